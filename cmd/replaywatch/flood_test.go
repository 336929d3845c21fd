package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/replaywatch/replaywatch/test/chtest"
	"github.com/replaywatch/replaywatch/test/floodprobe"
	"github.com/replaywatch/replaywatch/test/procmem"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// floodProbe is one attack on the memory budget: a capture test/floodprobe
// writes, and the limit it must be shed at.
type floodProbe struct {
	name  string
	write func(io.Writer) error
	args  []string // more flags of the run
}

// The probes, each of which held hundreds of MiB before the budget (the
// figures are docs/performance.md's, "Memory budget"): per-session state
// growing with the session ids' bytes, decoder buffers held by open
// connections, the merger holding a reorder window of one fast stream, and
// sessions arriving faster than anything expires.
var floodProbes = []floodProbe{
	{"2000 sessions with 60 KiB ids", func(w io.Writer) error { return floodprobe.LongIDs(w, 2000, 60<<10, false) }, nil},
	{"2000 open connections with 60 KiB session ids", func(w io.Writer) error { return floodprobe.LongIDs(w, 2000, 60<<10, true) }, nil},
	{"one stream of a million events", func(w io.Writer) error { return floodprobe.OneStream(w, 1_000_000) }, nil},
	{"100000 sessions in 0.5 s", func(w io.Writer) error { return floodprobe.Sessions(w, 100_000, 500*time.Millisecond) }, nil},
}

// analyzeFloodLimit is the --memory-limit analyze is given: small enough
// that every probe goes past it without a budget.
const analyzeFloodLimit = 128 << 20

// TestFloodProbesHoldTheBudget runs the real binary's analyze on every
// flood probe with --memory-limit 128MiB: its peak resident set (VmHWM,
// runtime and binary included) stays under the limit, nothing is called a
// violation, and what was shed is counted.
func TestFloodProbesHoldTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("writes about 900 MB of probe captures")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not the binary's: the bound is measured without it")
	}
	bin := buildBinary(t)
	// The stream's million events are as many rows for ClickHouse: its
	// sink's batches come out of the same budget.
	srv := chtest.Shared(t)
	dsn := srv.DSN(chtest.NewDatabase(t, srv))
	if code, out, errOut := runBin(t, bin, "schema", "apply", "--clickhouse", dsn); code != 0 {
		t.Fatalf("schema apply: %d\n%s%s", code, out, errOut)
	}
	stream := floodProbes[2]
	runs := append([]floodProbe{{stream.name + ", into ClickHouse", stream.write, []string{"--clickhouse", dsn, "--spool-dir", t.TempDir()}}},
		floodProbes...)
	for _, p := range runs {
		t.Run(p.name, func(t *testing.T) {
			path := writeProbe(t, p)
			out := filepath.Join(t.TempDir(), "out.jsonl")
			args := append([]string{"analyze", "--memory-limit", strconv.Itoa(analyzeFloodLimit), "--format", "json", "--progress", "never"}, p.args...)
			hwm, code, stderr := runMeasured(t, out, bin, append(args, path)...)
			if code != 0 {
				t.Fatalf("analyze exited %d:\n%s", code, stderr)
			}
			sum := readFloodSummary(t, out)
			t.Logf("peak RSS %.1f MiB (limit %d MiB); %d violations, %d unverifiable; limits hit %v",
				float64(hwm)/(1<<20), analyzeFloodLimit>>20, sum.Violations, sum.Unverifiable, sum.LimitsHit)
			if hwm > analyzeFloodLimit {
				t.Errorf("peak RSS %.1f MiB is over --memory-limit %d MiB", float64(hwm)/(1<<20), analyzeFloodLimit>>20)
			}
			if sum.Violations != 0 {
				t.Errorf("%d violations on clean traffic", sum.Violations)
			}
		})
	}
}

// TestAgentFloodProbesHoldTheBudget replays probes onto the loopback
// interface while a real agent captures them with --memory-limit 256MiB
// (128 MiB of which are its two packet rings): its peak resident set stays
// under the limit and nothing is called a violation.
func TestAgentFloodProbesHoldTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("replays about 900 MB of probe captures")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not the binary's: the bound is measured without it")
	}
	if os.Geteuid() != 0 {
		if testenv.InCI() {
			t.Fatal("the agent's flood test needs root (AF_PACKET); CI runs as root")
		}
		t.Skip("the agent's flood test needs root (AF_PACKET)")
	}
	const limit = 256 << 20
	// Two probes, for the suite's time: the open connections with long
	// ids (the detector's state and the decoder's buffers) and the burst
	// of sessions (the detector's state and the merger). The closed
	// connections cost the same state with fewer buffers; the stream
	// outruns the rings on loopback (kernel drops), so analyze's test
	// holds it.
	for _, p := range []floodProbe{floodProbes[1], floodProbes[3]} {
		t.Run(p.name, func(t *testing.T) {
			path := writeProbe(t, p)
			a := startLoopbackAgent(t, "net 10.0.0.0/8", "--workers", "2", "--memory-limit", strconv.Itoa(limit))
			mon := a.monitor(t)
			sent := sendOnLoopback(t, path, 300_000)
			final := mon.settle(t)
			mon.endScrapes()
			code, stdout := a.stop(t)
			mon.endSamples()
			if code != 0 {
				t.Errorf("agent exited %d after SIGTERM:\n%s", code, a.stderr.tail())
			}
			out := readSoakOutput(t, stdout)
			m := func(name string, labels ...string) float64 { return metricValue(final, name, labels...) }
			t.Logf("sent %d packets; captured %.0f, kernel drops %.0f; peak RSS %.1f MiB (limit %d MiB); state %.0f B; %d unverifiable",
				sent, m("replaywatch_capture_packets_total"), m("replaywatch_capture_kernel_drops_total"),
				float64(mon.hwm())/(1<<20), limit>>20, m("replaywatch_detector_state_bytes"), out.types["unverifiable"])
			if m("replaywatch_capture_packets_total") == 0 {
				t.Fatal("the agent captured nothing")
			}
			if hwm := mon.hwm(); hwm == 0 || hwm > limit {
				t.Errorf("agent peak RSS %.1f MiB, over --memory-limit %d MiB (VmRSS samples: %s)", float64(hwm)/(1<<20), limit>>20, mon.rssTrace())
			}
			if n := out.types["violation"]; n > 0 {
				t.Errorf("%d violations on clean traffic, first:\n%s", n, out.firstViolation)
			}
		})
	}
}

// writeProbe writes p's capture into the test's temporary directory.
func writeProbe(t *testing.T, p floodProbe) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "probe.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(p.write(f), f.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// runMeasured runs bin with args, its standard output into the file out,
// and returns its peak resident set (test/procmem).
func runMeasured(t *testing.T, out, bin string, args ...string) (hwm int64, code int, stderr string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var errBuf syncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, &errBuf
	hwm, err = procmem.Run(cmd)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return hwm, cmd.ProcessState.ExitCode(), errBuf.String()
}

// floodSummary is what the tests read of analyze's summary record.
type floodSummary struct {
	Violations   int            `json:"violations"`
	Unverifiable int            `json:"unverifiable"`
	LimitsHit    map[string]int `json:"limits_hit"`
}

func readFloodSummary(t *testing.T, path string) floodSummary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	var sum floodSummary
	found := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"type":"summary"`) {
			found = json.Unmarshal(sc.Bytes(), &sum) == nil
		}
	}
	if !found {
		t.Fatal("no summary record in analyze's output")
	}
	return sum
}

// sendOnLoopback writes every packet of the capture at path onto lo with
// an AF_PACKET socket, at most pps packets a second, and returns how many
// it sent. The probes' addresses (10.0.0.0/8) are not the host's, so the
// kernel drops what it receives; a capture on lo sees each frame once.
func sendOnLoopback(t *testing.T, path string, pps int) int {
	t.Helper()
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	proto := int(uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8) // in network order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: lo.Index}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	const burst = 500
	start, sent := time.Now(), 0
	for {
		data, _, err := r.ZeroCopyReadPacketData()
		if errors.Is(err, io.EOF) {
			return sent
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(fd, data); err != nil {
			t.Fatalf("sending packet %d on lo: %v", sent, err)
		}
		sent++
		if sent%burst == 0 {
			if ahead := time.Duration(sent)*time.Second/time.Duration(pps) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	}
}
