package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
)

// LiveConfig configures the live pipeline.
type LiveConfig struct {
	Capture capture.LiveConfig
	Decode  decode.Config
	Detect  detector.Config
	// Tick, if set, is called once a second after the detector's clock
	// moved, with the detector held: flush an output that buffers.
	Tick func()
	// Lock, if set, is held whenever the detector writes to its sink:
	// pipelines that share one sink (packets and spans in one agent)
	// share it.
	Lock *sync.Mutex
}

// Live is the live pipeline: packets from AF_PACKET rings, decoded and
// judged as they come. The detector is single-threaded: observations
// (from the decoder's merger) and the clock take turns under mu.
type Live struct {
	cfg     LiveConfig
	det     *detector.Detector
	pipe    *decode.Pipeline
	capture *capture.LiveCapture

	mu        *sync.Mutex // the detector's (LiveConfig.Lock when set)
	lastDrops uint64      // kernel drops already told to the detector; mu
	// kernelDrops is capture's KernelDrops (a seam for tests).
	kernelDrops func() uint64
	detStats    atomic.Pointer[detector.Stats]
	clockStop   chan struct{}
	clockDone   chan struct{}
	closeOnce   sync.Once
}

// NewLive opens the capture (it says which capability is missing) and
// wires it to a decoder and a detector writing to out.
func NewLive(cfg LiveConfig, out detector.Sink) (*Live, error) {
	cfg.Capture.Config = cfg.Capture.Config.WithDefaults()
	l := &Live{cfg: cfg, det: detector.New(cfg.Detect, withSource(out, detector.SourceLive)), mu: lockOr(cfg.Lock),
		clockStop: make(chan struct{}), clockDone: make(chan struct{})}
	l.storeStats()
	cfg.Decode.ReuseObservations = true // the detector keeps nothing the pipeline reuses
	l.pipe = decode.NewPipeline(cfg.Decode, cfg.Capture.WithDefaults().Workers, l.observe)
	c, err := capture.NewLive(cfg.Capture, func(i int) decode.StreamFactory { return l.pipe.Factory(i) })
	if err != nil {
		l.pipe.Close()
		return nil, err
	}
	l.capture, l.kernelDrops = c, c.KernelDrops
	go l.clock()
	return l, nil
}

// Workers is how many capture and decode workers run.
func (l *Live) Workers() int { return l.cfg.Capture.WithDefaults().Workers }

// CaptureStats, DecodeStats and DetectorStats are the stages' counters,
// safe to read at any time (for metrics).
func (l *Live) CaptureStats() capture.LiveStats { return l.capture.Snapshot() }
func (l *Live) DecodeStats() decode.Stats       { return l.pipe.Stats() }
func (l *Live) DetectorStats() detector.Stats   { return *l.detStats.Load() }

func (l *Live) storeStats() {
	st := l.det.Stats()
	l.detStats.Store(&st)
}

// Run captures until ctx is cancelled or the capture fails. The
// detector's clock moves once a second from NewLive to Close. Close after
// Run returns (or instead of it).
func (l *Live) Run(ctx context.Context) error {
	_, err := l.capture.Run(ctx)
	return err
}

// observe hands o to the detector, told first of any kernel drop counted
// since the last: a drop of a packet stamped before o is counted by then
// (capture's KernelDrops), and a finding o completes may rest on it. The
// clock's once a second came too late for one: the detector judged o
// first.
func (l *Live) observe(o *decode.Observation) {
	l.mu.Lock()
	l.noteLoss()
	l.det.Observe(o)
	l.mu.Unlock()
}

// clock moves the detector's clock: on a quiet network nothing else does.
// Observations can still be on their way for the reorder window, so the
// clock stays that far (and a tick) behind the wall.
func (l *Live) clock() {
	defer close(l.clockDone)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-l.clockStop:
			return
		case now := <-tick.C:
			l.mu.Lock()
			l.noteLoss()
			l.det.Advance(now.Add(-l.cfg.Decode.ReorderWindow - 2*time.Second))
			l.storeStats()
			if l.cfg.Tick != nil {
				l.cfg.Tick()
			}
			l.mu.Unlock()
		}
	}
}

// noteLoss tells the detector about kernel drops since the last call; mu
// held. Drops are counted per socket, not per connection: every check whose
// evidence began before now may rest on a packet that never arrived.
func (l *Live) noteLoss() {
	if drops := l.kernelDrops(); drops > l.lastDrops {
		l.det.NoteCaptureLoss(time.Now())
		l.lastDrops = drops
	}
}

// Close shuts the pipeline down in its order: the decoder drains what
// capture handed it, the clock stops, a last capture loss is noted, and
// the detector closes every open session (their records reach out).
func (l *Live) Close() {
	l.closeOnce.Do(func() {
		l.capture.Close()
		l.pipe.Close()
		close(l.clockStop)
		<-l.clockDone
		l.mu.Lock()
		l.noteLoss()
		l.det.Close(time.Now())
		l.storeStats()
		if l.cfg.Tick != nil {
			l.cfg.Tick()
		}
		l.mu.Unlock()
	})
}

// lockOr is l, or a lock of the pipeline's own.
func lockOr(l *sync.Mutex) *sync.Mutex {
	if l != nil {
		return l
	}
	return &sync.Mutex{}
}
