package decode

import (
	"cmp"
	"slices"
	"time"
)

// The decoder's buffers in bytes. Each connection's are bounded by the
// per-message limits (MaxHeaderBytes, MaxBodyBytes, MaxSSELineBytes,
// MaxEventBytes), and a buffer grown past keptBufBytes (heads and bodies) or
// maxKeptSSEBuffer (SSE lines and events) is let go once its message is
// done, so an idle connection holds little. What many connections hold at
// once mid-message is bounded by Config.MaxBufferedBytes, split evenly
// between the workers: each worker counts what its connections and pools
// hold every time enough bytes arrived to have grown them by an eighth of
// its share (buffers grow only with the bytes fed), and past its share it
// empties its pools, then gives up what the largest holders buffered, as
// after a capture gap marked with the limit's name (decode.MaxBufferedBytes):
// their open messages end cut, and the detector makes the checks that
// needed them unverifiable.
const (
	keptBufBytes     = 4 << 10
	maxKeptSSEBuffer = 64 << 10
	// minBufferCheck bounds how often a worker counts: at least every
	// this many bytes fed.
	minBufferCheck = 256 << 10
)

// trimBuf empties b for reuse, or lets it go when it grew past keep.
func trimBuf(b []byte, keep int) []byte {
	if cap(b) > keep {
		return nil
	}
	return b[:0]
}

// held is what a connection's buffers hold.
func (c *conn) held() int64 {
	var n int
	for i := range c.dirs {
		d := &c.dirs[i]
		n += cap(d.buf) + cap(d.body)
		if d.inflate != nil {
			n += inflaterBytes
		}
		if d.sse != nil {
			n += cap(d.sse.line) + cap(d.sse.data)
		}
	}
	return int64(n)
}

// track adds c to the connections the worker counts.
func (w *worker) track(c *conn) {
	c.live = len(w.live)
	w.live = append(w.live, c)
}

// untrack removes c (swapping the last one into its place).
func (w *worker) untrack(c *conn) {
	i := c.live
	if i < 0 || i >= len(w.live) || w.live[i] != c {
		return
	}
	last := len(w.live) - 1
	w.live[i] = w.live[last]
	w.live[i].live = i
	w.live[last] = nil
	w.live = w.live[:last]
	c.live = -1
}

// fed counts n bytes arriving; it counts what is held when enough did.
func (w *worker) fed(n int, ts time.Time) {
	w.sinceCheck += int64(n)
	if w.sinceCheck < w.checkEvery {
		return
	}
	w.sinceCheck = 0
	w.checkBuffered(ts)
}

// pooled is what the worker's pools hold.
func (w *worker) pooled() int64 {
	var n int
	for _, b := range w.bufPool {
		n += cap(b)
	}
	for _, d := range w.ssePool {
		n += cap(d.line) + cap(d.data)
	}
	return int64(n)
}

// checkBuffered counts what the worker's buffers hold and sheds down to
// seven eighths of its share when they hold more.
func (w *worker) checkBuffered(ts time.Time) {
	pooled, held := w.pooled(), int64(0)
	for _, c := range w.live {
		held += c.held()
	}
	if total := pooled + held; total > w.stats.peakHeld.Load() {
		w.stats.peakHeld.Store(total)
	}
	if pooled+held <= w.maxHeld {
		return
	}
	clear(w.bufPool)
	w.bufPool = w.bufPool[:0]
	clear(w.ssePool)
	w.ssePool = w.ssePool[:0]
	if held <= w.maxHeld {
		return
	}
	type holder struct {
		c    *conn
		held int64
	}
	byHeld := make([]holder, 0, len(w.live))
	for _, c := range w.live {
		if h := c.held(); h > 0 {
			byHeld = append(byHeld, holder{c, h})
		}
	}
	slices.SortFunc(byHeld, func(a, b holder) int { return cmp.Compare(b.held, a.held) })
	target := w.maxHeld - w.maxHeld/8
	for _, h := range byHeld {
		if held <= target {
			break
		}
		h.c.shed(ts)
		held -= h.held
		w.stats.bufferLimitHits.Add(1)
	}
}

// shed gives up what c buffered, as after a gap in both directions marked
// with the limit's name: open messages end cut (EndGap), the directions
// look for a start line again, and the detector is told why.
func (c *conn) shed(ts time.Time) {
	if c.dead {
		return
	}
	for i := range c.dirs {
		d := &c.dirs[i]
		d.ts = ts
		if d.state != stDone {
			d.abort(EndGap)
			d.enterSync()
		}
		d.buf, d.body = nil, nil
		if d.sse != nil {
			d.sse.line, d.sse.data = nil, nil
		}
	}
	c.emit(&Observation{Kind: KindGap, Time: ts, Gap: &Gap{Lost: -1, Limit: "MaxBufferedBytes", Momentary: true,
		RolesUnknown: c.dirs[0].role == roleUnknown}})
	c.pairingLost = true
	c.endQueued(ts)
}
