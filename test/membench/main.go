// Command membench measures replaywatch analyze's peak memory and time on
// the flood probes of test/floodprobe, for one or more builds side by side
// (scripts/bench-memory.sh builds this tree and a baseline revision):
//
//	membench -bin "this tree=./replaywatch" -bin "28cb324=./replaywatch-base" -limit 768MiB
//
// The probes, written once into -cache:
//
//	longids   20,000 sessions with 60 KiB session ids, each connection closed
//	open      2,000 sessions with 60 KiB ids, every connection left open
//	stream    one session streaming 1,000,000 events
//	sessions  200,000 sessions started within 0.9 s of capture time
//
// Each run is "BIN analyze --format json --progress never --memory-limit
// LIMIT FILE" (without --memory-limit for a build that does not know it):
// wall seconds, CPU seconds (user + system), peak resident set (VmHWM, read
// every 2 ms until the process exits), violations and the limits the
// summary says were hit. With -clickhouse (and clickhouse-server installed,
// Debian's package) the stream probe also runs into a ClickHouse server
// started for the run (test/chtest), --clickhouse. It prints a Markdown
// table; it asserts nothing (the tests do, on smaller probes).
//
// -scaling measures the first build's scaling laws instead: time, peak
// RSS and the largest live heap a collection left (GODEBUG=gctrace=1) on
// the benchmark capture at the sizes -captures names
// ("1x=FILE,4x=FILE,16x=FILE", test/benchgen's), with
// --session-idle-timeout 30s so that sessions expire within them; and on
// 1,000 to 1,000,000 sessions started within a second and left idle (live
// until the end), where memory grows with the sessions up to the
// detector's share of the limit and is flat after.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/test/chtest"
	"github.com/replaywatch/replaywatch/test/floodprobe"
	"github.com/replaywatch/replaywatch/test/procmem"
)

type build struct{ label, path string }

type builds []build

func (b *builds) String() string { return fmt.Sprint(*b) }
func (b *builds) Set(s string) error {
	label, path, ok := strings.Cut(s, "=")
	if !ok {
		return errors.New("want LABEL=PATH")
	}
	*b = append(*b, build{label, path})
	return nil
}

type probe struct {
	name  string
	write func(io.Writer) error
}

var probes = []probe{
	{"longids", func(w io.Writer) error { return floodprobe.LongIDs(w, 20000, 60<<10, false) }},
	{"open", func(w io.Writer) error { return floodprobe.LongIDs(w, 2000, 60<<10, true) }},
	{"stream", func(w io.Writer) error { return floodprobe.OneStream(w, 1_000_000) }},
	{"sessions", func(w io.Writer) error { return floodprobe.Sessions(w, 200_000, 900*time.Millisecond) }},
}

func main() {
	var bins builds
	flag.Var(&bins, "bin", "LABEL=PATH of a replaywatch binary (repeat for several)")
	limit := flag.String("limit", "768MiB", "--memory-limit of every run")
	cache := flag.String("cache", filepath.Join(os.TempDir(), "replaywatch-memory"), "where the probes are written once")
	withCH := flag.Bool("clickhouse", true, "also run the stream probe into a ClickHouse server started for the run, when clickhouse-server is installed")
	scaling := flag.Bool("scaling", false, "measure the first build's scaling laws instead of the probes")
	captures := flag.String("captures", "", "-scaling: LABEL=FILE,... of the benchmark capture at several sizes")
	flag.Parse()
	if *scaling {
		if err := runScaling(bins, *limit, *cache, *captures); err != nil {
			fmt.Fprintln(os.Stderr, "membench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(bins, *limit, *cache, *withCH); err != nil {
		fmt.Fprintln(os.Stderr, "membench:", err)
		os.Exit(1)
	}
}

func run(bins builds, limit, cache string, withCH bool) error {
	if len(bins) == 0 {
		return errors.New("no -bin given")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	paths := map[string]string{}
	for _, p := range probes {
		path := filepath.Join(cache, p.name+".pcap")
		paths[p.name] = path
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			continue
		}
		fmt.Fprintf(os.Stderr, "membench: writing %s\n", path)
		if err := writeFile(path, p.write); err != nil {
			return err
		}
	}
	var dsn string
	if _, err := exec.LookPath("clickhouse-server"); withCH && err == nil {
		dir, err := os.MkdirTemp("", "membench-ch-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		srv, err := chtest.NewServer(dir, chtest.Options{})
		if err != nil {
			return err
		}
		defer srv.Stop()
		if err := srv.Exec(context.Background(), "CREATE DATABASE membench"); err != nil {
			return err
		}
		dsn = srv.DSN("membench")
		if out, err := exec.Command(bins[0].path, "schema", "apply", "--clickhouse", dsn).CombinedOutput(); err != nil {
			return fmt.Errorf("schema apply: %v\n%s", err, out)
		}
	} else if withCH {
		fmt.Println("note: clickhouse-server is not installed: no run into ClickHouse")
	}
	fmt.Printf("--memory-limit %s\n\n", limit)
	fmt.Println("| probe | capture | build | seconds | CPU s | CPU s/Gbit | peak RSS | RSS/session | violations | limits hit |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	row := func(name string, b build, pcap string, extra ...string) {
		st, _ := os.Stat(pcap)
		r, err := measure(b.path, limit, cache, pcap, extra...)
		if err != nil {
			fmt.Printf("| %s | | %s | failed: %v | | | | | | |\n", name, b.label, err)
			return
		}
		fmt.Printf("| %s | %.0f MB | %s | %.2f | %.2f | %s | %d MiB | %s | %d | %s |\n", name, float64(st.Size())/1e6, b.label,
			r.wall.Seconds(), r.cpu.Seconds(), perGbit(r.cpu, st.Size()), r.hwm>>20, perSession(r.hwm, r.sessions), r.violations, r.limits)
	}
	for _, p := range probes {
		for _, b := range bins {
			row(p.name, b, paths[p.name])
		}
	}
	if dsn != "" {
		for _, b := range bins {
			row("stream, into ClickHouse", b, paths["stream"], "--clickhouse", dsn, "--spool-dir", filepath.Join(cache, "spool"))
		}
	}
	return nil
}

// perGbit spells CPU seconds per Gbit of an input of size bytes: the cores a
// 1 Gbit/s link of such traffic would keep busy.
func perGbit(cpu time.Duration, size int64) string {
	if size <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", cpu.Seconds()/(float64(size)*8/1e9))
}

// perSession spells bytes per session seen, in KiB (MiB from 1 MiB on).
func perSession(bytes int64, sessions int) string {
	if sessions <= 0 {
		return "-"
	}
	kib := float64(bytes) / float64(sessions) / 1024
	if kib >= 1024 {
		return fmt.Sprintf("%.0f MiB", kib/1024)
	}
	return fmt.Sprintf("%.1f KiB", kib)
}

// runScaling prints the scaling table: capture size, then live sessions.
func runScaling(bins builds, limit, cache, captures string) error {
	if len(bins) == 0 {
		return errors.New("no -bin given")
	}
	bin := bins[0]
	fmt.Printf("build %s, --memory-limit %s\n\n", bin.label, limit)
	fmt.Println("| workload | input | seconds | CPU s | CPU s/Gbit | peak RSS | live heap | sessions seen | live heap/session | limits hit |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	row := func(name, pcap string, extra ...string) error {
		st, err := os.Stat(pcap)
		if err != nil {
			return err
		}
		r, err := measure(bin.path, limit, cache, pcap, extra...)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("| %s | %.0f MB | %.2f | %.2f | %s | %d MiB | %d MiB | %d | %s | %s |\n", name, float64(st.Size())/1e6,
			r.wall.Seconds(), r.cpu.Seconds(), perGbit(r.cpu, st.Size()), r.hwm>>20, r.live>>20, r.sessions,
			perSession(r.live, r.sessions), r.limits)
		return nil
	}
	for _, c := range strings.Split(captures, ",") {
		label, path, ok := strings.Cut(c, "=")
		if !ok {
			continue
		}
		if err := row("benchmark capture "+label+", sessions expire after 30 s", path, "--session-idle-timeout", "30s"); err != nil {
			return err
		}
	}
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		path := filepath.Join(cache, fmt.Sprintf("live-%d.pcap", n))
		if st, err := os.Stat(path); err != nil || st.Size() == 0 {
			fmt.Fprintf(os.Stderr, "membench: writing %s\n", path)
			if err := writeFile(path, func(w io.Writer) error { return floodprobe.Sessions(w, n, time.Second) }); err != nil {
				return err
			}
		}
		if err := row(fmt.Sprintf("%d live sessions", n), path); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path + ".part")
	if err != nil {
		return err
	}
	if err := errors.Join(write(f), f.Close()); err != nil {
		return err
	}
	return os.Rename(path+".part", path)
}

type result struct {
	wall, cpu            time.Duration
	hwm, live            int64
	violations, sessions int
	limits               string
}

// gcLine matches a gctrace line's heap sizes: "A->B->C MB", C being the
// live heap the collection left.
var gcLine = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

// maxLiveHeap is the largest live heap gctrace reported, in bytes.
func maxLiveHeap(trace string) int64 {
	var most int64
	for _, m := range gcLine.FindAllStringSubmatch(trace, -1) {
		n, _ := strconv.ParseInt(m[3], 10, 64)
		most = max(most, n<<20)
	}
	return most
}

// measure runs one analysis and reads its figures.
// knowsLimit caches, per binary, whether its analyze has --memory-limit (a
// baseline revision from before the budget does not).
var knowsLimit = map[string]bool{}

func knowsMemoryLimit(bin string) bool {
	known, ok := knowsLimit[bin]
	if !ok {
		help, _ := exec.Command(bin, "analyze", "--help").CombinedOutput()
		known = strings.Contains(string(help), "-memory-limit")
		knowsLimit[bin] = known
	}
	return known
}

func measure(bin, limit, cache, pcap string, extra ...string) (result, error) {
	args := []string{"analyze", "--format", "json", "--progress", "never"}
	if knowsMemoryLimit(bin) {
		args = append(args, "--memory-limit", limit)
	}
	args = append(append(args, extra...), pcap)
	out := filepath.Join(cache, "out.jsonl")
	f, err := os.Create(out)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	var stderr strings.Builder
	cmd := exec.Command(bin, args...)
	// gctrace reports the live heap after each collection: what the state
	// holds, apart from the collector's room (RSS shows both).
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	cmd.Stdout, cmd.Stderr = f, &stderr
	start := time.Now()
	var r result
	r.hwm, err = procmem.Run(cmd)
	r.wall = time.Since(start)
	if cmd.ProcessState == nil {
		return r, err
	}
	if code := cmd.ProcessState.ExitCode(); code > 1 {
		return r, fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.live = maxLiveHeap(stderr.String())
	r.violations, r.sessions, r.limits, err = summary(out)
	return r, err
}

// summary reads the violations, the sessions and the limits hit from
// analyze's JSON Lines.
func summary(path string) (violations, sessions int, limits string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	var s struct {
		Violations  int              `json:"violations"`
		MCPSessions int              `json:"mcp_sessions"`
		LimitsHit   map[string]int64 `json:"limits_hit"`
	}
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"type":"summary"`) {
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				return 0, 0, "", err
			}
		}
	}
	var hits []string
	for k, n := range s.LimitsHit {
		hits = append(hits, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(hits)
	return s.Violations, s.MCPSessions, strings.Join(hits, ", "), sc.Err()
}
