package otlp_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
)

// TestEmptyBodyHidesNothing: a 2xx JSON answer whose span shows no
// message has unknown content (a gap), unless http.response.body.size says
// the body held no byte (a server answering a call with an empty 200).
func TestEmptyBodyHidesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		size func(pcommon.Map)
		want decode.EndHow
	}{
		{"no size", func(pcommon.Map) {}, decode.EndGap},
		{"size 0", func(a pcommon.Map) { a.PutInt("http.response.body.size", 0) }, decode.EndClean},
		{"size 0 as text", func(a pcommon.Map) { a.PutStr("http.response.body.size", "0") }, decode.EndClean},
		{"size 12", func(a pcommon.Map) { a.PutInt("http.response.body.size", 12) }, decode.EndGap},
		{"size not a number", func(a pcommon.Map) { a.PutStr("http.response.body.size", "none") }, decode.EndGap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := ptrace.NewTraces()
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.instance.id", "client-1")
			sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
			sp.SetTraceID(pcommon.TraceID{1})
			sp.SetSpanID(pcommon.SpanID{1})
			sp.SetKind(ptrace.SpanKindClient)
			start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
			sp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
			sp.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Millisecond)))
			a := sp.Attributes()
			a.PutStr("http.request.method", "POST")
			a.PutStr("url.full", "http://mcp.example.com/mcp")
			a.PutInt("http.response.status_code", 200)
			a.PutEmptySlice("http.request.header.mcp-session-id").AppendEmpty().SetStr("S1")
			a.PutStr("mcp.method.name", "tools/call")
			a.PutStr("jsonrpc.request.id", "2")
			tc.size(a)

			var end *decode.End
			asm := otlp.NewAssembler(otlp.DefaultConfig(), []byte("body-test-key"), func(o *decode.Observation) {
				if o.Kind == decode.KindEnd {
					end = o.End
				}
			})
			if _, err := asm.Consume(td, start.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			asm.Flush()
			if end == nil || end.How != tc.want {
				t.Fatalf("end %+v, want %v", end, tc.want)
			}
		})
	}
}
