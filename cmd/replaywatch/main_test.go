package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const samplePcap = "testdata/sample/rolling-deploy.pcap"

// fixtureDir holds the real-SDK fixture captures, beside the pipeline whose
// end-to-end tests they are.
var fixtureDir = filepath.Join("..", "..", "pipeline", "testdata", "fixtures")

// buildBinary compiles the real replaywatch binary (the build cache makes
// it cheap after the first), under the race detector when the tests run
// under it: a race in the binary then fails its test (exit 66, the report
// on stderr).
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "replaywatch")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBinary runs the compiled binary the way a CI job or an SRE would and
// checks the exit-code contract and both output formats.
func TestBinary(t *testing.T) {
	bin := buildBinary(t)
	garbage := filepath.Join(t.TempDir(), "garbage.pcap")
	os.WriteFile(garbage, []byte("this is not a capture file at all\n"), 0o644)
	empty := filepath.Join(t.TempDir(), "empty.pcap")
	os.WriteFile(empty, nil, 0o644)
	gzipped := filepath.Join(t.TempDir(), "capture.pcap.gz")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	sample, _ := os.ReadFile(samplePcap)
	zw.Write(sample)
	zw.Close()
	os.WriteFile(gzipped, gz.Bytes(), 0o644)
	clean := filepath.Join(fixtureDir, "go-correct-resume.pcap")
	unknownCursor := filepath.Join(fixtureDir, "ts-unknown-id-accepted.pcap")

	tests := []struct {
		name     string
		args     []string
		stdin    string // file fed on standard input
		wantCode int
		wantOut  []string
		wantErr  []string
	}{
		{name: "sample text", args: []string{"analyze", samplePcap}, wantCode: 1,
			wantOut: []string{"Findings           1: session_swap 1", "CRITICAL  session_swap", "evidence:", "Mcp-Session-Id"}},
		{name: "sample json", args: []string{"analyze", "--format", "json", samplePcap}, wantCode: 1,
			wantOut: []string{`"type":"violation"`, `"kind":"session_swap"`, `"type":"summary"`}},
		{name: "clean capture", args: []string{"analyze", clean}, wantCode: 0,
			wantOut: []string{"No violations"}},
		{name: "stdin", args: []string{"analyze", "--format", "json", "-"}, stdin: samplePcap, wantCode: 1,
			wantOut: []string{`"kind":"session_swap"`}},
		{name: "missing file", args: []string{"analyze", "/nonexistent.pcap"}, wantCode: 2,
			wantErr: []string{"/nonexistent.pcap"}},
		{name: "heap profile that cannot be written", args: []string{"analyze", "--memprofile", "/nonexistent/heap.out", samplePcap}, wantCode: 2,
			wantErr: []string{"/nonexistent/heap.out"}},
		{name: "spans beside a missing file", args: []string{"analyze", "--spans", "/nonexistent.json"}, wantCode: 2,
			wantErr: []string{"/nonexistent.json"}},
		{name: "not a capture", args: []string{"analyze", garbage}, wantCode: 2,
			wantErr: []string{"garbage.pcap", "not a pcap or pcapng file"}},
		{name: "gzip-compressed file", args: []string{"analyze", "--format", "json", gzipped}, wantCode: 1, wantOut: []string{`"kind":"session_swap"`}},
		{name: "gzip-compressed standard input", args: []string{"analyze", "--format", "json", "-"}, stdin: gzipped, wantCode: 1, wantOut: []string{`"kind":"session_swap"`}},
		{name: "empty file", args: []string{"analyze", empty}, wantCode: 2, wantErr: []string{"empty.pcap: empty file, not a pcap or pcapng file"}},
		{name: "flags after the file", args: []string{"analyze", samplePcap, "--format", "json"}, wantCode: 1,
			wantOut: []string{`"kind":"session_swap"`}},
		{name: "unknown cursor", args: []string{"analyze", "--format", "json", unknownCursor}, wantCode: 1,
			wantOut: []string{`"kind":"unknown_last_event_id_accepted"`}},
		{name: "unknown cursor, partial history", args: []string{"analyze", "--format", "json", "--partial-history", unknownCursor}, wantCode: 0,
			wantOut: []string{`"check":"resume","reason":"input may miss whole exchanges"`}},
		{name: "no file", args: []string{"analyze"}, wantCode: 2, wantErr: []string{"no capture file"}},
		{name: "bad format", args: []string{"analyze", "--format", "xml", samplePcap}, wantCode: 2, wantErr: []string{"--format"}},
		{name: "bad flag", args: []string{"analyze", "--frobnicate", samplePcap}, wantCode: 2},
		{name: "negative limit", args: []string{"analyze", "--max-sessions", "0", samplePcap}, wantCode: 2, wantErr: []string{"--max-sessions"}},
		{name: "help", args: []string{"--help"}, wantCode: 0, wantOut: []string{"replaywatch analyze"}},
		{name: "analyze help", args: []string{"analyze", "--help"}, wantCode: 0, wantOut: []string{"-format", "-max-events-per-session", "-keep-query-strings"}},
		{name: "unknown command", args: []string{"frob"}, wantCode: 2, wantErr: []string{`unknown command "frob"`}},
		{name: "help on an unknown command", args: []string{"help", "frob"}, wantCode: 2, wantErr: []string{`unknown command "frob"`}},
		{name: "help on version", args: []string{"help", "version"}, wantCode: 0, wantOut: []string{"replaywatch version"}},
		{name: "schema print, bad cluster name", args: []string{"schema", "print", "--clickhouse-cluster", "a-b"}, wantCode: 2, wantErr: []string{`cluster name "a-b"`}},
		{name: "schema print, extra arguments", args: []string{"schema", "print", "extra"}, wantCode: 2, wantErr: []string{"unexpected arguments"}},
		{name: "negative shutdown timeout", args: []string{"analyze", "--shutdown-timeout", "-5s", samplePcap}, wantCode: 2, wantErr: []string{"--shutdown-timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if tt.stdin != "" {
				f, err := os.Open(tt.stdin)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd.Stdin = f
			}
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

// TestBinaryReadsNamedPipe: a named pipe, as a shell's process substitution
// gives (analyze <(zcat capture.pcap.gz)), is read once, like standard
// input: looking at its first bytes beforehand would consume them.
func TestBinaryReadsNamedPipe(t *testing.T) {
	bin := buildBinary(t)
	fifo := filepath.Join(t.TempDir(), "capture.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(samplePcap)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// Opening for writing waits for the reader, the binary.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Write(data)
			f.Close()
		}
	}()
	out, err := exec.Command(bin, "analyze", "--format", "json", fifo).Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitViolations {
		t.Fatalf("analyze of a named pipe: %v, want exit %d\n%s", err, exitViolations, out)
	}
	if !bytes.Contains(out, []byte(`"kind":"session_swap"`)) {
		t.Errorf("the sample's session_swap not found through a named pipe:\n%s", out)
	}
}

// TestJSONContract checks the output contract other tools rely on: every line
// is an object with a known type, a violation has every contract field
// present (null when empty, never omitted), and times carry nanoseconds.
func TestJSONContract(t *testing.T) {
	recs, code, stderr := analyzeJSON(t, nil, samplePcap)
	if code != exitViolations {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	required := map[string][]string{
		"violation": {"id", "kind", "severity", "time", "session_id", "new_session_id", "last_event_id",
			"first_event_id", "stream_id", "protocol_version", "client", "server", "jsonrpc_ids", "tool",
			"explanation", "evidence"},
		"resume":          {"id", "time", "session_id", "last_event_id", "first_event_id", "status", "outcome"},
		"session":         {"session_id", "first_seen", "last_seen", "ended"},
		"unknown_outcome": {"id", "time", "session_id", "jsonrpc_id", "method", "tool"},
		"summary":         {"packets", "bytes", "tcp_connections", "http_exchanges", "mcp_sessions", "resumes", "findings", "capture_gaps"},
	}
	seen := map[string]int{}
	for _, r := range recs {
		typ, _ := r["type"].(string)
		seen[typ]++
		fields, ok := required[typ]
		if !ok && typ != "unverifiable" {
			t.Errorf("record of unknown type %q", typ)
		}
		for _, f := range fields {
			if _, ok := r[f]; !ok {
				t.Errorf("%s record lacks field %q: %v", typ, f, r)
			}
		}
		if typ == "violation" {
			ts, _ := r["time"].(string)
			if len(ts) < len("2006-01-02T15:04:05.000000000Z") || !strings.HasSuffix(ts, "Z") {
				t.Errorf("violation time %q is not RFC 3339 with nanoseconds", ts)
			}
			if r["session_id"] == nil || r["new_session_id"] == nil || r["session_id"] == r["new_session_id"] {
				t.Errorf("session_swap without two distinct session ids: %v", r)
			}
			ev, _ := r["evidence"].([]any)
			if len(ev) == 0 {
				t.Errorf("violation without evidence")
			}
		}
	}
	for _, typ := range []string{"violation", "resume", "session", "summary"} {
		if seen[typ] == 0 {
			t.Errorf("no %s record in the sample's output", typ)
		}
	}
	if last := recs[len(recs)-1]; last["type"] != "summary" {
		t.Errorf("last line is %v, want the summary", last["type"])
	}
	// Deterministic ids: a second run gives the same violation ids.
	again, _, _ := analyzeJSON(t, []string{"--workers", "1"}, samplePcap)
	ids := func(rs []map[string]any) string {
		var b []string
		for _, r := range rs {
			if r["type"] == "violation" {
				b = append(b, r["id"].(string))
			}
		}
		return strings.Join(b, ",")
	}
	if ids(recs) != ids(again) {
		t.Errorf("violation ids differ between runs: %s vs %s", ids(recs), ids(again))
	}
	if raw, _ := json.Marshal(recs[0]); len(raw) == 0 {
		t.Fatal("unreachable")
	}
}
