//go:build unix

// Package plugin_test checks that build.sh builds the Grafana data source
// plugin: the frontend (npm ci, typecheck, webpack) and the backend for
// linux/amd64 and linux/arm64, zipped as Grafana's plugin zips are.
package plugin_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/testenv"
)

const (
	pluginID   = "replaywatch-sessions-datasource"
	executable = "gpx_replaywatch"
)

// BuildEnv runs TestBuildScript; scripts/test.sh sets it and runs the test
// on its own, after the parallel go test: npm ci, webpack and two
// cross-compiles load both cores, and timing-sensitive tests of other
// packages (the lossy link, the live agent) must not share them.
const BuildEnv = "REPLAYWATCH_PLUGIN_BUILD"

func TestBuildScript(t *testing.T) {
	if os.Getenv(BuildEnv) == "" {
		t.Skipf("%s=1 runs it (scripts/test.sh does, on its own: it loads both cores)", BuildEnv)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		if testenv.InCI() {
			t.Fatalf("npm is missing: the plugin's frontend cannot be built: %v", err)
		}
		t.Skip("npm is missing: install Node.js and npm to build the plugin's frontend")
	}
	for _, tool := range []string{"bash", "node", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("build.sh needs %s: %v", tool, err)
		}
	}

	// npm ci, two cross-compiled backends on a cold Go cache: minutes.
	deadline := time.Now().Add(13 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	zipDir := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "build.sh")
	cmd.Env = append(os.Environ(), "PLUGIN_ZIP_DIR="+zipDir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// On timeout, end build.sh with what it started (npm, node, go).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("build.sh: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("build.sh took %s", time.Since(start).Round(time.Second))

	version := packageVersion(t)
	want := filepath.Join(zipDir, pluginID+"-"+version+".zip")
	if got := lastLine(stdout.String()); got != want {
		t.Errorf("build.sh printed %q as its last line, want the zip's path %q", got, want)
	}
	files := readZip(t, want)

	for _, name := range []string{"module.js", "plugin.json", "README.md", "CHANGELOG.md", "img/logo.svg",
		executable + "_linux_amd64", executable + "_linux_arm64"} {
		if _, ok := files[name]; !ok {
			t.Errorf("the zip has no %s/%s", pluginID, name)
		}
	}

	checkPluginJSON(t, files["plugin.json"], version, files)
	checkModuleJS(t, files)
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		if f, ok := files[executable+"_linux_"+arch]; ok {
			checkBinary(t, f, machine)
		}
	}
}

// zipped is one file of the zip, its path below the plugin's folder.
type zipped struct {
	mode os.FileMode
	data []byte
}

// readZip reads the zip: every entry must be in one folder named after
// the plugin id, as Grafana's plugin zips are (grafana cli plugins
// install, or unzip into the plugins directory).
func readZip(t *testing.T, path string) map[string]zipped {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("the zip: %v", err)
	}
	defer zr.Close()
	files := map[string]zipped{}
	for _, f := range zr.File {
		name, ok := strings.CutPrefix(f.Name, pluginID+"/")
		if !ok {
			t.Errorf("zip entry %q is not in the folder %s/", f.Name, pluginID)
			continue
		}
		if f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatalf("zip entry %s: %v", f.Name, err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("zip entry %s: %v", f.Name, err)
		}
		files[name] = zipped{mode: f.Mode(), data: data}
	}
	return files
}

func checkPluginJSON(t *testing.T, f zipped, version string, files map[string]zipped) {
	t.Helper()
	var p struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		Name        string `json:"name"`
		Backend     bool   `json:"backend"`
		Executable  string `json:"executable"`
		Alerting    bool   `json:"alerting"`
		Annotations bool   `json:"annotations"`
		Metrics     bool   `json:"metrics"`
		Info        struct {
			Version string `json:"version"`
			Updated string `json:"updated"`
			Logos   struct {
				Small string `json:"small"`
				Large string `json:"large"`
			} `json:"logos"`
		} `json:"info"`
		Dependencies struct {
			GrafanaDependency string `json:"grafanaDependency"`
		} `json:"dependencies"`
	}
	if err := json.Unmarshal(f.data, &p); err != nil {
		t.Fatalf("plugin.json is not valid JSON: %v\n%s", err, f.data)
	}
	if p.Type != "datasource" || p.ID != pluginID || !p.Backend || p.Executable != executable {
		t.Errorf("plugin.json: type %q id %q backend %v executable %q, want datasource %s true %s",
			p.Type, p.ID, p.Backend, p.Executable, pluginID, executable)
	}
	if !p.Alerting || !p.Annotations || !p.Metrics {
		t.Errorf("plugin.json: alerting %v annotations %v metrics %v, want all true", p.Alerting, p.Annotations, p.Metrics)
	}
	if p.Info.Version != version {
		t.Errorf("plugin.json: info.version %q, want package.json's %q", p.Info.Version, version)
	}
	if _, err := time.Parse("2006-01-02", p.Info.Updated); err != nil {
		t.Errorf("plugin.json: info.updated %q is not a date", p.Info.Updated)
	}
	if p.Dependencies.GrafanaDependency == "" {
		t.Errorf("plugin.json: no dependencies.grafanaDependency")
	}
	for _, logo := range []string{p.Info.Logos.Small, p.Info.Logos.Large} {
		if _, ok := files[logo]; !ok {
			t.Errorf("plugin.json names logo %q, which the zip does not hold", logo)
		}
	}
	if bytes.Contains(f.data, []byte("%VERSION%")) || bytes.Contains(f.data, []byte("%TODAY%")) {
		t.Errorf("plugin.json still has a %%…%% placeholder:\n%s", f.data)
	}
}

// checkModuleJS: an AMD module (Grafana loads module.js with SystemJS's AMD
// support), with no absolute path of the machine that built it, in it or
// in its source map.
func checkModuleJS(t *testing.T, files map[string]zipped) {
	t.Helper()
	js, ok := files["module.js"]
	if !ok {
		return
	}
	if !bytes.HasPrefix(js.data, []byte("define(")) {
		t.Errorf("module.js does not start with define( (an AMD module): %.80q", js.data)
	}
	for _, external := range []string{`"@grafana/data"`, `"@grafana/runtime"`, `"@grafana/ui"`, `"react"`} {
		if !bytes.Contains(js.data[:bytes.IndexByte(js.data, ']')+1], []byte(external)) {
			t.Errorf("module.js does not take %s from Grafana (define's dependencies): %.200q", external, js.data)
		}
	}
	var paths []string
	if root, err := filepath.Abs(filepath.Join("..", "..")); err == nil {
		paths = append(paths, root)
	}
	if home, err := os.UserHomeDir(); err == nil && len(home) > 1 {
		paths = append(paths, home)
	}
	for _, name := range []string{"module.js", "module.js.map"} {
		f, ok := files[name]
		if !ok {
			continue
		}
		for _, p := range paths {
			if i := bytes.Index(f.data, []byte(p+"/")); i >= 0 {
				t.Errorf("%s has this machine's path %s: …%s…", name, p, f.data[max(0, i-40):min(len(f.data), i+len(p)+60)])
			}
		}
	}
}

// checkBinary: an executable ELF for machine, statically linked
// (CGO_ENABLED=0: it runs in any Grafana image, Alpine's too).
func checkBinary(t *testing.T, f zipped, machine elf.Machine) {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(f.data))
	if err != nil {
		t.Errorf("%s binary: not an ELF file: %v", machine, err)
		return
	}
	defer ef.Close()
	if ef.Machine != machine || ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		t.Errorf("binary for %s: ELF machine %s type %s", machine, ef.Machine, ef.Type)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("binary for %s is dynamically linked (has an interpreter)", machine)
		}
	}
	if f.mode&0o111 == 0 {
		t.Errorf("binary for %s is not executable in the zip (mode %s)", machine, f.mode)
	}
}

func packageVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil || pkg.Version == "" {
		t.Fatalf("package.json: no version (%v)", err)
	}
	return pkg.Version
}

func lastLine(s string) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last
}
