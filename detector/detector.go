// Package detector turns decoded MCP observations into findings: breaches of
// the session-resume contract (the catalogue in docs/catalogue.md),
// one record per resume attempt, session summaries, tool calls whose outcome
// the client cannot know, and the places where the capture cannot prove
// either way. It knows nothing about packets: it consumes decode.Observation
// values and hands records to a Sink.
package detector

import (
	"hash/maphash"
	"iter"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// Protocol revisions that change what the detector checks.
const (
	revDefault     = "2025-03-26" // assumed when nothing says otherwise; allows batches
	revPriming     = "2025-11-25" // priming events, server-closed polling streams
	revSessionless = "2026-07-28" // no sessions, no GET stream, no resumption
)

// revAtLeast compares revision dates; they are YYYY-MM-DD strings, so
// lexical order is date order. Anything else is never "at least".
func revAtLeast(rev, min string) bool {
	return len(rev) == len(min) && rev >= min
}

// Detector holds per-session state machines. It is not safe for concurrent
// use: Observe and Close are called from one goroutine in capture order.
type Detector struct {
	cfg  Config
	sink Sink
	// events is sink when it also takes every SSE event (EventSink); nil
	// otherwise, and then no per-event record is built.
	events EventSink

	sessions map[string]*session
	// connEndpoint is the logical endpoint of each connection's last
	// request, for responses whose request was not seen (endpointOf);
	// at most MaxOpenExchanges.
	connEndpoint map[uint64]string
	// serverEndpoints are the endpoints seen served at each server address
	// (at most maxEndpointsPerServer, and as many servers as MaxSessions),
	// for answers on connections whose requests were not seen.
	serverEndpoints map[netip.AddrPort][]string
	// connSession is the key of the session each connection's last request
	// was bound to (at most MaxOpenExchanges); sharedConns are the client
	// address and server pairs with a connection seen to carry two live
	// sessions (a pooling proxy, a shared client pool), at most MaxSessions,
	// sharedConnsAll once that overflowed. On those pairs "the same TCP
	// connection" is no evidence of the same client (noteConnSession).
	connSession    map[uint64]string
	sharedConns    map[addrKey]struct{}
	sharedConnsAll bool
	// brokenCalls: sessionless tools/calls whose stream broke before their
	// answer, waiting LinkWindow for a re-issue (reissue.go), at most
	// maxBrokenCalls; toolNotes: tools/list annotations per endpoint and
	// tool, at most MaxEventsIndexedPerServer.
	brokenCalls map[uint64]*brokenCall
	toolNotes   map[uint64]toolNote
	// habits: sessionless calls answered with a result (or whose answer
	// may be in lost bytes), what shows a call the client makes over and
	// over (reissue.go).
	habits callHabits
	// pairRevisions: requests by revision per client address and server,
	// at most maxRevisionPairs pairs (Stats.PairRevisions).
	pairRevisions map[addrKey]map[string]int64
	// serverEvents is the cross-session event index (crossindex.go), at
	// most MaxEventsIndexedPerServer ids.
	serverEvents map[uint64]eventOrigin
	// callSessions counts, per endpoint and call identity (a hash), the
	// sessions that made the call, at most MaxEventsIndexedPerServer
	// identities: an identical call is evidence of a link only when rare.
	callSessions map[uint64]callMakers
	// sharedTools are the endpoint and tool pairs (a hash) of which two
	// live sessions were seen making the very same call (countCall), at
	// most MaxEventsIndexedPerServer (past it every tool counts as shared).
	sharedTools map[uint64]struct{}
	hashSeed    maphash.Seed // for the index's keys (membership only: no output depends on it)
	keyScratch  []byte       // scratchKey's buffer
	// sharedIDEndpoints are the endpoints whose sessions were seen to
	// send the same event id (idsShared).
	sharedIDEndpoints map[string]struct{}
	lruHead, lruTail  *session
	// stateBytes is what the sessions hold, as budget.go counts it.
	stateBytes int64
	exchanges  map[exKey]*exchange
	openByConn map[uint64]*exchange // the same exchanges, per connection (list by exchange.nextOnConn), for gaps
	// gaps: the last capture gaps per client address and server endpoint;
	// gapFloor: sessions that started before it are treated as gapped
	// (set when gaps outgrew its bound); gapBytes: what gaps hold, also
	// counted in stateBytes.
	gaps           map[addrKey]*pairGaps
	gapFloor       time.Time
	gapBytes       int64
	spareExchanges []*exchange      // ended exchanges for reuse (recycleExchange)
	parked         []*parkedFinding // bounded by maxParkedFindings
	lost           lostIndex
	causesReported map[string]struct{}   // session ids already reported, per cause (firstCause)
	tombs          tombstones            // deleted session ids
	retiring       map[*session]struct{} // retired, still bound to open exchanges
	now            time.Time
	cur            *decode.Observation // the observation being handled, for findings' context
	lastSweep      time.Time
	exSerial       uint64 // last exchange.serial handed out
	closed         bool
	stats          Stats
	// refused: exchanges turned away while MaxOpenExchanges was reached, so
	// one rebuilt later from its events is known to have missed some.
	// Bounded by MaxOpenExchanges; refusedAll says it overflowed (then any
	// rebuilt exchange may be one).
	refused    map[exKey]struct{}
	refusedAll bool
	// limitMarks: pairs whose evidence a pipeline limit cut (limitmark.go),
	// at most MaxSessions; limitFloor stands for all of them once that
	// overflowed. mcpPairs: pairs that carried MCP sessions (mcpPairsAll
	// once it overflowed).
	limitMarks  map[addrKey]limitMark
	limitFloor  limitMark
	mcpPairs    map[addrKey]struct{}
	mcpPairsAll bool
	// hopGens: MCP requests seen in the last hopWindow, the current
	// generation first, to set a proxy's second hop or a NAT copy of them
	// aside (hops.go).
	hopGens  [2]hopMemory
	hopConns map[uint64]struct{} // connections that carried a second hop
	// servingAddrs: addresses that served MCP requests (a proxy connecting
	// from one is known for a proxy); relayAddrs: addresses that serve no
	// MCP but were seen forwarding a request of another client's (hops.go).
	servingAddrs map[netip.Addr]struct{}
	relayAddrs   map[netip.Addr]struct{}
	// relayRepeats: for an address not yet known for a relay, how many of
	// its requests in a row without a session id repeated another
	// client's to another server (hops.go, relayEvidence).
	relayRepeats map[netip.Addr]int
	// hopCallers: for a party (client address, Authorization, clientInfo
	// and User-Agent) at an endpoint, when a tools/call of it was last set
	// aside as a hop (UnixNano): its habit may be in such calls (hops.go,
	// setAside; reissue.go, noteBrokenCall); hopCallersForgot: when
	// they were last forgotten at maxHopRequests (every party counts as
	// set aside within twice LinkWindow of that).
	hopCallers       map[uint64]int64
	hopCallersForgot int64
	// hopProbes: requests that may be a proxy's hop on the client's own
	// host, by the exchange they may repeat; localPairs: for pairs of
	// server sockets, how many answers in a row said they are a proxy's
	// two legs, or -1 once one said they are not (hops.go).
	hopProbes  map[exKey]hopProbe
	localPairs map[uint64]int
}

// New returns a detector writing to sink. Zero Config fields take their
// defaults.
func New(cfg Config, sink Sink) *Detector {
	cfg = cfg.withDefaults()
	events, _ := sink.(EventSink)
	return &Detector{
		cfg:               cfg,
		sink:              sink,
		events:            events,
		sessions:          map[string]*session{},
		connEndpoint:      map[uint64]string{},
		serverEndpoints:   map[netip.AddrPort][]string{},
		connSession:       map[uint64]string{},
		sharedConns:       map[addrKey]struct{}{},
		brokenCalls:       map[uint64]*brokenCall{},
		toolNotes:         map[uint64]toolNote{},
		pairRevisions:     map[addrKey]map[string]int64{},
		serverEvents:      map[uint64]eventOrigin{},
		callSessions:      map[uint64]callMakers{},
		sharedTools:       map[uint64]struct{}{},
		hashSeed:          maphash.MakeSeed(),
		sharedIDEndpoints: map[string]struct{}{},
		exchanges:         map[exKey]*exchange{},
		openByConn:        map[uint64]*exchange{},
		gaps:              map[addrKey]*pairGaps{},
		lost:              newLostIndex(cfg.MaxLostSessions),
		causesReported:    map[string]struct{}{},
		hopGens:           [2]hopMemory{newHopMemory(), newHopMemory()},
		hopConns:          map[uint64]struct{}{},
		servingAddrs:      map[netip.Addr]struct{}{},
		hopCallers:        map[uint64]int64{},
		relayAddrs:        map[netip.Addr]struct{}{},
		relayRepeats:      map[netip.Addr]int{},
		hopProbes:         map[exKey]hopProbe{},
		localPairs:        map[uint64]int{},
		tombs:             newTombstones(),
		retiring:          map[*session]struct{}{},
		refused:           map[exKey]struct{}{},
		limitMarks:        map[addrKey]limitMark{},
		mcpPairs:          map[addrKey]struct{}{},
		stats:             newStats(),
	}
}

type exKey struct {
	conn uint64
	ex   int
}

// exchange is one HTTP request/response pair being followed.
type exchange struct {
	key           exKey
	serial        uint64 // unique per exchange for the detector's life (calls refer to it)
	conn          decode.Conn
	start, respAt time.Time
	method, path  string
	// endpoint is the logical MCP endpoint (Host header and path, else the
	// server address): sessions are keyed by id within it.
	endpoint      string
	auth          string // the request's Authorization hash
	userAgent     string
	reqSession    string
	hasReqSession bool
	cursor        string
	hasCursor     bool
	protoHeader   string
	rev           string
	// revAsked: rev is the revision an initialize asked for (header or
	// params), and its result (the revision the server chose) has not
	// been seen.
	revAsked       bool
	msgs           []decode.Message
	isInit         bool
	ignored        bool
	hasResponse    bool
	status         int
	sse            bool
	respSession    string
	hasRespSession bool
	sess           *session
	sessionless    bool // revision 2026-07-28 or later
	stream         *stream
	resume         *resumeState
	events         int
	sawID          bool
	gap            bool
	flags          uint16 // onceFlag bits already raised
	lastAt         time.Time
	swapped        bool // the response carried another session id
	// probeOf: while probing, the exchange this one may be a proxy's hop
	// of, until its first answer (hopProbe).
	probeOf    exKey
	probing    bool
	nextOnConn *exchange // next open exchange on the same connection
	// hop: ignored as a proxy's second hop (secondHop), whose answer
	// still says what its server's tools are (noteHopAnswer).
	hop bool
	// afterDelete: the request carried the id of a session already
	// deleted (a tombstone); there is no state to judge it against.
	afterDelete bool
	// tombForgotten: the id may be a deleted session's whose tombstone was
	// dropped at MaxSessions (afterDelete is set too).
	tombForgotten bool
	seq           int // ordinal among the exchanges bound to sess
	// limit names the bound that thinned this exchange's evidence (a
	// decoder limit: a head, body, line or event cut, pipelined requests
	// forgotten; or MaxOpenExchanges: observations missed while the table
	// was full). Checks that rest on the missing part are Unverifiable.
	limit string
	// mcpUnknown: the request was cut by a limit before it showed whether
	// it is MCP; its response decides.
	mcpUnknown bool
	// headerMismatch says how the request's Mcp-Method/Mcp-Name headers
	// disagree with its body ("" when they agree or are absent).
	headerMismatch string
	// answered: a sessionless exchange carried the response to its
	// request; progress counts the progress notifications on its stream
	// (reissue.go).
	answered bool
	progress int
	// taskCreated: that response was a task (tasks extension): the call
	// runs on and is polled, not re-issued.
	taskCreated bool
	// crossOrigins: the sessions whose events this exchange replayed and
	// that were reported (checkCrossSession), at most maxCrossOriginsPerResume.
	crossOrigins []string
	// dropped: the cursor this GET, sent without one, left behind
	// (checkCursorKept), judged on its answer (judgeDroppedCursor).
	dropped *droppableCursor
}

func (ex *exchange) ok2xx() bool { return ex.status >= 200 && ex.status < 300 }

// mayNotHaveReached says whether ex's 5xx may be a gateway's that no server
// got the request behind (502: connection refused; 503: no endpoint ready),
// as well as one that came after the call ran.
func (ex *exchange) mayNotHaveReached() bool { return ex.status == 502 || ex.status == 503 }

// Advance tells the detector that capture time has reached now although
// no observation says so: a live agent calls it on a timer, so sessions
// expire and pending findings are emitted on a quiet network too. The
// caller must pass a time no observation still on its way can be older
// than (the capture's reorder window behind the clock), and must not call
// it concurrently with Observe.
func (d *Detector) Advance(now time.Time) {
	if !d.closed {
		d.advance(now)
	}
}

func (d *Detector) advance(t time.Time) {
	if !t.After(d.now) {
		return
	}
	if d.now.IsZero() {
		d.habits.began = t
	}
	d.now = t
	d.expire(d.now)
	d.tombs.expire(d.now, d.cfg.SessionIdleTimeout)
	d.lost.flushDue(d, d.now, d.cfg.LinkWindow)
	if len(d.parked) > 0 {
		d.settleParkedOf(nil, false, d.now.Add(-d.cfg.LinkWindow))
	}
	if d.now.Sub(d.lastSweep) > d.cfg.SessionIdleTimeout/4 {
		d.sweepExchanges()
		d.expireBrokenCalls(d.now)
	}
}

// Observe consumes one observation. Once it returns it keeps nothing of o
// (strings that may share its memory, an event's DataHash, are copied) but
// a request's Messages, and those only until their exchange's End, when the
// exchange is dropped: so the decoder may reuse them
// (decode.Config.ReuseObservations).
func (d *Detector) Observe(o *decode.Observation) {
	if d.closed {
		return
	}
	d.stats.Observations++
	if o == nil || !wellFormed(o) {
		d.stats.Malformed++
		return
	}
	d.cur = o
	defer func() { d.cur = nil }()
	d.advance(o.Time)
	if o.Late != decode.NotLate {
		d.onLate(o)
	}
	switch o.Kind {
	case decode.KindRequest:
		d.onRequest(o)
	case decode.KindResponse:
		if o.Request == nil {
			// A response whose request the capture does not hold: bytes
			// were lost (or the capture began mid-connection), and what
			// that request carried is unknown.
			d.onUnpaired(o)
		}
		if ex := d.exchangeFor(o, false); ex != nil {
			d.onResponse(ex, o)
		}
	case decode.KindEvent:
		if ex := d.exchangeFor(o, true); ex != nil {
			if len(d.hopProbes) > 0 {
				d.probeAnswer(ex, o)
			}
			d.onEvent(ex, o)
		}
	case decode.KindBody:
		if ex := d.exchangeFor(o, true); ex != nil {
			if len(d.hopProbes) > 0 {
				d.probeAnswer(ex, o)
			}
			d.onMessages(ex, o, o.Body.Messages, false)
		}
	case decode.KindEnd:
		if ex := d.exchanges[exKey{o.Conn.ID, o.Exchange}]; ex != nil {
			if len(d.hopProbes) > 0 {
				delete(d.hopProbes, ex.key) // unanswered: proves nothing
			}
			d.onEnd(ex, o)
		}
		if o.End.How == decode.EndGap {
			d.hopConnGap(o)
		}
	case decode.KindGap:
		d.onGap(o)
		d.hopConnGap(o)
	}
	if d.stateBytes > d.cfg.MaxStateBytes {
		d.shed(o.Time)
	}
}

// wellFormed checks that the pointer Kind promises is there.
func wellFormed(o *decode.Observation) bool {
	switch o.Kind {
	case decode.KindRequest:
		return o.Request != nil
	case decode.KindResponse:
		return o.Response != nil
	case decode.KindEvent:
		return o.Event != nil && o.Response != nil
	case decode.KindBody:
		return o.Body != nil
	case decode.KindEnd:
		return o.End != nil
	case decode.KindGap:
		return o.Gap != nil
	}
	return false
}

// exchangeFor finds the exchange o belongs to. When its request or response
// was not captured (the capture began mid-exchange) it is rebuilt from what
// o carries, so later observations still count.
func (d *Detector) exchangeFor(o *decode.Observation, needResponse bool) *exchange {
	key := exKey{o.Conn.ID, o.Exchange}
	ex := d.exchanges[key]
	if ex == nil {
		if o.Request != nil {
			_, refused := d.refused[key]
			ex = d.onRequest(o)
			if ex != nil && (refused || d.refusedAll) {
				// Its request came while the table was full: the
				// observations between it and o were not followed.
				delete(d.refused, key)
				ex.limit = "MaxOpenExchanges"
				if ex.resume != nil && ex.resume.unverifiable == "" {
					ex.resume.unverifiable = ReasonOpenExchangeLimit
				}
			}
		} else {
			ex = d.newExchange(o)
			if ex == nil {
				return nil
			}
			// Only the response head says whether this is MCP.
			ex.ignored = o.Response == nil || !o.Response.HasSessionID || d.onHopConn(o.Conn.ID)
			d.countExchange(ex)
		}
		if ex == nil {
			return nil
		}
		if needResponse && o.Response != nil && !ex.hasResponse && !ex.ignored {
			d.onResponse(ex, o)
		}
	}
	if ex.ignored {
		if ex.hop {
			d.noteHopAnswer(ex, o)
		}
		return nil
	}
	ex.lastAt = o.Time
	return ex
}

// sweepExchanges forgets exchanges with no observation for
// SessionIdleTimeout: a decoder that never ends one cannot grow the table.
func (d *Detector) sweepExchanges() {
	d.lastSweep = d.now
	var stale []exKey
	for k, ex := range d.exchanges {
		if d.now.Sub(ex.lastAt) > d.cfg.SessionIdleTimeout {
			stale = append(stale, k)
		}
	}
	sortKeys(stale)
	for _, k := range stale {
		ex := d.exchanges[k]
		d.dropExchange(ex)
		if ex.resume != nil && !ex.resume.emitted {
			d.resolveResume(ex, d.now, ResumeUnverifiable, ReasonCaptureEnded)
		}
		d.releaseIfIdle(ex.sess)
		d.recycleExchange(ex)
	}
}

func sortKeys(keys []exKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].conn != keys[j].conn {
			return keys[i].conn < keys[j].conn
		}
		return keys[i].ex < keys[j].ex
	})
}

func (d *Detector) newExchange(o *decode.Observation) *exchange {
	if len(d.exchanges) >= d.cfg.MaxOpenExchanges {
		d.refuseExchange(o)
		return nil
	}
	d.exSerial++
	var ex *exchange
	if n := len(d.spareExchanges); n > 0 {
		ex = d.spareExchanges[n-1]
		d.spareExchanges = d.spareExchanges[:n-1]
	} else {
		ex = new(exchange)
	}
	*ex = exchange{key: exKey{o.Conn.ID, o.Exchange}, serial: d.exSerial, conn: o.Conn, start: o.Time, lastAt: o.Time,
		endpoint: d.endpointOf(o)}
	d.exchanges[ex.key] = ex
	ex.nextOnConn = d.openByConn[ex.key.conn]
	d.openByConn[ex.key.conn] = ex
	return ex
}

// refuseExchange: o's exchange finds the table full. Its observations are
// not followed, so its session's event index misses whatever it carries;
// the first refusal of each exchange is recorded as Unverifiable.
func (d *Detector) refuseExchange(o *decode.Observation) {
	const field = "MaxOpenExchanges"
	key := exKey{o.Conn.ID, o.Exchange}
	var s *session
	if r := o.Request; r != nil && r.HasSessionID {
		s = d.sessions[sessionKey(d.endpointOf(o), r.SessionID)]
	} else if r := o.Response; r != nil && r.HasSessionID {
		s = d.sessions[sessionKey(d.endpointOf(o), r.SessionID)]
	}
	if s != nil && s.indexLimit == "" {
		s.indexLimit = field
	}
	d.limitHit(field, o.Time, s, "exchange")
	if _, seen := d.refused[key]; seen {
		return
	}
	if len(d.refused) >= d.cfg.MaxOpenExchanges {
		clear(d.refused)
		d.refusedAll = true
	}
	d.refused[key] = struct{}{}
	if s == nil {
		u := &Unverifiable{Time: o.Time, Check: "exchange", Reason: ReasonOpenExchangeLimit,
			Client: o.Conn.Client.String(), Server: o.Conn.Server.String()}
		u.ID = findingID("unverifiable", "exchange", u.Reason, u.Client, u.Server, strconv.Itoa(o.Exchange), o.Time.UTC().Format(time.RFC3339Nano))
		d.emitUnverifiable(u)
	}
}

// dropExchange forgets an ended (or stale) exchange. It stays bound to its
// session until the caller is done with it (then releaseIfIdle).
func (d *Detector) dropExchange(ex *exchange) {
	delete(d.exchanges, ex.key)
	if ex.sess != nil {
		ex.sess.open--
	}
	// A connection has one or two exchanges open (pipelining is rare).
	if head := d.openByConn[ex.key.conn]; head == ex {
		if ex.nextOnConn == nil {
			delete(d.openByConn, ex.key.conn)
		} else {
			d.openByConn[ex.key.conn] = ex.nextOnConn
		}
	} else {
		for e := head; e != nil; e = e.nextOnConn {
			if e.nextOnConn == ex {
				e.nextOnConn = ex.nextOnConn
				break
			}
		}
	}
	ex.nextOnConn = nil
}

// maxSpareExchanges bounds the ended exchanges kept for reuse.
const maxSpareExchanges = 256

// recycleExchange keeps a dropped exchange for the next newExchange: one
// allocation less per HTTP exchange. Only the tables and the observation
// being handled ever point at an exchange (calls name it by serial, records
// copy what they need), so once dropped and handled it is unreachable.
func (d *Detector) recycleExchange(ex *exchange) {
	if len(d.spareExchanges) < maxSpareExchanges {
		*ex = exchange{} // let go of its messages, session and resume state
		d.spareExchanges = append(d.spareExchanges, ex)
	}
}

func (d *Detector) countExchange(ex *exchange) {
	if ex.ignored {
		d.stats.NonMCPExchanges++
	} else {
		d.stats.MCPExchanges++
	}
}

// isMCPRequest: the decoder's MCP flag, or a JSON-RPC body (a stateless
// 2025-03-26 client may send neither header).
func isMCPRequest(r *decode.Request) bool {
	if r.MCP {
		return true
	}
	for i := range r.Messages {
		if r.Messages[i].Type != decode.MsgInvalid {
			return true
		}
	}
	return false
}

func (d *Detector) onRequest(o *decode.Observation) *exchange {
	key := exKey{o.Conn.ID, o.Exchange}
	if old := d.exchanges[key]; old != nil {
		// A decoder repeating a request: keep the first.
		return old
	}
	ex := d.newExchange(o)
	if ex == nil {
		return nil
	}
	r := o.Request
	ex.method, ex.path = r.Method, r.Path
	ex.ignored = !isMCPRequest(r)
	ex.limit = requestLimit(r)
	if ex.ignored && ex.limit != "" {
		// What would have shown it to be MCP may be in the part the
		// limit cut: its response decides (as for a request not seen).
		ex.ignored, ex.mcpUnknown = false, true
	} else {
		d.countExchange(ex)
	}
	if ex.ignored {
		return ex
	}
	ex.reqSession, ex.hasReqSession = r.SessionID, r.HasSessionID && r.SessionID != ""
	ex.auth, ex.userAgent = r.AuthHash, r.UserAgent
	ex.cursor, ex.hasCursor = r.LastEventID, r.HasLastEventID
	ex.protoHeader = r.ProtocolVersion
	ex.msgs = r.Messages
	for i := range r.Messages {
		m := &r.Messages[i]
		if m.Type == decode.MsgRequest && m.Method == "initialize" {
			// Whatever revision an initialize names, in its header (as
			// @ai-sdk/mcp's client sends) or its params, the server may
			// choose an older one.
			ex.isInit, ex.revAsked = true, true
			if ex.protoHeader == "" && m.ProtocolVersion != "" {
				ex.rev = m.ProtocolVersion
			}
		}
	}
	if d.secondHop(ex, o) {
		ex.ignored, ex.hop = true, true
		return ex
	}
	if ex.headerMismatch = headerMismatch(r); ex.headerMismatch != "" {
		d.stats.HeaderMismatches++
	}
	// A body cut by the capture may have held requests we cannot see
	// (one cut by a limit is named by ex.limit instead).
	ex.gap = r.BodyIncomplete && ex.limit == ""
	if ex.protoHeader != "" {
		ex.rev = ex.protoHeader
	}
	if ex.rev == "" && ex.hasReqSession {
		key := d.scratchKey(ex.endpoint, ex.reqSession)
		if s, ok := d.sessions[string(key)]; ok {
			ex.rev = s.rev
		} else if t, ok := d.tombs.byID[string(key)]; ok {
			ex.rev = t.rev
		}
	}
	// 2026-07-28 and later have no sessions: a session id there is a
	// finding (checkSessionless), never state to track.
	if ex.hasReqSession && !revAtLeast(ex.rev, revSessionless) {
		if s := d.sessionUnlessDeleted(ex.endpoint, ex.reqSession, o); s == nil {
			ex.afterDelete = true
			_, tomb := d.tombs.byID[sessionKey(ex.endpoint, ex.reqSession)]
			ex.tombForgotten = !tomb
		} else {
			if ex.protoHeader != "" && !s.revFromInit {
				s.rev = ex.protoHeader
			}
			if ex.rev == "" {
				ex.rev = s.rev
			}
			d.bind(ex, s)
			s.requests++
			d.checkCursorKept(ex)
		}
	}
	if ex.rev == "" {
		ex.rev = revDefault
	}
	d.countRevision(ex, ex.rev)
	// An initialize's asked revision is not yet its own: a server that
	// speaks only older ones answers with one of them, and a session id
	// (onResponse decides).
	ex.sessionless = revAtLeast(ex.rev, revSessionless) && !ex.revAsked
	if ex.sessionless {
		for i := range ex.msgs {
			if m := &ex.msgs[i]; m.Type == decode.MsgRequest && m.Method == "server/discover" {
				d.noteStart(ex, m)
			}
		}
	}
	if ex.hasCursor {
		ex.resume = d.newResume(ex, o)
	}
	if ex.sess != nil && !ex.sessionless {
		d.recordCalls(ex.sess, ex, o)
	}
	return ex
}

// recordCalls remembers the JSON-RPC requests of ex as in flight in s, and
// what the client gave up: requests it cancelled, the session if it is a
// DELETE.
func (d *Detector) recordCalls(s *session, ex *exchange, o *decode.Observation) {
	if ex.method == "DELETE" {
		s.deleteSent = true
	}
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Method == "notifications/cancelled" && m.Type == decode.MsgNotification {
			switch c := s.calls.at(m.CancelledID); {
			case c == nil:
				s.historyElsewhere = true
			case !c.answered:
				c.cancelled, c.cancelledAt = true, o.Time
				s.gaveUp(c)
			}
			continue
		}
		if m.Type != decode.MsgRequest || m.ID == "" {
			continue
		}
		old := s.calls.at(m.ID)
		if v, ok := parseDecimal(m.ID); ok && old == nil {
			s.requestIDs.add(v)
		}
		if s.inflight >= d.cfg.MaxInflightPerSession {
			d.limitHit("MaxInflightPerSession", o.Time, s, "unknown outcome")
			continue
		}
		if m.ProgressToken != "" {
			d.forgetProgress(s, m.ProgressToken)
		}
		c := &call{id: m.ID, method: m.Method, tool: m.Tool, token: m.ProgressToken, at: o.Time,
			ex: ex.serial, client: ex.conn.Client, server: ex.conn.Server, exNum: ex.key.ex}
		if m.Method == "tools/call" {
			// Only tools/calls are matched or reported by their
			// arguments; other requests need not keep the hash.
			c.paramsHash = m.ParamsHash
			c.args = m.Arguments // "" unless the operator opted in
		}
		if old != nil && old.answered {
			s.answered--
		} else if old != nil {
			s.inflight--
		}
		if old == nil {
			d.chargeCall(s, c)
		}
		s.calls.set(m.ID, c)
		s.inflight++
		if m.Method == "tools/call" {
			k := toolKey{m.Tool, m.ParamsHash}
			prev := s.toolCalls.at(k)
			c.habitual = prev != nil && (prev.habitual || prev.answered && !prev.failed)
			if prev != nil && !prev.answered {
				c.replaced, prev.replaced = prev, nil
				prev.reissuedHere = true
			}
			if prev != nil || s.toolCalls.len() < d.cfg.MaxInflightPerSession {
				if prev == nil {
					d.countCall(s, ex.endpoint, m.Tool, m.ParamsHash)
					d.charge(s, entryBytes)
				}
				s.toolCalls.set(k, c)
			}
		}
	}
	if len(d.parked) > 0 {
		// A cancel of an unseen request, or a number skipped, may show
		// the session's history partly elsewhere.
		d.settleParkedOf(s, false, time.Time{})
	}
}

// redirected handles a request answered 3xx: a router sent it elsewhere
// (Starlette's mount redirects /mcp to /mcp/, an ingress http to https)
// before any MCP handler saw it, and the client sends it again there. It
// ran no call, deleted nothing and resumed nothing: its calls are
// forgotten, a DELETE is no longer pending, and a resume attempt is
// withdrawn, to be judged where the request went. A session known only
// from such requests is no session of this endpoint (endSession).
func (d *Detector) redirected(ex *exchange) {
	d.ranNothing(ex)
	s := ex.sess
	if s == nil {
		return
	}
	s.redirected++
	if rs := ex.resume; rs != nil && !rs.emitted {
		rs.emitted = true
		s.resumes--
	}
}

// unansweredCalls yields the requests of ex that s still holds in flight.
func unansweredCalls(s *session, ex *exchange) iter.Seq[*call] {
	return func(yield func(*call) bool) {
		for i := range ex.msgs {
			if c := s.calls.at(ex.msgs[i].ID); c != nil && c.ex == ex.serial && !c.answered && !yield(c) {
				return
			}
		}
	}
}

// ranNothing handles an exchange that reached no MCP handler or was
// refused by it: its calls did not run, and a DELETE deleted nothing (the
// session lives on).
func (d *Detector) ranNothing(ex *exchange) {
	d.dropCalls(ex)
	if ex.method == "DELETE" && ex.sess != nil {
		ex.sess.deleteSent = false
	}
}

// asksSessionless says whether ex is an initialize asking for a revision
// without sessions, which the server has not yet chosen: one answered with a
// session id chose an older one.
func (ex *exchange) asksSessionless() bool {
	return ex.revAsked && revAtLeast(ex.rev, revSessionless)
}

// mcpMethod says whether a request of this method reaches an MCP handler
// (the method "" when the request was not captured): a router answers
// others (OPTIONS, HEAD) itself, often 404 (gin's default), which says
// nothing of the session.
func mcpMethod(method string) bool {
	return method == "" || method == "POST" || method == "GET" || method == "DELETE"
}

// dropCalls forgets the requests of ex: the server refused the exchange,
// so they did not run.
func (d *Detector) dropCalls(ex *exchange) {
	s := ex.sess
	if s == nil || s.calls.len() == 0 {
		return
	}
	for c := range unansweredCalls(s, ex) {
		if p := c.replaced; p != nil && p.id == c.id {
			// A retry under the same id (a proxy re-sending the
			// request whole after its upstream reset) took the place
			// of an attempt that may have run: it is the one in flight.
			s.calls.set(p.id, p)
		} else {
			s.calls.del(c.id)
			s.inflight--
		}
		if k := (toolKey{c.tool, c.paramsHash}); s.toolCalls.at(k) == c {
			if p := c.replaced; p != nil && s.calls.at(p.id) == p {
				s.toolCalls.set(k, p)
			} else {
				s.toolCalls.del(k)
			}
		}
	}
}

func (d *Detector) onResponse(ex *exchange, o *decode.Observation) {
	if ex.hasResponse {
		return
	}
	r := o.Response
	if ex.mcpUnknown {
		ex.mcpUnknown = false
		ex.ignored = !r.HasSessionID
		d.countExchange(ex)
		if ex.ignored {
			return
		}
	}
	switch {
	case r.PipelineOverflow:
		ex.limit = "MaxPipelinedRequests"
	case r.HeadTruncated && ex.limit == "":
		ex.limit = "MaxHeaderBytes"
	case r.EncodedUnread && ex.limit == "":
		// The head is read; the body (events, their ids, messages) is not.
		ex.limit = encodedBody
	}
	if r.HeadTruncated && ex.sess != nil && ex.sess.indexLimit == "" {
		// The body (a stream's event ids) is skipped.
		ex.sess.indexLimit = "MaxHeaderBytes"
	}
	ex.hasResponse = true
	ex.respAt = o.Time
	ex.status = r.Status
	ex.sse = r.SSE
	ex.respSession, ex.hasRespSession = r.SessionID, r.HasSessionID && r.SessionID != ""
	if ex.rev == "" {
		ex.rev = revDefault
		if r.ProtocolVersion != "" {
			ex.rev = r.ProtocolVersion
		}
		ex.sessionless = revAtLeast(ex.rev, revSessionless)
	}
	if ex.asksSessionless() && !ex.hasRespSession {
		// An initialize asking for a revision without sessions, answered
		// without a session id: no session is made either way. One
		// answered with a session id goes on as a session's start; its
		// result says which revision the server chose (onMessages).
		ex.sessionless = true
	}
	if ex.sessionless {
		if ex.ok2xx() {
			// Judged on the answer, as in a session: a re-issue
			// refused (a 429, a redirect) ran nothing, and the broken
			// call waits for the next.
			d.checkReissue(ex, o)
		}
		d.checkSessionless(ex, o)
		return
	}
	s := ex.sess
	if s != nil && len(s.heldCloses) > 0 {
		d.answerHeldCloses(s, ex)
	}
	if ex.dropped != nil {
		d.judgeDroppedCursor(ex)
	}
	if ex.status >= 400 && ex.status < 500 && s != nil && ex.hasCursor && ex.resume != nil {
		// A rejected resume may still carry a lost session's cursor.
		r := d.lost.link(d.evidenceOf(ex.conn, s, ex), s, o.Time, d.cfg.LinkWindow)
		d.checkOldCursor(ex, o, r)
	}
	switch {
	case ex.status == 404:
		if s != nil {
			d.dropCalls(ex)
			if !s.deleted && !s.gone && mcpMethod(ex.method) {
				d.sessionLost(s, ex, o.Time, "404", "the server answered 404 for the session")
			}
		}
		d.resolveRejected(ex, ResumeRejected404)
		return
	case ex.status >= 500:
		// No refusal: the server's own 500, or a gateway's 504 (it
		// forwarded the request and gave up waiting), may come after the
		// call ran (or the session was deleted), so the calls stay in
		// flight, their outcome unknown to the client. A gateway's 502 or
		// 503 may as well, or may say the request never reached a server
		// (connection refused, no endpoint ready): the wire cannot tell.
		if ex.mayNotHaveReached() && s != nil {
			for c := range unansweredCalls(s, ex) {
				c.mayNotHaveReached = true
			}
		}
		d.resolveRejected(ex, ResumeRejected4xx)
		return
	case ex.status >= 400:
		d.checkUnknownSessionStatus(ex, o)
		d.ranNothing(ex) // refused (405, say)
		d.resolveRejected(ex, ResumeRejected4xx)
		return
	case ex.status >= 300 && ex.status < 400:
		d.redirected(ex)
		return
	case !ex.ok2xx():
		if ex.resume != nil {
			d.resolveResume(ex, o.Time, ResumeUnverifiable, "server answered "+strconv.Itoa(ex.status))
		}
		return
	}
	forgot := ex.tombForgotten
	if !ex.isInit && !ex.afterDelete && s == nil && ex.hasRespSession && d.sessions[sessionKey(ex.endpoint, ex.respSession)] == nil &&
		!d.tombs.use(sessionKey(ex.endpoint, ex.respSession), o.Time) && d.tombs.mayBeForgotten(sessionKey(ex.endpoint, ex.respSession)) {
		forgot = true
	}
	if !ex.isInit && (ex.afterDelete || forgot || s == nil && ex.hasRespSession && d.tombs.use(sessionKey(ex.endpoint, ex.respSession), o.Time)) {
		// The session was deleted and its state is gone: an answer for
		// it now can be judged against nothing.
		reason := ReasonSessionDeleted
		if forgot {
			// Maybe deleted: its tombstone was dropped at MaxSessions,
			// so whether this answer (another session id, a stream for
			// a cursor) is wrong cannot be told.
			reason = ReasonLimitPrefix + "MaxSessions"
			check := "session"
			if ex.hasReqSession {
				check = "session_swap"
			}
			d.unverifiable(o.Time, nil, ex, check, reason, ex.reqSession, ex.respSession)
		}
		if ex.resume != nil {
			d.resolveResume(ex, o.Time, ResumeUnverifiable, reason)
		}
		return
	}
	if d.limitHidesPairing(ex, o) {
		return
	}
	if ex.isInit && ex.hasRespSession {
		d.onInitialized(ex, o)
		s = ex.sess
	} else if s != nil && ex.hasRespSession && ex.respSession != s.id && (ex.gap || d.requestsMayBeHidden(s, ex.conn)) {
		// The capture pairs a response with its request only on a
		// connection that lost nothing, so this one answers the request
		// that carried s. But s's DELETE, after which an answer for it
		// is judged against nothing, may be among lost requests: s's
		// own, or ones of a connection not known to carry another
		// session alone.
		d.unverifiable(o.Time, s, ex, "session_swap", ReasonCaptureGap, ex.respSession)
		if ex.resume != nil {
			d.resolveResume(ex, o.Time, ResumeUnverifiable, ReasonCaptureGap)
		}
		return
	} else if s != nil && ex.hasRespSession && ex.respSession != s.id {
		d.sessionSwap(ex, o)
		s = ex.sess
	} else if s == nil && ex.hasRespSession {
		// A session id first seen on a response to a request without one
		// (not initialize): the server minted or echoed it; its start is
		// unknown to us.
		d.checkSessionlessReinit(ex, o)
		s = d.session(ex.endpoint, ex.respSession, o)
		if s.rev == "" {
			s.rev = ex.rev
		}
		if o.Request == nil {
			// An answer whose request the capture lost names it: an
			// unpaired answer naming a session it already knew does
			// the same (onUnpaired).
			s.requestGap = true
		}
		d.bind(ex, s)
		s.requests++
		d.recordCalls(s, ex, o)
	}
	if s == nil {
		d.stats.Sessionless++
		d.checkSessionlessReinit(ex, o)
		if ex.resume != nil {
			d.resolveResume(ex, o.Time, ResumeUnverifiable, "request carried Last-Event-ID without a session id: nothing to check it against")
		}
		return
	}
	if r.EncodedUnread {
		d.responseUnread(ex, s)
	}
	if ex.method == "DELETE" {
		s.deleted = true
		d.endSession(s, "deleted")
		d.resolveRejected(ex, "")
		if !s.retired && !s.removed {
			d.retire(s)
		}
		return
	}
	d.checkReinit(ex, o)
	d.checkSessionReissue(ex, o)
	if ex.resume != nil {
		d.resumeResponse(ex, o)
	}
}

// limitHidesPairing handles a 2xx response whose session cannot be judged
// because a limit cut the request or response head (the session header may
// be in the cut part), the request body (an initialize may be in it), or
// shifted request/response pairing (MaxPipelinedRequests), or a request body
// under a Content-Encoding or answered before it ended (unread, as over
// MaxBodyBytes): session_swap and
// the resume become Unverifiable naming the limit, never a violation. It
// reports whether onResponse must stop there.
func (d *Detector) limitHidesPairing(ex *exchange, o *decode.Observation) bool {
	switch ex.limit {
	case "MaxHeaderBytes", "MaxBodyBytes", "MaxPipelinedRequests", answeredEarly:
	case encodedBody:
		if o.Request == nil || !o.Request.EncodedUnread {
			return false // only the response's body is unread: the pairing is shown
		}
	default:
		return false
	}
	s, r := ex.sess, o.Response
	pairing := ex.limit == "MaxPipelinedRequests"
	swap := s != nil && ex.hasRespSession && ex.respSession != s.id
	hidden := s == nil && ex.hasRespSession && (o.Request == nil || o.Request.HeadTruncated) ||
		s != nil && !ex.hasRespSession && r.HeadTruncated
	if !pairing && !swap && !hidden {
		return false
	}
	if pairing && s == nil && !ex.hasRespSession {
		return false // no session on either side: nothing to pair
	}
	reason := limitReason(ex.limit)
	d.unverifiable(o.Time, s, ex, "session_swap", reason, ex.respSession)
	if ex.resume != nil {
		d.resolveResume(ex, o.Time, ResumeUnverifiable, reason)
	}
	if !pairing && s == nil && ex.hasRespSession {
		// The server's session for this exchange: follow its events
		// (without the checks that need the request).
		ns := d.session(ex.endpoint, ex.respSession, o)
		if ns.rev == "" {
			ns.rev = ex.rev
		}
		d.bind(ex, ns)
		ns.requests++
	}
	return true
}

// onInitialized binds a new session to its initialize exchange.
func (d *Detector) onInitialized(ex *exchange, o *decode.Observation) {
	_, existed := d.sessions[sessionKey(ex.endpoint, ex.respSession)]
	s := d.session(ex.endpoint, ex.respSession, o)
	if !existed {
		s.startSeen = true
	}
	s.client, s.server = ex.conn.Client, ex.conn.Server
	// A revision without sessions that the initialize asked for is not
	// the session's: the server answered with a session, so it chose an
	// older one, which its result names (onMessages).
	if ex.rev != "" && !s.revFromInit && !ex.asksSessionless() {
		s.rev = ex.rev
	}
	if ex.sess != s {
		s.requests++
		d.bind(ex, s)
		d.recordCalls(s, ex, o)
	}
	if s.prev == "" {
		if r := d.lost.link(d.evidenceOf(ex.conn, s, ex), s, o.Time, d.cfg.LinkWindow); r.s != nil {
			s.prev, s.linkConf = r.s.id, r.conf
		}
	}
}

// NoteCaptureLoss says the capture lost packets it cannot place (a live
// capture's kernel drops, counted per socket, not per connection) by time t:
// every check whose evidence began before t becomes unverifiable, as for a
// gap on its own connection. Call it from the goroutine that calls Observe.
func (d *Detector) NoteCaptureLoss(t time.Time) {
	if t.After(d.gapFloor) {
		d.gapFloor = t
	}
	d.stats.CaptureLosses++
}

// gapped reports whether ex's own bytes, or any between its client address
// and server since t, were lost.
func (d *Detector) gapped(ex *exchange, t time.Time) bool {
	return ex.gap || d.gapSince(t, ex.conn)
}

// pairGaps are the last capture gaps between a client address and server.
type pairGaps struct {
	last time.Time // any lost bytes
	// hiding: lost bytes that may have held a request or a status line of
	// a session the capture cannot name: any session's initialize, call
	// or 404 may be among them. Lost bytes inside a response body hide
	// only that response's rest.
	hiding time.Time
	// unowned: the last lost request bytes on a connection that carried no
	// one live session alone (connOwner, liveSession): they may have been
	// any session's request, its DELETE among them.
	unowned time.Time
	// unattributed: the last lost or unpaired response bytes the capture
	// cannot put in a known session's exchange: any session's events may
	// be among them.
	unattributed time.Time
	// awaiting: connections whose client lost a request the capture cannot
	// tell yet: the answer to it, the next on the connection (clients send
	// one request at a time), will name its session or show it harmless.
	// Those of the last link window, at most maxLinkCandidates; past that a
	// loss is told unanswered at once.
	awaiting []lostRequest
	// mayBeLost: the sessions such bytes belonged to where the capture
	// can name them (session.mayBeLostAt), newest last: those of the last
	// link window, at most maxLinkCandidates.
	mayBeLost []*session
	// cut: the last request answered after the connection's pairing was
	// lost. The decoder ends it cut before its status line the moment the
	// next response comes and hands that response on unpaired: the answer
	// to it, which says whether it was a 404 (onUnpaired).
	cut cutRequest
	// bytes: what this entry holds, as chargeGaps counts it.
	bytes int64
}

// cutRequest is a request of session s ended at at, before its status
// line, on conn (n of them at that instant); prev was s.mayBeLostAt.
type cutRequest struct {
	conn     uint64
	at, prev time.Time
	s        *session
	n        int
}

// gapSince reports whether the capture lost bytes between conn's client
// address and server since t. Lost bytes on any connection of that pair can
// hide a session's events or shift request/response pairing, so checks that
// rest on something being absent, or on pairing, become unverifiable.
func (d *Detector) gapSince(t time.Time, conn decode.Conn) bool {
	if t.Before(d.gapFloor) {
		return true
	}
	g := d.gaps[pairOf(conn)]
	return g != nil && !g.last.Before(t)
}

// requestsMayBeHidden says whether lost bytes may have held a request of s,
// or its answer: on a connection of s (s.requestGap), or one between conn's
// client and server that carried no one session alone, or that may have
// held any session's requests (pairGaps.hiding), since s began; any time
// before, if the capture did not see it begin.
func (d *Detector) requestsMayBeHidden(s *session, conn decode.Conn) bool {
	var t time.Time
	if s.startSeen {
		t = s.firstSeen
	}
	return s.requestGap || d.pairRequestsMayBeHidden(t, conn)
}

// pairRequestsMayBeHidden says whether lost bytes since t may have held a
// request between conn's client and server that no one session owned: on
// a connection that carried no one live session alone, or where any
// session's requests or status lines may have been.
func (d *Detector) pairRequestsMayBeHidden(t time.Time, conn decode.Conn) bool {
	if d.hidingGapSince(t, conn) {
		return true
	}
	g := d.gaps[pairOf(conn)]
	return g != nil && atOrAfter(g.unowned, t)
}

// hidingGapSince is gapSince for gaps that may have held any session's
// requests or status lines (pairGaps.hiding).
func (d *Detector) hidingGapSince(t time.Time, conn decode.Conn) bool {
	if t.Before(d.gapFloor) {
		return true
	}
	g := d.gaps[pairOf(conn)]
	return g != nil && atOrAfter(g.hiding, t)
}

// atOrAfter says whether the time x of a kind of loss is set and not before t.
func atOrAfter(x, t time.Time) bool { return !x.IsZero() && !x.Before(t) }

func (d *Detector) onGap(o *decode.Observation) {
	if o.Gap.Limit != "" {
		d.onLimitGap(o)
		return
	}
	if o.Gap.Notice {
		d.onGapNotice(o)
		return
	}
	queued := d.awaitsAnswer(o.Conn.ID)
	owner, anySession := d.markLost(o)
	g := d.noteGap(o.Conn, o.Time)
	if o.Gap.FromClient {
		if anySession {
			g.unowned = o.Time
		}
		lr := lostRequest{o.Conn.ID, o.Conn.Server, owner, o.Time}
		// An answer not come within the link window is past linking:
		// the request counts as unanswered, as of when it was lost.
		g.awaiting = slices.DeleteFunc(g.awaiting, func(a lostRequest) bool {
			past := o.Time.Sub(a.at) > d.cfg.LinkWindow
			if past {
				d.unanswered(g, a, a.at)
			}
			return past
		})
		if queued || len(g.awaiting) >= maxLinkCandidates {
			// Pipelined: which answer is the lost request's is unknown.
			d.unanswered(g, lr, o.Time)
			return
		}
		g.awaiting = append(g.awaiting, lr)
		d.chargeGaps(g)
		return
	}
	if lr, ok := g.stopAwaiting(o.Conn.ID); ok {
		d.unanswered(g, lr, o.Time) // the answer that would tell may be lost
	}
	// Lost response bytes may run on past the response being read into
	// answers to requests lost too: no session can be named for them.
	g.unattributed = o.Time
}

// onGapNotice marks, ahead of the gap proven at o.Gap.ProvenAt, what its
// lost bytes may already have touched, at ProvenAt as the gap will (as
// onGap does); the gap itself does the rest.
func (d *Detector) onGapNotice(o *decode.Observation) {
	_, anySession := d.markLost(o)
	t := o.Gap.ProvenAt
	g := d.noteGap(o.Conn, t)
	switch {
	case !o.Gap.FromClient:
		g.unattributed = later(g.unattributed, t)
	case anySession:
		g.unowned = later(g.unowned, t)
	}
}

// markLost marks, for a gap and its notice alike, what bytes lost on o's
// connection may have held: any exchange open on it, and a lost request
// may be the next of the session the connection carries (owner; a
// keep-alive connection's GET, say). anySession: with no owner, or its
// session ended, the lost request may be any session's.
func (d *Detector) markLost(o *decode.Observation) (owner *session, anySession bool) {
	d.markOpenExchangesGapped(o)
	if !o.Gap.FromClient {
		return nil, false
	}
	owner = d.connOwner(o.Conn)
	if owner != nil {
		owner.gap, owner.requestGap = true, true
	}
	return owner, owner == nil || !d.liveSession(owner.key)
}

// historyMayBeHidden says whether lost bytes since t may hold events of
// s, so that a check resting on their absence from s's history cannot be
// made at ex: bytes lost on ex or on an exchange of s, or response bytes
// between ex's client address and server the capture could not put in a
// known session's exchange (pairGaps.unattributed), or bytes that may have
// held any session's requests or status lines (pairGaps.hiding). A request
// lost on another connection hides no events by itself: its answer is
// lost (a gap in the server's bytes) or comes unpaired, naming its session
// or counting as unattributed.
func (d *Detector) historyMayBeHidden(ex *exchange, s *session, t time.Time) bool {
	return ex.gap || d.pairMayHideHistory(ex.conn, s, t)
}

// pairMayHideHistory is historyMayBeHidden without the exchange's own
// losses, for a check decided after its exchange ended (parkedFinding).
func (d *Detector) pairMayHideHistory(conn decode.Conn, s *session, t time.Time) bool {
	if s.gap || d.hidingGapSince(t, conn) {
		return true
	}
	g := d.gaps[pairOf(conn)]
	return g != nil && atOrAfter(g.unattributed, t)
}

// lostRequest is a connection whose client lost a request at at, awaiting
// the answer to it; owner is the session the connection carries alone, if
// the capture knows one (connOwner).
type lostRequest struct {
	conn   uint64
	server netip.AddrPort
	owner  *session
	at     time.Time
}

// unanswered: the answer to lr's lost request cannot be told at t. It may
// have been any call and any 404 of its owner or, with none known, of any
// session.
func (d *Detector) unanswered(g *pairGaps, lr lostRequest, t time.Time) {
	if lr.owner == nil {
		g.hiding = later(g.hiding, t)
		return
	}
	lr.owner.requestsLost = true
	d.mayBeLost(lr.owner, g, t)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stopAwaiting takes conn off the connections awaiting the answer to a
// lost request.
func (g *pairGaps) stopAwaiting(conn uint64) (lostRequest, bool) {
	i := slices.IndexFunc(g.awaiting, func(lr lostRequest) bool { return lr.conn == conn })
	if i < 0 {
		return lostRequest{}, false
	}
	lr := g.awaiting[i]
	g.awaiting = slices.Delete(g.awaiting, i, i+1)
	return lr, true
}

// awaitsAnswer says whether a request on conn is waiting for its answer.
func (d *Detector) awaitsAnswer(conn uint64) bool {
	for ex := d.openByConn[conn]; ex != nil; ex = ex.nextOnConn {
		if !ex.hasResponse {
			return true
		}
	}
	return false
}

// onUnpaired reads a response the capture holds no request for. Right
// after a lost request on its connection it answers that request: it names
// the request's session, or shows it harmless (202, 204), or leaves any
// session's 404 or call possible. On a connection whose start was not
// captured it answers a request sent before the capture began.
func (d *Detector) onUnpaired(o *decode.Observation) {
	g := d.noteGap(o.Conn, o.Time)
	r := o.Response
	lr, awaited := g.stopAwaiting(o.Conn.ID)
	if !awaited {
		if c := g.cut; c.conn == o.Conn.ID && c.at.Equal(o.Time) && c.n == 1 {
			// The answer to the request just cut (one request at a
			// time): unless a 404, that session was not lost by it.
			g.cut = cutRequest{}
			if r.Status != http.StatusNotFound {
				c.s.mayBeLostAt = c.prev
				if c.prev.IsZero() {
					g.mayBeLost = slices.DeleteFunc(g.mayBeLost, func(x *session) bool { return x == c.s })
				}
			}
			return
		}
	}
	var named *session
	if r.HasSessionID {
		named = d.sessions[sessionKey(d.endpointOf(o), r.SessionID)]
	}
	if named == nil && r.Status != http.StatusAccepted && r.Status != http.StatusNoContent {
		// Its events, if any, go to no session the capture knows (the
		// endpoint of a request it did not see is a guess).
		g.unattributed = o.Time
	}
	if !awaited && o.Conn.StartSeen {
		// It answers a request the capture saw, after pairing was lost:
		// that request's session was marked when it was cut.
		return
	}
	s := lr.owner
	if r.HasSessionID {
		s = named
	}
	if s != nil {
		s.requestGap = true // even a 204: the lost request was its DELETE
	}
	switch {
	case r.Status == http.StatusAccepted || r.Status == http.StatusNoContent:
		// Notifications or responses only (202), or a DELETE (204): no
		// call, no 404.
	case s != nil && r.Status == http.StatusNotFound:
		// The lost request was refused, so no call of it ran: s got a
		// 404 the capture cannot place.
		s.gap = true
		d.mayBeLost(s, g, o.Time)
	case s != nil:
		s.gap, s.requestsLost = true, true
	case r.HasSessionID && r.Status < 300:
		// A session the capture does not know yet: the lost request was
		// its initialize, or all it did so far is unseen (it will be a
		// session whose start was not captured).
	default:
		g.hiding = o.Time
	}
}

// connOwner is the session conn carries when it carries one alone (as far
// as the capture knows): the one whose bytes it lost are.
func (d *Detector) connOwner(conn decode.Conn) *session {
	if key, ok := d.connSession[conn.ID]; ok && !d.connShared(conn) {
		return d.sessions[key]
	}
	return nil
}

// mayBeLost: at t the capture lost the status line of an answer to s
// (on a connection of pair g): s may have got a 404 unseen.
func (d *Detector) mayBeLost(s *session, g *pairGaps, t time.Time) {
	t = later(s.mayBeLostAt, t)
	s.mayBeLostAt = t
	// Newest last: those past the link window can no longer be linked.
	old := 0
	for old < len(g.mayBeLost) && t.Sub(g.mayBeLost[old].mayBeLostAt) > d.cfg.LinkWindow {
		old++
	}
	g.mayBeLost = slices.Delete(g.mayBeLost, 0, old)
	if i := slices.Index(g.mayBeLost, s); i >= 0 {
		g.mayBeLost = slices.Delete(g.mayBeLost, i, i+1)
	} else if len(g.mayBeLost) >= maxLinkCandidates {
		g.mayBeLost = slices.Delete(g.mayBeLost, 0, 1)
	}
	g.mayBeLost = append(g.mayBeLost, s)
	d.chargeGaps(g)
}

// noteGap records that evidence between conn's client and server is
// missing at t, and returns the pair's gaps to add to.
func (d *Detector) noteGap(conn decode.Conn, t time.Time) *pairGaps {
	k := pairOf(conn)
	g := d.gaps[k]
	if g == nil {
		// Bounded like the sessions, and in bytes to a share of the
		// detector's: forget every pair and treat all that started
		// before now as possibly affected.
		if len(d.gaps) >= d.cfg.MaxSessions {
			d.forgetGaps(t, "MaxSessions")
		} else if d.gapBytes > d.cfg.MaxStateBytes/gapShare {
			d.forgetGaps(t, "MaxStateBytes")
		}
		g = &pairGaps{}
		d.gaps[k] = g
		d.chargeGaps(g)
	}
	g.last = later(g.last, t) // a gap notice may have set a later one
	return g
}

func (d *Detector) markOpenExchangesGapped(o *decode.Observation) {
	// Every exchange open on the connection may have lost bytes.
	for ex := d.openByConn[o.Conn.ID]; ex != nil; ex = ex.nextOnConn {
		ex.gap = true
		if ex.sess != nil {
			ex.sess.gap = true
		}
		if ex.stream != nil {
			ex.stream.gap = true
		}
	}
}

// requestLimit is the limit that kept part of r unread ("" for none): a
// head or body cut, a body under an encoding not read here, or one its
// answer came before (an initialize may be in it).
func requestLimit(r *decode.Request) string {
	switch {
	case r == nil:
		return ""
	case r.HeadTruncated:
		return "MaxHeaderBytes"
	case r.BodyTruncated:
		return "MaxBodyBytes"
	case r.EncodedUnread && r.BodyBytes > 0:
		return encodedBody
	case r.AnsweredEarly:
		return answeredEarly
	}
	return ""
}

func (d *Detector) onEnd(ex *exchange, o *decode.Observation) {
	d.dropExchange(ex)
	d.endExchange(ex, o)
	d.releaseIfIdle(ex.sess)
	d.recycleExchange(ex)
}

func (d *Detector) endExchange(ex *exchange, o *decode.Observation) {
	e := o.End
	if e.Limit != "" && ex.limit == "" {
		ex.limit = e.Limit
	}
	if (e.Limit == decode.EndNotInflated || e.Limit == decode.EndInflateRatio) && ex.sess != nil && !ex.sessionless {
		d.responseUnread(ex, ex.sess) // it stopped inflating partway: the rest was not read
	}
	if e.How == decode.EndGap && !ex.hasResponse && ex.hasReqSession {
		// Cut before its status line: the answer, a 404 say, is unseen.
		if s := ex.sess; s != nil && !ex.sessionless {
			if ex.method == "DELETE" {
				s.requestGap = true // deleted or not: unknown
			}
			prev := s.mayBeLostAt
			g := d.noteGap(ex.conn, o.Time)
			d.mayBeLost(s, g, o.Time)
			if c := &g.cut; c.conn == ex.conn.ID && c.at.Equal(o.Time) {
				c.n++
			} else {
				*c = cutRequest{conn: ex.conn.ID, at: o.Time, prev: prev, s: s, n: 1}
			}
		} else {
			d.noteGap(ex.conn, o.Time).hiding = o.Time
		}
	}
	if e.How == decode.EndGap || e.How == decode.EndUnknown {
		ex.gap = ex.gap || e.How == decode.EndGap
		if ex.stream != nil && e.How == decode.EndGap {
			ex.stream.gap = true
		}
	}
	if ex.sessionless {
		d.noteBrokenCall(ex, o)
	}
	s := ex.sess
	if s == nil || ex.sessionless || s.removed {
		return
	}
	if ex.dropped != nil {
		// Cut before its status line, or the capture ended first.
		d.unverifiable(o.Time, s, ex, string(KindCursorDropped), ReasonAnswerNotSeen, ex.dropped.cursor)
		ex.dropped = nil
	}
	d.noteResumeEnded(ex, o)
	if e.How == decode.EndGap && s != nil {
		s.gap = true
	}
	// A stream let go open (the capture's idle timeout or eviction, or its
	// end) may have completed the event unseen: its id may have reached
	// the client.
	if e.HasPartialID && e.PartialID != "" && (e.How == decode.EndTruncated || e.How == decode.EndReset || e.How == decode.EndUnknown) {
		if s.partial == nil {
			s.partial = map[string]bool{}
		}
		if len(s.partial) < maxPartialIDsPerSession {
			if _, ok := s.partial[e.PartialID]; !ok {
				d.charge(s, entryBytes+int64(len(e.PartialID)))
			}
			s.partial[e.PartialID] = s.partial[e.PartialID] || e.How == decode.EndUnknown
		} else if _, ok := s.partial[e.PartialID]; !ok {
			// A resume from this id would look like one from an id
			// never issued.
			if s.indexLimit == "" {
				s.indexLimit = "maxPartialIDsPerSession"
			}
			d.limitHit("maxPartialIDsPerSession", o.Time, s, "truncated_resume")
		}
	}
	if ex.resume != nil && !ex.resume.emitted {
		d.resumeEnd(ex, o)
	}
	d.checkUnresumableClose(ex, o)
	if ex.stream != nil && !e.ClientClosed && s.streamBroke(ex) {
		s.noteBreak(ex.stream)
	}
	// Requests whose stream ended without their response: if no later
	// resume delivers it, the client cannot know whether it ran.
	if e.How != decode.EndUnknown {
		for c := range unansweredCalls(s, ex) {
			c.cut = true
			c.answerLost = c.answerLost || e.How == decode.EndGap
			// A call the client had cancelled (notifications/cancelled)
			// while its stream was open was given up, not broken: the
			// server's end of the stream may be its answer to that. A
			// whole answer that was no stream broke nothing either.
			if c.method == "tools/call" && c.broke == nil && !c.cancelled && !ex.endedWhole(e.How) {
				b := ex.callBreak(c.id, o.Time, e.How)
				b.clientClosed = e.ClientClosed
				c.broke = &b
				d.charge(s, callBreakBytes+int64(len(b.how)+len(b.request.Detail)+len(b.broke.Detail)))
			}
		}
	}
}

// Close ends the input: pending resumes are resolved, open sessions are
// summarised ("capture_end") and unknown outcomes flushed. Output order is
// deterministic.
func (d *Detector) Close(now time.Time) {
	if d.closed {
		return
	}
	if now.After(d.now) {
		d.now = now
	}
	keys := make([]exKey, 0, len(d.exchanges))
	for k := range d.exchanges {
		keys = append(keys, k)
	}
	sortKeys(keys)
	for _, k := range keys {
		ex := d.exchanges[k]
		if ex.resume != nil && !ex.resume.emitted {
			d.heldUnknownCursor(ex, d.now, false, false)
			reason := ReasonCaptureEnded
			switch {
			case !ex.hasResponse:
				reason = "no response captured"
			case ex.resume.delivered == 0:
				reason = "stream still open at capture end with nothing delivered"
			}
			d.resolveResume(ex, d.now, ResumeUnverifiable, reason)
		}
	}
	// Deleted sessions whose last exchanges were still open: their cut
	// calls become unknown outcomes now.
	retiring := make([]*session, 0, len(d.retiring))
	for s := range d.retiring {
		retiring = append(retiring, s)
	}
	sort.Slice(retiring, func(i, j int) bool { return retiring[i].id < retiring[j].id })
	for _, s := range retiring {
		d.release(s)
	}
	d.retiring = nil
	// Oldest first, so summaries come out in order of last activity.
	for s := d.lruTail; s != nil; s = d.lruTail {
		d.removeSession(s, "capture_end")
	}
	d.settleParkedOf(nil, true, time.Time{})
	d.lost.flushAll(d)
	d.dropGaps()
	d.closed = true
}

// responseUnread: ex's response body, or its rest, is under a
// Content-Encoding not read. Whether its calls were answered cannot be told,
// and a stream's ids are missing from the session's event index from now on.
func (d *Detector) responseUnread(ex *exchange, s *session) {
	if ex.sse && s.indexLimit == "" {
		s.indexLimit = encodedBody
	}
	for i := range ex.msgs {
		if c := s.calls.at(ex.msgs[i].ID); c != nil && c.ex == ex.serial {
			c.unread = true
		}
	}
}

// unreadOutcome records a call whose answer may be in a body not read as
// Unverifiable instead of an unknown outcome, and says whether it did.
func (d *Detector) unreadOutcome(t time.Time, s *session, c *call) bool {
	if !c.unread {
		return false
	}
	c.unknown = true
	d.unverifiable(t, s, nil, "unknown_outcome", ReasonEncodedBody, "call", c.id)
	return true
}

// cutCallsUnknown turns tools/calls whose stream was cut, and which no resume
// answered, into unknown outcomes.
func (d *Detector) cutCallsUnknown(s *session) {
	if s.gone || s.calls.len() == 0 {
		return
	}
	var ids []string
	for id, c := range s.calls.all() {
		if c.cut && !c.answered && !c.unknown && c.method == "tools/call" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	// The session's last activity, not the detector's clock: when the
	// session is let go depends on when ticks come, which differs with the
	// number of workers, and the record must not.
	at := s.lastSeen
	for _, id := range ids {
		c := s.calls.at(id)
		if d.unreadOutcome(at, s, c) {
			continue
		}
		c.unknown = true
		if s.ended == "evicted" {
			// The detector let go of the session, not the client: a
			// resume may yet deliver the response, unseen by us.
			d.unverifiable(at, s, nil, "unknown_outcome", s.evictedBy, "call", id)
			continue
		}
		if s.gap || d.gapSince(s.firstSeen, decode.Conn{Client: s.client, Server: s.server}) {
			// The response, or the resume that delivered it, may be
			// in the bytes the capture lost.
			d.unverifiable(at, s, nil, "unknown_outcome", ReasonCaptureGap, "call", id)
			continue
		}
		if l := d.limitOn(s.firstSeen, addrKey{s.client.Addr(), s.server}); l != "" {
			// The resume that delivered the response may be what the
			// limit hid (a connection not read, or out of order).
			d.unverifiable(at, s, nil, "unknown_outcome", limitReason(l), "call", id)
			continue
		}
		s.pendingUnknown = append(s.pendingUnknown, d.unknownOutcome(s, c, at, "the stream carrying the call ended before its response and no resume delivered it"))
	}
}
