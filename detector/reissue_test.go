package detector

import (
	"fmt"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// TestCallHabitsWindow follows one answered call through the habit memory's
// generations: it is found for at least LinkWindow after its answer, across
// a turn of generations, and a generation retired full is a limit hit.
func TestCallHabitsWindow(t *testing.T) {
	const window = time.Minute
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name string
		// later: other calls answered at these offsets from t0 after the
		// call, turning the generations over.
		later []time.Duration
		at    time.Duration // when a broken identical call was sent
		found bool
	}{
		{"at once", nil, time.Second, true},
		{"sent before the answer", nil, -time.Second, false},
		{"across one turn", []time.Duration{window + time.Second}, window + 2*time.Second, true},
		{"the window whole, across a turn", []time.Duration{window / 2, window + time.Second}, window, true},
		{"past two turns", []time.Duration{window + time.Second, 2*window + 2*time.Second}, 2*window + 3*time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New(Config{LinkWindow: window}, discard{})
			d.noteHabit(1, t0, true)
			for i, off := range tc.later {
				d.noteHabit(uint64(100+i), t0.Add(off), true)
			}
			answered, maybe := d.habits.by(1, t0.Add(tc.at))
			if answered != tc.found || maybe {
				t.Errorf("by = %v, %v; want %v, false", answered, maybe, tc.found)
			}
		})
	}
	t.Run("possibly answered", func(t *testing.T) {
		d := New(Config{LinkWindow: window}, discard{})
		d.noteHabit(1, t0, false)
		if answered, maybe := d.habits.by(1, t0.Add(time.Second)); answered || !maybe {
			t.Errorf("by = %v, %v; want false, true", answered, maybe)
		}
	})
	t.Run("full", func(t *testing.T) {
		d := New(Config{LinkWindow: window}, discard{})
		for k := range uint64(maxBrokenCalls + 1) {
			d.noteHabit(k, t0, true)
		}
		if got := d.stats.LimitsHit["maxBrokenCalls"]; got != 1 {
			t.Errorf("limit hits = %d, want 1", got)
		}
		if answered, _ := d.habits.by(0, t0); !answered {
			t.Error("the retired generation's calls are forgotten at once")
		}
	})
}

// TestClientStarts: a sessionless client's server/discover counts only in
// the capture's first LinkWindow, which is also the only time it is asked
// for, and past maxBrokenCalls clients a start is a limit hit, judged as
// unseen.
func TestClientStarts(t *testing.T) {
	const window = time.Minute
	t0 := time.Unix(1_700_000_000, 0)
	d := New(Config{LinkWindow: window}, discard{})
	d.advance(t0)
	client := func(i int, at time.Duration) (*exchange, *decode.Message) {
		return &exchange{start: t0.Add(at), endpoint: "shop.test/mcp"}, &decode.Message{ClientInfo: fmt.Sprint("app/", i)}
	}
	d.noteStart(client(1, time.Second))
	d.noteStart(client(2, window))
	for _, tc := range []struct {
		name  string
		i     int
		at    time.Duration
		whole bool
	}{
		{"started", 1, 2 * time.Second, true},
		{"another client", 3, 2 * time.Second, false},
		{"started after the first window", 2, window - time.Second, false},
		{"after the first window", 3, window, true},
	} {
		if got := d.clientHistoryWhole(client(tc.i, tc.at)); got != tc.whole {
			t.Errorf("%s: clientHistoryWhole = %v, want %v", tc.name, got, tc.whole)
		}
	}
	for i := range maxBrokenCalls {
		d.noteStart(client(10+i, time.Second))
	}
	if got := d.stats.LimitsHit["maxBrokenCalls"]; got != 1 {
		t.Errorf("limit hits = %d, want 1", got)
	}
	if d.clientHistoryWhole(client(10+maxBrokenCalls-1, 2*time.Second)) {
		t.Error("a start past the limit was noted")
	}
}
