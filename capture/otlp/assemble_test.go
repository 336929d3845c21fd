package otlp_test

import (
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
				asm.Advance(now.Add(time.Second))
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
