package pipeline

import (
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/sink"
)

// TestAssessCoverage holds the threshold and the wording of the reason.
func TestAssessCoverage(t *testing.T) {
	tests := []struct {
		name    string
		s       sink.Summary
		snap    int
		damaged []string
		share   string // "-": nil
		reason  []string
		advice  string
	}{
		{name: "nothing", share: "-"},
		{name: "intact", s: sink.Summary{Packets: 10, PayloadBytes: 1000, MCPExchanges: 1}, share: "100%"},
		{name: "exactly half", s: sink.Summary{Packets: 10, PayloadBytes: 500, CaptureGapBytes: 500, MCPExchanges: 1}, share: "50%"},
		{name: "just under half", s: sink.Summary{Packets: 10, PayloadBytes: 499, CaptureGapBytes: 501, MCPExchanges: 1}, share: "49%",
			reason: []string{"only 49% of TCP payload bytes could be analysed: 501 bytes were lost in capture gaps"},
			advice: "recapture without dropped packets (tcpdump -B for a larger buffer)"},
		{name: "snap length", s: sink.Summary{Packets: 10, PayloadBytes: 382, CaptureGapBytes: 12345, SnaplenBytes: 12345}, snap: 64, share: "3%",
			reason: []string{"only 3% of TCP payload bytes could be analysed: 12,345 bytes were cut by the capture's snap length (64 bytes); no MCP traffic was recognised in what remained"},
			advice: "recapture with -s 0"},
		{name: "snap length not counted yet", s: sink.Summary{Packets: 10, PayloadBytes: 10, CaptureGapBytes: 990, MCPExchanges: 1}, snap: 200, share: "1%",
			reason: []string{"990 bytes were lost in capture gaps (the capture's snap length is 200 bytes, so longer packets were cut)"},
			advice: "recapture with -s 0"},
		{name: "page limits", s: sink.Summary{Packets: 10, PayloadBytes: 10, CaptureGapBytes: 990, MCPExchanges: 1,
			LimitsHit: map[string]int{"capture.MaxBufferedPages": 3}}, share: "1%",
			reason: []string{"(some forced by the reassembly page limits)"}, advice: "raise --max-pages-per-connection and --max-pages-total"},
		{name: "sliver", s: sink.Summary{Packets: 10, PayloadBytes: 1, CaptureGapBytes: 999, MCPExchanges: 1}, share: "under 1%",
			reason: []string{"under 1% of TCP payload bytes could be analysed"}},
		{name: "damaged file", s: sink.Summary{Packets: 3, PayloadBytes: 100, UnreadFileBytes: 9000, MCPExchanges: 1},
			damaged: []string{"a.pcap"}, share: "1%",
			reason: []string{"9,000 bytes of a.pcap could not be read past the damage"}, advice: "copy or repair the damaged file"},
		{name: "undecodable", s: sink.Summary{Packets: 100, UndecodablePackets: 51}, snap: 40, share: "-",
			reason: []string{"51 of 100 packets could not be decoded", "snap length is 40 bytes"}, advice: "recapture with -s 0"},
		{name: "half undecodable", s: sink.Summary{Packets: 100, UndecodablePackets: 50, PayloadBytes: 10, MCPExchanges: 1}, share: "100%"},
		{name: "everything", s: sink.Summary{Packets: 100, UndecodablePackets: 60, PayloadBytes: 10, CaptureGapBytes: 500, SnaplenBytes: 400,
			UnreadFileBytes: 90, MCPExchanges: 2}, snap: 100, damaged: []string{"x.pcap"}, share: "1%",
			reason: []string{"400 bytes were cut by the capture's snap length (100 bytes), 100 bytes were lost in capture gaps, 90 bytes of x.pcap",
				"; 60 of 100 packets could not be decoded"},
			advice: "copy or repair the damaged file and recapture with -s 0 and recapture without dropped packets (tcpdump -B for a larger buffer)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			assessCoverage(&s, tt.snap, tt.damaged)
			if got := s.AnalysedPercent(); got != tt.share {
				t.Errorf("share %s, want %s", got, tt.share)
			}
			if (s.PartialReason != nil) != (len(tt.reason) > 0) {
				t.Fatalf("partial reason %v, want one: %v", s.PartialReason, len(tt.reason) > 0)
			}
			for _, w := range tt.reason {
				if !strings.Contains(*s.PartialReason, w) {
					t.Errorf("reason %q lacks %q", *s.PartialReason, w)
				}
			}
			if tt.advice != "" && s.PartialAdvice != tt.advice {
				t.Errorf("advice %q, want %q", s.PartialAdvice, tt.advice)
			}
		})
	}
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567"} {
		if got := grouped(n); got != want {
			t.Errorf("grouped(%d) = %q, want %q", n, got, want)
		}
	}
}
