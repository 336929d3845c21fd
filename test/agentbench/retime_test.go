package main

import (
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestRetime: each frame is due when the bytes before it are sent at the
// rate, from the first frame's own time; empty records are dropped, as
// send drops them.
func TestRetime(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	pkt := func(at time.Duration, n int) pcaprec.Packet {
		p := pcaprec.Packet{Data: make([]byte, n)}
		p.CI.Timestamp = t0.Add(at)
		return p
	}
	// At 8 Mbit/s a byte takes 1 us.
	got := retime([]pcaprec.Packet{pkt(0, 1000), pkt(time.Hour, 0), pkt(time.Hour, 500), pkt(time.Millisecond, 250)}, 8)
	want := []time.Duration{0, 1000 * time.Microsecond, 1500 * time.Microsecond}
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i, p := range got {
		if d := p.CI.Timestamp.Sub(t0); d != want[i] {
			t.Errorf("frame %d at %v, want %v", i, d, want[i])
		}
	}
}
