//go:build linux

package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/afpacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/replaywatch/replaywatch/decode"
)

// Live capture's timing, not worth a knob.
const (
	// liveBlockTimeout is TPACKET_V3's block retire timeout: a block that
	// holds packets is handed to the reader after this long even when it is
	// not full, which bounds the latency of a quiet link.
	liveBlockTimeout = 20 * time.Millisecond
	// livePollTimeout is how long a reader waits for a block before it
	// sends its pending segments and checks for cancellation.
	livePollTimeout = 100 * time.Millisecond
	// liveFlushEvery is how much capture time a segment may wait in a
	// reader's partly filled batch before the batch is sent anyway.
	liveFlushEvery = 20 * time.Millisecond
	// liveTickLag is how far behind the wall clock an idle reader vouches
	// for (readerClocks): a packet still in a ring (liveBlockTimeout) or
	// in a reader's batch (liveFlushEvery, livePollTimeout) when a Tick
	// comes is stamped after it, as the Tick contract wants.
	liveTickLag = 250 * time.Millisecond
	// livePublishEvery is how often readers publish their counters for
	// Snapshot. Their socket's kernel counters they read whenever they
	// vouch for a newer time (vouch).
	livePublishEvery = 100 * time.Millisecond
	// liveDrainTimeout bounds how long, after cancellation, readers go on
	// reading what the rings hold from before it.
	liveDrainTimeout = 500 * time.Millisecond
	// fanoutIDMin and fanoutIDTries: a run's fanout group ids are drawn at
	// random above the small ids other tools configure by hand, and each
	// is checked to be free first.
	fanoutIDMin   = 1024
	fanoutIDTries = 32
	// linkRefreshEvery bounds how often a reader on "any" asks the kernel
	// again for the interfaces, when a packet comes from one it does not
	// know.
	linkRefreshEvery = time.Second
)

// fanoutMu keeps two runs in this process from choosing the same fanout
// group id between checking it and joining it.
var fanoutMu sync.Mutex

// LiveCapture is a live capture whose sockets are open: NewLive opens them,
// Run reads them until its context is cancelled, Snapshot reads the counters
// at any time.
type LiveCapture struct {
	cfg        LiveConfig
	newFactory func(worker int) decode.StreamFactory
	ifaces     []liveIface
	sockets    []*liveSocket
	// start is when every filter was attached: packets stamped before it
	// may have got into a ring unfiltered, and are dropped.
	start time.Time
	links *linkTable
	ids   atomic.Uint64 // connection IDs

	readerStats []statsSlot // per socket
	workerStats []statsSlot // per worker
	// drops is the kernel's drops over every socket, as last polled.
	drops atomic.Uint64

	mu    sync.Mutex
	state int // liveNew, liveRunning, liveDone
}

const (
	liveNew = iota
	liveRunning
	liveDone
)

type liveIface struct {
	name     string
	linkType layers.LinkType // 0 on "any": it depends on the packet's interface
}

// statsSlot is where a reader or a worker publishes its counters.
type statsSlot struct {
	mu          sync.Mutex
	st          Stats
	duplicates  uint64
	beforeStart uint64
	open        int
}

func (s *statsSlot) set(st *Stats, duplicates, beforeStart uint64, open int) {
	s.mu.Lock()
	s.st, s.duplicates, s.beforeStart, s.open = *st, duplicates, beforeStart, open
	s.mu.Unlock()
}

func (s *statsSlot) addTo(ls *LiveStats) {
	s.mu.Lock()
	ls.Stats.add(s.st)
	ls.Duplicates += s.duplicates
	ls.BeforeStart += s.beforeStart
	ls.OpenConnections += s.open
	s.mu.Unlock()
}

// NewLive checks the config, compiles the filter and opens one socket per
// worker and interface, each with its ring and the filter, joined to one
// fanout group per interface. Packets are captured from when it returns:
// they wait in the rings until Run reads them.
func NewLive(cfg LiveConfig, newFactory func(worker int) decode.StreamFactory) (*LiveCapture, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	prog, err := liveFilter(cfg)
	if err != nil {
		return nil, err
	}
	links, err := newLinkTable()
	if err != nil {
		return nil, err
	}
	c := &LiveCapture{cfg: cfg, newFactory: newFactory, links: links,
		workerStats: make([]statsSlot, cfg.Workers)}
	for _, name := range cfg.Interfaces {
		iface := liveIface{name: name}
		if name != AnyInterface {
			l, ok := links.byName(name)
			if !ok {
				return nil, fmt.Errorf("capture: unknown interface %q", name)
			}
			lt, ok := linkTypeOf(l.arphrd)
			switch {
			case !ok:
				return nil, fmt.Errorf("capture: interface %q has link type %d (ARPHRD), which capture does not decode", name, l.arphrd)
			case cfg.Filter != "" && lt != layers.LinkTypeEthernet:
				return nil, fmt.Errorf("capture: interface %q has no Ethernet header, and a Filter is compiled for Ethernet; use Ports", name)
			}
			iface.linkType = lt
		}
		c.ifaces = append(c.ifaces, iface)
	}
	for j := range c.ifaces {
		if err := c.openInterface(j, prog); err != nil {
			c.closeSockets()
			return nil, err
		}
	}
	c.readerStats = make([]statsSlot, len(c.sockets))
	c.start = time.Now()
	return c, nil
}

// openInterface opens the workers' sockets on interface j and joins them to
// a fanout group of their own, in worker order: the group's member i is then
// worker i's socket on every interface, and the kernel's flow hash, the same
// for a packet whichever interface it crosses, sends the copies of a packet
// to the same worker.
func (c *LiveCapture) openInterface(j int, prog []bpf.RawInstruction) error {
	iface := c.ifaces[j]
	first := len(c.sockets)
	for i := range c.cfg.Workers {
		s, err := openSocket(c.cfg, iface.name, prog, &c.drops)
		if err != nil {
			return err
		}
		s.worker, s.iface = i, j
		c.sockets = append(c.sockets, s)
	}
	if c.cfg.Workers == 1 {
		return nil
	}
	fanoutMu.Lock()
	defer fanoutMu.Unlock()
	var id uint16
	var err error
	for range fanoutIDTries {
		if id, err = freeFanoutID(); err != nil {
			return err
		}
		// Another process may take the id in between; then the join
		// fails, and another id is tried.
		if err = c.sockets[first].tp.SetFanout(afpacket.FanoutHash, id); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("capture: joining a fanout group on %s: %v", iface.name, err)
	}
	for _, s := range c.sockets[first+1:] {
		if err := s.tp.SetFanout(afpacket.FanoutHash, id); err != nil {
			return fmt.Errorf("capture: joining fanout group %d on %s: %v", id, iface.name, err)
		}
	}
	return nil
}

func openSocket(cfg LiveConfig, name string, prog []bpf.RawInstruction, drops *atomic.Uint64) (*liveSocket, error) {
	dev := name
	if dev == AnyInterface {
		dev = "" // bound to no interface: all of them
	}
	tp, err := afpacket.NewTPacket(afpacket.OptInterface(dev), afpacket.TPacketVersion3, afpacket.SocketRaw,
		afpacket.OptFrameSize(cfg.FrameSize), afpacket.OptBlockSize(cfg.BlockSize), afpacket.OptNumBlocks(cfg.NumBlocks),
		afpacket.OptBlockTimeout(liveBlockTimeout), afpacket.OptPollTimeout(livePollTimeout))
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("capture: opening a packet socket on %s needs root (or CAP_NET_RAW): %v", name, err)
		}
		return nil, fmt.Errorf("capture: opening a packet socket on %s: %v", name, err)
	}
	s := &liveSocket{name: name, tp: tp, drops: drops}
	if err := tp.SetBPF(prog); err != nil {
		s.close()
		return nil, fmt.Errorf("capture: attaching the filter on %s: %v", name, err)
	}
	if cfg.Promiscuous {
		// The membership goes with the socket when it is closed.
		if err := tp.SetPromiscuous(true); err != nil {
			s.close()
			return nil, fmt.Errorf("capture: promiscuous mode on %s: %v", name, err)
		}
	}
	return s, nil
}

// freeFanoutID draws a fanout group id that no group in this network
// namespace uses: a group with that id, joined by a probe socket with a type
// nobody combines with a random id (PACKET_FANOUT_QM), is new only if the id
// was free. Joining a group that exists with the same type and interface
// would silently share its packets with another capture.
func freeFanoutID() (uint16, error) {
	var last error
	for range fanoutIDTries {
		id := uint16(fanoutIDMin + rand.IntN(1<<16-fanoutIDMin))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return 0, fmt.Errorf("capture: opening a packet socket: %v", err)
		}
		last = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT, int(id)|unix.PACKET_FANOUT_QM<<16)
		unix.Close(fd) // the probe's group goes with it
		if last == nil {
			return id, nil
		}
	}
	return 0, fmt.Errorf("capture: no free fanout group id in %d tries: %v", fanoutIDTries, last)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// liveSocket is one worker's socket on one interface, and the kernel's
// counters for it.
type liveSocket struct {
	name   string
	worker int
	iface  int // index in LiveCapture.ifaces
	tp     *afpacket.TPacket
	drops  *atomic.Uint64 // the capture's total (LiveCapture.drops)

	mu     sync.Mutex // guards below
	last   [3]uint32  // the counters TPacket reported last (it sums the kernel's in uint32)
	total  KernelStats
	closed bool
}

// pollKernel adds what the kernel counted since the last call.
func (s *liveSocket) pollKernel() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pollLocked()
}

func (s *liveSocket) pollLocked() {
	if s.closed {
		return
	}
	_, v3, err := s.tp.SocketStats()
	if err != nil {
		return
	}
	now := [3]uint32{uint32(v3.Packets()), uint32(v3.Drops()), uint32(v3.QueueFreezes())}
	// Differences of uint32 survive TPacket's sums wrapping around.
	s.total.Packets += uint64(now[0] - s.last[0])
	s.total.Drops += uint64(now[1] - s.last[1])
	s.drops.Add(uint64(now[1] - s.last[1]))
	s.total.QueueFreezes += uint64(now[2] - s.last[2])
	s.last = now
}

func (s *liveSocket) stats() SocketStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SocketStats{Interface: s.name, Worker: s.worker, KernelStats: s.total}
}

// close reads the counters a last time and closes the socket.
func (s *liveSocket) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.pollLocked()
	s.tp.Close()
	s.closed = true
}

func (c *LiveCapture) closeSockets() {
	for _, s := range c.sockets {
		s.close()
	}
}

// Close closes the sockets of a capture that is not to be Run. Run closes
// them itself when it returns.
func (c *LiveCapture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == liveRunning {
		return errors.New("capture: Close while Run runs; cancel Run's context instead")
	}
	c.state = liveDone
	c.closeSockets()
	return nil
}

// Snapshot returns the counters so far; it may be called from any goroutine,
// while Run runs or after. Reader and worker counters are at most about
// livePublishEvery old; the kernel's are read now.
func (c *LiveCapture) Snapshot() LiveStats {
	var ls LiveStats
	for i := range c.readerStats {
		c.readerStats[i].addTo(&ls)
	}
	for i := range c.workerStats {
		c.workerStats[i].addTo(&ls)
	}
	for _, s := range c.sockets {
		s.pollKernel()
		ss := s.stats()
		ls.Sockets = append(ls.Sockets, ss)
		ls.Kernel.add(ss.KernelStats)
	}
	return ls
}

// KernelDrops is the packets the kernel dropped on every socket, as last
// polled. Each reader polls its socket before it vouches for a time
// (readerClocks), and the workers' Ticks, which release observations to
// the detector, never pass what every reader vouched for: so an
// observation comes after every drop of a packet stamped before it is
// counted here. One atomic load: it is asked before every observation.
func (c *LiveCapture) KernelDrops() uint64 { return c.drops.Load() }

// Run reads the sockets until ctx is cancelled, then delivers what the rings
// held from before the cancellation (for at most liveDrainTimeout), closes
// every connection still open, calls Done on each factory and closes the
// sockets. It returns nil after a cancellation, or the error that stopped a
// reader (an interface that went away, say), which stops the others. Run
// may be called once.
func (c *LiveCapture) Run(ctx context.Context) (LiveStats, error) {
	c.mu.Lock()
	if c.state != liveNew {
		c.mu.Unlock()
		return c.Snapshot(), errors.New("capture: Run on a capture that has run or was closed")
	}
	c.state = liveRunning
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.state = liveDone
		c.mu.Unlock()
	}()

	queues := make([]chan *batch, c.cfg.Workers)
	clocks := newReaderClocks(len(c.sockets), c.start)
	var workers sync.WaitGroup
	for i := range queues {
		w := newWorker(c.cfg.Config, c.newFactory(i))
		w.ids = &c.ids
		queues[i] = make(chan *batch, batchesPerWorker*len(c.ifaces))
		lw := &liveWorker{w: w, dup: newDupWindow(DuplicateWindow), q: queues[i], slot: &c.workerStats[i], clocks: clocks}
		workers.Add(1)
		go func() {
			defer workers.Done()
			lw.run(c.cfg.TickInterval)
		}()
	}

	// The first reader error stops every reader (the others' are usually
	// the same: all of an interface's sockets fail together).
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var readers sync.WaitGroup
	for k, s := range c.sockets {
		r := c.newReader(s, &c.readerStats[k], queues, clocks, k)
		readers.Add(1)
		go func() {
			defer readers.Done()
			if err := r.run(rctx); err != nil {
				cancel(err)
			}
		}()
	}
	readers.Wait()
	for _, q := range queues {
		close(q)
	}
	workers.Wait()
	c.closeSockets()
	var err error
	if cause := context.Cause(rctx); rctx.Err() != nil && ctx.Err() == nil {
		err = cause
	}
	return c.Snapshot(), err
}

// readerClocks holds, for each reader, the capture time it vouches for
// (Unix nanoseconds): it has sent the workers every packet it will ever
// read stamped before that. A reader vouches for its newest packet once it
// has sent everything pending, and for the wall clock less liveTickLag
// when its ring is idle. A reader that falls behind its ring vouches only
// for what it has read, so the workers' Ticks, bounded by the earliest of
// the readers' clocks, never pass packets still waiting in a ring: a Tick
// on the wall clock did, and a backlog longer than the decoder's reorder
// window then reached it late.
type readerClocks []atomic.Int64

func newReaderClocks(n int, start time.Time) readerClocks {
	rc := make(readerClocks, n)
	for i := range rc {
		rc[i].Store(start.UnixNano()) // packets stamped before start are not read
	}
	return rc
}

// floor is the time every reader has reached.
func (rc readerClocks) floor() time.Time {
	m := int64(math.MaxInt64)
	for i := range rc {
		m = min(m, rc[i].Load())
	}
	return time.Unix(0, m).UTC()
}

// liveWorker runs a worker: the batches every reader sends it, and Ticks to
// the time the readers have all reached.
type liveWorker struct {
	w      *worker
	dup    *dupWindow
	q      <-chan *batch
	slot   *statsSlot
	clocks readerClocks
	// claim is the readers' floor when it was read; it holds for this
	// worker once the owed batches, those queued at that moment (FIFO:
	// every packet a reader vouched for is among them or already run),
	// have run.
	claim time.Time
	owed  int
}

func (lw *liveWorker) run(tickEvery time.Duration) {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	lw.stake()
	for {
		select {
		case b, ok := <-lw.q:
			if !ok {
				lw.w.finish()
				lw.slot.set(&lw.w.stats, lw.dup.dropped, 0, 0)
				return
			}
			lw.w.runBatch(b, lw.dup)
			b.release()
			lw.ran()
		case <-t.C:
			if lw.owed == 0 {
				lw.stake()
			}
		}
		lw.slot.set(&lw.w.stats, lw.dup.dropped, 0, len(lw.w.byKey))
	}
}

// ran notes a batch run: once the batches a claim owed have run, it holds,
// and the next is staked.
func (lw *liveWorker) ran() {
	if lw.owed > 0 {
		if lw.owed--; lw.owed > 0 {
			return
		}
		lw.w.tick(lw.claim)
		lw.w.closeIdle()
	}
	lw.stake()
}

// stake reads the readers' floor (before the queue's length: a reader
// sends, then vouches) and ticks to it now, or once the batches queued
// before it have run.
func (lw *liveWorker) stake() {
	lw.claim = lw.clocks.floor()
	if lw.owed = len(lw.q); lw.owed == 0 {
		lw.w.tick(lw.claim)
		lw.w.closeIdle()
	}
}

// liveReader reads one socket: it decodes each packet and hands its TCP
// segment to the worker that owns the connection. The kernel spreads packets
// over a fanout group's sockets by a flow hash that is symmetric and the
// same on every interface, so a reader nearly always sends a connection to
// its own worker; the readers still pick the worker by the flow key
// themselves, as ReadFiles' reader does, so that a connection never depends
// on the kernel's choice to stay on one worker.
type liveReader struct {
	c       *LiveCapture
	s       *liveSocket
	slot    *statsSlot
	dec     *packetDecoder
	feed    *feeder
	workers int
	fixed   layers.LinkType         // the interface's link type, 0 on "any"
	links   map[int]layers.LinkType // on "any", by interface index
	trace   func(worker, iface int, key flowKey, fromLo bool)
	miss    func(iface int, tcp *layers.TCP) bool
	hold    func(iface int)
	// clocks[k] is what this reader vouches for (vouched, as last stored).
	clocks  readerClocks
	k       int
	vouched int64
	// capReads: the readers read several interfaces, so a segment's
	// reader time is capped by what they all have read (feeder.readCap).
	capReads bool

	stats       Stats
	beforeStart uint64
	// flushAt is the capture time after which the pending segments are
	// sent, zero when none is pending.
	flushAt     time.Time
	packets     uint64
	nextPublish time.Time // wall clock
	// stopAt is set once the context is cancelled: packets stamped after
	// it are left in the ring.
	stopAt time.Time
	past   bool // a packet stamped after stopAt was read
}

// newReader makes the reader of socket s, the k-th of clocks.
func (c *LiveCapture) newReader(s *liveSocket, slot *statsSlot, queues []chan *batch, clocks readerClocks, k int) *liveReader {
	r := &liveReader{c: c, s: s, slot: slot, dec: newPacketDecoder(),
		// Each reader can hold a batch for every worker while the
		// workers' queues are full.
		feed:    newFeeder(queues, len(queues)+batchesPerWorker),
		workers: len(queues), fixed: c.ifaces[s.iface].linkType, links: map[int]layers.LinkType{}, capReads: len(c.ifaces) > 1,
		trace: c.cfg.traceReader, miss: c.cfg.missReader, hold: c.cfg.holdReader,
		clocks: clocks, k: k, vouched: clocks[k].Load()}
	if r.capReads {
		r.feed.readCap = c.start // a zero cap is none
	}
	return r
}

func (r *liveReader) run(ctx context.Context) error {
	defer r.finish()
	for ctx.Err() == nil {
		if _, err := r.read(); err != nil {
			return err
		}
	}
	// Deliver what the ring holds from before the cancellation.
	r.stopAt = time.Now()
	deadline := r.stopAt.Add(liveDrainTimeout)
	for !r.past && time.Now().Before(deadline) {
		idle, err := r.read()
		if err != nil || idle {
			return err
		}
	}
	return nil
}

// read reads one packet, or reports the ring idle for livePollTimeout.
func (r *liveReader) read() (idle bool, err error) {
	if r.hold != nil {
		r.hold(r.s.iface)
	}
	data, ci, err := r.s.tp.ZeroCopyReadPacketData()
	switch {
	case err == afpacket.ErrTimeout:
		r.flush()
		r.vouch(time.Now().Add(-liveTickLag))
		r.publish()
		return true, nil
	case errors.Is(err, afpacket.ErrPoll):
		return false, fmt.Errorf("capture: reading %s: %v (the interface went down or away)", r.s.name, err)
	case err != nil:
		return false, fmt.Errorf("capture: reading %s: %v", r.s.name, err)
	}
	r.handle(data, ci)
	return false, nil
}

func (r *liveReader) handle(data []byte, ci gopacket.CaptureInfo) {
	// The ring's timestamp, in UTC: batches keep UTC times compactly.
	ts := ci.Timestamp.UTC()
	switch {
	case ts.Before(r.c.start):
		r.beforeStart++
		return
	case !r.stopAt.IsZero() && ts.After(r.stopAt):
		r.past = true
		return
	}
	if ts.After(r.feed.now) {
		r.feed.now = ts
	}
	if _, ok := r.dec.classify(&r.stats, data, r.linkType(ci.InterfaceIndex), ci.Length); ok {
		tcp := &r.dec.tcp
		if r.miss != nil && r.miss(r.s.iface, tcp) {
			return
		}
		key, fromLo := makeFlowKey(r.dec.src, r.dec.dst, uint16(tcp.SrcPort), uint16(tcp.DstPort))
		if r.trace != nil {
			r.trace(r.s.worker, r.s.iface, key, fromLo)
		}
		r.feed.add(key.worker(r.workers), key, fromLo, tcp, r.dec.cut, r.dec.ipID, ts, 0)
		if r.flushAt.IsZero() {
			r.flushAt = ts.Add(liveFlushEvery)
		}
	}
	if !r.flushAt.IsZero() && ts.After(r.flushAt) {
		r.flush()
	}
	if r.packets++; r.packets%256 == 0 {
		r.publish()
	}
}

// flush sends the pending segments, and vouches for the newest.
func (r *liveReader) flush() {
	r.feed.flush()
	r.flushAt = time.Time{}
	r.vouch(r.feed.now)
}

// vouch says this reader has sent every packet it will read stamped before
// t (readerClocks).
func (r *liveReader) vouch(t time.Time) {
	if n := t.UnixNano(); n > r.vouched {
		// A packet stamped before t that the ring had no room for was
		// dropped before t was read: counted now, before t is vouched
		// for, it is in KernelDrops before any observation after it
		// can reach the detector (a read every liveFlushEvery at most).
		r.s.pollKernel()
		r.vouched = n
		r.clocks[r.k].Store(n)
	}
	if r.capReads {
		r.feed.readCap = r.clocks.floor()
	}
}

// publish makes the counters visible to Snapshot when they are due.
func (r *liveReader) publish() {
	now := time.Now()
	if now.Before(r.nextPublish) {
		return
	}
	r.nextPublish = now.Add(livePublishEvery)
	if r.flushAt.IsZero() {
		// Nothing pending (a busy ring of segments no worker wants):
		// what was read is all sent.
		r.vouch(r.feed.now)
	}
	r.slot.set(&r.stats, 0, r.beforeStart, 0)
}

func (r *liveReader) finish() {
	r.flush()
	r.slot.set(&r.stats, 0, r.beforeStart, 0)
	r.s.pollKernel()
}

// linkType is the link type of a packet captured on interface index.
func (r *liveReader) linkType(index int) layers.LinkType {
	if r.fixed != 0 {
		return r.fixed
	}
	if lt, ok := r.links[index]; ok {
		return lt
	}
	l, ok := r.c.links.byIndex(index)
	if !ok {
		return 0 // undecodable, and asked again next time
	}
	lt, _ := linkTypeOf(l.arphrd)
	r.links[index] = lt
	return lt
}

// linkTypeOf maps an interface's ARPHRD type to the link type of what a raw
// packet socket reads on it; ok is false for those capture does not decode.
func linkTypeOf(arphrd uint16) (lt layers.LinkType, ok bool) {
	switch arphrd {
	case unix.ARPHRD_ETHER, unix.ARPHRD_LOOPBACK:
		// Loopback frames have an Ethernet header with zero addresses.
		return layers.LinkTypeEthernet, true
	case unix.ARPHRD_NONE, unix.ARPHRD_RAWIP, unix.ARPHRD_TUNNEL, unix.ARPHRD_TUNNEL6, unix.ARPHRD_SIT,
		unix.ARPHRD_IPGRE, unix.ARPHRD_IP6GRE, unix.ARPHRD_PPP:
		// No link-layer header (WireGuard, tun, IP tunnels): the
		// packet starts with IP.
		return layers.LinkTypeRaw, true
	}
	return 0, false
}

// linkTable knows the interfaces of the network namespace: their names,
// indexes and ARPHRD types, from the kernel (netlink).
type linkTable struct {
	mu     sync.Mutex
	links  map[int]linkInfo
	loaded time.Time
}

type linkInfo struct {
	name   string
	arphrd uint16
}

func newLinkTable() (*linkTable, error) {
	t := &linkTable{}
	if err := t.load(); err != nil {
		return nil, fmt.Errorf("capture: listing interfaces: %v", err)
	}
	return t, nil
}

func (t *linkTable) load() error {
	links, err := dumpLinks()
	if err != nil {
		return err
	}
	t.links, t.loaded = links, time.Now()
	return nil
}

func (t *linkTable) byName(name string) (linkInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.links {
		if l.name == name {
			return l, true
		}
	}
	return linkInfo{}, false
}

// byIndex looks an interface up, asking the kernel again (at most every
// linkRefreshEvery) for one it does not know: a pod's new veth.
func (t *linkTable) byIndex(index int) (linkInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.links[index]; ok {
		return l, true
	}
	if time.Since(t.loaded) < linkRefreshEvery || t.load() != nil {
		return linkInfo{}, false
	}
	l, ok := t.links[index]
	return l, ok
}

// dumpLinks lists the interfaces with an RTM_GETLINK dump.
func dumpLinks() (map[int]linkInfo, error) {
	tab, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return nil, err
	}
	msgs, err := syscall.ParseNetlinkMessage(tab)
	if err != nil {
		return nil, err
	}
	links := map[int]linkInfo{}
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type == syscall.NLMSG_DONE {
			break
		}
		if m.Header.Type != syscall.RTM_NEWLINK || len(m.Data) < syscall.SizeofIfInfomsg {
			continue
		}
		// struct ifinfomsg: family, pad, type (ARPHRD), index, ...
		l := linkInfo{arphrd: binary.NativeEndian.Uint16(m.Data[2:4])}
		index := int(int32(binary.NativeEndian.Uint32(m.Data[4:8])))
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			continue
		}
		for _, a := range attrs {
			if a.Attr.Type == syscall.IFLA_IFNAME {
				l.name = string(bytes.TrimRight(a.Value, "\x00"))
			}
		}
		links[index] = l
	}
	return links, nil
}
