package decode

import (
	"bytes"
	"encoding/binary"
	"strings"
	"time"
	"unsafe"
)

// Roles of one direction of a connection, decided from content.
const (
	roleUnknown uint8 = iota
	roleClient
	roleServer
)

// Parse states of one direction.
const (
	stSync uint8 = iota // looking for a request or status line
	stHead              // reading a head (start line already in buf)
	stBody              // reading a body as bodyMode says
	stDone              // FIN, upgrade or not HTTP: ignore everything
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
	req    *Request // set once the request is complete (and then immutable)
}

// conn decodes one TCP connection. It implements TCPStream.
type conn struct {
	w    *worker
	meta ConnMeta
	info Conn
	// dead means the connection is not (or no longer) HTTP/1.x: Data returns
	// at once.
	dead   bool
	synced bool // a request or status line was found at least once
	// scanLimited: given up at NonHTTPScanLimit; its close is reported
	// too (a limit gap), since what it carried until then was not read.
	scanLimited bool
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
	v := c.w.strings.str(b)
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

	// The message being read.
	ex        *exchange
	req       *requestObservation
	resp      *responseObservation
	bodyMode  uint8
	remaining int64
	chunk     uint8
	sawCR     bool
	body      []byte // kept for the JSON-RPC peek, up to MaxBodyBytes
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
	c := &conn{w: w, meta: meta}
	c.info = Conn{ID: meta.ID, Client: meta.A, Server: meta.B, StartSeen: meta.SawSYN}
	for i := range c.dirs {
		c.dirs[i] = dir{c: c, fromA: i == 0}
	}
	w.stats.connections.Add(1)
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
		return
	}
	d := c.dir(fromA)
	d.ts = ts
	d.feed(p)
}

// Gap implements TCPStream: the framing after a gap cannot be trusted, so the
// open message is ended and the direction looks for a start line again.
func (c *conn) Gap(fromA bool, lost int, ts time.Time) {
	c.w.stats.gaps.Add(1)
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

// endQueued ends every exchange still waiting for its response as cut by a
// gap: after lost bytes no response can be proven to be theirs.
func (c *conn) endQueued(ts time.Time) {
	for len(c.queue) > 0 {
		ex := c.queue[0]
		c.dequeue()
		if ex.req != nil {
			c.emit(&Observation{Kind: KindEnd, Time: ts, Exchange: ex.index, Request: ex.req, End: &End{How: EndGap}})
		}
	}
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
	if c.scanLimited {
		c.emitLimitGap(ts, true)
	}
}

// emitLimitGap tells the consumer that the connection's bytes are not being
// read because of NonHTTPScanLimit: it may have been HTTP whose framing the
// capture missed (a midstream connection inside a long compressed body), so
// checks between its endpoints cannot rest on what it did not show.
func (c *conn) emitLimitGap(ts time.Time, ended bool) {
	g := &Gap{Lost: -1, Limit: "NonHTTPScanLimit", Ended: ended, RolesUnknown: c.dirs[0].role == roleUnknown}
	c.emit(&Observation{Kind: KindGap, Time: ts, Gap: g})
}

// giveUp marks the connection as not HTTP.
func (c *conn) giveUp() {
	if !c.dead {
		c.dead = true
		c.w.stats.nonHTTPConnections.Add(1)
		for i := range c.dirs {
			c.dirs[i].buf = nil
		}
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
	} else {
		c.info.Client, c.info.Server = c.meta.B, c.meta.A
	}
	return true
}

// feed runs the state machine over p.
func (d *dir) feed(p []byte) {
	if !d.started {
		d.started = true
		// A connection whose start was captured must open with a start
		// line; a first byte that cannot begin one (TLS, binary protocols)
		// rules HTTP/1.x out at once.
		if d.c.meta.SawSYN && !isStartLineByte(p[0]) {
			d.c.giveUp()
			return
		}
		if !d.c.meta.SawSYN {
			d.resyncing = true
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
		default:
			return
		}
	}
}

func isStartLineByte(b byte) bool {
	return (b >= 'A' && b <= 'Z') || b == '\r' || b == '\n'
}

func (d *dir) enterSync() {
	d.state = stSync
	d.resyncing = true
	d.skipLine = false
	d.buf = d.buf[:0]
	d.resetMessage()
}

func (d *dir) resetMessage() {
	d.ex, d.req, d.resp = nil, nil, nil
	d.bodyMode, d.remaining, d.chunk, d.sawCR = 0, 0, chSize, false
	d.body = d.body[:0]
	d.bodyBytes, d.bodyOver, d.keepBody = 0, false, false
	d.events = 0
	d.sseOn = false
	d.limit = ""
	d.lineLen = 0
}

// skipped accounts bytes (a then b) passed over while looking for a start
// line. A connection that never synced is given up after NonHTTPScanLimit
// bytes, but only once binary bytes were seen: text may be the rest of a
// long event stream whose start the capture missed, and the next exchange on
// the connection is worth waiting for (skipping text costs little).
func (d *dir) skipped(a, b []byte) {
	n := len(a) + len(b)
	d.c.w.stats.resyncSkippedBytes.Add(int64(n))
	if d.c.synced {
		return
	}
	if !d.sawBinary {
		d.sawBinary = isBinary(a) || isBinary(b)
	}
	d.unsynced += int64(n)
	if d.unsynced > NonHTTPScanLimit && d.sawBinary && !d.c.dead {
		d.c.giveUp()
		d.c.scanLimited = true
		d.c.emitLimitGap(d.ts, false)
	}
}

// binaryBytes are the bytes that do not occur in HTTP/1.x heads or SSE text.
var binaryBytes = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = c != '\t' && c != '\n' && c != '\r'
	}
	t[0x7f] = true
	return t
}()

func isBinary(b []byte) bool {
	for _, c := range b {
		if binaryBytes[c] {
			return true
		}
	}
	return false
}

// sync looks for a start line, one line at a time.
func (d *dir) sync(p []byte) []byte {
	i := bytes.IndexByte(p, '\n')
	if d.skipLine {
		if i < 0 {
			d.skipped(nil, p)
			return nil
		}
		d.skipped(nil, p[:i+1])
		d.skipLine = false
		return p[i+1:]
	}
	seg := p
	if i >= 0 {
		seg = p[:i+1]
	}
	if len(d.buf)+len(seg) > MaxStartLineBytes {
		d.skipped(d.buf, seg)
		d.buf = d.buf[:0]
		if i < 0 {
			d.skipLine = true
			return nil
		}
		return p[i+1:]
	}
	if d.buf == nil {
		d.buf = d.c.w.getBuf()
	}
	d.buf = append(d.buf, seg...)
	if i < 0 {
		return nil
	}
	rest := p[i+1:]
	line := d.buf
	if len(trimEOL(line)) == 0 {
		// Blank lines between messages are tolerated (RFC 9112 2.2).
		d.buf = d.buf[:0]
		return rest
	}
	role := roleUnknown
	if d.role != roleServer {
		if _, _, ok := parseRequestLine(line); ok {
			role = roleClient
		}
	}
	if role == roleUnknown && d.role != roleClient {
		if _, ok := parseStatusLine(line); ok {
			role = roleServer
		}
	}
	if role != roleUnknown && d.c.setRoles(d, role) {
		if d.resyncing {
			d.c.w.stats.resyncs.Add(1)
			d.resyncing = false
		}
		d.c.synced = true
		d.state = stHead
		d.lineLen = 0
		return rest
	}
	if d.c.meta.SawSYN && !d.c.synced && !d.resyncing {
		// The captured start of the connection is not HTTP/1.x.
		d.c.w.stats.parseErrors[errBadStartLine].Add(1)
		d.c.giveUp()
		return nil
	}
	d.skipped(nil, line)
	d.resyncing = true
	d.buf = d.buf[:0]
	return rest
}

// head collects header lines up to the blank line, bounded by MaxHeaderBytes.
func (d *dir) head(p []byte) []byte {
	for len(p) > 0 {
		seg, rest, complete := cutLine(p)
		if len(d.buf)+len(seg) > d.c.w.cfg.MaxHeaderBytes {
			d.skipped(d.buf, seg)
			d.headTooLarge(!complete)
			return rest
		}
		d.buf = append(d.buf, seg...)
		p = rest
		if d.trackLine(seg) {
			d.headDone()
			return p
		}
	}
	return nil
}

// cutLine splits p after its first LF; complete is false when there is none.
func cutLine(p []byte) (seg, rest []byte, complete bool) {
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		return p[:i+1], p[i+1:], true
	}
	return p, nil, false
}

// trackLine follows the lines of a head or trailer section piece by piece
// and reports whether seg completed the blank line that ends it.
func (d *dir) trackLine(seg []byte) (blank bool) {
	if len(seg) == 0 {
		return false
	}
	if d.lineLen == 0 {
		d.lineFirst = seg[0]
	}
	d.lineLen += len(seg)
	if seg[len(seg)-1] != '\n' {
		return false
	}
	blank = d.lineLen == 1 || (d.lineLen == 2 && d.lineFirst == '\r')
	d.lineLen = 0
	return blank
}

// headTooLarge reports what arrived of a head over MaxHeaderBytes, marked
// HeadTruncated, and resynchronises: the body's framing is unknown. The
// exchange keeps its place in the pipeline, so later responses still pair
// with the right requests.
func (d *dir) headTooLarge(midLine bool) {
	d.c.w.stats.headerLimitHits.Add(1)
	if d.role == roleClient {
		ro, _ := d.parseRequestHead()
		ro.req.HeadTruncated = true
		d.ex = d.c.newExchange(&ro.ex, ro.req.Method)
		d.req = ro
		d.resetBody()
		d.finishRequest(true)
	} else if ro, _ := d.parseResponseHead(); ro.resp.Status >= 200 {
		ro.resp.HeadTruncated = true
		ex := d.c.popExchange(d.ts)
		d.ex, d.resp = ex, ro
		d.resetBody()
		d.emitResponse(ro)
		d.limit = "MaxHeaderBytes"
		d.endResponse(EndTruncated)
	}
	d.enterSync()
	d.skipLine = midLine
}

// newExchange queues ex (kept in its request's allocation) as the next
// exchange awaiting a response.
func (c *conn) newExchange(ex *exchange, method string) *exchange {
	c.exchanges++
	*ex = exchange{index: c.exchanges, method: method}
	if len(c.queue) >= MaxPipelinedRequests {
		c.w.stats.pipelineOverflows.Add(1)
		c.overflowed = true
		c.dequeue()
	}
	c.queue = append(c.queue, ex)
	return ex
}

// dequeue drops the oldest queued exchange. It shifts the rest down rather
// than reslicing from the front, which would make every append of a
// keep-alive connection reallocate; the queue is nearly always one long.
func (c *conn) dequeue() {
	n := copy(c.queue, c.queue[1:])
	c.queue[n] = nil
	c.queue = c.queue[:n]
}

// popExchange takes the oldest unanswered exchange, or makes one for a
// response whose request was not seen.
func (c *conn) popExchange(ts time.Time) *exchange {
	if c.pairingLost {
		c.endQueued(ts)
	}
	if len(c.queue) > 0 {
		ex := c.queue[0]
		c.dequeue()
		return ex
	}
	c.exchanges++
	c.w.stats.httpExchanges.Add(1)
	return &exchange{index: c.exchanges}
}

// firstLine returns the start line of a head, with its line end.
func firstLine(head []byte) []byte {
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		return head[:i+1]
	}
	return head
}

// headerIter walks the header fields of a head (after the start line),
// with names lower-cased and obs-fold continuation lines joined by one
// space. It is an iterator rather than a callback so that the callers'
// switches run inline, without a closure call per field. lower is scratch
// space for the lower-cased names (the worker's, so that it does not escape
// to the heap on every head); a name is valid until the next call.
type headerIter struct {
	rest  []byte
	lower *[maxKnownHeaderName]byte
	bad   bool // a malformed line was skipped
}

func newHeaderIter(head []byte, lower *[maxKnownHeaderName]byte) headerIter {
	i := bytes.IndexByte(head, '\n')
	return headerIter{rest: head[i+1:], lower: lower}
}

// next returns the next field; more is false after the last one. A name
// longer than any the decoder looks at comes back as nil.
func (it *headerIter) next() (name, value []byte, more bool) {
	for len(it.rest) > 0 {
		j := bytes.IndexByte(it.rest, '\n')
		line := trimEOL(it.rest[:j+1])
		it.rest = it.rest[j+1:]
		if len(line) == 0 {
			it.rest = nil
			break
		}
		// One pass over the name finds the colon, refuses whitespace
		// (a continuation line without a field before it lands here too)
		// and lower-cases it; names are short, so a byte loop beats
		// bytes.IndexByte plus separate passes.
		colon := -1
		lower := it.lower // a local, so the loop does not reload it
		for i, c := range line {
			l := nameLower[c]
			if l == 0 && c != 0 {
				if c == ':' {
					colon = i
				}
				break
			}
			if i < len(lower) {
				lower[i] = l
			}
		}
		if colon <= 0 {
			it.bad = true
			continue
		}
		if colon <= len(lower) {
			name = lower[:colon]
		}
		value = trimOWS(line[colon+1:])
		folded := false
		for len(it.rest) > 0 && (it.rest[0] == ' ' || it.rest[0] == '\t') {
			j := bytes.IndexByte(it.rest, '\n')
			if j < 0 {
				// A head cut by MaxHeaderBytes: its last, partial line
				// ends it, as an unterminated field line does above.
				it.rest = nil
				break
			}
			cont := trimEOL(it.rest[:j+1])
			it.rest = it.rest[j+1:]
			if !folded {
				value = append([]byte(nil), value...)
				folded = true
			}
			value = append(append(value, ' '), trimOWS(cont)...)
		}
		return name, value, true
	}
	return nil, nil, false
}

// nameLower maps a byte of a header name to its lower case, and the bytes
// that end a name (the colon, or whitespace, which makes the line
// malformed) to 0. NUL maps to itself, so it needs a second look.
var nameLower = func() (t [256]byte) {
	for c := range t {
		t[c] = byte(c)
		if c >= 'A' && c <= 'Z' {
			t[c] = byte(c) + 'a' - 'A'
		}
	}
	t[':'], t[' '], t['\t'], t['\r'] = 0, 0, 0, 0
	return t
}()

// maxKnownHeaderName is the longest header name the decoder looks at
// ("mcp-protocol-version"); longer names are passed on as "".
const maxKnownHeaderName = 24

// framing is what a head says about its body.
type framing struct {
	contentLength int64 // -1 when absent
	chunked       bool
	otherCoding   bool // Transfer-Encoding without chunked last
	badLength     bool
}

func (f *framing) field(name, value []byte) bool {
	switch string(name) {
	case "content-length":
		n, ok := parseContentLength(value)
		if !ok || (f.contentLength >= 0 && n != f.contentLength) {
			f.badLength = true
		}
		f.contentLength = n
	case "transfer-encoding":
		f.chunked = lastCodingIsChunked(value)
		f.otherCoding = !f.chunked
	default:
		return false
	}
	return true
}

func (d *dir) headDone() {
	if d.role == roleClient {
		d.requestHead()
	} else {
		d.responseHead()
	}
}

// requestObservation holds what one request needs in a single allocation:
// its observation, the Request, its exchange and room for the usual single
// JSON-RPC message. The Request outlives the observation (later observations
// of the exchange point to it), which keeps the rest alive too; that costs
// less than four allocations per request.
type requestObservation struct {
	obs Observation
	req Request
	ex  exchange
	msg [1]Message
}

// parseRequestHead reads the request head in d.buf (complete lines only).
func (d *dir) parseRequestHead() (*requestObservation, framing) {
	in := &d.c.w.strings
	method, target, _ := parseRequestLine(firstLine(d.buf))
	ro := &requestObservation{}
	req := &ro.req
	*req = Request{Method: d.c.value(slotMethod, method), Path: d.c.value(slotPath, target)}
	f := framing{contentLength: -1}
	it := newHeaderIter(d.buf, &d.c.w.lower)
	for {
		name, value, more := it.next()
		if !more {
			break
		}
		if f.field(name, value) {
			continue
		}
		switch string(name) {
		case "host":
			req.Host = d.c.value(slotHost, value)
		case "mcp-session-id":
			if !req.HasSessionID {
				req.SessionID, req.HasSessionID = d.c.value(slotSession, value), true
			}
		case "last-event-id":
			if !req.HasLastEventID {
				req.LastEventID, req.HasLastEventID = in.str(value), true
			}
		case "mcp-protocol-version":
			req.ProtocolVersion = d.c.value(slotProtocol, value)
		case "content-type":
			req.ContentType = d.c.value(slotRequestType, value)
		case "accept":
			req.Accept = d.c.value(slotAccept, value)
		case "user-agent":
			req.UserAgent = d.c.value(slotUserAgent, value)
		case "mcp-method":
			req.MCPMethod = in.str(value)
		case "mcp-name":
			req.MCPName = in.str(value)
		case "authorization":
			// Only the keyed hash leaves: the credential itself is never kept.
			req.AuthHash = hexDigest(d.c.w.peeker.digester().digest(value))
		}
		// Cookie and everything else: dropped.
	}
	if it.bad {
		d.c.w.stats.parseErrors[errBadHeader].Add(1)
	}
	return ro, f
}

func (d *dir) requestHead() {
	st := d.c.w.stats
	ro, f := d.parseRequestHead()
	d.ex = d.c.newExchange(&ro.ex, ro.req.Method)
	d.req = ro
	d.resetBody()
	d.keepBody = true
	switch {
	case f.badLength && !f.chunked:
		st.parseErrors[errBadContentLength].Add(1)
		d.finishRequest(true)
		d.enterSync()
		return
	case f.otherCoding:
		// A request body without chunked last cannot be delimited.
		st.parseErrors[errBadTransferEncoding].Add(1)
		d.finishRequest(true)
		d.enterSync()
		return
	case f.chunked:
		d.startBody(bodyChunked, 0)
	case f.contentLength > 0:
		d.startBody(bodyLength, f.contentLength)
	default:
		d.finishRequest(false)
		d.nextMessage()
	}
}

func (d *dir) resetBody() {
	d.body = d.body[:0]
	d.bodyBytes, d.bodyOver = 0, false
	d.keepBody = false
	d.events = 0
}

func (d *dir) startBody(mode uint8, length int64) {
	d.state = stBody
	d.bodyMode = mode
	d.remaining = length
	d.chunk = chSize
	d.sawCR = false
	d.buf = d.buf[:0]
}

// nextMessage readies the direction for the next head on a keep-alive
// connection.
func (d *dir) nextMessage() {
	d.resetMessage()
	d.state = stSync
	d.buf = d.buf[:0]
	d.skipLine = false
	d.resyncing = false
}

// finishRequest emits the request with what its body held.
func (d *dir) finishRequest(incomplete bool) {
	ro := d.req
	if ro == nil {
		return
	}
	req := &ro.req
	st := d.c.w.stats
	req.BodyBytes = d.bodyBytes
	req.BodyIncomplete = incomplete || d.bodyOver
	req.BodyTruncated = d.bodyOver
	if !req.BodyIncomplete && len(d.body) > 0 {
		msgs, batch, _ := d.c.w.peeker.peekInto(ro.msg[:0], d.body)
		if HasJSONRPC(msgs) {
			req.Messages, req.Batch = msgs, batch
			st.jsonrpcMessages.Add(int64(len(msgs)))
		}
	}
	req.MCP = req.HasSessionID || req.ProtocolVersion != ""
	for i := range req.Messages {
		if m := &req.Messages[i]; m.Type == MsgRequest && m.Method == "initialize" {
			req.MCP = true
		}
	}
	st.httpExchanges.Add(1)
	if req.MCP {
		st.mcpExchanges.Add(1)
	} else {
		st.nonMCPExchanges.Add(1)
	}
	d.ex.req = req
	ro.obs = Observation{Kind: KindRequest, Time: d.ts, Exchange: d.ex.index, Request: req}
	d.c.emit(&ro.obs)
	d.req = nil
}

// responseObservation holds a response head and its observation in one
// allocation.
type responseObservation struct {
	obs  Observation
	resp Response
}

// parseResponseHead reads the response head in d.buf (complete lines only).
func (d *dir) parseResponseHead() (*responseObservation, framing) {
	status, _ := parseStatusLine(firstLine(d.buf))
	ro := &responseObservation{}
	resp := &ro.resp
	*resp = Response{Status: status, ContentLength: -1}
	f := framing{contentLength: -1}
	it := newHeaderIter(d.buf, &d.c.w.lower)
	for {
		name, value, more := it.next()
		if !more {
			break
		}
		if f.field(name, value) {
			continue
		}
		switch string(name) {
		case "mcp-session-id":
			if !resp.HasSessionID {
				resp.SessionID, resp.HasSessionID = d.c.value(slotSession, value), true
			}
		case "content-type":
			resp.ContentType = d.c.value(slotResponseType, value)
		case "mcp-protocol-version":
			resp.ProtocolVersion = d.c.value(slotProtocol, value)
		}
	}
	if it.bad {
		d.c.w.stats.parseErrors[errBadHeader].Add(1)
	}
	resp.SSE = mediaTypeIs(resp.ContentType, "text/event-stream")
	resp.Chunked = f.chunked
	if !f.badLength {
		resp.ContentLength = f.contentLength
	}
	return ro, f
}

// emitResponse emits the response head of the exchange d.ex.
func (d *dir) emitResponse(ro *responseObservation) {
	ex := d.ex
	if d.c.overflowed {
		// Pairing may be shifted by the forgotten request; it is right
		// again after a response that found no request waiting.
		ro.resp.PipelineOverflow = true
		d.c.overflowed = ex.req != nil
	}
	ro.obs = Observation{Kind: KindResponse, Time: d.ts, Exchange: ex.index, Request: ex.req, Response: &ro.resp}
	d.c.emit(&ro.obs)
}

func (d *dir) responseHead() {
	st := d.c.w.stats
	ro, f := d.parseResponseHead()
	resp := &ro.resp
	status := resp.Status
	if status < 200 {
		if status == 101 {
			// Switching protocols: what follows is not HTTP/1.x.
			d.c.giveUp()
			return
		}
		// Interim responses are not paired with the request.
		d.nextMessage()
		return
	}
	ex := d.c.popExchange(d.ts)
	d.ex, d.resp = ex, ro
	d.resetBody()
	noBody := ex.method == "HEAD" || status == 204 || status == 304
	if ex.method == "CONNECT" && status < 300 {
		d.emitResponse(ro)
		d.c.giveUp()
		return
	}
	if resp.SSE && !noBody {
		st.sseStreams.Add(1)
		if ex.req != nil && !ex.req.MCP {
			st.nonMCPSSEStreams.Add(1)
		}
		if d.sse == nil {
			d.sse = d.c.w.getSSE(d.onEvent)
		} else {
			d.sse.Reset()
		}
		d.sseHits = [2]int{}
		d.evLineHits = 0
		d.sseOn = true
	} else {
		ct := resp.ContentType
		d.keepBody = ct == "" || strings.Contains(strings.ToLower(ct), "json")
	}
	d.emitResponse(ro)
	switch {
	case noBody:
		d.messageDone()
	case f.badLength && !f.chunked:
		st.parseErrors[errBadContentLength].Add(1)
		d.endResponse(EndTruncated)
		d.enterSync()
	case f.chunked:
		d.startBody(bodyChunked, 0)
	case f.contentLength == 0:
		d.messageDone()
	case f.contentLength > 0:
		d.startBody(bodyLength, f.contentLength)
	default:
		d.startBody(bodyClose, 0)
	}
}

// bodyBytesIn consumes body framing and hands the payload on.
func (d *dir) bodyBytesIn(p []byte) []byte {
	switch d.bodyMode {
	case bodyClose:
		d.payload(p)
		return nil
	case bodyLength:
		n := int64(len(p))
		if n > d.remaining {
			n = d.remaining
		}
		d.payload(p[:n])
		d.remaining -= n
		if d.remaining == 0 {
			d.messageDone()
		}
		return p[n:]
	}
	return d.chunked(p)
}

func (d *dir) chunked(p []byte) []byte {
	st := d.c.w.stats
	for len(p) > 0 && d.state == stBody {
		switch d.chunk {
		case chSize:
			seg, rest, complete := cutLine(p)
			if len(d.buf)+len(seg) > MaxChunkLineBytes {
				st.parseErrors[errBadChunk].Add(1)
				consumed := len(d.buf)
				d.limit = "MaxChunkLineBytes"
				d.framingError()
				return d.skipLineAfterError(consumed, seg, rest, complete)
			}
			d.buf = append(d.buf, seg...)
			if !complete {
				return nil
			}
			p = rest
			n, ok := parseChunkSize(d.buf)
			d.buf = d.buf[:0]
			if !ok {
				st.parseErrors[errBadChunk].Add(1)
				d.framingError()
				return p
			}
			if n == 0 {
				d.chunk = chTrailer
				d.lineLen = 0
			} else {
				d.chunk, d.remaining = chData, n
			}
		case chData:
			n := int64(len(p))
			if n > d.remaining {
				n = d.remaining
			}
			d.payload(p[:n])
			d.remaining -= n
			p = p[n:]
			if d.remaining == 0 {
				d.chunk, d.sawCR = chDataEnd, false
			}
		case chDataEnd:
			c := p[0]
			if c == '\r' && !d.sawCR {
				d.sawCR = true
				p = p[1:]
				continue
			}
			if c != '\n' {
				st.parseErrors[errBadChunk].Add(1)
				d.framingError()
				return p
			}
			p = p[1:]
			d.chunk = chSize
		case chTrailer:
			// Trailer fields are read and dropped; they are bounded like a
			// head.
			seg, rest, complete := cutLine(p)
			d.remaining += int64(len(seg))
			if d.remaining > int64(d.c.w.cfg.MaxHeaderBytes) {
				st.headerLimitHits.Add(1)
				consumed := d.lineLen
				d.limit = "MaxHeaderBytes"
				d.framingError()
				return d.skipLineAfterError(consumed, seg, rest, complete)
			}
			p = rest
			if d.trackLine(seg) {
				d.messageDone()
			}
		}
	}
	return p
}

// skipLineAfterError skips the line a limit cut, whole: the consumed bytes
// of it that came before seg and seg itself are counted as skipped, and
// the rest of the line (when seg did not end it) is skipped too, so the
// outcome does not depend on where TCP split the line.
func (d *dir) skipLineAfterError(consumed int, seg, rest []byte, complete bool) []byte {
	d.c.w.stats.resyncSkippedBytes.Add(int64(consumed))
	d.skipped(nil, seg)
	d.skipLine = !complete
	return rest
}

// framingError ends the message as cut and looks for the next start line.
func (d *dir) framingError() {
	d.abort(EndTruncated)
	d.enterSync()
}

// payload takes body bytes after framing.
func (d *dir) payload(b []byte) {
	if len(b) == 0 {
		return
	}
	d.bodyBytes += int64(len(b))
	if d.sseOn {
		d.sse.Write(b)
		d.countSSEHits()
		return
	}
	if !d.keepBody || d.bodyOver {
		return
	}
	if len(d.body)+len(b) > d.c.w.cfg.MaxBodyBytes {
		d.bodyOver = true
		d.body = d.body[:0]
		d.c.w.stats.bodyLimitHits.Add(1)
		return
	}
	if d.body == nil {
		d.body = d.c.w.getBuf()
	}
	d.body = append(d.body, b...)
}

func (d *dir) countSSEHits() {
	st := d.c.w.stats
	if n := d.sse.LineLimitHits; n != d.sseHits[0] {
		st.lineLimitHits.Add(int64(n - d.sseHits[0]))
		d.sseHits[0] = n
	}
	if n := d.sse.EventLimitHits; n != d.sseHits[1] {
		st.eventLimitHits.Add(int64(n - d.sseHits[1]))
		d.sseHits[1] = n
	}
}

// eventObservation holds an event observation and its parts in one
// allocation: there is one per SSE event, the decoder's most common output.
// It has room for the usual single JSON-RPC message and for the data hash's
// digits, so an event costs one allocation plus its id.
type eventObservation struct {
	obs     Observation
	ev      Event
	msg     [1]Message
	hashHex [16]byte
}

// onEvent turns a dispatched SSE event into an observation.
func (d *dir) onEvent(e *SSEEvent) {
	st := d.c.w.stats
	eo := &eventObservation{}
	eo.ev = Event{
		Index:     d.events,
		ID:        e.ID,
		HasID:     e.HasID,
		Type:      e.Type,
		DataEmpty: e.DataBytes == 0,
		Retry:     e.Retry,
		DataBytes: e.DataBytes,
		DataHash:  hex64(&eo.hashHex, d.c.w.peeker.digester().keyed64(e.DataHash)),

		LastEventID:   e.LastEventID,
		DataTruncated: e.DataTruncated,
	}
	if n := d.sse.LineLimitHits; n != d.evLineHits {
		eo.ev.LineDropped = true
		d.evLineHits = n
	}
	d.events++
	st.sseEvents.Add(1)
	if !e.DataTruncated {
		msgs, _, _ := d.c.w.peeker.peekInto(eo.msg[:0], e.Data)
		if HasJSONRPC(msgs) {
			eo.ev.Messages = msgs
			st.jsonrpcMessages.Add(int64(len(msgs)))
		}
	}
	eo.obs = Observation{Kind: KindEvent, Time: d.ts, Exchange: d.ex.index, Request: d.ex.req, Response: &d.resp.resp, Event: &eo.ev}
	d.c.emit(&eo.obs)
}

// hex64 spells h in 16 hex digits into buf and returns them as a string
// that shares buf's memory instead of copying it. buf must never be written
// again: it lives in the observation whose field holds the string.
func hex64(buf *[16]byte, h uint64) string {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], h)
	hexEncode(buf[:], raw[:])
	return unsafe.String(&buf[0], len(buf))
}

// messageDone completes the message whose framing just ended.
func (d *dir) messageDone() {
	if d.role == roleClient {
		d.finishRequest(false)
	} else {
		d.endResponse(EndClean)
	}
	d.nextMessage()
}

// endResponse emits the body (when it held JSON-RPC) and the End.
func (d *dir) endResponse(how EndHow) {
	ro := d.resp
	if ro == nil {
		return
	}
	resp := &ro.resp
	st := d.c.w.stats
	eo := &endObservation{}
	end := &eo.end
	end.How = how
	end.ClientClosed = d.c.clientFin
	if d.sseOn {
		if d.sse.MidEvent() {
			if how == EndClean {
				end.How = EndTruncated
			}
			end.PartialID, end.HasPartialID = d.sse.PartialID()
		}
		end.LastID, end.HasLastID = d.sse.LastEventID()
		end.Events = d.events
		switch {
		case d.sse.LineLimitHits > 0:
			d.limit = "MaxSSELineBytes"
		case d.sse.EventLimitHits > 0:
			d.limit = "MaxEventBytes"
		}
	} else if d.bodyOver {
		d.limit = "MaxBodyBytes"
	} else if how == EndClean && len(d.body) > 0 && !d.bodyOver {
		bo := &bodyObservation{}
		msgs, batch, _ := d.c.w.peeker.peekInto(bo.msg[:0], d.body)
		if HasJSONRPC(msgs) {
			st.jsonrpcMessages.Add(int64(len(msgs)))
			bo.body = Body{Messages: msgs, Batch: batch, Bytes: d.bodyBytes}
			bo.obs = Observation{Kind: KindBody, Time: d.ts, Exchange: d.ex.index, Request: d.ex.req, Response: resp, Body: &bo.body}
			d.c.emit(&bo.obs)
		}
	}
	end.Limit = d.limit
	eo.obs = Observation{Kind: KindEnd, Time: d.ts, Exchange: d.ex.index, Request: d.ex.req, Response: resp, End: end}
	d.c.emit(&eo.obs)
	d.resp = nil
}

// endObservation and bodyObservation hold an observation and its part in
// one allocation, a body with room for the usual single message.
type endObservation struct {
	obs Observation
	end End
}

type bodyObservation struct {
	obs  Observation
	body Body
	msg  [1]Message
}

// abort ends whatever message is open in this direction with how.
func (d *dir) abort(how EndHow) {
	switch d.state {
	case stBody:
		if d.role == roleClient {
			d.finishRequest(true)
		} else {
			d.endResponse(how)
		}
	}
}

// finish handles the end of a direction's bytes (FIN or close). A body
// delimited by close ends cleanly; any other body was cut, except that an
// event stream is judged by its events: FIN at an event boundary lost
// nothing (endResponse turns a FIN inside an event into truncated).
func (d *dir) finish(how EndHow) {
	if d.state != stBody {
		return
	}
	if how == EndClean && d.bodyMode != bodyClose && !d.sseOn {
		how = EndTruncated
	}
	d.abort(how)
	d.resetMessage()
}
