package spanproj

import (
	"net/url"
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// What goes wrong between an emitter and a receiver, applied to Traces
// output (one resource and span per entry, in export order). Each returns
// new Traces.

// Drop loses every n-th span (an exporter's queue overflowed).
func Drop(td ptrace.Traces, n int) ptrace.Traces {
	return rebuild(td, func(i int, rs ptrace.ResourceSpans, out []ptrace.ResourceSpans) []ptrace.ResourceSpans {
		if (i+1)%n == 0 {
			return out
		}
		return append(out, rs)
	})
}

// Duplicate sends every n-th span again a few exports later (an export
// the receiver took, retried after a timeout).
func Duplicate(td ptrace.Traces, n int) ptrace.Traces {
	var again []ptrace.ResourceSpans
	return rebuild(td, func(i int, rs ptrace.ResourceSpans, out []ptrace.ResourceSpans) []ptrace.ResourceSpans {
		out = append(out, rs)
		if len(again) > 0 && i%3 == 0 {
			out = append(out, again[0])
			again = again[1:]
		}
		if (i+1)%n == 0 {
			again = append(again, rs)
		}
		return out
	})
}

// Delay holds every n-th span back by `by` exports (a slow exporter or a
// batch that waited).
func Delay(td ptrace.Traces, n, by int) ptrace.Traces {
	type held struct {
		rs  ptrace.ResourceSpans
		due int
	}
	var hold []held
	out := rebuild(td, func(i int, rs ptrace.ResourceSpans, out []ptrace.ResourceSpans) []ptrace.ResourceSpans {
		for len(hold) > 0 && hold[0].due <= i {
			out = append(out, hold[0].rs)
			hold = hold[1:]
		}
		if (i+1)%n == 0 {
			hold = append(hold, held{rs, i + by})
			return out
		}
		return append(out, rs)
	})
	for _, h := range hold {
		h.rs.CopyTo(out.ResourceSpans().AppendEmpty())
	}
	return out
}

// CapEvents keeps the first max events of each span and counts the rest
// dropped, as an SDK's span limits do.
func CapEvents(td ptrace.Traces, max int) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	eachSpan(out, func(sp ptrace.Span) {
		evs := sp.Events()
		if evs.Len() > max {
			dropped := evs.Len() - max
			i := 0
			evs.RemoveIf(func(ptrace.SpanEvent) bool { i++; return i > max })
			sp.SetDroppedEventsCount(uint32(dropped))
		}
	})
	return out
}

// Shift moves every timestamp by d.
func Shift(td ptrace.Traces, d time.Duration) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	move := func(t pcommon.Timestamp) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t.AsTime().Add(d)) }
	eachSpan(out, func(sp ptrace.Span) {
		sp.SetStartTimestamp(move(sp.StartTimestamp()))
		sp.SetEndTimestamp(move(sp.EndTimestamp()))
		for i := 0; i < sp.Events().Len(); i++ {
			sp.Events().At(i).SetTimestamp(move(sp.Events().At(i).Timestamp()))
		}
	})
	return out
}

// Merge is every span of tds in one stream, in order of their end.
func Merge(tds ...ptrace.Traces) ptrace.Traces {
	var all []ptrace.ResourceSpans
	for _, td := range tds {
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			all = append(all, td.ResourceSpans().At(i))
		}
	}
	slices.SortStableFunc(all, func(a, b ptrace.ResourceSpans) int {
		return a.ScopeSpans().At(0).Spans().At(0).EndTimestamp().AsTime().Compare(b.ScopeSpans().At(0).Spans().At(0).EndTimestamp().AsTime())
	})
	out := ptrace.NewTraces()
	for _, rs := range all {
		rs.CopyTo(out.ResourceSpans().AppendEmpty())
	}
	return out
}

// Start is the earliest span start in td.
func Start(td ptrace.Traces) time.Time {
	var t time.Time
	eachSpan(td, func(sp ptrace.Span) {
		if s := sp.StartTimestamp().AsTime(); t.IsZero() || s.Before(t) {
			t = s
		}
	})
	return t
}

func rebuild(td ptrace.Traces, f func(i int, rs ptrace.ResourceSpans, out []ptrace.ResourceSpans) []ptrace.ResourceSpans) ptrace.Traces {
	var keep []ptrace.ResourceSpans
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		keep = f(i, td.ResourceSpans().At(i), keep)
	}
	out := ptrace.NewTraces()
	for _, rs := range keep {
		rs.CopyTo(out.ResourceSpans().AppendEmpty())
	}
	return out
}

func eachSpan(td ptrace.Traces, f func(ptrace.Span)) {
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			for k := 0; k < sss.At(j).Spans().Len(); k++ {
				f(sss.At(j).Spans().At(k))
			}
		}
	}
}

// OneEndpoint makes every span a request of one client process to one
// server address and port: many clients behind one address reaching one
// MCP endpoint (a NAT or egress gateway in front of a load balancer).
func OneEndpoint(td ptrace.Traces) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	for i := 0; i < out.ResourceSpans().Len(); i++ {
		out.ResourceSpans().At(i).Resource().Attributes().PutStr("service.instance.id", "crowd")
	}
	eachSpan(out, func(sp ptrace.Span) {
		a := sp.Attributes()
		path := "/mcp"
		if v, ok := a.Get("url.full"); ok {
			if u, err := url.Parse(v.Str()); err == nil {
				path = u.EscapedPath()
			}
		}
		a.PutStr("server.address", "10.0.0.1")
		a.PutInt("server.port", 8080)
		a.PutStr("url.full", "http://10.0.0.1:8080"+path)
	})
	return out
}
