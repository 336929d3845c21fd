// Package text renders the detector's output as a terminal report: a summary
// first, then every violation with its explanation and evidence, then the
// tool calls left with an unknown outcome and the checks the capture could
// not settle. Findings are buffered until Finish because the summary leads.
package text

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/internal/humanize"
	"github.com/replaywatch/replaywatch/sink"
)

// MaxListed bounds how many records of each list are kept for the report;
// the rest are counted (the summary still has every count). It keeps a
// capture with millions of unverifiable checks from holding them all.
const MaxListed = 1000

// Writer is a detector.Sink that prints a report on Finish.
type Writer struct {
	w            io.Writer
	violations   []*detector.Violation
	unknown      []*detector.UnknownOutcome
	unverifiable []*detector.Unverifiable
	dropped      int
}

// New returns a Writer that prints to w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

func keep[T any](list []T, v T, dropped *int) []T {
	if len(list) >= MaxListed {
		*dropped++
		return list
	}
	return append(list, v)
}

// Violation implements detector.Sink.
func (w *Writer) Violation(v *detector.Violation) { w.violations = keep(w.violations, v, &w.dropped) }

// Resume implements detector.Sink; resumes appear in the summary's counts.
func (w *Writer) Resume(*detector.ResumeAttempt) {}

// Session implements detector.Sink; sessions appear in the summary's counts.
func (w *Writer) Session(*detector.SessionSummary) {}

// UnknownOutcome implements detector.Sink.
func (w *Writer) UnknownOutcome(u *detector.UnknownOutcome) {
	w.unknown = keep(w.unknown, u, &w.dropped)
}

// Unverifiable implements detector.Sink.
func (w *Writer) Unverifiable(u *detector.Unverifiable) {
	w.unverifiable = keep(w.unverifiable, u, &w.dropped)
}

// Finish prints the report.
func (w *Writer) Finish(s *sink.Summary) error {
	var b strings.Builder
	writeSummary(&b, s)
	for i, v := range w.violations {
		writeViolation(&b, fmt.Sprintf("%d/%d", i+1, len(w.violations)), v)
	}
	if len(w.unknown) > 0 {
		fmt.Fprintf(&b, "\nTool calls with unknown outcome (%d): the client must reconcile these before re-running them\n", len(w.unknown))
		for _, u := range w.unknown {
			fmt.Fprintf(&b, "  %s  session %s  %s id %s", stamp(u.Time), orDash(u.SessionID), orDash(u.Method), orDash(u.JSONRPCID))
			if u.Tool != "" {
				fmt.Fprintf(&b, " tool %s", visible(u.Tool))
			}
			fmt.Fprintf(&b, ": %s", visibleWords(u.Reason))
			if u.ReissuedInSession != "" {
				fmt.Fprintf(&b, " (re-issued in session %s)", visible(u.ReissuedInSession))
			}
			b.WriteString(sourceTag(u.Source))
			b.WriteByte('\n')
		}
	}
	if len(w.unverifiable) > 0 {
		fmt.Fprintf(&b, "\nNot verifiable from this capture (%d): not violations, the evidence is incomplete\n", len(w.unverifiable))
		for _, u := range w.unverifiable {
			fmt.Fprintf(&b, "  %s  session %s  %s: %s%s\n", stamp(u.Time), orDash(u.SessionID), visible(u.Check), visibleWords(u.Reason), sourceTag(u.Source))
		}
	}
	if w.dropped > 0 {
		fmt.Fprintf(&b, "\n(%d more records not listed; use --format json for all of them)\n", w.dropped)
	}
	_, err := io.WriteString(w.w, b.String())
	return err
}

func writeSummary(b *strings.Builder, s *sink.Summary) {
	spans := s.Spans > 0
	if spans {
		fmt.Fprintf(b, "replaywatch: %d file(s), %d spans", s.Files, s.Spans)
	} else {
		fmt.Fprintf(b, "replaywatch: %d file(s), %d packets, %s", s.Files, s.Packets, humanize.Bytes(int64(s.Bytes)))
	}
	if s.CaptureStart != nil && s.CaptureEnd != nil {
		label := "capture"
		if spans {
			label = "traffic"
		}
		fmt.Fprintf(b, ", %s %s .. %s (%s)", label, s.CaptureStart.UTC().Format(time.RFC3339),
			s.CaptureEnd.UTC().Format(time.RFC3339), s.CaptureEnd.Sub(*s.CaptureStart).Round(time.Millisecond))
	} else {
		b.WriteString(", capture times none (no HTTP decoded)")
	}
	b.WriteByte('\n')
	row := func(name string, format string, args ...any) {
		fmt.Fprintf(b, "  %-18s %s\n", name, fmt.Sprintf(format, args...))
	}
	if !spans {
		row("TCP connections", "%d", s.TCPConnections)
	}
	if s.TunnelledPackets > 0 {
		row("Tunnelled", "%d packets taken out of VXLAN, Geneve, GRE, ERSPAN or IP in IP and read as the inner traffic", s.TunnelledPackets)
	}
	row("HTTP exchanges", "%d (%d MCP, %d other, ignored)", s.HTTPExchanges, s.MCPExchanges, s.NonMCPExchanges)
	row("SSE events", "%d", s.SSEEvents)
	row("MCP sessions", "%d", s.MCPSessions)
	if len(s.Revisions) > 0 {
		row("Revisions", "%s", counts(s.Revisions))
	}
	if s.ProxyHops > 0 {
		row("Second hops", "%d requests set aside: a proxy's second hop, or a NAT copy, of one already seen", s.ProxyHops)
	}
	if s.HeaderMismatches > 0 {
		row("Header mismatch", "%d requests whose Mcp-Method/Mcp-Name disagree with the body", s.HeaderMismatches)
	}
	row("Resume attempts", "%s", counts(s.Resumes))
	row("Findings", "%s", counts(s.Findings))
	row("Unknown outcomes", "%d", s.UnknownOutcomes)
	row("Unverifiable", "%d", s.Unverifiable)
	switch {
	case spans:
		// Spans carry no bytes to lose: what they lack is said per check.
	case s.SnaplenBytes > 0:
		row("Capture gaps", "%d (%s lost, %s of it cut by the snap length)", s.CaptureGaps,
			humanize.Bytes(int64(s.CaptureGapBytes)), humanize.Bytes(int64(s.SnaplenBytes)))
	default:
		row("Capture gaps", "%d (%s lost)", s.CaptureGaps, humanize.Bytes(int64(s.CaptureGapBytes)))
	}
	if s.UnreadFileBytes > 0 {
		row("Unread", "%s of damaged files", humanize.Bytes(int64(s.UnreadFileBytes)))
	}
	if s.InflatedBodies+s.EncodedUnreadBodies > 0 {
		row("Compressed", "%d bodies inflated and read (gzip, deflate), %d not read (another Content-Encoding): their checks unverifiable",
			s.InflatedBodies, s.EncodedUnreadBodies)
	}
	if s.TLSConnections > 0 {
		row("TLS", "%d connection(s), encrypted: not readable from packets", s.TLSConnections)
	}
	if s.ProxyProtocolHeaders > 0 {
		row("PROXY headers", "%d skipped (a load balancer's: each connection's client is the one its header names)", s.ProxyProtocolHeaders)
	}
	if s.HTTP2Connections > 0 {
		row("HTTP/2", "%d connection(s), %s, not decoded: checks on their client address and server unverifiable", s.HTTP2Connections, humanize.Bytes(int64(s.HTTP2Bytes)))
	}
	switch {
	case spans:
	case s.AnalysedShare != nil:
		row("Analysed", "%s of TCP payload bytes (%s)", s.AnalysedPercent(), humanize.Bytes(int64(s.PayloadBytes)))
	default:
		row("Analysed", "- (no TCP payload captured)")
	}
	if len(s.LimitsHit) > 0 {
		row("Limits hit", "%s", counts(s.LimitsHit))
	}
	for _, e := range s.Errors {
		row("Input problem", "%s", Escape(e)) // may quote the input
	}
	switch {
	case s.PartialReason != nil:
		fmt.Fprintf(b, "\nIncomplete analysis: %s.\n", *s.PartialReason)
		if s.PartialAdvice != "" {
			fmt.Fprintf(b, "To analyse it: %s.\n", s.PartialAdvice)
		}
		if s.Violations == 0 {
			b.WriteString("No violations in the part that could be analysed.\n")
		}
	case spans && s.Violations == 0 && s.Unverifiable > 0:
		fmt.Fprintf(b, "\nNo violations in the spans, but %s could not be verified from them (listed above).\n", checks(s.Unverifiable))
	case spans && s.Violations == 0:
		b.WriteString("\nNo violations in the spans: every resume they show kept its contract.\n")
	case spans:
	case s.Packets == 0:
		b.WriteString("\nNothing analysed: the capture holds no packets.\n")
	case s.AnalysedShare == nil:
		b.WriteString("\nNothing analysed: the capture holds no TCP payload.\n")
	case s.Violations > 0:
	case s.MCPExchanges == 0 && s.TLSConnections > 0:
		b.WriteString("\nNo MCP traffic found: no HTTP exchange was MCP Streamable HTTP, and TLS connections were not read.\n")
	case s.MCPExchanges == 0:
		b.WriteString("\nNo MCP traffic found: no HTTP exchange was MCP Streamable HTTP.\n")
	case s.Unverifiable > 0:
		fmt.Fprintf(b, "\nNo violations found, but %s could not be verified from this capture (listed above).\n", checks(s.Unverifiable))
	default:
		b.WriteString("\nNo violations: every resume seen kept its contract.\n")
	}
}

// checks counts n checks in words: "1 check", "2 checks".
func checks(n int) string {
	if n == 1 {
		return "1 check"
	}
	return fmt.Sprintf("%d checks", n)
}

// writeViolation prints one finding; number is its place ("3/7", or "3"
// while the total is unknown).
func writeViolation(b *strings.Builder, number string, v *detector.Violation) {
	fmt.Fprintf(b, "\n[%s] %s  %s  %s\n", number, strings.ToUpper(string(v.Severity)), v.Kind, stamp(v.Time))
	sess := orDash(v.SessionID)
	if v.NewSessionID != "" {
		sess += " -> " + visible(v.NewSessionID)
	}
	fmt.Fprintf(b, "  session   %s\n", sess)
	fmt.Fprintf(b, "  client    %s   server %s   protocol %s\n", orDash(v.Client), orDash(v.Server), orDash(v.ProtocolVersion))
	if src := sourceShown(v.Source); src != "" {
		fmt.Fprintf(b, "  source    %s\n", src)
	}
	var ids []string
	if v.LastEventID != "" {
		ids = append(ids, "Last-Event-ID "+visible(v.LastEventID))
	}
	if v.FirstEventID != "" {
		ids = append(ids, "first event "+visible(v.FirstEventID))
	}
	if v.StreamID != "" {
		ids = append(ids, "stream "+visible(v.StreamID))
	}
	if len(v.JSONRPCIDs) > 0 {
		ids = append(ids, "JSON-RPC ids "+visible(strings.Join(v.JSONRPCIDs, ",")))
	}
	if v.Tool != "" {
		ids = append(ids, "tool "+visible(v.Tool))
	}
	if len(ids) > 0 {
		fmt.Fprintf(b, "  ids       %s\n", strings.Join(ids, "   "))
	}
	if v.Confidence != "" {
		fmt.Fprintf(b, "  linked by %s\n", v.Confidence)
	}
	b.WriteString(wrap(visibleWords(v.Explanation), "  ", 100))
	if len(v.Evidence) > 0 {
		b.WriteString("  evidence:\n")
		for _, e := range v.Evidence {
			fmt.Fprintf(b, "    %s  %s  exchange %d  %s: %s\n", stamp(e.Time), visible(e.Conn), e.Exchange, visible(e.What), visibleWords(e.Detail))
		}
	}
	fmt.Fprintf(b, "  id        %s\n", v.ID)
}

// sourceShown is the input a record came from as the report shows it: ""
// for capture files (pcap), the input a report is about unless it says
// otherwise, and for a record whose pipeline did not say; "live" or "otlp"
// otherwise. The agent, which reads packets and spans at once, shows every
// finding's.
func sourceShown(source string) string {
	if source == "" || source == detector.SourcePcap {
		return ""
	}
	return visible(source)
}

// sourceTag is sourceShown at the end of a one-line entry.
func sourceTag(source string) string {
	if src := sourceShown(source); src != "" {
		return "  [source " + src + "]"
	}
	return ""
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z")
}

// orDash is visible(s), or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return visible(s)
}

func counts(m map[string]int) string {
	total := 0
	keys := make([]string, 0, len(m))
	for k, n := range m {
		total += n
		if n > 0 {
			keys = append(keys, k)
		}
	}
	if total == 0 {
		return "0"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", visible(k), m[k]) // a revision is the client's header
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

// wrap breaks s into lines of at most width runes, each prefixed.
func wrap(s, prefix string, width int) string {
	var b, line strings.Builder
	for _, word := range strings.Fields(s) {
		if line.Len() > 0 && line.Len()+1+len(word) > width-len(prefix) {
			b.WriteString(prefix + line.String() + "\n")
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	if line.Len() > 0 {
		b.WriteString(prefix + line.String() + "\n")
	}
	return b.String()
}
