package otlp_test

import (
	"testing"
	"time"

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
			if err := asm.Consume(first, now); err != nil {
				t.Fatal(err)
			}
			if tc.quiet {
				asm.Advance(now.Add(time.Second))
				if s := asm.Stats(); s.EarlyRelease == 0 || s.Late != 0 || s.Pending != 0 {
					t.Fatalf("in-order spans, then quiet: stats %+v; want early releases, none late, nothing pending", s)
				}
			}
			// Another client's exchanges, an hour older, arrive now.
			if err := asm.Consume(spanproj.Shift(emitterTraces(t, "otelhttp.json"), -time.Hour), now); err != nil {
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
