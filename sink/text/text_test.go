package text

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/sink"
)

func TestReport(t *testing.T) {
	var buf bytes.Buffer
	w := New(&buf)
	when := time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC)
	w.Violation(&detector.Violation{ID: "f00d", Kind: detector.KindSessionSwap, Severity: detector.SeverityCritical,
		Time: when, SessionID: "S1", NewSessionID: "S2", LastEventID: "_3", Client: "10.0.0.1:5000", Server: "10.0.0.2:80",
		Explanation: strings.Repeat("word ", 60),
		Evidence:    []detector.Evidence{{Time: when, Conn: "c", Exchange: 1, What: "response header", Detail: "Mcp-Session-Id: S2"}}})
	w.UnknownOutcome(&detector.UnknownOutcome{SessionID: "S1", Method: "tools/call", JSONRPCID: "7", Tool: "pay", Reason: "session lost"})
	w.Unverifiable(&detector.Unverifiable{SessionID: "S9", Check: "resume", Reason: "capture gap"})
	err := w.Finish(&sink.Summary{Files: 1, Packets: 10, Bytes: 2048, Violations: 1,
		Findings: map[string]int{"session_swap": 1}, Resumes: map[string]int{"violated": 1, "resumed": 2}})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"1 file(s), 10 packets, 2.0 KiB",
		"Resume attempts    3: resumed 2, violated 1",
		"Findings           1: session_swap 1",
		"[1/1] CRITICAL  session_swap  2026-11-30T12:00:00.000000005Z",
		"session   S1 -> S2",
		"Last-Event-ID _3",
		"response header: Mcp-Session-Id: S2",
		"tools/call id 7 tool pay: session lost",
		"session S9  resume: capture gap",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  word") && len(line) > 100 {
			t.Errorf("explanation not wrapped: %d columns", len(line))
		}
	}
	if strings.Contains(out, "No violations") {
		t.Error("says no violations while there is one")
	}
}

func TestListsAreBounded(t *testing.T) {
	var buf bytes.Buffer
	w := New(&buf)
	for range MaxListed + 5 {
		w.Unverifiable(&detector.Unverifiable{Check: "resume", Reason: "gap"})
	}
	w.Finish(&sink.Summary{})
	if !strings.Contains(buf.String(), "5 more records not listed") {
		t.Errorf("overflow not reported:\n%s", buf.String()[len(buf.String())-200:])
	}
	if !strings.Contains(buf.String(), "No violations") {
		t.Error("clean summary missing")
	}
}

func TestStreamPrintsAtOnce(t *testing.T) {
	var b strings.Builder
	s := NewStream(&b)
	s.Violation(&detector.Violation{ID: "abc", Kind: detector.KindSessionSwap, Severity: detector.SeverityCritical, SessionID: "S1", NewSessionID: "S2", Explanation: "swapped"})
	if out := b.String(); !strings.Contains(out, "[1] CRITICAL  session_swap") || !strings.Contains(out, "S1 -> S2") || !strings.Contains(out, "id        abc") {
		t.Fatalf("violation not printed at once:\n%s", out)
	}
	s.UnknownOutcome(&detector.UnknownOutcome{SessionID: "S1", Method: "tools/call", JSONRPCID: "2", Tool: "t", Reason: "session lost"})
	if !strings.Contains(b.String(), "UNKNOWN OUTCOME") {
		t.Fatal("unknown outcome not printed")
	}
}
