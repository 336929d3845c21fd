package main

import (
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// sink collects what a pipe writes.
type sink struct {
	mu     sync.Mutex
	frames []int
	times  []time.Time
}

func (s *sink) write(frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frames = append(s.frames, int(binary.BigEndian.Uint32(frame)))
	s.times = append(s.times, time.Now())
	return nil
}

// wait returns what was written once n frames were, or fails.
func (s *sink) wait(t *testing.T, n int) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		got := slices.Clone(s.frames)
		s.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d frames written, want %d", len(got), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func frame(i int) []byte {
	b := make([]byte, 60)
	binary.BigEndian.PutUint32(b, uint32(i))
	return b
}

// pushAll pushes n numbered frames through a pipe and returns it with its sink.
func pushAll(imp impairment, seed uint64, n int) (*pipe, *sink) {
	s := &sink{}
	p := newPipe(imp, seed, 1, s.write)
	for i := range n {
		p.push(frame(i))
	}
	return p, s
}

func TestCleanPipePassesEveryFrameInOrder(t *testing.T) {
	p, s := pushAll(impairment{window: 3, holdMax: time.Second}, 1, 1000)
	got := s.wait(t, 1000)
	for i, f := range got {
		if f != i {
			t.Fatalf("frame %d written as the %dth", f, i)
		}
	}
	if st := p.stats(); st.Frames != 1000 || st.Written != 1000 || st.Dropped+st.Duplicated+st.Reordered != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestReorderSendsAHeldFrameAfterTheWindow(t *testing.T) {
	// Every frame is to be held, but only one at a time: each held frame
	// goes out after the next three.
	p, s := pushAll(impairment{reorder: 1, window: 3, holdMax: time.Minute}, 1, 9)
	got := s.wait(t, 8)
	if want := []int{1, 2, 3, 0, 5, 6, 7, 4}; !slices.Equal(got, want) {
		t.Errorf("written %v, want %v (and frame 8 held)", got, want)
	}
	if st := p.stats(); st.Reordered != 3 || st.HoldTimeouts != 0 || st.Written != 8 {
		t.Errorf("stats %+v, want 3 reordered, 8 written", st)
	}
	// drain sends the held frame, and takes no more.
	p.drain()
	p.push(frame(9))
	if got := s.wait(t, 9); !slices.Equal(got, []int{1, 2, 3, 0, 5, 6, 7, 4, 8}) {
		t.Errorf("written after drain %v, want frame 8 last", got)
	}
	if st := p.stats(); st.Frames != 9 || st.Written != 9 {
		t.Errorf("stats after drain %+v, want 9 frames, 9 written", st)
	}
}

func TestHeldFrameGoesAfterMaxHold(t *testing.T) {
	start := time.Now()
	p, s := pushAll(impairment{reorder: 1, window: 3, holdMax: 30 * time.Millisecond}, 1, 1)
	if got := s.wait(t, 1); !slices.Equal(got, []int{0}) {
		t.Fatalf("written %v", got)
	}
	if d := s.times[0].Sub(start); d < 30*time.Millisecond {
		t.Errorf("held frame written after %v, before the maximum hold", d)
	}
	if st := p.stats(); st.Reordered != 1 || st.HoldTimeouts != 1 {
		t.Errorf("stats %+v, want 1 reordered, 1 hold timeout", st)
	}
}

func TestDelay(t *testing.T) {
	start := time.Now()
	_, s := pushAll(impairment{window: 3, holdMax: time.Second, delay: 20 * time.Millisecond}, 1, 3)
	got := s.wait(t, 3)
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("written %v", got)
	}
	for i, w := range s.times {
		if d := w.Sub(start); d < 20*time.Millisecond {
			t.Errorf("frame %d written after %v, before the delay", i, d)
		}
	}
}

func TestRates(t *testing.T) {
	imp := impairment{drop: 0.05, duplicate: 0.02, reorder: 0.02, window: 3, holdMax: time.Millisecond}
	const n = 20000
	p, s := pushAll(imp, 42, n)
	st := p.stats()
	for _, c := range []struct {
		name string
		got  int64
		rate float64
	}{{"dropped", st.Dropped, imp.drop}, {"duplicated", st.Duplicated, imp.duplicate * (1 - imp.drop)}} {
		want := c.rate * n
		if math.Abs(float64(c.got)-want) > 5*math.Sqrt(want) {
			t.Errorf("%s %d of %d, want about %.0f", c.name, c.got, n, want)
		}
	}
	if st.Reordered == 0 {
		t.Errorf("nothing reordered: %+v", st)
	}
	// Every frame not dropped is written (the last held one after the
	// maximum hold), duplicates twice.
	s.wait(t, int(n-st.Dropped+st.Duplicated))
	time.Sleep(10 * time.Millisecond)
	if st := p.stats(); st.Written != n-st.Dropped+st.Duplicated || st.WriteErrors != 0 {
		t.Errorf("stats %+v: written is not frames - dropped + duplicated", st)
	}
}

func TestSameSeedSameFates(t *testing.T) {
	// A maximum hold longer than the test: frames are released by the
	// window only, which depends on nothing but the frames.
	imp := impairment{drop: 0.05, duplicate: 0.02, reorder: 0.02, window: 3, holdMax: time.Minute}
	const n, compared = 5000, 4000
	_, s := pushAll(imp, 42, n)
	_, again := pushAll(imp, 42, n)
	_, other := pushAll(imp, 43, n)
	got := s.wait(t, compared)[:compared]
	if !slices.Equal(again.wait(t, compared)[:compared], got) {
		t.Error("the same seed wrote the frames differently")
	}
	if slices.Equal(other.wait(t, compared)[:compared], got) {
		t.Error("another seed wrote the frames the same")
	}
}
