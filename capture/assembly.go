package capture

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/reassembly"

	"github.com/replaywatch/replaywatch/decode"
)

const (
	// ctxSlab is how many per-packet contexts are allocated at once. The
	// assembler keeps a packet's context for as long as the packet sits in
	// its out-of-order queue, so contexts cannot be reused; allocating them
	// in slabs keeps the in-order path nearly free of allocation.
	ctxSlab = 1024
	// evictFraction: when a worker exceeds its connection share it evicts
	// 1/evictFraction of that share at once, because each eviction pass
	// scans every connection.
	evictFraction = 64
)

// connKey names a connection by its IP and port flows, in the direction of
// the packet that opened it.
type connKey [2]gopacket.Flow

// pktCtx is the reassembly.AssemblerContext of one packet. The assembler
// sees the worker's strictly increasing clock (asm), so "older than" cut-offs
// for idle flushes and evictions never tie; streams get the real capture
// time (ts).
type pktCtx struct {
	asm, ts time.Time
}

func (p *pktCtx) GetCaptureInfo() gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: p.asm}
}

// workerLimits are one worker's share of the Config limits.
type workerLimits struct {
	maxConns       int
	idleTimeout    time.Duration
	reorderTimeout time.Duration
	// flushEvery is how often (capture time) the timeouts are checked: a
	// check scans every connection, so not on every packet.
	flushEvery time.Duration
	// closedTTL is how long the ports of a connection that ended with FIN
	// or RST ignore packets without SYN: stragglers after the close
	// (retransmissions, data in flight when an RST came) would otherwise
	// open a ghost connection decoded from the middle of a stream.
	closedTTL time.Duration
}

func limitsFor(cfg Config) workerLimits {
	return workerLimits{
		maxConns:       share(cfg.MaxConnections, cfg.Workers),
		idleTimeout:    cfg.IdleTimeout,
		reorderTimeout: cfg.ReorderTimeout,
		flushEvery:     min(cfg.IdleTimeout, cfg.ReorderTimeout) / 4,
		closedTTL:      cfg.ReorderTimeout,
	}
}

// worker owns one reassembly.Assembler, its own StreamPool and one
// decode.StreamFactory. All of it is used from a single goroutine.
type worker struct {
	limits  workerLimits
	factory decode.StreamFactory
	asm     *reassembly.Assembler
	stats   Stats

	clock     time.Time // assembler clock: strictly increasing per packet
	now       time.Time // latest real capture time seen
	lastFlush time.Time // clock at the last timeout check

	conns []*conn // every connection the assembler holds, open or not
	// closeReason is the reason given to connections the assembler closes
	// during the current call: CloseFIN while assembling packets, the
	// flush's reason inside a flush.
	closeReason decode.CloseReason
	flushing    bool   // inside a flush: gaps come from timeouts, not page limits
	injecting   bool   // feeding synthetic RSTs (see finishReset)
	reset       *conn  // connection whose packet carried RST in this Assemble call
	resetDir    int    // its assembler direction
	ord         uint64 // ordinal of the packet being assembled: the ID of a new connection
	ctxs        []pktCtx
	rstTCP      layers.TCP
	rstBuf      [20]byte
	seen        []time.Time // scratch for eviction
	// closed holds recently ended connections (see closedTTL), at most
	// limits.maxConns of them.
	closed map[connKey]time.Time
}

func newWorker(cfg Config, factory decode.StreamFactory) *worker {
	w := &worker{
		limits:      limitsFor(cfg),
		factory:     factory,
		closeReason: decode.CloseFIN,
		closed:      make(map[connKey]time.Time),
	}
	w.asm = reassembly.NewAssembler(reassembly.NewStreamPool(w))
	w.asm.MaxBufferedPagesPerConnection = cfg.MaxBufferedPagesPerConnection
	w.asm.MaxBufferedPagesTotal = share(cfg.MaxBufferedPagesTotal, cfg.Workers)
	return w
}

func (w *worker) newCtx(ts time.Time) *pktCtx {
	if len(w.ctxs) == 0 {
		w.ctxs = make([]pktCtx, ctxSlab)
	}
	c := &w.ctxs[0]
	w.ctxs = w.ctxs[1:]
	c.asm, c.ts = w.clock, ts
	return c
}

func (w *worker) timeOf(ac reassembly.AssemblerContext) time.Time {
	if c, ok := ac.(*pktCtx); ok && c != nil {
		return c.ts
	}
	return w.now
}

// handle assembles one TCP segment. ord is the packet's ordinal in the run.
func (w *worker) handle(net gopacket.Flow, tcp *layers.TCP, ts time.Time, ord uint64) {
	if ts.After(w.now) {
		w.now = ts
	}
	if ts.After(w.clock) {
		w.clock = ts
	} else {
		w.clock = w.clock.Add(1)
	}
	w.checkTimeouts()
	ctx := w.newCtx(ts)
	w.ord = ord
	w.asm.AssembleWithContext(net, tcp, ctx)
	if c := w.reset; c != nil {
		w.reset = nil
		w.finishReset(c, net, tcp, ctx)
	}
	if len(w.conns) > w.limits.maxConns {
		w.evict()
	}
}

// tick advances the worker's clocks to now (the reader's latest capture
// time), runs the timeout checks when due and passes the time on.
func (w *worker) tick(now time.Time) {
	if now.After(w.now) {
		w.now = now
	}
	if now.After(w.clock) {
		w.clock = now
	}
	w.checkTimeouts()
	if !w.now.IsZero() {
		w.factory.Tick(w.now)
	}
}

// checkTimeouts delivers data held longer than the reorder timeout (after a
// gap) and closes connections idle longer than the idle timeout, when a
// check is due.
func (w *worker) checkTimeouts() {
	if w.clock.Sub(w.lastFlush) < w.limits.flushEvery {
		return
	}
	w.lastFlush = w.clock
	w.flush(decode.CloseIdle, reassembly.FlushOptions{
		T:  w.clock.Add(-w.limits.reorderTimeout),
		TC: w.clock.Add(-w.limits.idleTimeout),
	})
	for k, at := range w.closed {
		if w.clock.Sub(at) > w.limits.closedTTL {
			delete(w.closed, k)
		}
	}
}

func (w *worker) flush(reason decode.CloseReason, opt reassembly.FlushOptions) {
	w.flushing, w.closeReason = true, reason
	w.asm.FlushWithOptions(opt)
	w.flushing, w.closeReason = false, decode.CloseFIN
}

// evict closes the least recently active connections. Assembler clocks are
// unique, so the cut-off closes exactly the chosen ones (and flushes any data
// older than it that other connections still hold).
func (w *worker) evict() {
	w.seen = w.seen[:0]
	for _, c := range w.conns {
		w.seen = append(w.seen, c.lastSeen)
	}
	// Compared as times, not UnixNano: a damaged pcapng can carry dates
	// that do not fit in int64 nanoseconds.
	slices.SortFunc(w.seen, time.Time.Compare)
	k := max(1, w.limits.maxConns/evictFraction)
	cut := w.seen[min(k, len(w.seen))-1].Add(1)
	w.flush(decode.CloseEvicted, reassembly.FlushOptions{T: cut, TC: cut})
}

// finish closes everything still open (after delivering buffered data with
// gaps) and tells the factory the worker is done.
func (w *worker) finish() {
	w.flushing, w.closeReason = true, decode.CloseEOF
	w.asm.FlushAll()
	w.flushing, w.closeReason = false, decode.CloseFIN
	if !w.now.IsZero() {
		w.factory.Tick(w.now)
	}
	w.factory.Done()
}

// finishReset makes an RST end the whole connection at once. The assembler
// closes a half only on an in-order FIN or RST, so an RST leaves the other
// half (and an out-of-order RST both halves) open until the idle timeout, and
// a new connection on the same ports would be fed to the dead stream.
// Injecting an in-order RST into each half closes it now.
func (w *worker) finishReset(c *conn, net gopacket.Flow, tcp *layers.TCP, ctx *pktCtx) {
	w.injecting = true
	for _, d := range [2]int{1 - w.resetDir, w.resetDir} {
		if c.removed {
			break
		}
		flow, src, dst := net, tcp.SrcPort, tcp.DstPort
		if d != w.resetDir {
			flow, src, dst = net.Reverse(), dst, src
		}
		b := w.rstBuf[:]
		clear(b)
		binary.BigEndian.PutUint16(b[0:], uint16(src))
		binary.BigEndian.PutUint16(b[2:], uint16(dst))
		// An old sequence number of the half is at or before its next
		// expected byte, so the assembler takes the RST as in order.
		binary.BigEndian.PutUint32(b[4:], c.nextSeq[d])
		b[12] = 5 << 4 // header length: 5 words
		b[13] = 0x04   // RST
		if err := w.rstTCP.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
			break
		}
		w.asm.AssembleWithContext(flow, &w.rstTCP, ctx)
	}
	w.injecting = false
	if !c.closed {
		c.close(decode.CloseReset)
	}
}

func (w *worker) track(c *conn) {
	c.index = len(w.conns)
	w.conns = append(w.conns, c)
}

func (w *worker) untrack(c *conn) {
	last := w.conns[len(w.conns)-1]
	w.conns[c.index] = last
	last.index = c.index
	w.conns[len(w.conns)-1] = nil
	w.conns = w.conns[:len(w.conns)-1]
}

// New implements reassembly.StreamFactory.
func (w *worker) New(net, transport gopacket.Flow, tcp *layers.TCP, ac reassembly.AssemblerContext) reassembly.Stream {
	key := connKey{net, transport}
	if !tcp.SYN {
		if len(tcp.Payload) == 0 {
			// A bare ACK, FIN or RST cannot start anything worth
			// decoding; it is usually the tail of a connection already
			// closed.
			return nil
		}
		if w.recentlyClosed(key) {
			return nil
		}
	}
	src := netip.AddrPortFrom(addrOf(net.Src()), uint16(tcp.SrcPort))
	dst := netip.AddrPortFrom(addrOf(net.Dst()), uint16(tcp.DstPort))
	meta := decode.ConnMeta{ID: w.ord, A: src, B: dst, Start: w.timeOf(ac), SawSYN: tcp.SYN}
	// A SYN-ACK first means the client's SYN was missed: A is still the
	// client, the receiver of this packet.
	swapped := tcp.SYN && tcp.ACK
	if swapped {
		meta.A, meta.B = dst, src
	}
	c := &conn{w: w, key: key, swapped: swapped, stream: w.factory.NewStream(meta)}
	w.track(c)
	w.stats.Connections++
	if !meta.SawSYN {
		w.stats.ConnectionsWithoutSYN++
	}
	return c
}

func (w *worker) recentlyClosed(k connKey) bool {
	if len(w.closed) == 0 {
		return false
	}
	at, ok := w.closed[k]
	if !ok {
		at, ok = w.closed[connKey{k[0].Reverse(), k[1].Reverse()}]
	}
	return ok && w.clock.Sub(at) <= w.limits.closedTTL
}

func addrOf(e gopacket.Endpoint) netip.Addr {
	a, _ := netip.AddrFromSlice(e.Raw())
	return a.Unmap()
}

// conn adapts one decode.TCPStream to reassembly.Stream.
type conn struct {
	w        *worker
	stream   decode.TCPStream
	key      connKey
	swapped  bool      // the assembler's client-to-server half is B's
	lastSeen time.Time // assembler clock of the last packet
	index    int       // in w.conns
	nextSeq  [2]uint32 // per assembler direction: an expected sequence number seen
	fin      [2]bool   // per assembler direction
	rst      bool
	closed   bool // Close was called on the stream
	removed  bool // the assembler let go of the connection
}

func dirIndex(d reassembly.TCPFlowDirection) int {
	if d == reassembly.TCPDirClientToServer {
		return 0
	}
	return 1
}

func (c *conn) fromA(d int) bool {
	return (d == 0) != c.swapped
}

// Accept implements reassembly.Stream.
func (c *conn) Accept(tcp *layers.TCP, ci gopacket.CaptureInfo, dir reassembly.TCPFlowDirection, nextSeq reassembly.Sequence, start *bool, _ reassembly.AssemblerContext) bool {
	c.lastSeen = ci.Timestamp
	d := dirIndex(dir)
	if nextSeq >= 0 {
		c.nextSeq[d] = uint32(nextSeq)
	} else if !tcp.SYN {
		// The handshake of this half was not captured: start at the
		// first segment seen instead of waiting for a SYN forever.
		*start = true
	}
	if c.closed {
		return c.w.injecting
	}
	// The synthetic RSTs of finishReset must not mark the connection as
	// reset again: the next packet would run finishReset for it with that
	// packet's flows, and reset an unrelated connection.
	if tcp.RST && !c.w.injecting {
		c.rst = true
		c.w.reset, c.w.resetDir = c, d
	}
	return true
}

// ReassembledSG implements reassembly.Stream. Its timestamp is the capture
// time of the packet that made the bytes deliverable: the packet itself for
// in-order data, the packet that filled the hole for reordered data.
func (c *conn) ReassembledSG(sg reassembly.ScatterGather, ac reassembly.AssemblerContext) {
	if c.closed {
		return
	}
	dir, _, end, skip := sg.Info()
	d := dirIndex(dir)
	fromA := c.fromA(d)
	ts := c.w.timeOf(ac)
	st := &c.w.stats
	if skip > 0 {
		st.Gaps++
		st.GapBytes += uint64(skip)
		if !c.w.flushing {
			st.PageLimitHits++
		}
		c.stream.Gap(fromA, skip, ts)
	}
	if n, _ := sg.Lengths(); n > 0 {
		st.PayloadBytes += uint64(n)
		c.stream.Data(fromA, sg.Fetch(n), ts)
	}
	if end && !c.rst && !c.fin[d] {
		c.fin[d] = true
		st.Fins++
		c.stream.Fin(fromA, ts)
	}
}

// ReassemblyComplete implements reassembly.Stream: both halves are closed.
func (c *conn) ReassemblyComplete(_ reassembly.AssemblerContext) bool {
	c.w.untrack(c)
	c.removed = true
	if !c.closed {
		reason := c.w.closeReason
		switch {
		case c.rst:
			reason = decode.CloseReset
		case c.fin[0] && c.fin[1]:
			reason = decode.CloseFIN
		case reason == decode.CloseEOF && (c.fin[0] || c.fin[1]):
			reason = decode.CloseFIN
		}
		c.close(reason)
	}
	// The assembler may forget the connection: a new one on the same ports
	// starts afresh.
	return true
}

func (c *conn) close(reason decode.CloseReason) {
	c.closed = true
	switch reason {
	case decode.CloseReset, decode.CloseFIN:
		if reason == decode.CloseReset {
			c.w.stats.Resets++
		}
		if len(c.w.closed) < c.w.limits.maxConns {
			c.w.closed[c.key] = c.w.clock
		}
	case decode.CloseIdle:
		c.w.stats.IdleFlushes++
	case decode.CloseEvicted:
		c.w.stats.Evictions++
	}
	c.stream.Close(reason, c.w.now)
}
