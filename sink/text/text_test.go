package text

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

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
	all := 1.0
	w.Finish(&sink.Summary{Packets: 1, PayloadBytes: 1, MCPExchanges: 1, Unverifiable: MaxListed + 5, AnalysedShare: &all})
	if !strings.Contains(buf.String(), "5 more records not listed") {
		t.Errorf("overflow not reported:\n%s", buf.String()[len(buf.String())-200:])
	}
	if !strings.Contains(buf.String(), "No violations found, but") {
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

// TestSourceShownUnlessPcap: a finding, an unknown outcome and an
// unverifiable check say which input they came from when it is not a
// capture file (what a report of files is about), in the report and in the
// agent's stream alike.
func TestSourceShownUnlessPcap(t *testing.T) {
	for _, c := range []struct {
		source string
		want   []string // nil: nothing is shown
	}{
		{"", nil},
		{detector.SourcePcap, nil},
		{detector.SourceLive, []string{"  source    live\n", "session lost  [source live]\n", "capture gap  [source live]\n"}},
		{detector.SourceOTLP, []string{"  source    otlp\n", "session lost  [source otlp]\n", "capture gap  [source otlp]\n"}},
	} {
		v := &detector.Violation{ID: "f00d", Kind: detector.KindSessionSwap, Severity: detector.SeverityCritical, SessionID: "S1", Source: c.source}
		u := &detector.UnknownOutcome{SessionID: "S1", Method: "tools/call", JSONRPCID: "7", Tool: "pay", Reason: "session lost", Source: c.source}
		var report, stream bytes.Buffer
		w := New(&report)
		w.Violation(v)
		w.UnknownOutcome(u)
		w.Unverifiable(&detector.Unverifiable{SessionID: "S9", Check: "resume", Reason: "capture gap", Source: c.source})
		if err := w.Finish(&sink.Summary{Violations: 1}); err != nil {
			t.Fatal(err)
		}
		s := NewStream(&stream)
		s.Violation(v)
		s.UnknownOutcome(u)
		for name, out := range map[string]string{"report": report.String(), "stream": stream.String()} {
			if c.want == nil {
				if strings.Contains(out, "source") {
					t.Errorf("%s of a record from %q names a source:\n%s", name, c.source, out)
				}
				continue
			}
			want := c.want
			if name == "stream" {
				want = want[:2] // the stream prints no unverifiable checks
			}
			for _, line := range want {
				if !strings.Contains(out, line) {
					t.Errorf("%s of a record from %q lacks %q:\n%s", name, c.source, line, out)
				}
			}
		}
	}
}

// TestSummaryCoverage: how much was analysed, times never printed as year 1,
// and no "every resume kept its contract" for a capture mostly lost.
func TestSummaryCoverage(t *testing.T) {
	share := func(f float64) *float64 { return &f }
	reason := "only 3% of TCP payload bytes could be analysed: 12,345 bytes were cut by the capture's snap length (64 bytes)"
	start, end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 12, 0, 2, 0, time.UTC)
	tests := []struct {
		name     string
		s        sink.Summary
		want     []string
		dontWant []string
	}{
		{name: "intact", s: sink.Summary{Packets: 10, PayloadBytes: 2048, MCPExchanges: 4, AnalysedShare: share(1), CaptureStart: &start, CaptureEnd: &end},
			want:     []string{"capture 2026-11-30T12:00:00Z .. 2026-11-30T12:00:02Z (2s)", "Analysed           100% of TCP payload bytes (2.0 KiB)", "No violations: every resume"},
			dontWant: []string{"Incomplete", "Nothing analysed"}},
		{name: "snap length", s: sink.Summary{Packets: 10, PayloadBytes: 382, CaptureGaps: 8, CaptureGapBytes: 12345, SnaplenBytes: 12345,
			AnalysedShare: share(0.03), PartialReason: &reason, PartialAdvice: "recapture with -s 0"},
			want: []string{"capture times none (no HTTP decoded)", "Capture gaps       8 (12.1 KiB lost, 12.1 KiB of it cut by the snap length)",
				"Analysed           3% of TCP payload bytes (382 B)", "Incomplete analysis: " + reason + ".", "To analyse it: recapture with -s 0.",
				"No violations in the part that could be analysed."},
			dontWant: []string{"0001-01-01", "every resume seen kept its contract"}},
		{name: "damaged", s: sink.Summary{Packets: 10, PayloadBytes: 100, UnreadFileBytes: 4096, AnalysedShare: share(0.02), PartialReason: &reason},
			want: []string{"Unread             4.0 KiB of damaged files"}},
		{name: "empty", s: sink.Summary{},
			want:     []string{"0 packets", "capture times none", "Analysed           - (no TCP payload captured)", "Nothing analysed: the capture holds no packets."},
			dontWant: []string{"0001-01-01", "every resume seen kept its contract"}},
		{name: "no payload", s: sink.Summary{Packets: 7},
			want:     []string{"Nothing analysed: the capture holds no TCP payload."},
			dontWant: []string{"every resume seen kept its contract"}},
		{name: "mirrored", s: sink.Summary{Packets: 7, PayloadBytes: 900, MCPExchanges: 3, TunnelledPackets: 7, AnalysedShare: share(1)},
			want: []string{"Tunnelled          7 packets taken out of VXLAN, Geneve, GRE, ERSPAN or IP in IP and read as the inner traffic"}},
		{name: "spans, unverifiable", s: sink.Summary{Spans: 40, MCPExchanges: 3, Unverifiable: 2},
			want:     []string{"No violations in the spans, but 2 checks could not be verified from them (listed above)."},
			dontWant: []string{"kept its contract"}},
		{name: "spans", s: sink.Summary{Spans: 40, MCPExchanges: 3},
			want: []string{"No violations in the spans: every resume they show kept its contract."}},
		{name: "no MCP", s: sink.Summary{Packets: 7, PayloadBytes: 900, HTTPExchanges: 3, NonMCPExchanges: 3, AnalysedShare: share(1)},
			want:     []string{"No MCP traffic found: no HTTP exchange was MCP Streamable HTTP.\n"},
			dontWant: []string{"every resume seen kept its contract"}},
		{name: "TLS only", s: sink.Summary{Packets: 7, PayloadBytes: 900, TLSConnections: 1, AnalysedShare: share(1)},
			want:     []string{"No MCP traffic found: no HTTP exchange was MCP Streamable HTTP, and TLS connections were not read."},
			dontWant: []string{"every resume seen kept its contract"}},
		{name: "unverifiable", s: sink.Summary{Packets: 7, PayloadBytes: 900, MCPExchanges: 3, Unverifiable: 2, AnalysedShare: share(1)},
			want:     []string{"No violations found, but 2 checks could not be verified from this capture (listed above)."},
			dontWant: []string{"every resume seen kept its contract"}},
		{name: "one unverifiable", s: sink.Summary{Packets: 7, PayloadBytes: 900, MCPExchanges: 3, Unverifiable: 1, AnalysedShare: share(1)},
			want: []string{"No violations found, but 1 check could not be verified from this capture (listed above)."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := New(&buf).Finish(&tt.s); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.dontWant {
				if strings.Contains(out, w) {
					t.Errorf("report has %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestHostileStrings: every control byte, invalid UTF-8, a bidi override
// and a 10 KB id, as a crafted client or server would put them in session
// ids, event ids, tool names and so into explanations and evidence, reach
// the report (and the agent's stream) escaped and shortened: no byte that
// a terminal acts on, valid UTF-8, and no line longer than the report's;
// so do a revision header's values and input problems in the summary. A
// shortened value says its own length, without the comma after it.
func TestHostileStrings(t *testing.T) {
	var ctl strings.Builder
	for c := range 0x20 {
		ctl.WriteByte(byte(c))
	}
	ctl.WriteString("\x7f\u0085\u009b\u202e\u200b\xff\xfe")
	hostile := "S\u202e\xff\x1b]0;pwned\x07\x1b[2J" + ctl.String()
	long := strings.Repeat("L", 10<<10)
	when := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v := &detector.Violation{ID: "f00d", Kind: detector.KindSessionSwap, Severity: detector.SeverityCritical, Time: when,
		SessionID: hostile, NewSessionID: long, LastEventID: hostile, FirstEventID: long, JSONRPCIDs: []string{hostile}, Tool: hostile,
		Client: "10.0.0.1:5000", Server: "10.0.0.2:80",
		Explanation: "session " + hostile + " swapped to " + long + " after " + strings.Repeat("M", 200) + ", then " + strings.Repeat(".", 10<<10),
		Evidence:    []detector.Evidence{{Time: when, Conn: "c", Exchange: 1, What: "request", Detail: "Mcp-Session-Id: " + hostile + " " + long}}}
	u := &detector.UnknownOutcome{SessionID: hostile, Method: hostile, JSONRPCID: hostile, Tool: long, Reason: "lost " + hostile, ReissuedInSession: long}

	var report, stream bytes.Buffer
	w := New(&report)
	w.Violation(v)
	w.UnknownOutcome(u)
	w.Unverifiable(&detector.Unverifiable{SessionID: long, Check: hostile, Reason: hostile})
	if err := w.Finish(&sink.Summary{Violations: 1, Revisions: map[string]int{hostile: 1}, Errors: []string{"spans.json:3: " + hostile}}); err != nil {
		t.Fatal(err)
	}
	s := NewStream(&stream)
	s.Violation(v)
	s.UnknownOutcome(u)
	for name, out := range map[string]string{"report": report.String(), "stream": stream.String()} {
		if !utf8.ValidString(out) {
			t.Errorf("%s: not valid UTF-8", name)
		}
		for _, r := range out {
			if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
				t.Errorf("%s: raw %U in the output", name, r)
			}
		}
		for line := range strings.SplitSeq(out, "\n") {
			if len(line) > 1000 {
				t.Errorf("%s: a %d-byte line: a long value was not shortened", name, len(line))
			}
		}
		for _, want := range []string{`S\u202e\xff\x1b]0;pwned\x07\x1b[2J`, "(10240 bytes)", "…(200", "bytes),"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
	for _, row := range []string{"Revisions", "Input problem"} {
		if !strings.Contains(report.String(), "  "+row) {
			t.Errorf("the report has no %s row", row)
		}
	}
}
