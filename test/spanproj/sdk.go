package spanproj

import (
	"encoding/binary"
	"fmt"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// SDKSpans is td as the OpenTelemetry Go SDK's finished spans, ready for
// any SDK exporter (otlptracegrpc): the spans a real Go process exports.
func SDKSpans(td ptrace.Traces) []sdktrace.ReadOnlySpan {
	var stubs tracetest.SpanStubs
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		res := sdkresource.NewSchemaless(keyValues(rs.Resource().Attributes())...)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				st := tracetest.SpanStub{
					Name: sp.Name(), SpanKind: trace.SpanKind(sp.Kind()),
					SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sp.TraceID()), SpanID: trace.SpanID(sp.SpanID()), TraceFlags: trace.FlagsSampled}),
					StartTime:   sp.StartTimestamp().AsTime(), EndTime: sp.EndTimestamp().AsTime(),
					Attributes: keyValues(sp.Attributes()), Resource: res,
				}
				if !sp.ParentSpanID().IsEmpty() {
					st.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(sp.TraceID()), SpanID: trace.SpanID(sp.ParentSpanID())})
				}
				if sp.Status().Code() == ptrace.StatusCodeError {
					st.Status = sdktrace.Status{Code: codes.Error, Description: sp.Status().Message()}
				}
				for e := 0; e < sp.Events().Len(); e++ {
					ev := sp.Events().At(e)
					st.Events = append(st.Events, sdktrace.Event{Name: ev.Name(), Time: ev.Timestamp().AsTime(), Attributes: keyValues(ev.Attributes())})
				}
				stubs = append(stubs, st)
			}
		}
	}
	return stubs.Snapshots()
}

func keyValues(m pcommon.Map) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	m.Range(func(k string, v pcommon.Value) bool {
		switch v.Type() {
		case pcommon.ValueTypeStr:
			kvs = append(kvs, attribute.String(k, v.Str()))
		case pcommon.ValueTypeInt:
			kvs = append(kvs, attribute.Int64(k, v.Int()))
		case pcommon.ValueTypeDouble:
			kvs = append(kvs, attribute.Float64(k, v.Double()))
		case pcommon.ValueTypeBool:
			kvs = append(kvs, attribute.Bool(k, v.Bool()))
		case pcommon.ValueTypeSlice:
			var ss []string
			for i := 0; i < v.Slice().Len(); i++ {
				ss = append(ss, v.Slice().At(i).AsString())
			}
			kvs = append(kvs, attribute.StringSlice(k, ss))
		default:
			kvs = append(kvs, attribute.String(k, v.AsString()))
		}
		return true
	})
	return kvs
}

// Renumber is td with new trace and span ids, session ids and client
// processes for copy n: the same traffic from other clients, so that
// copies neither collide as duplicate spans nor share sessions.
func Renumber(td ptrace.Traces, n uint32) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	suffix := fmt.Sprintf("-%d", n)
	for i := 0; i < out.ResourceSpans().Len(); i++ {
		a := out.ResourceSpans().At(i).Resource().Attributes()
		if v, ok := a.Get("service.instance.id"); ok {
			a.PutStr("service.instance.id", v.AsString()+suffix)
		}
	}
	eachSpan(out, func(sp ptrace.Span) {
		tid := sp.TraceID()
		binary.BigEndian.PutUint32(tid[12:], binary.BigEndian.Uint32(tid[12:])^n)
		sp.SetTraceID(tid)
		sid := sp.SpanID()
		binary.BigEndian.PutUint32(sid[4:], binary.BigEndian.Uint32(sid[4:])^n)
		sp.SetSpanID(sid)
		for _, k := range []string{"http.request.header.mcp-session-id", "http.response.header.mcp-session-id"} {
			if v, ok := sp.Attributes().Get(k); ok && v.Type() == pcommon.ValueTypeSlice && v.Slice().Len() > 0 {
				v.Slice().At(0).SetStr(v.Slice().At(0).Str() + suffix)
			}
		}
	})
	return out
}
