package decode

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Merger tuning that is not worth a knob.
const (
	// localBatch is how many observations a worker collects before it takes
	// the merger's lock.
	localBatch = 256
	// tickGranularity is how far capture time must advance before a Tick
	// takes the merger's lock again.
	tickGranularity = 10 * time.Millisecond
	// outQueueBatches bounds released batches waiting for the out goroutine,
	// and releaseBatch the observations in one: a slow consumer slows the
	// workers down instead of growing memory, so between the workers and
	// out the merger holds at most MaxBufferedObservations plus
	// MaxQueuedObservations.
	outQueueBatches = 16
	releaseBatch    = 1024
	// MaxQueuedObservations is what released batches hold at most.
	MaxQueuedObservations = (outQueueBatches + 1) * releaseBatch
)

// item is one observation in the merger's buffer. Observations sort by key
// (capture time, made non-decreasing per connection), then connection and
// per-connection sequence, so one exchange keeps its order on equal times.
type item struct {
	key  int64
	conn uint64
	seq  uint64
	obs  *Observation
}

func (a *item) less(b *item) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	if a.conn != b.conn {
		return a.conn < b.conn
	}
	return a.seq < b.seq
}

// Pipeline decodes the streams of all capture workers and merges their
// observations into one capture-time-ordered sequence handed to out.
type Pipeline struct {
	cfg     Config
	out     func(*Observation)
	workers []*worker

	mu          sync.Mutex
	buffered    runHeap
	lastTick    []int64 // per worker, UnixNano; 0 until its first Tick
	done        []bool
	released    item // the newest observation released so far
	hasReleased bool
	// releasedEarly: released left early (MaxBufferedObservations), so an
	// older observation arriving now is late because of that limit.
	releasedEarly bool
	closed        bool

	outCh chan []*Observation
	// free returns delivered batches for reuse: grown one append at a
	// time, each released batch used to cost several allocations.
	free chan []*Observation
	wg   sync.WaitGroup

	// reused holds the reused observations (reuse.go); back is the
	// delivering goroutine's side of it.
	reused freeLists
	back   spareSet

	delivered, late, early atomic.Int64
	lateEarly              atomic.Int64 // late after an early release
	// queued counts observations released and not yet delivered; peak is
	// the most the merger held at once (buffered and queued).
	queued atomic.Int64
	peak   int64
}

// NewPipeline makes a pipeline for the given number of capture workers. out
// is called from one goroutine, in capture-time order, until Close returns.
// An invalid cfg is replaced field by field with defaults.
func NewPipeline(cfg Config, workers int, out func(*Observation)) *Pipeline {
	cfg = withDefaults(cfg)
	if workers < 1 {
		workers = 1
	}
	p := &Pipeline{
		cfg:      cfg,
		out:      out,
		lastTick: make([]int64, workers),
		done:     make([]bool, workers),
		outCh:    make(chan []*Observation, outQueueBatches),
		free:     make(chan []*Observation, outQueueBatches+2),
	}
	share := max(cfg.MaxBufferedBytes/int64(workers), 1)
	for i := 0; i < workers; i++ {
		p.workers = append(p.workers, &worker{p: p, id: i, cfg: cfg, stats: new(counters),
			peeker:  Peeker{KeepToolArguments: cfg.KeepToolArguments, MaxArgumentBytes: cfg.MaxArgumentBytes, HashKey: cfg.HashKey},
			maxHeld: share, checkEvery: max(share/8, minBufferCheck), maxInflaters: max(MaxInflatingBodies/workers, 1)})
	}
	p.wg.Add(1)
	go p.deliver()
	return p
}

// withDefaults replaces unusable limits with their defaults.
func withDefaults(cfg Config) Config {
	def := DefaultConfig()
	if cfg.MaxHeaderBytes < 256 {
		cfg.MaxHeaderBytes = def.MaxHeaderBytes
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = def.MaxBodyBytes
	}
	if cfg.MaxSSELineBytes < 16 {
		cfg.MaxSSELineBytes = def.MaxSSELineBytes
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = def.MaxEventBytes
	}
	if cfg.ReorderWindow < 0 {
		cfg.ReorderWindow = def.ReorderWindow
	}
	if cfg.MaxBufferedObservations < 1 {
		cfg.MaxBufferedObservations = def.MaxBufferedObservations
	}
	if cfg.MaxArgumentBytes <= 0 {
		cfg.MaxArgumentBytes = def.MaxArgumentBytes
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = def.MaxBufferedBytes
	}
	return cfg
}

func (p *Pipeline) deliver() {
	defer p.wg.Done()
	for batch := range p.outCh {
		for _, o := range batch {
			p.out(o)
			p.release(o)
		}
		p.delivered.Add(int64(len(batch)))
		p.queued.Add(-int64(len(batch)))
		clear(batch) // let the observations go
		select {
		case p.free <- batch[:0]:
		default:
		}
	}
}

// Factory returns worker i's StreamFactory; use it from that worker's
// goroutine only.
func (p *Pipeline) Factory(i int) StreamFactory {
	if i < 0 || i >= len(p.workers) {
		panic(fmt.Sprintf("decode: Factory(%d) on a pipeline of %d workers", i, len(p.workers)))
	}
	return p.workers[i]
}

// Close flushes every worker, releases all buffered observations and waits
// until out has seen them. Call it after capture has returned (no factory or
// stream is used after Close).
func (p *Pipeline) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	for _, w := range p.workers {
		p.insertLocked(w.pending, w.id)
		w.pending = nil
		p.done[w.id] = true
	}
	p.releaseLocked()
	p.closed = true
	close(p.outCh)
	p.mu.Unlock()
	p.wg.Wait()
}

// Stats sums the counters of all workers and the merger.
func (p *Pipeline) Stats() Stats {
	s := Stats{ParseErrors: map[string]int64{}}
	for _, w := range p.workers {
		w.stats.addTo(&s)
	}
	s.Observations = p.delivered.Load()
	s.LateObservations = p.late.Load()
	s.EarlyReleases = p.early.Load()
	s.LateAfterEarlyRelease = p.lateEarly.Load()
	p.mu.Lock()
	s.MergerPeak = p.peak
	p.mu.Unlock()
	return s
}

// insertLocked moves worker src's batch into the buffer (taking ownership of
// the slice), releasing the oldest early when the buffer is full.
func (p *Pipeline) insertLocked(items []item, src int) {
	if p.closed || len(items) == 0 {
		return
	}
	for i := range items {
		if p.hasReleased && items[i].less(&p.released) {
			p.late.Add(1)
			// Not yet handed out, so still the merger's to mark.
			items[i].obs.Late = LateReorderWindow
			if p.releasedEarly {
				items[i].obs.Late = LateMaxBufferedObservations
				p.lateEarly.Add(1)
			}
		}
	}
	p.buffered.pushFrom(items, src)
	p.peak = max(p.peak, int64(p.buffered.len())+p.queued.Load())
	var early []*Observation
	for p.buffered.len() > p.cfg.MaxBufferedObservations {
		if early == nil {
			early = p.newBatch()
		}
		old := p.buffered.pop()
		p.noteReleased(old, true)
		early = append(early, old.obs)
		p.early.Add(1)
		if len(early) == releaseBatch {
			p.send(early)
			early = nil
		}
	}
	p.send(early)
}

// send hands a released batch to the out goroutine, waiting while the
// queue is full.
func (p *Pipeline) send(batch []*Observation) {
	if len(batch) == 0 {
		return
	}
	p.queued.Add(int64(len(batch)))
	p.outCh <- batch
}

// newBatch returns an empty batch, reused when one is free.
func (p *Pipeline) newBatch() []*Observation {
	select {
	case b := <-p.free:
		return b
	default:
		return nil
	}
}

func (p *Pipeline) noteReleased(it item, early bool) {
	if !p.hasReleased || p.released.less(&it) {
		p.released = it
		p.hasReleased = true
		p.releasedEarly = early
	}
}

// releaseLocked hands out everything older than the watermark: the slowest
// active worker's capture time minus the reorder window. Finished workers do
// not hold it back; a worker that has not ticked yet holds everything back
// (capture ticks every worker regularly, even one without traffic, so this
// only lasts until its first tick; MaxBufferedObservations bounds it).
func (p *Pipeline) releaseLocked() {
	watermark := int64(1<<63 - 1)
	all := true
	for i, t := range p.lastTick {
		if p.done[i] {
			continue
		}
		if t == 0 {
			return
		}
		all = false
		watermark = min(watermark, t-int64(p.cfg.ReorderWindow))
	}
	var batch []*Observation
	for p.buffered.len() > 0 && (all || p.buffered.min().key < watermark) {
		if batch == nil {
			batch = p.newBatch()
		}
		it := p.buffered.pop()
		p.noteReleased(it, false)
		batch = append(batch, it.obs)
		if len(batch) == releaseBatch {
			p.send(batch)
			batch = nil
		}
	}
	p.send(batch)
}

// worker is one capture worker's StreamFactory and its decoding state.
type worker struct {
	p        *Pipeline
	id       int
	cfg      Config
	stats    *counters
	peeker   Peeker
	strings  interner
	ssePool  []*SSEDecoder // decoders of closed connections, for reuse
	bufPool  [][]byte      // head and body buffers of closed connections
	connPool []*conn       // closed connections, zeroed, for reuse
	lower    [maxKnownHeaderName]byte
	scratch  []byte // a request target without its query (redactQuery)

	spare    spareSet // this worker's side of the pipeline's free lists
	pending  []item
	tick     time.Time // latest Tick
	sentTick time.Time // latest Tick the merger knows

	// The buffers' budget (buffered.go): the open connections, this
	// worker's share of MaxBufferedBytes, and the bytes fed since they
	// were last counted.
	live                            []*conn
	maxHeld, checkEvery, sinceCheck int64
	// inflaters open on this worker's connections, and its share of
	// MaxInflatingBodies.
	inflaters, maxInflaters int
}

// Pooling SSE decoders spares each new connection growing fresh buffers.
const (
	maxPooledSSE       = 64
	maxPooledSSEBuffer = 64 << 10 // larger buffers are dropped, not pooled
)

func (w *worker) getSSE(onEvent func(*SSEEvent)) *SSEDecoder {
	if n := len(w.ssePool); n > 0 {
		d := w.ssePool[n-1]
		w.ssePool[n-1] = nil
		w.ssePool = w.ssePool[:n-1]
		d.onEvent = onEvent
		d.Reset()
		return d
	}
	return NewSSEDecoder(w.cfg.MaxSSELineBytes, w.cfg.MaxEventBytes, onEvent)
}

func (w *worker) putSSE(d *SSEDecoder) {
	if len(w.ssePool) >= maxPooledSSE {
		return
	}
	if cap(d.line) > maxPooledSSEBuffer {
		d.line = nil
	}
	if cap(d.data) > maxPooledSSEBuffer {
		d.data = nil
	}
	d.onEvent = nil
	w.ssePool = append(w.ssePool, d)
}

// Head and body buffers are pooled too: grown from nothing, every
// connection's first head took several allocations.
const (
	maxPooledBufs = 256
	newBufSize    = 512
	maxPooledBuf  = 64 << 10 // larger buffers are dropped, not pooled
)

func (w *worker) getBuf() []byte {
	if n := len(w.bufPool); n > 0 {
		b := w.bufPool[n-1]
		w.bufPool[n-1] = nil
		w.bufPool = w.bufPool[:n-1]
		return b
	}
	return make([]byte, 0, newBufSize)
}

func (w *worker) putBuf(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBuf || len(w.bufPool) >= maxPooledBufs {
		return
	}
	w.bufPool = append(w.bufPool, b[:0])
}

// maxPooledConns bounds the closed connections a worker keeps for reuse: a
// connection is a 1 KiB object with pointers, costly to allocate anew for
// every short-lived connection, and a few suffice for a steady churn.
const maxPooledConns = 64

// getConn returns a zeroed connection, a reused one when there is one.
func (w *worker) getConn() *conn {
	if n := len(w.connPool); n > 0 {
		c := w.connPool[n-1]
		w.connPool[n-1] = nil
		w.connPool = w.connPool[:n-1]
		return c
	}
	return &conn{}
}

// putConn zeroes a closed connection and keeps it for reuse. Nothing else
// points to it: observations copy its Conn, and capture calls nothing on a
// stream after Close (the TCPStream contract).
func (w *worker) putConn(c *conn) {
	if len(w.connPool) >= maxPooledConns {
		return
	}
	*c = conn{}
	w.connPool = append(w.connPool, c)
}

// NewStream implements StreamFactory.
func (w *worker) NewStream(meta ConnMeta) TCPStream { return newConn(w, meta) }

func (w *worker) push(it item) {
	if w.pending == nil {
		w.pending = make([]item, 0, localBatch)
	}
	w.pending = append(w.pending, it)
	if len(w.pending) >= localBatch {
		w.flush(false)
	}
}

// Tick implements StreamFactory.
func (w *worker) Tick(now time.Time) {
	if now.After(w.tick) {
		w.tick = now
	}
	if w.tick.Sub(w.sentTick) < tickGranularity && len(w.pending) < localBatch {
		return
	}
	w.flush(true)
}

// Done implements StreamFactory.
func (w *worker) Done() {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.insertLocked(w.pending, w.id)
	w.pending = nil
	p.done[w.id] = true
	if !p.closed {
		p.releaseLocked()
	}
}

func (w *worker) flush(withTick bool) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.insertLocked(w.pending, w.id)
	// The merger owns the batch now; refill one it has emptied.
	w.pending = p.buffered.takeSpare()
	if withTick && !w.tick.IsZero() {
		p.lastTick[w.id] = w.tick.UnixNano()
		w.sentTick = w.tick
	}
	if !p.closed {
		p.releaseLocked()
	}
}
