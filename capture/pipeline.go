package capture

import (
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/decode"
)

const (
	// batchSegments and batchArenaBytes size the batches the reader hands
	// to workers: large enough that channel hand-offs are rare, small enough
	// that a batch stays in cache.
	batchSegments   = 128
	batchArenaBytes = 64 << 10
	// batchesPerWorker is how many batches may be in flight per worker; the
	// reader waits for a free one, so memory stays bounded when workers are
	// slower than the reader.
	batchesPerWorker = 4
	// syncEvery is how many packets the reader reads before it sends every
	// worker its pending batch (even an empty one), so that a worker whose
	// connections are quiet still learns the time and flushes idle ones.
	syncEvery = 4096
	// tickEvery is how often (in packets) the single-goroutine path calls
	// Tick and checks timeouts.
	tickEvery = 64
)

// segment is one TCP segment in a batch: its TCP header and payload are
// copied into the batch's arena, because the reader reuses its read buffer.
// The fields the worker's in-order path needs come decoded; the header is
// decoded again only for a segment that goes to the assembler.
//
// A segment holds no pointers, so a batch's segments are not scanned by the
// garbage collector and filling them takes no write barriers: a time.Time
// has a Location pointer, and the barriers on storing it were a good part of
// what handing segments over cost while a collection ran. The time is kept as
// Unix seconds and nanoseconds when it is in UTC, as packet sources make it;
// any other time goes to the batch's times.
type segment struct {
	key            flowKey
	fromLo         bool
	flags          uint8
	ipID           uint16 // the IPv4 identification (0 for IPv6), for Live's duplicate check
	seq, ack       uint32
	lost           uint32 // payload bytes the capture did not keep (tcpSeg.lost)
	behind         int64  // the reader's capture time when it read the segment (at most feeder.readCap), less the segment's (tcpSeg.readAt)
	nsec           int32
	zoned          int32 // 1 + index of the time in batch.times; 0: sec and nsec
	sec            int64
	ord            uint64
	off, body, end int // header at arena[off:body], payload at arena[body:end]
}

type batch struct {
	segs  []segment
	arena []byte
	times []time.Time   // segment times that sec and nsec cannot rebuild
	now   time.Time     // the reader's capture time when the batch was sent
	home  chan<- *batch // the free pool the batch goes back to once handled
	// idle: after the batch, the worker closes its idle connections
	// (pipeline.idleCheck).
	idle bool
}

func newBatch(home chan<- *batch) *batch {
	return &batch{segs: make([]segment, 0, batchSegments), arena: make([]byte, 0, batchArenaBytes), home: home}
}

func (b *batch) full() bool {
	return len(b.segs) >= batchSegments || len(b.arena) >= batchArenaBytes
}

// setTime stores ts in s, in the segment itself when it is a UTC time. Such
// a time has no monotonic reading (setting a location strips it), so
// time.Unix(sec, nsec).UTC() rebuilds exactly the same value.
func (b *batch) setTime(s *segment, ts time.Time) {
	if ts.Location() == time.UTC {
		s.sec, s.nsec = ts.Unix(), int32(ts.Nanosecond())
		return
	}
	b.times = append(b.times, ts)
	s.zoned = int32(len(b.times))
}

func (b *batch) time(s *segment) time.Time {
	if s.zoned != 0 {
		return b.times[s.zoned-1]
	}
	return time.Unix(s.sec, int64(s.nsec)).UTC()
}

func (b *batch) reset() {
	b.segs, b.arena, b.idle = b.segs[:0], b.arena[:0], false
	clear(b.times)
	b.times = b.times[:0]
}

// release empties the batch and returns it to its pool.
func (b *batch) release() {
	b.reset()
	b.home <- b
}

// feeder is the sending side of the workers' queues: a partly filled batch
// per worker and a pool of free batches. ReadFiles' reader has one; each of
// Live's socket readers has its own, all sending to the same queues.
type feeder struct {
	queues  []chan *batch
	pending []*batch
	// free holds the batches handed back; up to cap(free) are made, as
	// they are first needed. Waiting for a free one bounds memory when
	// the workers are slower than the reader.
	free chan *batch
	made int
	now  time.Time // the reader's latest capture time, sent with each batch
	// readCap, when set, caps the reader's time a segment carries
	// (tcpSeg.readAt): Live's readers of several interfaces set it to
	// the time every reader has reached, so that a loss proof never
	// outruns a copy of the segment still in another reader's ring.
	readCap time.Time
}

func newFeeder(queues []chan *batch, batches int) *feeder {
	return &feeder{queues: queues, pending: make([]*batch, len(queues)), free: make(chan *batch, batches)}
}

// add copies a segment into worker i's batch, and sends the batch when it is
// full.
func (f *feeder) add(i int, key flowKey, fromLo bool, tcp *layers.TCP, lost int, ipID uint16, ts time.Time, ord uint64) {
	b := f.batchFor(i)
	off := len(b.arena)
	body := off + len(tcp.Contents)
	if seg, ok := contiguous(tcp.Contents, tcp.Payload); ok {
		// The usual case: the payload follows the header in the packet,
		// so one copy takes both.
		b.arena = append(b.arena, seg...)
	} else {
		b.arena = append(b.arena, tcp.Contents...)
		b.arena = append(b.arena, tcp.Payload...)
	}
	b.segs = append(b.segs, segment{key: key, fromLo: fromLo, flags: tcpFlags(tcp), ipID: ipID, seq: tcp.Seq,
		ack: tcp.Ack, lost: uint32(lost), ord: ord, off: off, body: body, end: len(b.arena)})
	b.setTime(&b.segs[len(b.segs)-1], ts)
	if f.now.After(ts) {
		b.segs[len(b.segs)-1].behind = int64(f.now.Sub(ts))
	}
	if !f.readCap.IsZero() && f.readCap.Before(f.now) {
		b.segs[len(b.segs)-1].behind = int64(f.readCap.Sub(ts)) // negative when ts is past the cap
	}
	if b.full() {
		f.send(i)
	}
}

func (f *feeder) batchFor(i int) *batch {
	if f.pending[i] == nil {
		select {
		case f.pending[i] = <-f.free:
		default:
			if f.made < cap(f.free) {
				f.made++
				f.pending[i] = newBatch(f.free)
			} else {
				f.pending[i] = <-f.free
			}
		}
	}
	return f.pending[i]
}

func (f *feeder) send(i int) {
	b := f.batchFor(i)
	b.now = f.now
	f.pending[i] = nil
	f.queues[i] <- b
}

// sync sends every worker its pending batch (even an empty one), so all of
// them see the time.
func (f *feeder) sync() {
	for i := range f.queues {
		f.send(i)
	}
}

// flush sends the batches that hold segments.
func (f *feeder) flush() {
	for i, b := range f.pending {
		if b != nil && len(b.segs) > 0 {
			f.send(i)
		}
	}
}

// runBatch hands a batch's segments to the worker. dup, when not nil, drops
// the copies of segments it has already seen (Live).
func (w *worker) runBatch(b *batch, dup *dupWindow) {
	var seg tcpSeg
	for i := range b.segs {
		s := &b.segs[i]
		if dup != nil && dup.seen(b, s) {
			continue
		}
		seg = tcpSeg{key: s.key, fromLo: s.fromLo, seq: s.seq, ack: s.ack, lost: s.lost, flags: s.flags,
			payload: b.arena[s.body:s.end], raw: b.arena[s.off:s.end], ts: b.time(s), ord: s.ord}
		seg.readAt = seg.ts.Add(time.Duration(s.behind))
		w.handleSeg(&seg)
	}
}

// pipeline is the per-packet path shared by every packet source: decode the
// frame, then hand the TCP segment to the worker that owns its connection.
type pipeline struct {
	dec   *packetDecoder
	stats Stats // reader-side counters
	ord   uint64
	now   time.Time

	workers []*worker
	// Workers > 1: the workers' queues and their batches.
	feed      *feeder
	sinceSync int
	wg        sync.WaitGroup
	// idleEvery is how much capture time passes between the points where
	// every worker closes its idle connections (idleCheck); nextIdle is
	// the reader's time of the next.
	idleEvery time.Duration
	nextIdle  time.Time
}

func newPipeline(cfg Config, newFactory func(worker int) decode.StreamFactory) *pipeline {
	p := &pipeline{dec: newPacketDecoder(), idleEvery: limitsFor(cfg).flushEvery}
	for i := range cfg.Workers {
		p.workers = append(p.workers, newWorker(cfg, newFactory(i)))
	}
	if cfg.Workers == 1 {
		return p
	}
	queues := make([]chan *batch, cfg.Workers)
	for i, w := range p.workers {
		queues[i] = make(chan *batch, batchesPerWorker)
		p.wg.Add(1)
		go p.run(w, queues[i])
	}
	p.feed = newFeeder(queues, cfg.Workers*batchesPerWorker)
	return p
}

// run is a worker goroutine.
func (p *pipeline) run(w *worker, q <-chan *batch) {
	defer p.wg.Done()
	for b := range q {
		w.runBatch(b, nil)
		w.tick(b.now)
		if b.idle {
			w.closeIdle()
		}
		b.release()
	}
	w.finish()
}

// classify counts a packet and decodes it; ok says it is a TCP segment, now
// in p.dec.tcp. wireLen is the packet's length as its capture record gives
// it (0: as captured).
func (d *packetDecoder) classify(st *Stats, data []byte, lt layers.LinkType, wireLen int) (net gopacket.Flow, ok bool) {
	st.Packets++
	st.Bytes += uint64(len(data))
	d.recordCut = max(0, wireLen-len(data))
	net, v := d.decode(data, lt)
	switch v {
	case verdictTCP:
		st.TCP++
		if d.tunnelled {
			st.Tunnelled++
		}
		if d.cut > 0 {
			// A segment cut by the snap length is lost whole: bytes
			// after the cut are unknown, and the framing of what was kept
			// cannot be trusted to end where the sender's did. The worker
			// reports the segment's bytes as a gap (tcpSeg.lost).
			d.cut += len(d.tcp.Payload)
			d.tcp.Payload = nil
			st.SnaplenBytes += uint64(d.cut)
		}
		return net, true
	case verdictNonTCP:
		st.NonTCP++
	case verdictFragment:
		st.Fragments++
	default:
		st.Undecodable++
	}
	return net, false
}

// handlePacket is the per-packet entry point for any packet source. data is
// only read during the call.
func (p *pipeline) handlePacket(data []byte, ci gopacket.CaptureInfo, lt layers.LinkType) {
	p.ord++
	if ci.Timestamp.After(p.now) {
		p.now = ci.Timestamp
		if p.feed != nil {
			p.feed.now = p.now
		}
	}
	// Before, not Sub: this runs for every packet.
	if !p.now.Before(p.nextIdle) {
		p.nextIdle = p.now.Add(p.idleEvery)
		p.idleCheck()
	}
	if _, ok := p.dec.classify(&p.stats, data, lt, ci.Length); ok {
		p.dispatch(&p.dec.tcp, ci.Timestamp)
	}
	if len(p.workers) == 1 {
		if p.ord%tickEvery == 0 {
			p.workers[0].tick(p.now)
		}
		return
	}
	if p.sinceSync++; p.sinceSync >= syncEvery {
		p.sync()
	}
}

func (p *pipeline) dispatch(tcp *layers.TCP, ts time.Time) {
	key, fromLo := makeFlowKey(p.dec.src, p.dec.dst, uint16(tcp.SrcPort), uint16(tcp.DstPort))
	if len(p.workers) == 1 {
		s := tcpSeg{key: key, fromLo: fromLo, seq: tcp.Seq, ack: tcp.Ack, lost: uint32(p.dec.cut), flags: tcpFlags(tcp),
			payload: tcp.Payload, tcp: tcp, ts: ts, readAt: p.now, ord: p.ord}
		p.workers[0].handleSeg(&s)
		return
	}
	// The key is the same for both directions, so both go to the same
	// worker.
	p.feed.add(key.worker(len(p.workers)), key, fromLo, tcp, p.dec.cut, p.dec.ipID, ts, p.ord)
}

// contiguous returns head and tail as one slice when tail starts where head
// ends in the same array.
func contiguous(head, tail []byte) ([]byte, bool) {
	if len(tail) == 0 {
		return head, true
	}
	n := len(head)
	if cap(head)-n < len(tail) {
		return nil, false
	}
	whole := head[:n+len(tail)]
	if &whole[n] != &tail[0] {
		return nil, false
	}
	return whole, true
}

// sync sends every worker its pending batch, so all of them see the time.
func (p *pipeline) sync() {
	p.sinceSync = 0
	p.feed.sync()
}

// idleCheck has every worker close its idle connections, at the reader's
// time, once the packets before it are handled. Each worker deciding on
// its own, at its own next packet, let a connection go at another time
// with one worker than with two: the times of what the let-go ended
// differed with the number of workers.
func (p *pipeline) idleCheck() {
	if len(p.workers) == 1 {
		p.workers[0].tick(p.now)
		p.workers[0].closeIdle()
		return
	}
	for i := range p.feed.queues {
		p.feed.batchFor(i).idle = true
	}
	p.sync()
}

// close delivers what is pending, closes every connection still open and
// returns the counters of the reader and of all workers.
func (p *pipeline) close() Stats {
	if len(p.workers) == 1 {
		p.workers[0].tick(p.now)
		p.workers[0].finish()
	} else {
		p.sync()
		for _, q := range p.feed.queues {
			close(q)
		}
		p.wg.Wait()
	}
	st := p.stats
	for _, w := range p.workers {
		st.add(w.stats)
	}
	return st
}
