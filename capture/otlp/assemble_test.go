package otlp_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/spanproj"
)

// TestEarlyReleasesCostOnlyWhatArrivesOlder: a full MaxBufferedObservations
// sends the oldest observations on early, which costs nothing by itself;
// the limit's hits are the observations that then arrive older than one
// released early, marked late for that limit. An observation late behind
// a release the reorder window made (here: the input went quiet) is not
// the limit's hit, even after early releases.
func TestEarlyReleasesCostOnlyWhatArrivesOlder(t *testing.T) {
	cases := []struct {
		name    string
		quiet   bool // the input goes quiet between the two clients' spans
		want    decode.Late
		hitsAll bool // every older observation is a hit of the limit
	}{
		{"older spans behind early releases", false, decode.LateMaxBufferedObservations, true},
		{"older spans behind a quiet input's release", true, decode.LateReorderWindow, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := otlp.DefaultConfig()
			cfg.SettleDelay, cfg.ReorderWindow, cfg.MaxBufferedObservations = 0, time.Hour, 1
			var obs []*decode.Observation
			asm := otlp.NewAssembler(cfg, []byte("assemble-test-key"), func(o *decode.Observation) { obs = append(obs, o) })
			now := time.Now()
			first := emitterTraces(t, "csharp.json")
			cut := spanproj.Start(first)
			if _, err := asm.Consume(first, now); err != nil {
				t.Fatal(err)
			}
			if tc.quiet {
				// Quiet for the reorder window: no span can still be
				// on its way.
				now = now.Add(cfg.ReorderWindow + time.Second)
				asm.Advance(now)
				if s := asm.Stats(); s.EarlyRelease == 0 || s.Late != 0 || s.Pending != 0 {
					t.Fatalf("in-order spans, then quiet: stats %+v; want early releases, none late, nothing pending", s)
				}
			}
			// Another client's exchanges, an hour older, arrive now.
			if _, err := asm.Consume(spanproj.Shift(emitterTraces(t, "otelhttp.json"), -time.Hour), now); err != nil {
				t.Fatal(err)
			}
			asm.Advance(now.Add(2 * time.Second))
			asm.Flush()
			older := 0
			for _, o := range obs {
				want := decode.NotLate
				if o.Time.Before(cut) {
					older++
					want = tc.want
				}
				if o.Late != want {
					t.Errorf("%s observation at %v delivered with Late %v, want %v", o.Kind, o.Time, o.Late, want)
				}
			}
			s := asm.Stats()
			wantHits := uint64(0)
			if tc.hitsAll {
				wantHits = uint64(older)
			}
			if older == 0 || s.EarlyRelease == 0 || s.Late != uint64(older) || s.LateAfterEarlyRelease != wantHits {
				t.Errorf("%d older observations, stats %+v: want some, early releases, Late %d, LateAfterEarlyRelease %d", older, s, older, wantHits)
			}
		})
	}
}

// TestSettlingSpansHoldBoundedBytes: spans whose attributes an exporter
// made huge (4 MiB each: a path, a user agent, a session id) are held while
// their trace settles by the bytes the reader keeps, every kept string
// bounded as ids are (decode.MaxIDBytes), not by the attributes' size.
func TestSettlingSpansHoldBoundedBytes(t *testing.T) {
	cfg := otlp.DefaultConfig()
	cfg.SettleDelay = time.Hour // nothing settles: every span stays buffered
	asm := otlp.NewAssembler(cfg, []byte("assemble-test-key"), func(*decode.Observation) {})
	huge := strings.Repeat("x", 4<<20)
	const spans = 32
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	now := time.Now()
	for i := range spans {
		td := ptrace.NewTraces()
		sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{byte(i + 1)})
		sp.SetSpanID(pcommon.SpanID{byte(i + 1)})
		sp.SetKind(ptrace.SpanKindClient)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
		a := sp.Attributes()
		a.PutStr("http.request.method", "POST")
		a.PutStr("url.full", "http://mcp.example:8080/"+huge)
		a.PutStr("user_agent.original", huge)
		a.PutEmptySlice("http.request.header.mcp-session-id").AppendEmpty().SetStr(huge)
		a.PutInt("http.response.status_code", 200)
		if _, err := asm.Consume(td, now); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(huge)
	if st := asm.Stats(); st.Buffered != spans || st.IgnoredSpans != 0 {
		t.Fatalf("stats %+v: want %d HTTP spans held, none ignored (the test built no span the reader keeps)", st, spans)
	}
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d spans with 3 x 4 MiB attributes: %d KiB held", spans, held>>10)
	if held > 16<<20 { // unbounded: 32 x 12 MiB
		t.Errorf("%d spans hold %d MiB while they settle; want their kept strings bounded", spans, held>>20)
	}
}

// TestReorderWindowOutlastsSettling: one client exporting in batches (the
// SDK's every 5 s) has a short POST at 2 s, exported at 5 s, and a stream
// from 0 to 8 s, whose span is exported when it ends, at 10 s. The stream's
// observations are older than the POST's, and well within ReorderWindow:
// none may be late. The window ended when every buffered trace had
// settled (their arrivals queue was empty, which read as a quiet input),
// 2 s after each export.
func TestReorderWindowOutlastsSettling(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	span := func(trace byte, start, end time.Duration, status int, sse bool) ptrace.Traces {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.instance.id", "agent-1")
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{trace})
		sp.SetSpanID(pcommon.SpanID{trace})
		sp.SetKind(ptrace.SpanKindClient)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(start)))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(end)))
		a := sp.Attributes()
		a.PutStr("http.request.method", "POST")
		a.PutStr("url.full", "http://mcp.example:8080/mcp")
		a.PutEmptySlice("http.request.header.mcp-session-id").AppendEmpty().SetStr("S1")
		a.PutInt("http.response.status_code", int64(status))
		if sse {
			a.PutEmptySlice("http.response.header.content-type").AppendEmpty().SetStr("text/event-stream")
		}
		return td
	}
	var obs []*decode.Observation
	asm := otlp.NewAssembler(otlp.DefaultConfig(), []byte("assemble-test-key"), func(o *decode.Observation) { obs = append(obs, o) })
	wall := t0.Add(time.Hour)
	exports := map[time.Duration]ptrace.Traces{5 * time.Second: span(1, 2*time.Second, 2100*time.Millisecond, 202, false),
		10 * time.Second: span(2, 0, 8*time.Second, 200, true)}
	for now := time.Duration(0); now <= 10*time.Second; now += 250 * time.Millisecond {
		if td, ok := exports[now]; ok {
			if _, err := asm.Consume(td, wall.Add(now)); err != nil {
				t.Fatal(err)
			}
		}
		asm.Advance(wall.Add(now))
		if now == 9*time.Second {
			// The POST's observations are held (and the pipeline keeps
			// the detector's clock behind them): HeldSince says so.
			if held, ok := asm.HeldSince(); !ok || !held.Equal(t0.Add(2*time.Second)) {
				t.Errorf("at 9 s HeldSince = %v, %v; want the POST's request at 2 s, held", held.Sub(t0), ok)
			}
		}
	}
	if _, ok := asm.HeldSince(); !ok {
		t.Error("the stream's observations, released only when the input is quiet or newer ones come, are not held")
	}
	asm.Flush()
	for _, o := range obs {
		if o.Late != decode.NotLate {
			t.Errorf("%s observation at %v delivered with Late %v", o.Kind, o.Time.Sub(t0), o.Late)
		}
	}
	if len(obs) == 0 {
		t.Fatal("no observations")
	}
}

// TestClientSpansNeedAnInstance: a client span's client is the process that
// emitted it, known by its resource. service.name alone is every replica's
// (the SDKs' default resource carries nothing more), so two such spans are
// two clients, not one: otherwise one replica's call looks re-made by
// another after its stream broke (a critical reissued_call_after_break).
func TestClientSpansNeedAnInstance(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	span := func(trace byte, res map[string]string) ptrace.Traces {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		for k, v := range res {
			rs.Resource().Attributes().PutStr(k, v)
		}
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{trace})
		sp.SetSpanID(pcommon.SpanID{trace})
		sp.SetKind(ptrace.SpanKindClient)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Duration(trace) * time.Second)))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Duration(trace)*time.Second + time.Millisecond)))
		sp.Attributes().PutStr("http.request.method", "POST")
		sp.Attributes().PutStr("url.full", "http://mcp.example:8080/mcp")
		sp.Attributes().PutInt("http.response.status_code", 202)
		return td
	}
	for _, tc := range []struct {
		name       string
		res        map[string]string
		sameClient bool
	}{
		{"service.name alone", map[string]string{"service.name": "worker", "telemetry.sdk.language": "go"}, false},
		{"an instance id", map[string]string{"service.name": "worker", "service.instance.id": "pod-a"}, true},
		{"a host name", map[string]string{"service.name": "worker", "host.name": "node-1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clients []netip.AddrPort
			asm := otlp.NewAssembler(otlp.DefaultConfig(), []byte("assemble-test-key"), func(o *decode.Observation) {
				if o.Kind == decode.KindRequest {
					clients = append(clients, o.Conn.Client)
				}
			})
			for trace := byte(1); trace <= 2; trace++ {
				if _, err := asm.Consume(span(trace, tc.res), t0); err != nil {
					t.Fatal(err)
				}
			}
			asm.Flush()
			if len(clients) != 2 || (clients[0] == clients[1]) != tc.sameClient {
				t.Errorf("clients %v: want the same client %v", clients, tc.sameClient)
			}
		})
	}
}

// TestHopsOfOneExchangeCountOnce: a client's HTTP span and its server's,
// one exchange, count once however far apart the two ends' exporters send
// them (each batches on its own timer: 5 s in the SDKs, longer than
// SettleDelay), in either order. A web server's span for its own request
// (no MCP in it), under which it calls an MCP server, is another exchange:
// the MCP call is counted, in the same export or another.
func TestHopsOfOneExchangeCountOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	span := func(id, parent byte, server bool, path, session string) ptrace.Traces {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.instance.id", fmt.Sprintf("process-%v", server))
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{1})
		sp.SetSpanID(pcommon.SpanID{id})
		if parent != 0 {
			sp.SetParentSpanID(pcommon.SpanID{parent})
		}
		sp.SetKind(ptrace.SpanKindClient)
		if server {
			sp.SetKind(ptrace.SpanKindServer)
			sp.Attributes().PutStr("url.path", path)
			sp.Attributes().PutStr("server.address", "mcp.example")
			sp.Attributes().PutStr("client.address", "10.0.0.1")
		} else {
			sp.Attributes().PutStr("url.full", "http://mcp.example:8080"+path)
		}
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Duration(id) * time.Millisecond)))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Second - time.Duration(id)*time.Millisecond)))
		sp.Attributes().PutStr("http.request.method", "POST")
		sp.Attributes().PutInt("http.response.status_code", 202)
		if session != "" {
			sp.Attributes().PutEmptySlice("http.request.header.mcp-session-id").AppendEmpty().SetStr(session)
		}
		return td
	}
	client, server := span(2, 1, false, "/mcp", "S1"), span(3, 2, true, "/mcp", "S1")
	app, call := span(1, 0, true, "/api/chat", ""), span(2, 1, false, "/mcp", "S1")
	// A gateway between: the client's span (2), the gateway's server and
	// client spans (3, 4, one export), the backend's (5).
	gateway := ptrace.NewTraces()
	span(3, 2, true, "/mcp", "S1").ResourceSpans().CopyTo(gateway.ResourceSpans())
	span(4, 3, false, "/mcp", "S1").ResourceSpans().MoveAndAppendTo(gateway.ResourceSpans())
	backend := span(5, 4, true, "/mcp", "S1")
	// A client whose HTTP span shows no MCP of its own: its MCP span (1,
	// tools/call) does, once joined; the server's span shows none either.
	rpcClient := span(2, 1, false, "/mcp", "")
	mcp := rpcClient.ResourceSpans().At(0).ScopeSpans().At(0).Spans().AppendEmpty()
	mcp.SetTraceID(pcommon.TraceID{1})
	mcp.SetSpanID(pcommon.SpanID{1})
	mcp.SetKind(ptrace.SpanKindClient)
	mcp.Attributes().PutStr("mcp.method.name", "tools/call")
	mcp.Attributes().PutStr("jsonrpc.request.id", "7")
	plainServer := span(3, 2, true, "/mcp", "")
	for _, tc := range []struct {
		name           string
		exports        [][]ptrace.Traces // one export every 3 s
		http, requests int               // exchanges, and those for /mcp
	}{
		{"client, then server, together", [][]ptrace.Traces{{client, server}}, 1, 1},
		{"client, then server 3 s later", [][]ptrace.Traces{{client}, {server}}, 1, 1},
		{"server, then client 3 s later", [][]ptrace.Traces{{server}, {client}}, 1, 1},
		{"a web server's request and its MCP call, together", [][]ptrace.Traces{{app, call}}, 2, 1},
		{"a web server's request, then its MCP call", [][]ptrace.Traces{{app}, {call}}, 2, 1},
		{"an MCP call, then the web server's request", [][]ptrace.Traces{{call}, {app}}, 2, 1},
		{"backend, gateway, client", [][]ptrace.Traces{{backend}, {gateway}, {client}}, 1, 1},
		{"client, gateway, backend", [][]ptrace.Traces{{client}, {gateway}, {backend}}, 1, 1},
		{"gateway, backend, client", [][]ptrace.Traces{{gateway}, {backend}, {client}}, 1, 1},
		{"a client MCP only by its MCP span, then its server", [][]ptrace.Traces{{rpcClient}, {plainServer}}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requests := 0
			asm := otlp.NewAssembler(otlp.DefaultConfig(), []byte("assemble-test-key"), func(o *decode.Observation) {
				if o.Kind == decode.KindRequest && o.Request.Path == "/mcp" {
					requests++
				}
			})
			wall := t0.Add(time.Hour)
			for i, export := range tc.exports {
				now := wall.Add(time.Duration(i) * 3 * time.Second)
				for _, td := range export {
					cp := ptrace.NewTraces()
					td.CopyTo(cp)
					if _, err := asm.Consume(cp, now); err != nil {
						t.Fatal(err)
					}
				}
				asm.Advance(now.Add(2500 * time.Millisecond))
			}
			asm.Flush()
			if st := asm.Stats(); int(st.HTTPSpans) != tc.http || requests != tc.requests {
				t.Errorf("stats %+v, %d requests for /mcp: want %d exchanges, %d for /mcp", st, requests, tc.http, tc.requests)
			}
		})
	}
}
