// One TCP connection: both directions' parse state and the TCPStream
// callbacks that feed them.

package decode

import (
	"net/netip"
	"time"
)

// Roles of one direction of a connection, decided from content.
const (
	roleUnknown uint8 = iota
	roleClient
	roleServer
)

// Parse states of one direction.
const (
	stSync  uint8 = iota // looking for a request or status line
	stHead               // reading a head (start line already in buf)
	stBody               // reading a body as bodyMode says
	stDone               // FIN, upgrade or not HTTP: ignore everything
	stProxy              // the client's first bytes may be a PROXY protocol v2 header
)

// Body framings.
const (
	bodyLength uint8 = iota + 1
	bodyChunked
	bodyClose
)

// Chunked sub-states.
const (
	chSize    uint8 = iota // reading a chunk-size line into buf
	chData                 // remaining bytes of chunk data
	chDataEnd              // the CRLF after chunk data
	chTrailer              // trailer fields up to the blank line
)

// exchange is one request/response pair on a connection, created when the
// request head (or an unpaired response head) is seen.
type exchange struct {
	index  int
	method string
	// ro is set once the request is complete (and then immutable); the
	// exchange's End takes it (emitEnd).
	ro *requestObservation
	// gapEnded: lost bytes of the answer direction ended the exchange while
	// its request's body was still arriving (endQueued). Its answer may
	// have been in them (a server may answer on the head), so its End,
	// EndGap, follows the request when that is complete.
	gapEnded bool
}

// request is the exchange's complete request, nil before it is complete
// and after its End.
func (ex *exchange) request() *Request {
	if ex.ro == nil {
		return nil
	}
	return &ex.ro.req
}

// conn decodes one TCP connection. It implements TCPStream.
type conn struct {
	w    *worker
	meta ConnMeta
	info Conn
	live int // index in w.live while open (buffered.go)
	// dead means the connection is not (or no longer) HTTP/1.x: Data returns
	// at once.
	dead   bool
	synced bool // a request or status line was found at least once
	// unreadFor names why the connection's bytes are not read when that
	// must be reported (NonHTTPScanLimit, or GapHTTP2): its close is
	// reported too (a limit gap), since what it carried until then was not
	// read. "" when it is read, or not HTTP at all.
	unreadFor string
	// clientFin: the client sent FIN, so a response ending after it was
	// given up by the client (End.ClientClosed).
	clientFin bool
	dirs      [2]dir

	seq       uint64 // per-connection observation sequence, the merger's tie-break
	lastKey   int64  // observation sort keys never go back within a connection
	exchanges int    // exchange indexes handed out
	queue     []*exchange
	// pairingLost: the capture lost bytes of this connection, so which
	// request a later response answers is unknown (the hole may have held
	// requests, responses or both). Every later response is reported
	// without a request, and every request still waiting ends as a gap.
	pairingLost bool
	// overflowed: a request was forgotten past MaxPipelinedRequests, so
	// responses may be paired with the wrong requests until one finds no
	// request waiting (Response.PipelineOverflow).
	overflowed bool
	// proxiedClient is the client a PROXY protocol header named (the zero
	// AddrPort when none did): Conn.Client once roles are known.
	proxiedClient netip.AddrPort
	// pickedUpGap: the connection, picked up again after a capture limit
	// let it go (ConnMeta.PickedUpAfter), reported what it could not read.
	pickedUpGap bool
	// values holds the header values last seen on this connection, by
	// header (see value).
	values [numValueSlots]string
}

// Header values the connection remembers, in conn.values.
const (
	slotMethod = iota
	slotPath
	slotHost
	slotSession
	slotProtocol
	slotRequestType
	slotAccept
	slotUserAgent
	slotResponseType
	numValueSlots
)

// value returns b as a string. A keep-alive connection repeats the same
// host, session id, content types and protocol version on every message, so
// comparing with the value last seen in that header is nearly always a hit
// and cheaper than the worker's interning table, which it falls back to.
func (c *conn) value(slot int, b []byte) string {
	if v := c.values[slot]; v == string(b) {
		return v
	}
	var v string
	if slot == slotSession {
		v = boundedID(&c.w.strings, b)
	} else {
		v = c.w.strings.str(b)
	}
	c.values[slot] = v
	return v
}

// dir is one direction of a connection.
type dir struct {
	c       *conn
	fromA   bool
	role    uint8
	state   uint8
	started bool // any byte arrived in this direction
	ts      time.Time

	// Sync and head reading.
	buf       []byte
	skipLine  bool  // inside a line too long to be a start line
	resyncing bool  // sync was lost (gap, error, mid-message start)
	unsynced  int64 // bytes scanned before the connection ever synced
	sawBinary bool  // some of them could not be HTTP or SSE text
	lineLen   int   // bytes of the current head line so far
	lineFirst byte
	// proxySkip: bytes of a PROXY protocol v2 header's addresses still to
	// skip (stProxy).
	proxySkip int
	proxyAddr int  // bytes of its client's address still to read (stProxy)
	proxied   bool // a PROXY protocol v1 header was skipped

	// The message being read.
	ex        *exchange
	req       *requestObservation
	resp      *responseObservation
	bodyMode  uint8
	remaining int64
	chunk     uint8
	sawCR     bool
	body      []byte // kept for the JSON-RPC peek, up to MaxBodyBytes
	// inflate inflates the body being read (gzip or deflate); plain is
	// what its output goes to (d.plain, bound once).
	inflate   *inflater
	plain     func([]byte)
	bodyBytes int64
	bodyOver  bool
	keepBody  bool
	sse       *SSEDecoder
	sseOn     bool   // the current response's body goes through sse
	sseHits   [2]int // SSE limit hits already counted
	events    int
	// evLineHits: SSE line limit hits already reported on an event
	// (Event.LineDropped).
	evLineHits int
	// limit names the decoder limit that cut the current response, for
	// End.Limit ("" when none did).
	limit string
}

func newConn(w *worker, meta ConnMeta) *conn {
	c := w.getConn()
	c.w, c.meta = w, meta
	c.info = Conn{ID: meta.ID, Client: meta.A, Server: meta.B, StartSeen: meta.SawSYN}
	for i := range c.dirs {
		c.dirs[i] = dir{c: c, fromA: i == 0}
	}
	w.stats.connections.Add(1)
	w.track(c)
	return c
}

func (c *conn) dir(fromA bool) *dir {
	if fromA {
		return &c.dirs[0]
	}
	return &c.dirs[1]
}

// Data implements TCPStream.
func (c *conn) Data(fromA bool, p []byte, ts time.Time) {
	if c.dead || len(p) == 0 {
		if c.speaksHTTP2() {
			c.w.stats.http2Bytes.Add(int64(len(p)))
		}
		return
	}
	d := c.dir(fromA)
	d.ts = ts
	d.feed(p)
	c.w.fed(len(p), ts)
}

// Gap implements TCPStream: the framing after a gap cannot be trusted, so the
// open message is ended and the direction looks for a start line again.
func (c *conn) Gap(fromA bool, lost int, ts time.Time) {
	c.w.stats.gaps.Add(1)
	at := c.lostSince(ts)
	d := c.dir(fromA)
	d.ts = ts
	fromClient := d.role == roleClient || (d.role == roleUnknown && fromA)
	exIndex := 0
	if d.ex != nil {
		exIndex = d.ex.index
	}
	if c.dead {
		return // not HTTP: nothing to report about
	}
	if at.Before(ts) {
		c.emit(&Observation{Kind: KindGap, Time: at, Exchange: exIndex, Gap: &Gap{FromClient: fromClient, Lost: lost, Notice: true, ProvenAt: ts}})
	}
	// Bytes after a gap are not the connection's first bytes, whatever
	// the handshake said.
	d.started = true
	if d.state != stDone {
		d.abort(EndGap)
		d.enterSync()
	}
	c.emit(&Observation{Kind: KindGap, Time: ts, Exchange: exIndex, Gap: &Gap{FromClient: fromClient, Lost: lost}})
	c.pairingLost = true
	c.endQueued(ts)
}

// lostSince is the earliest time bytes proved lost at ts may have been sent
// (Gap.Notice): the connection's last packet before, but no more than half
// the reorder window back, so that the merger still puts it in order.
func (c *conn) lostSince(ts time.Time) time.Time {
	at := ts.Add(-c.w.cfg.ReorderWindow / 2)
	for i := range c.dirs {
		if t := c.dirs[i].ts; t.After(at) {
			at = t
		}
	}
	if at.After(ts) {
		return ts
	}
	return at
}

// endQueued ends every exchange still waiting for its response as cut by a
// gap: after lost bytes no response can be proven to be theirs.
func (c *conn) endQueued(ts time.Time) {
	for len(c.queue) > 0 {
		ex := c.queue[0]
		c.dequeue()
		if ex.ro != nil {
			c.endByGap(ex, ts)
		} else {
			ex.gapEnded = true // its request is still arriving
		}
	}
}

// endByGap emits ex's End as cut by lost bytes at ts.
func (c *conn) endByGap(ex *exchange, ts time.Time) {
	eo := c.w.endObservation()
	eo.end.How = EndGap
	eo.obs = Observation{Kind: KindEnd, Time: ts, Exchange: ex.index, End: &eo.end}
	c.emitEnd(eo, ex, nil)
}

// Fin implements TCPStream.
func (c *conn) Fin(fromA bool, ts time.Time) {
	d := c.dir(fromA)
	d.ts = ts
	if c.dead {
		return
	}
	if d.role == roleClient {
		c.clientFin = true
	}
	d.finish(EndClean)
	d.state = stDone
}

// Close implements TCPStream. A direction that sent FIN was finished by
// Fin; one still open here never did (capture ended or flushed it), so its
// open response ends "open" even when the reason is CloseFIN.
func (c *conn) Close(reason CloseReason, ts time.Time) {
	how := EndUnknown
	if reason == CloseReset {
		how = EndReset
	}
	for i := range c.dirs {
		d := &c.dirs[i]
		d.ts = ts
		if !c.dead {
			d.finish(how)
		}
		d.dropCoding()
		d.state = stDone
		if d.sse != nil {
			c.w.putSSE(d.sse)
		}
		c.w.putBuf(d.buf)
		c.w.putBuf(d.body)
		d.buf, d.body, d.sse = nil, nil, nil
	}
	if c.pairingLost {
		c.endQueued(ts)
	}
	c.queue = nil
	if c.unreadFor != "" {
		c.emitLimitGap(ts, true)
	}
	c.w.untrack(c)
	c.w.putConn(c)
}

// emitLimitGap tells the consumer that the connection's bytes are not being
// read, for c.unreadFor: at NonHTTPScanLimit it may have been HTTP whose
// framing the capture missed (a midstream connection inside a long
// compressed body); under HTTP/2 it may carry MCP the decoder does not
// read. Either way checks between its endpoints cannot rest on what it did
// not show.
func (c *conn) emitLimitGap(ts time.Time, ended bool) {
	g := &Gap{Lost: -1, Limit: c.unreadFor, Ended: ended, RolesUnknown: c.dirs[0].role == roleUnknown}
	c.emit(&Observation{Kind: KindGap, Time: ts, Gap: g})
}

// giveUp marks the connection as not HTTP.
func (c *conn) giveUp() {
	if !c.dead {
		c.w.stats.nonHTTPConnections.Add(1)
		c.stopReading()
	}
}

// switchToHTTP2 stops reading a connection that began to speak HTTP/2 (its
// client preface, or a 101 to an Upgrade: h2c) and reports it as unread
// from ts: its frames are counted, not decoded.
func (c *conn) switchToHTTP2(ts time.Time) {
	if c.dead {
		return
	}
	c.w.stats.http2Connections.Add(1)
	c.stopReading()
	c.reportUnread(GapHTTP2, ts)
}

// reportUnread marks a connection no longer read as unread for limit from
// ts: checks between its endpoints cannot rest on what it carries, then or
// until it closes (emitLimitGap).
func (c *conn) reportUnread(limit string, ts time.Time) {
	c.unreadFor = limit
	c.emitLimitGap(ts, false)
}

// speaksHTTP2: the connection switched to HTTP/2; its later bytes are
// counted (Stats.HTTP2Bytes), not read.
func (c *conn) speaksHTTP2() bool { return c.unreadFor == GapHTTP2 }

func (c *conn) stopReading() {
	c.dead = true
	for i := range c.dirs {
		c.dirs[i].buf = nil
	}
}

// pickedUpUnread reports, once, that a connection picked up again after a
// capture limit let it go (ConnMeta.PickedUpAfter) carried what the decoder
// cannot read, at the time of fromA's side: bytes skipped to find its place
// again, or an answer whose request came before the let-go (unpaired, so
// the call it answers shows no outcome). Checks between its endpoints
// cannot rest on what came before.
func (c *conn) pickedUpUnread(d *dir) {
	if limit := c.meta.PickedUpAfter; limit != "" && !c.pickedUpGap {
		c.pickedUpGap = true
		c.emit(&Observation{Kind: KindGap, Time: d.ts, Gap: &Gap{FromClient: d.fromA, Lost: -1, Limit: limit, Momentary: true}})
	}
}

func (c *conn) emit(o *Observation) {
	o.Conn = c.info
	key := o.Time.UnixNano()
	if key < c.lastKey {
		key = c.lastKey
	}
	c.lastKey = key
	c.seq++
	c.w.push(item{key: key, conn: c.meta.ID, seq: c.seq, obs: o})
}

// setRoles fixes which side is the client once one direction showed a start
// line; it reports false when that contradicts the other direction.
func (c *conn) setRoles(d *dir, role uint8) bool {
	other := &c.dirs[0]
	if d == other {
		other = &c.dirs[1]
	}
	if d.role == role {
		return true
	}
	if d.role != roleUnknown || other.role == role {
		c.w.stats.parseErrors[errRoleConflict].Add(1)
		return false
	}
	d.role = role
	other.role = roleClient + roleServer - role
	clientIsA := (role == roleClient) == d.fromA
	if clientIsA {
		c.info.Client, c.info.Server = c.meta.A, c.meta.B
		if c.proxiedClient.IsValid() {
			c.info.Client = c.proxiedClient
		}
	} else {
		c.info.Client, c.info.Server = c.meta.B, c.meta.A
	}
	return true
}

// tlsHandshakeRecord is the first byte of a TLS connection: the record type
// of the client's ClientHello (RFC 8446 5.1). Nothing else a client opens a
// connection with begins so, and one byte is all a split delivery may give.
const tlsHandshakeRecord = 0x16

// feed runs the state machine over p.
func (d *dir) feed(p []byte) {
	if !d.started {
		d.started = true
		// A connection whose start was captured must open with a start
		// line; a first byte that cannot begin one (TLS, binary protocols)
		// rules HTTP/1.x out at once.
		if d.c.meta.SawSYN && !isStartLineByte(p[0]) {
			if d.fromA && p[0] == tlsHandshakeRecord {
				d.c.w.stats.tlsConnections.Add(1)
			}
			d.c.giveUp()
			return
		}
		if !d.c.meta.SawSYN {
			d.resyncing = true
		} else if d.fromA && p[0] == proxyV2Signature[0] {
			d.state = stProxy
		}
	}
	for len(p) > 0 && !d.c.dead {
		switch d.state {
		case stSync:
			p = d.sync(p)
		case stHead:
			p = d.head(p)
		case stBody:
			p = d.bodyBytesIn(p)
		case stProxy:
			p = d.proxyV2(p)
		default:
			return
		}
	}
	if d.c.speaksHTTP2() {
		d.c.w.stats.http2Bytes.Add(int64(len(p))) // the rest of the segment that switched it
	}
}
