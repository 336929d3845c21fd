// Command fixturegen records the pcap fixtures replaywatch is tested
// against: real MCP SDK clients and servers talking over loopback TCP through
// the recording proxy of test/pcaprec, with faults injected by the proxy
// or by a deliberately broken backend. Beside each <name>.pcap it writes
// <name>.spec, the hand-written expected findings (the spec is the oracle;
// the generator never computes findings).
//
// Usage:
//
//	go run ./test/fixturegen [-out DIR] [-only NAME] [-list]
//
// Scenario families live one per file and add themselves to the registry in
// init() with register.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// scenarioTimeout bounds one scenario; each is meant to finish in a few
// seconds, so a hang is a bug in the scenario, reported rather than waited on.
const scenarioTimeout = 30 * time.Second

// scenario records one fixture. run writes dir/<name>.pcap and
// dir/<name>.spec (writeSpec helps with the latter).
type scenario struct {
	name string // file stem, prefixed with the SDK family ("go-", "ts-")
	desc string // one line for -list
	run  func(ctx context.Context, dir string) error
	// probe: not a fixture; run only when -only names it exactly.
	probe bool
}

var registry = map[string]scenario{}

// sampleDir receives the README's sample capture (see -sample).
var sampleDir string

// register adds scenarios; it is called from init() in each scenario file.
// A duplicate name is a programming error caught at startup.
func register(ss ...scenario) {
	for _, s := range ss {
		if _, dup := registry[s.name]; dup {
			panic("fixturegen: scenario registered twice: " + s.name)
		}
		if s.run == nil {
			panic("fixturegen: scenario without run: " + s.name)
		}
		registry[s.name] = s
	}
}

// writeSpec writes dir/<name>.spec from its lines (comments and expect
// lines, see README.md), ending with a newline.
func writeSpec(dir, name string, lines ...string) error {
	return os.WriteFile(filepath.Join(dir, name+".spec"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// pcapPath is where scenario name records its capture.
func pcapPath(dir, name string) string { return filepath.Join(dir, name+".pcap") }

// copyFile copies src to dst, creating dst's directory.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

func main() {
	out := flag.String("out", "pipeline/testdata/fixtures", "directory to write <name>.pcap and <name>.spec into")
	only := flag.String("only", "", "comma-separated scenario names (or name prefixes ending in '*') to run; empty runs all")
	list := flag.Bool("list", false, "list scenarios and exit")
	flag.StringVar(&sampleDir, "sample", "cmd/replaywatch/testdata/sample", "directory for the README sample capture (a copy of go-rolling-deploy-swap); empty skips it")
	flag.Parse()

	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	if *list {
		for _, n := range names {
			fmt.Printf("%-32s %s\n", n, registry[n].desc)
		}
		return
	}
	selected := selectScenarios(names, *only)
	if len(selected) == 0 {
		fmt.Fprintf(os.Stderr, "fixturegen: no scenario matches %q (try -list)\n", *only)
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "fixturegen:", err)
		os.Exit(1)
	}
	failed := 0
	for _, n := range selected {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
		err := registry[n].run(ctx, *out)
		cancel()
		if err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", n, err)
			continue
		}
		fmt.Printf("ok   %s (%s)\n", n, time.Since(start).Round(time.Millisecond))
	}
	if failed > 0 {
		os.Exit(1)
	}
}

// selectScenarios picks the names matching the -only filter; a probe only
// by its exact name.
func selectScenarios(names []string, only string) []string {
	var out []string
	for _, n := range names {
		if only == "" && !registry[n].probe {
			out = append(out, n)
			continue
		}
		for _, pat := range strings.Split(only, ",") {
			pat = strings.TrimSpace(pat)
			if pat == n || !registry[n].probe && strings.HasSuffix(pat, "*") && strings.HasPrefix(n, strings.TrimSuffix(pat, "*")) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}
