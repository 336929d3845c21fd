package pipeline

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
)

// lossRecorder keeps what the detector reports that the test looks at.
type lossRecorder struct {
	violations   []detector.Kind
	unverifiable []string
}

func (r *lossRecorder) Violation(v *detector.Violation)         { r.violations = append(r.violations, v.Kind) }
func (r *lossRecorder) Resume(*detector.ResumeAttempt)          {}
func (r *lossRecorder) Session(*detector.SessionSummary)        {}
func (r *lossRecorder) UnknownOutcome(*detector.UnknownOutcome) {}
func (r *lossRecorder) Unverifiable(u *detector.Unverifiable) {
	r.unverifiable = append(r.unverifiable, u.Check)
}

// TestLiveTellsDropsBeforeEachObservation: the live pipeline tells the
// detector of kernel drops before it hands on the next observation, so a
// finding that observation completes is unverifiable when a packet was
// dropped before it; the clock's once a second came too late for such a
// finding (a burst lost on a full ring, the swap judged 650 ms later). The
// README sample's session swap, read from its capture, is handed to a
// Live's observe with the kernel's drop counter stepping once, just before
// the swapped answer, or just after it, which changes nothing.
func TestLiveTellsDropsBeforeEachObservation(t *testing.T) {
	path := filepath.Join("testdata", "fixtures", "go-rolling-deploy-swap.pcap")
	swapAt := -1 // the index of the answer carrying another session's id
	run := func(dropAt int) *lossRecorder {
		rec := &lossRecorder{}
		seen := 0
		var last time.Time
		l := &Live{det: detector.New(detector.DefaultConfig(), rec), mu: &sync.Mutex{}}
		l.kernelDrops = func() uint64 {
			if dropAt >= 0 && seen >= dropAt {
				return 1
			}
			return 0
		}
		cfg := DefaultConfig()
		cfg.Capture.Workers = 1
		pipe := decode.NewPipeline(cfg.Decode, 1, func(o *decode.Observation) {
			if r := o.Request; swapAt < 0 && o.Kind == decode.KindResponse && r != nil && r.HasSessionID &&
				o.Response.HasSessionID && o.Response.SessionID != r.SessionID {
				swapAt = seen
			}
			l.observe(o)
			seen++
			last = o.Time
		})
		if _, err := capture.ReadFiles(context.Background(), []string{path}, cfg.Capture, pipe.Factory); err != nil {
			t.Fatal(err)
		}
		pipe.Close()
		l.det.Close(last)
		return rec
	}
	intact := run(-1)
	if len(intact.violations) != 1 || intact.violations[0] != detector.KindSessionSwap || swapAt < 0 {
		t.Fatalf("intact: violations %v (swapped answer at %d), want one session_swap", intact.violations, swapAt)
	}
	if got := run(swapAt); len(got.violations) != 0 || !slices.Contains(got.unverifiable, "session_swap") {
		t.Errorf("drop counted before the swapped answer: violations %v, unverifiable %v; want the swap unverifiable",
			got.violations, got.unverifiable)
	}
	if got := run(swapAt + 1); len(got.violations) != 1 {
		t.Errorf("drop counted after the swapped answer: violations %v, want the swap", got.violations)
	}
}
