package main

// The impairment of one direction of the link: which frames are dropped,
// duplicated, held back (reordered) and when each is sent. Kept apart from
// the TAP devices so that it can be tested without root.

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replaywatch/replaywatch/test/netnsrig"
)

// impairment is what a pipe does to the frames it carries.
type impairment struct {
	drop      float64 // probability that a frame is dropped
	duplicate float64 // probability that a frame is sent twice, back to back
	reorder   float64 // probability that a frame is held back...
	window    int     // ... until this many later frames have been sent
	// holdMax sends a held frame anyway when fewer than window frames
	// follow it within this time (the end of a burst).
	holdMax time.Duration
	delay   time.Duration // added to every frame
}

// pipe impairs one direction. push takes the frames in the order they were
// read; write gets them, from a goroutine of the pipe's own, in the order
// and at the time (delay after their turn came) they are to be written.
// The decisions come from a PRNG seeded per direction, three draws for
// every frame whatever the outcome: the n-th frame of a direction meets the
// same fate in every run with the same seed.
type pipe struct {
	imp     impairment
	write   func(frame []byte) error
	out     chan timed
	drained chan struct{} // closed when the writer has written the last frame

	mu       sync.Mutex
	closed   bool // push takes no more frames
	rng      *rand.Rand
	held     []byte // the frame held back, nil when none
	heldDup  bool   // send the held frame twice
	heldLeft int    // frames still to send before it
	heldGen  uint64 // which hold a timer belongs to

	frames, bytes, dropped, duplicated, reordered, holdTimeouts atomic.Int64
	written, writeErrors                                        atomic.Int64
	firstWriteError                                             atomic.Pointer[string]
}

// timed is a frame and when to write it.
type timed struct {
	due   time.Time
	frame []byte
}

func newPipe(imp impairment, seed, stream uint64, write func([]byte) error) *pipe {
	p := &pipe{imp: imp, write: write, out: make(chan timed, 4096), drained: make(chan struct{}),
		rng: rand.New(rand.NewPCG(seed, stream))}
	go p.writer()
	return p
}

// push decides the fate of one frame (which push may keep: the caller
// must not reuse it).
func (p *pipe) push(frame []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.frames.Add(1)
	p.bytes.Add(int64(len(frame)))
	d, u, r := p.rng.Float64(), p.rng.Float64(), p.rng.Float64()
	if d < p.imp.drop {
		p.dropped.Add(1)
		return
	}
	dup := u < p.imp.duplicate
	if dup {
		p.duplicated.Add(1)
	}
	if r < p.imp.reorder && p.imp.window > 0 && p.held == nil {
		p.reordered.Add(1)
		p.held, p.heldDup, p.heldLeft = frame, dup, p.imp.window
		p.heldGen++
		gen := p.heldGen
		time.AfterFunc(p.imp.holdMax, func() { p.holdTimeout(gen) })
		return
	}
	p.emit(frame, dup)
	if p.held != nil {
		p.heldLeft--
		if p.heldLeft == 0 {
			p.release()
		}
	}
}

// drain takes no more frames, sends the one held back, if any, and
// returns once every frame taken has been written (or failed to be).
func (p *pipe) drain() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.held != nil {
			p.release()
		}
		close(p.out)
	}
	p.mu.Unlock()
	<-p.drained
}

// holdTimeout sends the frame held by hold gen if it is still held.
func (p *pipe) holdTimeout(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed && p.held != nil && p.heldGen == gen {
		p.holdTimeouts.Add(1)
		p.release()
	}
}

func (p *pipe) release() {
	p.emit(p.held, p.heldDup)
	p.held = nil
}

// emit queues a frame (twice when dup) for writing, delay from now. It is
// called with mu held, so frames are queued in their sending order.
func (p *pipe) emit(frame []byte, dup bool) {
	t := timed{due: time.Now().Add(p.imp.delay), frame: frame}
	p.out <- t
	if dup {
		p.out <- t
	}
}

// writer writes the queued frames when they are due.
func (p *pipe) writer() {
	defer close(p.drained)
	for t := range p.out {
		if d := time.Until(t.due); d > 0 {
			time.Sleep(d)
		}
		if err := p.write(t.frame); err != nil {
			p.writeErrors.Add(1)
			msg := err.Error()
			p.firstWriteError.CompareAndSwap(nil, &msg)
		} else {
			p.written.Add(1)
		}
	}
}

// stats are the pipe's counters so far.
func (p *pipe) stats() netnsrig.DirStats {
	st := netnsrig.DirStats{
		Frames:       p.frames.Load(),
		Bytes:        p.bytes.Load(),
		Dropped:      p.dropped.Load(),
		Duplicated:   p.duplicated.Load(),
		Reordered:    p.reordered.Load(),
		HoldTimeouts: p.holdTimeouts.Load(),
		Written:      p.written.Load(),
		WriteErrors:  p.writeErrors.Load(),
	}
	if msg := p.firstWriteError.Load(); msg != nil {
		st.FirstWriteError = *msg
	}
	return st
}
