package capture

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"slices"
	"sync/atomic"
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
	// DefaultLossProofDelay is Config.LossProofDelay's default: how long,
	// in capture time, a hole proven by an ACK waits for the data to
	// arrive after all before it is reported as lost (a capture can hold
	// an ACK a little before the data it covers). Short, because a resume
	// on another connection right after the loss must already know of it.
	DefaultLossProofDelay = time.Millisecond
	// LiveMultiInterfaceLossProofDelay is LossProofDelay when Live reads
	// several named interfaces: each has its own ring and reader, and a
	// segment one interface missed reaches the worker through another's
	// ring up to a ring block's timeout and a batch flush later.
	LiveMultiInterfaceLossProofDelay = 500 * time.Millisecond
	// evictFraction: when a worker exceeds its connection share it evicts
	// 1/evictFraction of that share at once, because each eviction pass
	// scans every connection.
	evictFraction = 64
)

// flowKey names a connection by its two endpoints, the lower one first, so
// that both directions find the same entry with one map lookup. It is what
// the worker's own connection table is keyed on: hashing it is much cheaper
// than the assembler's lookup by a pair of gopacket.Flow values.
type flowKey struct {
	lo, hi         [16]byte // IPv4 addresses use the first 4 bytes
	loPort, hiPort uint16
	v6             bool
}

// makeFlowKey returns the key of a segment from src to dst and whether src
// is the key's lo endpoint. src and dst are 4 bytes (IPv4) or 16 (IPv6).
func makeFlowKey(src, dst []byte, sport, dport uint16) (k flowKey, fromLo bool) {
	var c int
	if len(src) == 4 && len(dst) == 4 {
		// IPv4, the usual case: compared as numbers, which is the
		// same order and cheaper than bytes.Compare.
		c = cmp.Compare(binary.BigEndian.Uint32(src), binary.BigEndian.Uint32(dst))
	} else {
		k.v6 = true
		c = bytes.Compare(src, dst)
	}
	fromLo = c < 0 || c == 0 && sport <= dport
	if !fromLo {
		src, dst, sport, dport = dst, src, dport, sport
	}
	copy(k.lo[:], src)
	copy(k.hi[:], dst)
	k.loPort, k.hiPort = sport, dport
	return k, fromLo
}

// hash spreads connections over workers. It is not the map's hash: it must
// be the same in every run, so that a capture is split the same way each
// time.
func (k *flowKey) hash() uint64 {
	le := binary.LittleEndian
	h := le.Uint64(k.lo[0:]) ^ le.Uint64(k.lo[8:])*0x9e3779b97f4a7c15
	h ^= (le.Uint64(k.hi[0:]) ^ le.Uint64(k.hi[8:])*0xc2b2ae3d27d4eb4f) * 0x165667b19e3779f9
	h ^= uint64(k.loPort)<<16 | uint64(k.hiPort)
	// So that every bit of the key reaches the low bits the worker index
	// is taken from.
	return mix64(h)
}

// worker is the index, among n workers, of the worker that follows the
// connection: the same for both directions.
func (k *flowKey) worker(n int) int {
	return int(k.hash() % uint64(n))
}

// endpoints returns the addresses and ports of the side that sends in a
// direction: the lo endpoint's when fromLo.
func (k *flowKey) endpoints(fromLo bool) (src, dst netip.AddrPort) {
	n := 4
	if k.v6 {
		n = 16
	}
	lo := netip.AddrPortFrom(addrOf(k.lo[:n]), k.loPort)
	hi := netip.AddrPortFrom(addrOf(k.hi[:n]), k.hiPort)
	if fromLo {
		return lo, hi
	}
	return hi, lo
}

// netFlow is the gopacket network flow of a direction, for the assembler.
func (k *flowKey) netFlow(fromLo bool) gopacket.Flow {
	t, n := layers.EndpointIPv4, 4
	if k.v6 {
		t, n = layers.EndpointIPv6, 16
	}
	if fromLo {
		return gopacket.NewFlow(t, k.lo[:n], k.hi[:n])
	}
	return gopacket.NewFlow(t, k.hi[:n], k.lo[:n])
}

// TCP flag bits as they are in the header's 14th byte.
const (
	flagFIN = 0x01
	flagSYN = 0x02
	flagRST = 0x04
	flagACK = 0x10
)

// tcpSeg is one TCP segment as the worker sees it.
type tcpSeg struct {
	key     flowKey
	fromLo  bool
	seq     uint32
	ack     uint32 // meaningful with flagACK
	flags   uint8
	payload []byte
	// lost is how many payload bytes the segment carried that the capture
	// did not keep (a snap length): payload is then empty, and the bytes
	// are reported as a gap.
	lost uint32
	// raw is the TCP header followed by the payload, decoded into a
	// layers.TCP only when the segment goes to the assembler; tcp, when
	// not nil, is that decoding already done by the caller.
	raw []byte
	tcp *layers.TCP
	ts  time.Time
	// readAt is the reader's capture time (the latest of any packet) when
	// it read the segment: the same whatever worker the segment goes to,
	// so decisions taken on it do not depend on the number of workers.
	// Live's readers of several interfaces cap it at the time they have
	// all reached (feeder.readCap); it can then be before ts.
	readAt time.Time
	ord    uint64
}

func tcpFlags(t *layers.TCP) uint8 {
	var f uint8
	if t.FIN {
		f |= flagFIN
	}
	if t.SYN {
		f |= flagSYN
	}
	if t.RST {
		f |= flagRST
	}
	if t.ACK {
		f |= flagACK
	}
	return f
}

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
	// proofDelay is Config.LossProofDelay; proveAtOnce says a proven hole
	// is reported before the other side's next data (a short delay).
	proofDelay  time.Duration
	proveAtOnce bool
	// flushEvery is how often (capture time) the timeouts are checked: a
	// check scans every connection, so not on every packet.
	flushEvery time.Duration
	// closedTTL is how long the ports of a connection that ended with FIN
	// or RST ignore packets without SYN: stragglers after the close
	// (retransmissions, data in flight when an RST came) would otherwise
	// open a ghost connection decoded from the middle of a stream.
	closedTTL time.Duration
	// endedTTL is how long an ended connection's handshake and sequence
	// numbers are remembered, to know another capture point's copy of it
	// (endedCopy): the connection idle timeout.
	endedTTL time.Duration
}

func limitsFor(cfg Config) workerLimits {
	return workerLimits{
		maxConns:       share(cfg.MaxConnections, cfg.Workers),
		idleTimeout:    cfg.IdleTimeout,
		reorderTimeout: cfg.ReorderTimeout,
		proofDelay:     cfg.LossProofDelay,
		proveAtOnce:    cfg.LossProofDelay <= DefaultLossProofDelay,
		flushEvery:     min(cfg.IdleTimeout, cfg.ReorderTimeout) / 4,
		closedTTL:      cfg.ReorderTimeout,
		endedTTL:       max(cfg.IdleTimeout, cfg.ReorderTimeout),
	}
}

// worker follows the connections of its share of the traffic. Segments that
// arrive in order are delivered by the worker itself (inOrder), without
// gopacket's reassembly.Assembler: on loopback and LAN captures that is
// nearly all of them, and the assembler's per-segment cost (its connection
// lookup by gopacket.Flow pairs, page handling) was most of a capture run. A
// connection that meets anything else (a segment out of order, a
// retransmission, an RST) is handed over to the assembler for the rest of its
// life (handOver), so reordering, overlaps, gaps and page limits keep the
// assembler's semantics. All of it is used from a single goroutine.
type worker struct {
	limits      workerLimits
	factory     decode.StreamFactory
	asm         *reassembly.Assembler
	stats       Stats
	assembleAll bool // Config.assembleAll
	noProofs    bool // Config.noLossProofs

	clock time.Time // assembler clock: strictly increasing per packet
	now   time.Time // latest real capture time seen
	// readNow is the reader's capture time with the segment being handled
	// (tcpSeg.readAt) or the last tick: the same whatever the number of
	// workers, unlike now, which is the latest of this worker's share.
	readNow   time.Time
	nextFlush time.Time // clock at which the timeouts are checked next
	nextIdle  time.Time // clock before which closeIdle does nothing

	conns []*conn // every connection not yet complete, whoever follows it
	byKey map[flowKey]*conn
	// last is the connection of the previous segment: on loopback and LAN
	// captures a segment and its ACK usually come one after the other, and
	// comparing keys is cheaper than the map lookup.
	last *conn
	// closeReason is the reason given to connections closed during the
	// current call: CloseFIN while handling packets, the flush's reason
	// inside a flush.
	closeReason decode.CloseReason
	flushing    bool  // inside a flush: gaps come from timeouts, not page limits
	injecting   bool  // feeding synthetic RSTs (see finishReset)
	reset       *conn // connection whose packet carried RST in this Assemble call
	resetDir    int   // its assembler direction
	// handingOver is the connection being handed to the assembler: the
	// only one its StreamFactory.New may return.
	handingOver *conn
	ctxs        []pktCtx
	tcp         layers.TCP // a segment decoded for the assembler
	synthTCP    layers.TCP // a synthetic segment (handOver, finishReset)
	synthBuf    [20]byte
	seen        []time.Time // scratch for eviction
	// closed holds recently ended connections (rememberEnded), at most
	// limits.maxConns of them.
	closed         map[flowKey]closedConn
	nextEndedSweep time.Time // clock before which rememberEnded does not sweep closed
	// earlier holds, per key, the ended connections a newer one on the
	// same ports took the place of in closed (at most maxEarlierEnded
	// each, and limits.maxConns in all): a capture of the other end, its
	// clock behind, shows their copies after the newer one began.
	earlier      map[flowKey][]closedConn
	earlierCount int
	// proving holds the connections with a proven hole waiting to be
	// reported (conn.proofAt).
	proving []*conn
	// holding holds the connections whose data the assembler took ahead
	// of a hole (conn.heldFrom), for heldBack; ticked is the last Tick.
	holding []*conn
	ticked  time.Time
	// ids, when set (Live), numbers connections across the run's workers
	// instead of the ordinal of their first packet, which Live's several
	// readers do not share.
	ids *atomic.Uint64
}

func newWorker(cfg Config, factory decode.StreamFactory) *worker {
	w := &worker{
		limits:      limitsFor(cfg),
		factory:     factory,
		assembleAll: cfg.assembleAll,
		noProofs:    cfg.noLossProofs,
		closeReason: decode.CloseFIN,
		byKey:       make(map[flowKey]*conn),
		closed:      make(map[flowKey]closedConn),
	}
	w.asm = reassembly.NewAssembler(reassembly.NewStreamPool(w))
	w.asm.MaxBufferedPagesPerConnection = cfg.MaxBufferedPagesPerConnection
	w.asm.MaxBufferedPagesTotal = share(cfg.MaxBufferedPagesTotal, cfg.Workers)
	return w
}

func (w *worker) newCtx(asm, ts time.Time) *pktCtx {
	if len(w.ctxs) == 0 {
		w.ctxs = make([]pktCtx, ctxSlab)
	}
	c := &w.ctxs[0]
	w.ctxs = w.ctxs[1:]
	c.asm, c.ts = asm, ts
	return c
}

func (w *worker) timeOf(ac reassembly.AssemblerContext) time.Time {
	if c, ok := ac.(*pktCtx); ok && c != nil {
		return c.ts
	}
	return w.now
}

// handle follows one decoded TCP segment; net is its IP flow and ord the
// packet's ordinal in the run. Packet sources go through pipeline.dispatch,
// which builds the tcpSeg without a gopacket.Flow; tests call this.
func (w *worker) handle(net gopacket.Flow, tcp *layers.TCP, ts time.Time, ord uint64) {
	src, dst := net.Endpoints()
	s := tcpSeg{seq: tcp.Seq, ack: tcp.Ack, flags: tcpFlags(tcp), payload: tcp.Payload, tcp: tcp, ts: ts, ord: ord}
	s.key, s.fromLo = makeFlowKey(src.Raw(), dst.Raw(), uint16(tcp.SrcPort), uint16(tcp.DstPort))
	w.handleSeg(&s)
}

func (w *worker) handleSeg(s *tcpSeg) {
	// The clock is never behind now, so a packet later than the clock is
	// later than now too: one comparison for the usual packet.
	if s.ts.After(w.clock) {
		w.clock, w.now = s.ts, s.ts
	} else {
		w.clock = w.clock.Add(1)
		if s.ts.After(w.now) {
			w.now = s.ts
		}
	}
	w.checkTimeouts()
	if w.readNow = s.readAt; w.readNow.IsZero() {
		w.readNow = w.now
	}
	if len(w.proving) > 0 {
		w.checkProofs(w.readNow)
	}
	c := w.last
	if c == nil || c.removed || c.key != s.key {
		if c = w.byKey[s.key]; c == nil {
			if c = w.open(s); c == nil {
				return
			}
		}
		w.last = c
	}
	if w.earlierCount > 0 && w.earlierOnOpen(c, s) {
		return
	}
	if s.flags&flagRST != 0 && !c.resetInWindow(s) {
		// A receiver drops an RST outside its window (RFC 9293
		// 3.10.7.4): a stale one, a forged one. The connection goes
		// on, and so must its bytes.
		w.stats.StaleResets++
		return
	}
	if s.flags&flagSYN != 0 {
		if i := senderIndex(s.fromLo); !c.syn[i] {
			c.syn[i], c.synSeq[i] = true, s.seq
		}
	} else if len(s.payload) > 0 {
		if i := senderIndex(s.fromLo); c.syn[i] && c.head[i].n == 0 && s.seq == c.synSeq[i]+1 {
			c.head[i] = headOf(s.payload)
		}
	}
	if !w.noProofs {
		w.proveLoss(c, s)
	}
	switch {
	case c.inAsm:
		w.assemble(s)
	case w.assembleAll || !w.inOrder(c, s):
		w.handOver(c)
		w.assemble(s)
	}
	if len(w.conns) > w.limits.maxConns {
		w.evict()
	}
}

// open starts following a connection at its first segment, or returns nil
// when the segment cannot start one.
func (w *worker) open(s *tcpSeg) *conn {
	syn := s.flags&flagSYN != 0
	if !syn {
		if len(s.payload) == 0 {
			// A bare ACK, FIN or RST cannot start anything worth
			// decoding; it is usually the tail of a connection already
			// closed.
			return nil
		}
	}
	copied, prev := w.endedCopy(s)
	if copied {
		return nil
	}
	// A SYN that repeated the ended connection's, and first bytes that
	// did not: a new connection (a copy, once decided, stays one).
	reborn := prev != nil && (prev.synAgain[0] || prev.synAgain[1]) && !prev.counted
	// A new connection on the ports, or the rest of one cut: what follows
	// is its, not a straggler of the old one.
	if cc, ok := w.closed[s.key]; ok && syn && prev == nil && cc.cutBy == "" {
		w.keepEarlier(s.key, cc)
	}
	delete(w.closed, s.key)
	src, dst := s.key.endpoints(s.fromLo)
	id := s.ord
	if w.ids != nil {
		id = w.ids.Add(1)
	}
	meta := decode.ConnMeta{ID: id, A: src, B: dst, Start: s.ts, SawSYN: syn}
	switch {
	case reborn:
		// Its SYN repeated the ended connection's and was held back:
		// it began there, with that connection's client.
		meta.SawSYN, meta.Start = true, prev.synAgainAt
	case prev != nil:
		// The rest of a connection the worker stopped following: what
		// the decoder skips to find its place again was carried, not
		// missed by the capture (decode.ConnMeta.PickedUpAfter).
		meta.PickedUpAfter = prev.cutBy
	}
	// A SYN-ACK first means the client's SYN was missed: A is still the
	// client, the receiver of this packet. So is it when the rest of a
	// connection begins with the server's bytes.
	swapped := syn && s.flags&flagACK != 0 || prev != nil && prev.clientLo != s.fromLo
	if swapped {
		meta.A, meta.B = dst, src
	}
	c := &conn{w: w, key: s.key, lo0: s.fromLo, swapped: swapped, stream: w.factory.NewStream(meta)}
	if reborn {
		c.syn, c.synSeq = prev.synAgain, prev.synSeq
	}
	w.byKey[s.key] = c
	w.track(c)
	w.stats.Connections++
	if !meta.SawSYN {
		w.stats.ConnectionsWithoutSYN++
	}
	return c
}

// seqRange is the sequence numbers from start up to end; zero when unused.
type seqRange struct{ start, end uint32 }

func (r seqRange) empty() bool { return r.start == r.end }

// holeStart is the first byte of half d that a proven hole would begin at:
// the next byte the assembler will deliver, for a connection in its care
// (data after a hole may wait there), else the end of the bytes seen.
func (c *conn) holeStart(d int) uint32 {
	if c.inAsm && c.delivKnown[d] {
		return c.deliv[d]
	}
	return c.seen[d]
}

// after reports whether sequence number a comes after b, modulo 2^32.
func after(a, b uint32) bool { return int32(a-b) > 0 }

// proveLoss keeps what a segment proves about bytes the capture never
// delivered, and reports them as a gap where that is known to be safe. The
// gopacket assembler sees a hole only when data after it arrives; these holes
// have nothing after them but a proof:
//   - the other half's ACK covers bytes this half never showed (the last
//     data segment of a response lost, on a keep-alive connection or before
//     the capture ended);
//   - a segment the snap length cut (its bytes are lost, s.lost).
//
// A FIN or data past the bytes seen proves nothing: behind a lossy link the
// sender's retransmission is still to come. A proven hole is reported before
// anything that could be read as coming after it (the other half's next data
// or FIN: a request must not be paired with a response whose end was lost),
// else Config.LossProofDelay after its proof (checkProofs), else at close; on the
// in-order path the expected sequence number then moves past it. A capture
// that holds an ACK before the data it covers (two interfaces, several
// rings) makes a hole that was not: that costs a finding, never adds one.
func (w *worker) proveLoss(c *conn, s *tcpSeg) {
	d := c.dirOf(s.fromLo)
	o := 1 - d
	f := s.flags
	if f&flagACK != 0 && c.known[o] && after(s.ack, c.proof[o]) {
		c.proof[o] = s.ack
	}
	start := s.seq
	if f&flagSYN != 0 {
		start++ // the SYN takes one sequence number
	}
	end := start + uint32(len(s.payload))
	if !c.known[d] {
		c.known[d] = true
		c.first[d], c.seen[d], c.proof[d] = start, start, start
	}
	if len(s.payload) > 0 || f&flagSYN != 0 {
		c.seen[d] = latest(c.seen[d], end)
		if c.finAt[d] != 0 && c.seen[d] == c.finAt[d] {
			c.seen[d]++ // a FIN that came before the retransmission it follows
		}
	}
	// A cut segment's bytes passed the capture point. (A FIN or data past
	// the bytes seen proves nothing: on a capture behind a lossy link the
	// retransmission is still to come. Only the receiver's ACK proves the
	// bytes went by.)
	if s.lost > 0 {
		c.proof[d] = latest(c.proof[d], end+s.lost)
	}
	inOrder := !c.inAsm && !w.assembleAll
	for _, h := range [2]int{d, o} {
		switch {
		case !after(c.proof[h], c.holeStart(h)):
			c.proofAt[h] = time.Time{} // no hole, or it was filled
		case c.proofAt[h].IsZero():
			if c.proofAt[1-h].IsZero() {
				w.proving = append(w.proving, c)
			}
			c.proofAt[h] = s.ts.Add(w.limits.proofDelay)
		}
	}
	if w.limits.proveAtOnce && !c.proofAt[o].IsZero() && (len(s.payload) > 0 || f&flagFIN != 0) {
		// The other half's proven hole comes before anything this half
		// sends: a request must not be paired with a response whose end
		// was lost.
		w.reportLoss(c, o, c.holeStart(o), s.ts)
	}
	switch {
	case inOrder && c.started[d] && s.seq == c.next[d] && s.lost > 0:
		// The cut segment itself; a FIN on it stays in place.
		w.reportLoss(c, d, c.next[d], s.ts)
		s.seq = c.next[d]
		return
	}
	if f&(flagFIN|flagRST) != 0 && (c.sentAt[d].IsZero() || after(end, c.sentTo[d])) {
		c.sentTo[d], c.sentAt[d] = end, s.ts
	}
	if f&flagFIN == 0 {
		return
	}
	// A FIN right after the bytes seen takes one sequence number, so its
	// ACK proves nothing lost; one past a hole leaves the hole to prove.
	if !c.fin[d] {
		// Where the FIN is, in case it is not taken at once: the
		// assembler keeps no FIN without data out of order, and loses
		// the flag of some it keeps (deliver takes it then).
		c.finAt[d] = end
	}
	if end == c.seen[d] {
		c.seen[d] = end + 1
		c.proof[d] = latest(c.proof[d], c.seen[d])
	}
}

// maxResetAhead is how far past the bytes seen an RST's sequence number may
// be and still be in its receiver's window: the largest window TCP can
// advertise (RFC 7323: 2^30 bytes).
const maxResetAhead = 1 << 30

// resetInWindow says whether an RST could be in its receiver's window: not
// before what the receiver has acknowledged (its window starts there), nor
// past the largest window beyond the bytes seen. Where the half is not
// known yet, nothing says otherwise.
func (c *conn) resetInWindow(s *tcpSeg) bool {
	d := c.dirOf(s.fromLo)
	if !c.known[d] {
		return true
	}
	return !after(c.proof[d], s.seq) && !after(s.seq, c.seen[d]+maxResetAhead)
}

// latest returns whichever of two sequence numbers comes later.
func latest(a, b uint32) uint32 {
	if after(b, a) {
		return b
	}
	return a
}

// checkProofs reports the holes whose proof has waited Config.LossProofDelay by
// the reader's time now, at the time the wait ended. Both come from the
// capture and the reader, not from the worker's share of it, so a report
// lands at the same place among a connection's segments and at the same
// time whatever the number of workers.
func (w *worker) checkProofs(now time.Time) {
	kept := w.proving[:0]
	for _, c := range w.proving {
		if c.closed {
			continue
		}
		for d := range 2 {
			if at := c.proofAt[d]; !at.IsZero() && !now.Before(at) {
				w.reportLoss(c, d, c.holeStart(d), at)
			}
		}
		if !c.proofAt[0].IsZero() || !c.proofAt[1].IsZero() {
			kept = append(kept, c)
		}
	}
	clear(w.proving[len(kept):])
	w.proving = kept
}

// reportLoss reports the bytes of half d from sequence number from to the
// proven end as a gap, and moves past them.
func (w *worker) reportLoss(c *conn, d int, from uint32, ts time.Time) {
	to := c.proof[d]
	if !after(to, from) {
		return
	}
	if c.finAt[d] != 0 && after(to, c.finAt[d]) && after(c.finAt[d], from) {
		to = c.finAt[d] // the FIN itself is not lost: it was seen
	}
	c.proofAt[d] = time.Time{}
	n := to - from
	c.seen[d] = latest(c.seen[d], to)
	canFill := c.inAsm && c.delivKnown[d] && from == c.deliv[d] && c.fill[d].empty() && !c.closed && !c.heldOverflow[d]
	if canFill {
		// Up to the first byte the assembler holds after the hole.
		for _, h := range c.held[d] {
			if after(h, from) && after(to, h) {
				to = h
			}
		}
		n = to - from
	}
	if canFill && n <= MaxHoleFill {
		// The assembler may hold data after the hole, waiting for it until
		// the reorder timeout: far too late for a resume on another
		// connection, and at a time that depends on the worker's clock.
		// Give it the hole as synthetic bytes, which ReassembledSG reports
		// as the gap, so the data after it is delivered now.
		c.fill[d] = seqRange{from, to}
		w.injectFill(c, d, from, int(n), ts)
		return
	}
	w.stats.Gaps++
	w.stats.GapBytes += uint64(n)
	c.stream.Gap(c.fromA(d), int(n), ts)
	if !c.inAsm && c.started[d] {
		c.next[d] = to
		if c.finAt[d] == to && !c.halfClosed[d] && !c.closed {
			w.finInOrder(c, d, ts)
		}
	}
}

// maxHeldStarts bounds conn.held per direction; beyond it holes are not
// filled (reported directly).
const maxHeldStarts = 16

// MaxHoleFill bounds the synthetic bytes given to the assembler for one
// proven hole (reportLoss); a larger hole is reported directly, and data
// held after it waits for the assembler's timeout.
const MaxHoleFill = 1 << 20

// holeFiller is MaxHoleFill bytes of zeros, shared: the assembler copies
// what it keeps.
var holeFiller []byte

// injectFill gives the assembler n synthetic bytes at seq in direction d.
func (w *worker) injectFill(c *conn, d int, seq uint32, n int, ts time.Time) {
	if holeFiller == nil {
		holeFiller = make([]byte, MaxHoleFill)
	}
	w.inject(c, d, seq, flagACK, holeFiller[:n], w.newCtx(w.clock, ts))
}

// inOrder delivers a segment of a connection the worker follows itself, the
// way the assembler would have. It returns false, having changed nothing,
// when the segment needs the assembler: an RST, a SYN on a started half, or
// data or a FIN anywhere but at the next expected sequence number.
func (w *worker) inOrder(c *conn, s *tcpSeg) bool {
	f := s.flags
	if f&flagRST != 0 {
		return false
	}
	d := c.dirOf(s.fromLo)
	next := s.seq
	switch {
	case c.halfClosed[d]:
		// The assembler drops segments of a half that has ended.
		c.lastSeen, c.nextSeq[d] = w.clock, c.next[d]
		return true
	case !c.started[d] && f&flagSYN != 0:
		if f&flagFIN != 0 {
			return false
		}
		next++ // the SYN takes one sequence number
	case !c.started[d]:
		// The handshake of this half was not captured: it starts at
		// its first segment, as Accept makes the assembler do.
	case f&flagSYN != 0:
		return false
	case s.seq != c.next[d]:
		if len(s.payload) == 0 && f&flagFIN == 0 {
			// A bare ACK elsewhere (a keep-alive, a window probe)
			// carries nothing, and the assembler does nothing with it.
			c.lastSeen, c.nextSeq[d] = w.clock, c.next[d]
			return true
		}
		if len(s.payload) == 0 && !w.noProofs && c.finAt[d] == s.seq && after(s.seq, c.next[d]) {
			// A FIN ahead of data still to come (from another ring, or
			// a retransmission) or lost: proveLoss noted it, and it is
			// taken when the data reaches it or the loss is proven.
			c.lastSeen = w.clock
			return true
		}
		return false
	}
	c.lastSeen = w.clock
	if c.started[d] {
		c.nextSeq[d] = c.next[d] // what Accept would have been told
	}
	c.started[d] = true
	c.next[d] = next + uint32(len(s.payload))
	fromA := c.fromA(d)
	if len(s.payload) > 0 {
		w.stats.PayloadBytes += uint64(len(s.payload))
		c.stream.Data(fromA, s.payload, s.ts)
	}
	if f&flagFIN != 0 || c.finAt[d] != 0 && c.next[d] == c.finAt[d] {
		w.finInOrder(c, d, s.ts)
	}
	return true
}

// finInOrder ends half d of a connection the worker follows in order: its
// FIN is at the next expected sequence number.
func (w *worker) finInOrder(c *conn, d int, ts time.Time) {
	c.next[d]++
	// The FIN was seen, even when it came ahead of a hole reportLoss
	// has just moved past: its sequence number is no lost byte.
	c.seen[d] = latest(c.seen[d], c.next[d])
	c.finAt[d] = 0
	c.halfClosed[d] = true
	if !c.fin[d] {
		c.fin[d] = true
		w.stats.Fins++
		c.stream.Fin(c.fromA(d), ts)
	}
	if c.halfClosed[1-d] {
		w.complete(c)
	}
}

// handOver gives a connection the worker followed itself to the assembler.
// For each started half a synthetic SYN just before the next expected byte
// (and a FIN after it, for a half that has ended) brings the assembler to the
// state it would have reached had it seen every segment: same expected
// sequence numbers, same halves closed, same client-to-server direction
// (half 0 always started first). The synthetic segments carry the
// connection's last-seen clock, so idle and eviction cut-offs do not move.
func (w *worker) handOver(c *conn) {
	c.inAsm = true
	w.handingOver = c
	ctx := w.newCtx(c.lastSeen, w.now)
	// The synthetic segments must not change what finishReset will use.
	defer func(seen [2]uint32) { c.nextSeq = seen }(c.nextSeq)
	for d := range 2 {
		if !c.started[d] {
			continue
		}
		seq := c.next[d] - 1
		if c.halfClosed[d] {
			seq-- // the FIN took one sequence number too
		}
		w.inject(c, d, seq, flagSYN, nil, ctx)
		if c.halfClosed[d] {
			w.inject(c, d, seq+1, flagFIN, nil, ctx)
		}
	}
}

// inject feeds the assembler a synthetic segment with the given sequence
// number, flags and payload in direction d of c.
func (w *worker) inject(c *conn, d int, seq uint32, flags uint8, payload []byte, ctx *pktCtx) {
	fromLo := (d == 0) == c.lo0
	src, dst := c.key.hiPort, c.key.loPort
	if fromLo {
		src, dst = dst, src
	}
	b := w.synthBuf[:]
	clear(b)
	binary.BigEndian.PutUint16(b[0:], src)
	binary.BigEndian.PutUint16(b[2:], dst)
	binary.BigEndian.PutUint32(b[4:], seq)
	b[12] = 5 << 4 // header length: 5 words
	b[13] = flags
	if err := w.synthTCP.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		return
	}
	w.synthTCP.Payload = payload
	w.asm.AssembleWithContext(c.key.netFlow(fromLo), &w.synthTCP, ctx)
	w.synthTCP.Payload = nil
}

// assemble hands a segment of a connection in the assembler's care to it.
func (w *worker) assemble(s *tcpSeg) {
	defer func() { w.handingOver = nil }()
	tcp := s.tcp
	if tcp == nil {
		// The reader decoded these bytes already, so this cannot fail.
		if decodeTCP(&w.tcp, s.raw) != nil {
			return
		}
		tcp = &w.tcp
	}
	tcp.Seq = s.seq // proveLoss may have moved a FIN
	ctx := w.newCtx(w.clock, s.ts)
	w.asm.AssembleWithContext(s.key.netFlow(s.fromLo), tcp, ctx)
	if c := w.reset; c != nil {
		w.reset = nil
		w.finishReset(c, ctx)
	}
}

// tick advances the worker's clocks to now (the time its readers have all
// reached), runs the timeout checks when due and passes the time on: the
// worker's, unless now is earlier. A worker's own packets can be ahead of
// now when several readers feed it (Live) and one lags; the Tick must not
// pass what that one still holds.
func (w *worker) tick(now time.Time) {
	if now.After(w.now) {
		w.now = now
	}
	if now.After(w.clock) {
		w.clock = now
	}
	if now.After(w.readNow) {
		w.readNow = now
	}
	if len(w.proving) > 0 {
		w.checkProofs(now)
	}
	w.checkTimeouts()
	if at := w.now; !at.IsZero() {
		if !now.IsZero() && now.Before(at) {
			at = now
		}
		if len(w.holding) > 0 {
			// Never back: data held from before the last Tick (a
			// capture whose times go back) is late all the same.
			if at = w.heldBack(at); at.Before(w.ticked) {
				at = w.ticked
			}
		}
		w.ticked = at
		w.factory.Tick(at)
	}
}

// heldBack returns at, or the capture time of the oldest data the assembler
// holds after a hole if that is earlier. A Tick vouches that nothing older
// than it (less the decoder's reorder window) follows; held data is
// delivered when the hole fills or at the reorder timeout, with its own
// packets' times, so a Tick past it made whatever it carried late: the
// decoder's merger then handed it on out of order, and every check of its
// client address and server was unverifiable from wherever the detector had
// got to by then, a point that moved with the number of workers. Data held
// longer than the reorder timeout and a check interval is the assembler's
// to flush at the next check, so it holds a Tick back no further.
func (w *worker) heldBack(at time.Time) time.Time {
	oldest := at
	kept := w.holding[:0]
	for _, c := range w.holding {
		if c.closed || c.heldFrom == [2]time.Time{} {
			c.holding = false
			continue
		}
		kept = append(kept, c)
		for _, t := range c.heldFrom {
			if !t.IsZero() && t.Before(oldest) {
				oldest = t
			}
		}
	}
	clear(w.holding[len(kept):])
	w.holding = kept
	if floor := w.clock.Add(-w.limits.reorderTimeout - w.limits.flushEvery); oldest.Before(floor) {
		oldest = floor
	}
	if oldest.Before(at) {
		return oldest
	}
	return at
}

// checkTimeouts delivers data held longer than the reorder timeout (after a
// gap), when a check is due. Idle connections are closed apart (closeIdle).
func (w *worker) checkTimeouts() {
	// Before, not Sub: this runs for every packet, and Sub's overflow
	// handling costs more than the comparison.
	if w.clock.Before(w.nextFlush) {
		return
	}
	w.nextFlush = w.clock.Add(w.limits.flushEvery)
	w.flush(decode.CloseIdle, reassembly.FlushOptions{T: w.clock.Add(-w.limits.reorderTimeout)})
	w.forgetEnded(w.limits.endedTTL)
}

// closeIdle closes the connections idle longer than the idle timeout, at
// most once per flushEvery: a check scans every connection. A file's reader
// has every worker do it at the same points of the capture
// (pipeline.idleCheck), Live at its ticks.
func (w *worker) closeIdle() {
	if w.clock.Before(w.nextIdle) {
		return
	}
	w.nextIdle = w.clock.Add(w.limits.flushEvery)
	w.flush(decode.CloseIdle, reassembly.FlushOptions{
		T:  w.clock.Add(-w.limits.reorderTimeout),
		TC: w.clock.Add(-w.limits.idleTimeout),
	})
}

func (w *worker) flush(reason decode.CloseReason, opt reassembly.FlushOptions) {
	w.flushing, w.closeReason = true, reason
	w.asm.FlushWithOptions(opt)
	// The connections followed here hold no out-of-order data, so a flush
	// only closes those last seen before TC, as the assembler closes a
	// connection with nothing buffered. Backwards, because complete moves
	// the last connection into the slot it frees.
	for i := len(w.conns) - 1; i >= 0; i-- {
		if c := w.conns[i]; !c.inAsm && c.lastSeen.Before(opt.TC) {
			w.complete(c)
		}
	}
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
	for i := len(w.conns) - 1; i >= 0; i-- {
		if c := w.conns[i]; !c.inAsm {
			w.complete(c)
		}
	}
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
func (w *worker) finishReset(c *conn, ctx *pktCtx) {
	w.injecting = true
	for _, d := range [2]int{1 - w.resetDir, w.resetDir} {
		if c.removed {
			break
		}
		// An old sequence number of the half is at or before its next
		// expected byte, so the assembler takes the RST as in order.
		w.inject(c, d, c.nextSeq[d], flagRST, nil, ctx)
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

// complete forgets a connection whose halves are both closed, closing its
// stream if that has not happened yet; a new connection on the same ports
// starts afresh.
func (w *worker) complete(c *conn) {
	w.untrack(c)
	delete(w.byKey, c.key)
	c.removed = true
	if !c.closed {
		reason := w.closeReason
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
}

// New implements reassembly.StreamFactory. The assembler only meets
// connections handOver gives it.
func (w *worker) New(_, _ gopacket.Flow, _ *layers.TCP, _ reassembly.AssemblerContext) reassembly.Stream {
	if w.handingOver == nil {
		return nil
	}
	return w.handingOver
}

// closedConn is what a worker remembers of a connection that ended with FIN
// or RST, or that it stopped following while it was open (cutBy), for
// endedTTL: when, and per sender (senderIndex) the sequence number of its SYN
// (syn) and the sequence numbers the capture held, first to end (held).
type closedConn struct {
	at         time.Time
	synSeq     [2]uint32
	first, end [2]uint32
	syn, held  [2]bool
	head       [2]streamHead
	// synAgain: a SYN with the ended connection's sequence number came
	// (when), so the first bytes after it decide whether it is a copy
	// (counted: in Stats.ReplayedConnections, and decided for the whole
	// connection) or a new connection that drew the same number.
	synAgain   [2]bool
	synAgainAt time.Time
	counted    bool
	// cutBy names the limit that made the worker stop following the
	// connection while it was open ("" when it ended); clientLo: its A
	// was the key's lo endpoint.
	cutBy    string
	clientLo bool
}

// streamHead fingerprints the first bytes a sender sent after its SYN: what
// tells a copy of an ended connection from a new one that drew the same
// initial sequence number.
type streamHead struct {
	n uint16 // bytes of the first segment hashed, at most headBytes; 0: none seen
	// hash holds the hashes of its first headCuts bytes (those it has), then
	// of its first n: 32 bits each, as it is kept for every connection (a
	// collision could only take a new connection for a copy).
	hash [len(headCuts) + 1]uint32
}

// headBytes is how much of a sender's first segment streamHead hashes: an
// HTTP request's line and headers, which differ between two requests where
// their first few dozen bytes do not.
const headBytes = 512

// headCuts are the shorter prefixes streamHead also hashes: a copy's first
// segment may be cut elsewhere than the original's (segmentation offload on
// the sending host, receive offload on the other), and is compared over
// as much as both hold.
var headCuts = [...]int{64, 96, 128, 192, 256, 384}

var headSeed = maphash.MakeSeed()

func headOf(payload []byte) streamHead {
	h := streamHead{n: uint16(min(len(payload), headBytes))}
	for i, cut := range headCuts {
		if len(payload) >= cut {
			h.hash[i] = hash32(payload[:cut])
		}
	}
	h.hash[len(headCuts)] = hash32(payload[:h.n])
	return h
}

func hash32(b []byte) uint32 { return uint32(maphash.Bytes(headSeed, b)) }

// sameHead says whether payload, the first segment after a SYN, begins with
// the bytes h fingerprints, over as many as both hold; known is false when
// that is fewer than the shortest cut.
func (h streamHead) sameHead(payload []byte) (same, known bool) {
	if h.n == 0 {
		return false, false
	}
	if len(payload) >= int(h.n) {
		return hash32(payload[:h.n]) == h.hash[len(headCuts)], true
	}
	for i := len(headCuts) - 1; i >= 0; i-- {
		if cut := headCuts[i]; len(payload) >= cut && int(h.n) > cut {
			return hash32(payload[:cut]) == h.hash[i], true
		}
	}
	return false, false
}

// copySlack is how far past the last byte an ended connection's capture held
// a later segment may start and still be taken for a copy of it: the copy
// may hold bytes the first capture lost at its end.
const copySlack = 1 << 16

// endedCopy reports whether a segment that would open a connection belongs
// to one that already ended on its ports: a straggler within closedTTL, or
// a second copy of the connection read later. Copies come when captures of
// the client's host and of the server's are analysed together: each end's
// clock, and the link's latency, put its copy of a packet at another time,
// and the sending host's checksum offload makes the copies differ, so they
// are no duplicates to drop. Decoding a copy would show every request and
// response of the connection twice. It is known by its SYN (a new
// connection on the same ports draws a new random initial sequence number,
// RFC 6528) and, where the ended connection's first bytes were seen, by
// those bytes again: a recorder that writes its own TCP headers may give a
// reused port the same initial sequence number every time (the suite's
// pcaprec does), and only the data tells that new connection from a copy.
// Else, for endedTTL, it is known by sequence numbers inside what the ended
// connection carried.
//
// A connection the worker stopped following while it was open (idle for
// IdleTimeout, or evicted) did not end: its later data continues it, and
// prev returns what was kept of it (open passes its cutBy on as
// decode.ConnMeta.PickedUpAfter). Only bytes it had already carried are a
// copy to ignore. prev is also the ended connection whose SYN a new one
// repeated (synAgain), for open to begin that one at its SYN.
func (w *worker) endedCopy(s *tcpSeg) (copied bool, prev *closedConn) {
	if len(w.closed) == 0 {
		return false, nil
	}
	copied, prev = w.lastEndedCopy(s)
	if !copied && prev == nil && w.earlierCount > 0 {
		copied = w.earlierCopy(s)
	}
	return copied, prev
}

// lastEndedCopy is endedCopy for the connection that ended last on the
// segment's ports.
func (w *worker) lastEndedCopy(s *tcpSeg) (copied bool, prev *closedConn) {
	cc, ok := w.closed[s.key]
	if !ok {
		return false, nil
	}
	age, i := w.clock.Sub(cc.at), senderIndex(s.fromLo)
	switch {
	case age > w.limits.endedTTL:
		return false, nil
	case s.flags&flagSYN != 0:
		if !cc.syn[i] || cc.synSeq[i] != s.seq {
			return false, nil
		}
		if !cc.synAgain[0] && !cc.synAgain[1] {
			cc.synAgainAt = s.ts
		}
		cc.synAgain[i] = true
		w.closed[s.key] = cc
		return true, nil
	case cc.synAgain[i] && !cc.counted && s.seq == cc.synSeq[i]+1 && len(s.payload) > 0:
		if same, known := cc.head[i].sameHead(s.payload); known && !same {
			// A new connection its SYN began: open takes it from there.
			return false, &cc
		}
	}
	if (cc.synAgain[0] || cc.synAgain[1]) && !cc.counted {
		cc.counted = true
		w.closed[s.key] = cc
		w.stats.ReplayedConnections++
		return true, nil
	}
	switch {
	case cc.cutBy != "":
		if cc.held[i] && s.seq-cc.first[i] < cc.end[i]-cc.first[i] {
			return true, nil
		}
		return false, &cc
	case age <= w.limits.closedTTL:
		return true, nil
	}
	return cc.carried(i, s.seq), nil
}

// carried says whether seq, from sender i, is inside what cc carried, or
// up to copySlack past its end.
func (cc *closedConn) carried(i int, seq uint32) bool {
	return cc.held[i] && seq-cc.first[i] <= cc.end[i]-cc.first[i]+copySlack
}

// maxEarlierEnded bounds the ended connections kept per pair of ports
// behind the last (worker.earlier).
const maxEarlierEnded = 3

// keepEarlier keeps cc, the last connection that ended on key, as a new
// one on the same ports opens with its own SYN: a client that reuses a
// port (a server that closed first holds no TIME_WAIT for it) within the
// skew of two ends' clocks makes the other end's copy of cc come after the
// new connection began.
func (w *worker) keepEarlier(key flowKey, cc closedConn) {
	if w.earlierCount >= w.limits.maxConns {
		return
	}
	if w.earlier == nil {
		w.earlier = map[flowKey][]closedConn{}
	}
	e := w.earlier[key]
	if len(e) == maxEarlierEnded {
		e = e[1:]
		w.earlierCount--
	}
	w.earlier[key] = append(e, cc)
	w.earlierCount++
}

// earlierCopy reports whether a segment that would open a connection is a
// copy of one that ended on its ports before the last did: its SYN
// repeats that one's, or its sequence numbers are inside what it carried.
func (w *worker) earlierCopy(s *tcpSeg) bool {
	e := w.earlier[s.key]
	i := senderIndex(s.fromLo)
	for k := range e {
		cc := &e[k]
		if w.clock.Sub(cc.at) > w.limits.endedTTL {
			continue
		}
		if s.flags&flagSYN != 0 {
			if cc.syn[i] && cc.synSeq[i] == s.seq {
				if !cc.counted {
					cc.counted = true
					w.stats.ReplayedConnections++
				}
				return true
			}
			continue
		}
		if cc.carried(i, s.seq) {
			return true
		}
	}
	return false
}

// earlierOnOpen reports whether s, which came on the ports of the open
// connection c, is a copy of one that ended on them before c began: its
// sequence numbers come before c's SYN (a later connection on the same
// ports draws a later initial sequence number from the clock, RFC 6528)
// and the earlier one's SYN or bytes match. Read at both ends with a skew
// longer than the client took to use its port again, the other end's copy
// of the earlier connection comes while the new one is open; given to it,
// its bytes would be taken for a hole and lost.
func (w *worker) earlierOnOpen(c *conn, s *tcpSeg) bool {
	i := senderIndex(s.fromLo)
	return c.syn[i] && int32(s.seq-c.synSeq[i]) < 0 && w.earlierCopy(s)
}

// rememberEnded keeps what endedCopy needs of a connection that ended with
// FIN or RST, or that the worker stopped following while it was open for
// the limit cutBy. At most limits.maxConns are kept: when full, those past
// closedTTL give way (at most once per flushEvery, since that scans them
// all).
func (w *worker) rememberEnded(c *conn, cutBy string) {
	if len(w.closed) >= w.limits.maxConns && !w.clock.Before(w.nextEndedSweep) {
		w.nextEndedSweep = w.clock.Add(w.limits.flushEvery)
		w.forgetEnded(w.limits.closedTTL)
	}
	if len(w.closed) >= w.limits.maxConns {
		return
	}
	cc := closedConn{at: w.clock, synSeq: c.synSeq, syn: c.syn, head: c.head, cutBy: cutBy, clientLo: c.lo0 != c.swapped}
	for d := range 2 {
		if i := senderIndex((d == 0) == c.lo0); c.known[d] {
			cc.held[i], cc.first[i], cc.end[i] = true, c.first[d], c.seen[d]
		}
	}
	w.closed[c.key] = cc
}

// forgetEnded forgets the ended connections older than ttl.
func (w *worker) forgetEnded(ttl time.Duration) {
	for k, cc := range w.closed {
		if w.clock.Sub(cc.at) > ttl {
			delete(w.closed, k)
		}
	}
	for k, e := range w.earlier {
		n := 0
		for _, cc := range e {
			if w.clock.Sub(cc.at) <= ttl {
				e[n] = cc
				n++
			}
		}
		w.earlierCount -= len(e) - n
		if n == 0 {
			delete(w.earlier, k)
		} else {
			w.earlier[k] = e[:n]
		}
	}
}

// senderIndex is the index, in per-sender arrays of a flowKey's connection,
// of the side a segment came from.
func senderIndex(fromLo bool) int {
	if fromLo {
		return 0
	}
	return 1
}

func addrOf(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a.Unmap()
}

// conn is one connection: followed by its worker while its segments come in
// order, then by the assembler, as whose reassembly.Stream it serves.
type conn struct {
	w        *worker
	stream   decode.TCPStream
	key      flowKey
	lo0      bool      // direction 0 (the assembler's client-to-server half) is sent by key's lo endpoint
	swapped  bool      // direction 0 is B's
	lastSeen time.Time // assembler clock of the last packet
	index    int       // in w.conns
	// nextSeq per direction: the last expected sequence number Accept
	// was told (or would have been, while the worker follows the
	// connection). finishReset sends its RSTs there.
	nextSeq [2]uint32
	// While the worker follows the connection, per direction:
	next       [2]uint32 // the next byte expected
	started    [2]bool   // the half has a start
	halfClosed [2]bool   // the half ended with a FIN (followed by the worker)
	inAsm      bool      // the assembler follows the connection
	// For proveLoss, per direction, once known (any segment seen): the
	// sequence number after the last byte the capture holds, and after the
	// last byte the traffic proves was sent.
	known              [2]bool
	first, seen, proof [2]uint32    // first: the first sequence number held
	proofAt            [2]time.Time // when a proven hole is reported (zero: none pending)
	finAt              [2]uint32    // the sequence number of a FIN that came past the bytes seen (0: none)
	// sentTo is the furthest sequence number a FIN or RST said was sent,
	// seen at sentAt: a hole before it that no retransmission filled by
	// the time the connection closed was lost by the capture.
	sentTo [2]uint32
	sentAt [2]time.Time
	// In the assembler's care, per direction: the sequence number of the
	// next byte it will deliver (once known), and a proven hole it was
	// given synthetic bytes for, which ReassembledSG turns into a Gap.
	deliv      [2]uint32
	delivKnown [2]bool
	fill       [2]seqRange
	// held are the first sequence numbers of segments the assembler took
	// ahead of deliv (data after a hole), at most maxHeldStarts; a fill
	// stops at the first, so no byte the capture holds is replaced.
	held         [2][]uint32
	heldOverflow [2]bool
	// heldFrom is the capture time of the oldest segment the assembler
	// took ahead of deliv since it last held nothing (zero: nothing held).
	heldFrom [2]time.Time
	holding  bool    // in worker.holding
	fin      [2]bool // per direction
	rst      bool
	// synSeq holds the sequence number of each sender's first SYN (syn),
	// by sender (senderIndex), for endedCopy once the connection ends;
	// so does head, each sender's first bytes after its SYN.
	synSeq  [2]uint32
	syn     [2]bool
	head    [2]streamHead
	closed  bool // Close was called on the stream
	removed bool // complete: the connection is forgotten
}

func (c *conn) dirOf(fromLo bool) int {
	if fromLo == c.lo0 {
		return 0
	}
	return 1
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
func (c *conn) Accept(tcp *layers.TCP, ci gopacket.CaptureInfo, dir reassembly.TCPFlowDirection, nextSeq reassembly.Sequence, start *bool, ac reassembly.AssemblerContext) bool {
	c.lastSeen = ci.Timestamp
	d := dirIndex(dir)
	if nextSeq >= 0 {
		c.nextSeq[d] = uint32(nextSeq)
		if !c.delivKnown[d] || after(uint32(nextSeq), c.deliv[d]) {
			// Never back: past a delivered FIN, deliv counts the FIN's
			// sequence number, which the assembler's nextSeq may not (a
			// FIN sent again, split otherwise on another interface), and
			// the FIN would be a hole at close.
			c.deliv[d], c.delivKnown[d] = uint32(nextSeq), true
		}
		if ahead := after(tcp.Seq, uint32(nextSeq)) && !c.w.injecting; ahead && (len(tcp.Payload) > 0 || tcp.FIN) {
			c.noteHeld(d, c.w.timeOf(ac))
			switch {
			case len(tcp.Payload) == 0:
			case len(c.held[d]) < maxHeldStarts:
				c.held[d] = append(c.held[d], tcp.Seq)
			default:
				c.heldOverflow[d] = true
			}
		}
	} else if !tcp.SYN {
		// The handshake of this half was not captured: start at the
		// first segment seen instead of waiting for a SYN forever.
		*start = true
		c.deliv[d], c.delivKnown[d] = tcp.Seq, true
	} else {
		c.deliv[d], c.delivKnown[d] = tcp.Seq+1, true
	}
	if c.closed {
		return c.w.injecting
	}
	// The synthetic RSTs of finishReset must not mark the connection as
	// reset again: the next packet would run finishReset for it once more.
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
		c.deliv[d] += uint32(skip)
	}
	if n, _ := sg.Lengths(); n > 0 {
		c.deliver(d, sg.Fetch(n), ts)
	}
	if end && !c.rst && !c.fin[d] {
		c.deliv[d]++ // the FIN takes a sequence number; its ACK proves no hole
		c.finAt[d] = 0
		c.fin[d] = true
		st.Fins++
		c.stream.Fin(fromA, ts)
	}
}

// deliver hands the stream bytes the assembler delivers in direction d,
// the synthetic bytes of a filled hole (reportLoss) as a gap.
func (c *conn) deliver(d int, p []byte, ts time.Time) {
	defer c.pruneHeld(d)
	st := &c.w.stats
	fromA := c.fromA(d)
	f := &c.fill[d]
	if !f.empty() && !after(f.end, c.deliv[d]) {
		*f = seqRange{} // skipped past it
	}
	for len(p) > 0 {
		k := len(p)
		if !f.empty() {
			if !after(f.start, c.deliv[d]) {
				k = min(k, int(f.end-c.deliv[d]))
				st.Gaps++
				st.GapBytes += uint64(k)
				c.stream.Gap(fromA, k, ts)
				p = p[k:]
				if c.deliv[d] += uint32(k); c.deliv[d] == f.end {
					*f = seqRange{}
				}
				continue
			}
			k = min(k, int(f.start-c.deliv[d]))
		}
		st.PayloadBytes += uint64(k)
		c.stream.Data(fromA, p[:k], ts)
		p = p[k:]
		c.deliv[d] += uint32(k)
	}
	if c.finAt[d] != 0 && c.deliv[d] == c.finAt[d] && !c.fin[d] && !c.rst {
		// A FIN that came ahead of these bytes: the assembler does not
		// keep a FIN without data out of order.
		c.deliv[d]++
		c.finAt[d] = 0
		c.fin[d] = true
		st.Fins++
		c.stream.Fin(fromA, ts)
	}
}

// pruneHeld forgets the held segments the assembler has delivered.
func (c *conn) pruneHeld(d int) {
	kept := c.held[d][:0]
	for _, h := range c.held[d] {
		if after(h, c.deliv[d]) {
			kept = append(kept, h)
		}
	}
	c.held[d] = kept
	if !after(c.seen[d], c.deliv[d]) {
		// Nothing is held any more, recorded or not.
		c.heldOverflow[d] = false
		c.heldFrom[d] = time.Time{}
	}
}

// noteHeld notes that the assembler takes a segment of half d, sent at ts,
// ahead of the next byte it will deliver (heldBack).
func (c *conn) noteHeld(d int, ts time.Time) {
	if !c.holding {
		c.holding = true
		c.w.holding = append(c.w.holding, c)
	}
	if c.heldFrom[d].IsZero() || ts.Before(c.heldFrom[d]) {
		c.heldFrom[d] = ts
	}
}

// ReassemblyComplete implements reassembly.Stream: both halves are closed.
func (c *conn) ReassemblyComplete(_ reassembly.AssemblerContext) bool {
	c.w.complete(c)
	// The assembler may forget the connection too.
	return true
}

func (c *conn) close(reason decode.CloseReason) {
	c.closed = true
	// Bytes the traffic proved were sent and the capture never held, with
	// nothing after them for the assembler to notice the hole by.
	for d := range 2 {
		if !c.w.noProofs && c.known[d] && !c.sentAt[d].IsZero() && after(c.sentTo[d], c.proof[d]) {
			// A FIN or RST past the bytes seen, and the connection ended
			// with no retransmission filling the hole: the capture lost it.
			c.proof[d] = c.sentTo[d]
			if c.proofAt[d].IsZero() {
				c.proofAt[d] = c.sentAt[d]
			}
		}
		if !c.w.noProofs && c.known[d] && after(c.proof[d], c.holeStart(d)) {
			// Not later than the reader's time: a proof waiting past
			// it is reported at it, at the same time with any number
			// of workers (the worker's own now is its share's).
			at, limit := c.proofAt[d], c.w.readNow
			if limit.IsZero() {
				limit = c.w.now
			}
			if at.IsZero() || at.After(limit) {
				at = limit
			}
			c.w.reportLoss(c, d, c.holeStart(d), at)
		}
	}
	switch reason {
	case decode.CloseReset, decode.CloseFIN:
		if reason == decode.CloseReset {
			c.w.stats.Resets++
		}
		c.w.rememberEnded(c, "")
	case decode.CloseIdle:
		c.w.stats.IdleFlushes++
		c.w.rememberEnded(c, "capture.IdleTimeout")
	case decode.CloseEvicted:
		c.w.stats.Evictions++
		c.w.rememberEnded(c, "capture.MaxConnections")
	}
	c.stream.Close(reason, c.w.now)
	// The decoder reuses a closed stream for its next connection: a late
	// loss report must not reach it.
	c.stream = endedStream{}
}

// endedStream stands in for a closed connection's stream.
type endedStream struct{}

func (endedStream) Data(bool, []byte, time.Time)        {}
func (endedStream) Gap(bool, int, time.Time)            {}
func (endedStream) Fin(bool, time.Time)                 {}
func (endedStream) Close(decode.CloseReason, time.Time) {}
