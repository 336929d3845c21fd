package detector

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// Link confidences, stated in findings and summaries.
const (
	ConfidenceSameConnection = "same connection"
	ConfidenceSameAddress    = "same client address"
	ConfidenceSameExchange   = "same exchange"
)

type addrKey struct {
	client netip.Addr
	server netip.AddrPort
}

// lostIndex remembers sessions the client lost (404 or swap) in a FIFO of
// MaxLostSessions. Only 404s are indexed for linking, newest per connection
// and per client address. Their pending unknown outcomes wait LinkWindow for
// a re-issue before they are emitted.
type lostIndex struct {
	ring    []*session
	head    int
	n       int
	flushed int // ring entries from head whose unknown outcomes were emitted
	byConn  map[uint64]*session
	byAddr  map[addrKey]*session
}

func newLostIndex(capacity int) lostIndex {
	return lostIndex{ring: make([]*session, capacity), byConn: map[uint64]*session{}, byAddr: map[addrKey]*session{}}
}

func (l *lostIndex) add(d *Detector, s *session) {
	if l.n == len(l.ring) {
		old := l.ring[l.head]
		l.forget(old)
		d.stats.LimitsHit["MaxLostSessions"]++
		// A re-initialisation of its client can no longer be linked.
		d.unverifiable(d.now, old, nil, "silent_reinit_after_404", ReasonLimitPrefix+"MaxLostSessions")
		d.flushUnknown(old)
		l.ring[l.head] = nil
		l.head = (l.head + 1) % len(l.ring)
		l.n--
		if l.flushed > 0 {
			l.flushed--
		}
	}
	l.ring[(l.head+l.n)%len(l.ring)] = s
	l.n++
	if s.lostHow == "404" {
		l.byConn[s.lostConn.ID] = s
		l.byAddr[addrKey{s.lostConn.Client.Addr(), s.lostConn.Server}] = s
	}
}

// flushDue emits the unknown outcomes of sessions lost more than window
// ago: a re-issue after that is no longer linked by address.
func (l *lostIndex) flushDue(d *Detector, now time.Time, window time.Duration) {
	for l.flushed < l.n {
		s := l.ring[(l.head+l.flushed)%len(l.ring)]
		if now.Sub(s.lostAt) <= window {
			return
		}
		d.flushUnknown(s)
		l.flushed++
	}
}

func (l *lostIndex) forget(s *session) {
	if l.byConn[s.lostConn.ID] == s {
		delete(l.byConn, s.lostConn.ID)
	}
	k := addrKey{s.lostConn.Client.Addr(), s.lostConn.Server}
	if l.byAddr[k] == s {
		delete(l.byAddr, k)
	}
}

// link finds the session the client on conn lost before t: same TCP
// connection first, else the same client IP to the same server within
// window. cur (may be nil) is never linked to itself, and a session that
// already existed before the loss is not a re-initialisation.
func (l *lostIndex) link(conn decode.Conn, cur *session, t time.Time, window time.Duration) (*session, string) {
	if l.n == 0 {
		return nil, ""
	}
	ok := func(c *session) bool {
		return c != nil && c != cur && !c.lostAt.After(t) && (cur == nil || !cur.firstSeen.Before(c.lostAt))
	}
	if c := l.byConn[conn.ID]; ok(c) {
		return c, ConfidenceSameConnection
	}
	if c := l.byAddr[addrKey{conn.Client.Addr(), conn.Server}]; ok(c) && t.Sub(c.lostAt) <= window {
		return c, ConfidenceSameAddress
	}
	return nil, ""
}

func (l *lostIndex) flushAll(d *Detector) {
	for i := 0; i < l.n; i++ {
		d.flushUnknown(l.ring[(l.head+i)%len(l.ring)])
	}
}

// sessionLost: the client lost s (404, or the server swapped it). Its
// unanswered tools/calls become unknown outcomes, emitted when the client
// re-issues them, when s is forgotten, or at Close.
func (d *Detector) sessionLost(s *session, ex *exchange, t time.Time, how, reason string) {
	s.lostAt, s.lostHow, s.lostConn, s.lostEx = t, how, ex.conn, ex.key.ex
	ids := make([]string, 0, s.inflight)
	for id, c := range s.calls.all() {
		if !c.answered && !c.unknown && c.method == "tools/call" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		c := s.calls.at(id)
		c.unknown = true
		s.pendingUnknown = append(s.pendingUnknown, d.unknownOutcome(s, c, t, reason))
	}
	if how == "404" {
		s.gone = true
		d.endSession(s, "404")
	}
	d.lost.add(d, s)
}

func (d *Detector) unknownOutcome(s *session, c *call, t time.Time, reason string) *UnknownOutcome {
	return &UnknownOutcome{
		ID:        findingID("unknown_outcome", s.id, c.id, c.method, c.tool, c.paramsHash, s.client.String(), s.server.String()),
		Time:      t,
		SessionID: s.id,
		JSONRPCID: c.id,
		Method:    c.method,
		Tool:      c.tool,
		ArgsHash:  c.paramsHash,
		Arguments: c.args,
		CalledAt:  c.at,
		Client:    s.client.String(),
		Server:    s.server.String(),
		Reason:    reason,
	}
}

// reissued marks the pending unknown outcome of c in src as re-issued in
// session to and emits it.
func (d *Detector) reissued(src *session, c *call, to string) {
	for i, u := range src.pendingUnknown {
		if u.JSONRPCID == c.id {
			u.ReissuedInSession = to
			src.pendingUnknown = append(src.pendingUnknown[:i], src.pendingUnknown[i+1:]...)
			d.stats.UnknownOutcomes++
			d.sink.UnknownOutcome(u)
			return
		}
	}
}

// sessionSwap: a request on S1 answered 2xx with Mcp-Session-Id S2.
func (d *Detector) sessionSwap(ex *exchange, o *decode.Observation) {
	s1 := ex.sess
	_, existed := d.sessions[sessionKey(ex.endpoint, ex.respSession)]
	s2 := d.session(ex.endpoint, ex.respSession, o)
	if !existed {
		s2.prev, s2.linkConf, s2.swappedFrom = s1.id, ConfidenceSameExchange, s1
		s2.rev = s1.rev
	}
	d.violation(&Violation{
		Kind: KindSessionSwap, Time: o.Time, SessionID: s1.id, NewSessionID: s2.id, LastEventID: ex.cursor,
		Explanation: fmt.Sprintf("A %s carrying session %s was answered %d with a different session id, %s. The server "+
			"(often a fresh backend after a drain) minted a new session instead of answering 404, and a client that "+
			"adopts it appends the new session's events to the old session's history: a duplicated tool call or an "+
			"invented intermediate result with no error anywhere. Check the load balancer's session affinity and that "+
			"the server answers 404 for session ids it does not know.", ex.method, s1.id, ex.status, s2.id),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence()},
	}, ex, s1)
	d.dropCalls(ex)
	d.sessionLost(s1, ex, o.Time, "swap", fmt.Sprintf("the server answered with a different session id (%s)", s2.id))
	d.bind(ex, s2)
	ex.swapped = true
	s2.requests++
	d.recordCalls(s2, ex, o)
}

// checkReinit looks for S1's state reused on S2 after S1's 404: S1's
// Last-Event-ID (form 1) and identical tools/calls (form 2).
func (d *Detector) checkReinit(ex *exchange, o *decode.Observation) {
	s := ex.sess
	l, conf := d.lost.link(ex.conn, s, o.Time, d.cfg.LinkWindow)
	if l == nil && s.swappedFrom == nil {
		return
	}
	if l != nil && s.prev == "" {
		s.prev, s.linkConf = l.id, conf
	}
	if l != nil {
		d.checkOldCursor(ex, o, l, conf)
	}
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Type != decode.MsgRequest || m.Method != "tools/call" {
			continue
		}
		key := toolKey{m.Tool, m.ParamsHash}
		if src := s.swappedFrom; src != nil {
			if c := src.toolCalls.at(key); c != nil {
				d.reissued(src, c, s.id)
			}
		}
		if l == nil {
			continue
		}
		c := l.toolCalls.at(key)
		if c == nil {
			continue
		}
		if !c.reissueFlagged {
			c.reissueFlagged = true
			if !l.isRepeatable(m.Tool) && !s.isRepeatable(m.Tool) {
				d.reissuedCall(ex, o, l, s, c, m, conf)
			}
		}
		d.reissued(l, c, s.id)
	}
}

// noteRepeatable remembers the tools a tools/list result annotated
// read-only or idempotent (one name per line), at most
// decode.MaxAnnotatedTools.
func (s *session) noteRepeatable(names string) {
	if s.repeatable == nil {
		s.repeatable = map[string]struct{}{}
	}
	for name := range strings.SplitSeq(names, "\n") {
		if len(s.repeatable) >= decode.MaxAnnotatedTools {
			return
		}
		s.repeatable[name] = struct{}{}
	}
}

// isRepeatable says whether a tools/list of s annotated tool as read-only or
// idempotent: calling it twice does no harm, so a re-issue is no corruption.
func (s *session) isRepeatable(tool string) bool {
	_, ok := s.repeatable[tool]
	return ok
}

// reissuedCall raises form 2: S1's tools/call c issued again, identical, as
// m on S2. Critical when c's outcome was unknown (in flight when S1 was lost:
// it may have run, and now runs again); high when it had completed (the
// client is replaying its log).
func (d *Detector) reissuedCall(ex *exchange, o *decode.Observation, l, s *session, c *call, m *decode.Message, conf string) {
	severity, state := SeverityHigh, "had completed"
	if !c.answered {
		severity, state = SeverityCritical, "was in flight (its outcome unknown to the client)"
	}
	reached := "the server accepted it and answered it"
	if !c.answered {
		reached = "the server had accepted it; whether it ran is unknown"
	}
	d.violation(&Violation{
		Kind: KindSilentReinitAfter404, Severity: severity, Time: o.Time, SessionID: l.id, NewSessionID: s.id,
		JSONRPCIDs: []string{c.id, m.ID}, Tool: m.Tool, Confidence: conf,
		Explanation: fmt.Sprintf("Session %s got 404 at %s while tools/call %s (id %s, sent %s) %s; the same client (%s) "+
			"opened session %s and at %s issued the identical call again (same tool, same arguments) as id %s. The first "+
			"attempt reached the server (%s), so if it ran, its side effect now happens twice. Check the client's "+
			"recovery: calls of a lost session must be reconciled (idempotency key or status query) before being re-run.",
			l.id, l.lostAt.Format(time.RFC3339Nano), m.Tool, c.id, c.at.Format(time.RFC3339Nano), state, conf, s.id,
			o.Time.Format(time.RFC3339Nano), m.ID, reached),
		Evidence: []Evidence{
			{Time: c.at, Conn: c.client.String() + "->" + c.server.String(), Exchange: c.exNum, What: "request", Detail: fmt.Sprintf("tools/call %s id %s on session %s, arguments sha256 %s", c.tool, c.id, l.id, short(c.paramsHash))},
			lostEvidence(l),
			ex.requestEvidence(),
		},
	}, ex, s, "form2", c.id)
}

// checkOldCursor raises form 1: S2 resumed with an event id of the lost
// session S1. Whatever the server answered, the client is merging two
// epochs: critical when the server accepted the cursor, high when it
// rejected it (this server caught it; another would not).
func (d *Detector) checkOldCursor(ex *exchange, o *decode.Observation, l *session, conf string) {
	s := ex.sess
	if !ex.hasCursor || ex.resume == nil || s == nil {
		return
	}
	_, own := s.events[ex.cursor]
	_, theirs := l.events[ex.cursor]
	_, partial := l.partial[ex.cursor]
	if own || !theirs && !partial {
		return
	}
	severity, answer := SeverityCritical, "the server accepted it"
	if !ex.ok2xx() {
		severity, answer = SeverityHigh, fmt.Sprintf("this server rejected it with %d, but the client is wrong all the same", ex.status)
	}
	d.violation(&Violation{
		Kind: KindSilentReinitAfter404, Severity: severity, Time: o.Time, SessionID: l.id, NewSessionID: s.id, LastEventID: ex.cursor, Confidence: conf,
		Explanation: fmt.Sprintf("Session %s got 404; the same client (%s) opened session %s and resumed it with "+
			"Last-Event-ID %s, an event id of the lost session (%s). Event ids mean something only in the session that "+
			"minted them, so the client is merging two epochs: what the new session sends is not the continuation of "+
			"what it holds. Check the client: after 404 it must drop its stream cursors and reconcile in-flight calls.",
			l.id, conf, s.id, ex.cursor, answer),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(), lostEvidence(l)},
	}, ex, s, "form1")
}

// checkSessionlessReinit: form 3, a request without session id accepted by
// a server that had just answered 404 to the same client's session.
func (d *Detector) checkSessionlessReinit(ex *exchange, o *decode.Observation) {
	if ex.isInit || !ex.ok2xx() {
		return
	}
	l, conf := d.lost.link(ex.conn, nil, o.Time, d.cfg.LinkWindow)
	if l == nil || l.reinitFlagged {
		return
	}
	if ex.method == "" || d.gapped(ex, l.lostAt) {
		// The request was not captured, or bytes were lost since the 404:
		// whether it really went without a session id is unknown.
		d.unverifiable(o.Time, l, ex, "silent_reinit_after_404", ReasonCaptureGap, "form3")
		return
	}
	l.reinitFlagged = true
	d.violation(&Violation{
		Kind: KindSilentReinitAfter404, Time: o.Time, SessionID: l.id, Confidence: conf,
		Explanation: fmt.Sprintf("Session %s got 404; the same client (%s) then sent %s %s without any session id and "+
			"without initializing, and the server answered %d. The client carried on as if the session still existed and "+
			"the server executed requests outside any session, so results and notifications can no longer be tied to the "+
			"client's history. Check the client (it must re-initialize after 404) and the server (it must reject "+
			"session-less requests when it uses sessions).", l.id, conf, ex.method, ex.path, ex.status),
		Evidence: []Evidence{lostEvidence(l), ex.requestEvidence(), ex.responseEvidence()},
	}, ex, nil, "form3")
}

// checkSessionless: under 2026-07-28 and later a server must neither use a
// session id nor honor Last-Event-ID.
func (d *Detector) checkSessionless(ex *exchange, o *decode.Observation) {
	if ex.hasRespSession && ex.ok2xx() {
		if _, done := d.sessionlessSeen[ex.respSession]; !done {
			if len(d.sessionlessSeen) < d.cfg.MaxSessions {
				d.sessionlessSeen[ex.respSession] = struct{}{}
			}
			verb := "minted"
			if ex.hasReqSession && ex.reqSession == ex.respSession {
				verb = "echoed"
			}
			d.violation(&Violation{
				Kind: KindResumeOnSessionlessRevision, Time: o.Time, SessionID: ex.respSession, ProtocolVersion: ex.rev,
				Explanation: fmt.Sprintf("Under protocol revision %s, which has no sessions, the server %s session id %s. "+
					"Clients of this revision do not scope state by session, so anything the server keys on it (event ids, "+
					"resumption) is a contract the client never agreed to. Check the server's transport for left-over "+
					"session handling.", ex.rev, verb, ex.respSession),
				Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence()},
			}, ex, nil, "session")
		}
	}
	if ex.resume == nil {
		return
	}
	switch {
	case ex.method == "GET" && ex.ok2xx() && ex.sse:
		d.violation(&Violation{
			Kind: KindResumeOnSessionlessRevision, Time: o.Time, SessionID: ex.reqSession, LastEventID: ex.cursor, ProtocolVersion: ex.rev,
			Explanation: fmt.Sprintf("Under protocol revision %s, which removed resumption and the GET stream, the server "+
				"answered a GET carrying Last-Event-ID %s with %d and a stream. Clients of this revision do not expect "+
				"replays, so replayed messages can be taken for new ones. Check the server's transport for left-over "+
				"resumption support.", ex.rev, ex.cursor, ex.status),
			Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence()},
		}, ex, nil, "resume")
		d.resolveResume(ex, o.Time, ResumeViolated, "")
	case ex.status == 404:
		d.resolveRejected(ex, ResumeRejected404)
	case ex.status >= 400:
		d.resolveRejected(ex, ResumeRejected4xx)
	default:
		d.resolveResume(ex, o.Time, ResumeUnverifiable, "revision "+ex.rev+" has no resumption; the server did not replay")
	}
}

// checkUnresumableClose: under 2025-11-25 a POST's stream ended before the
// JSON-RPC response without any event id, so the client cannot resume it.
func (d *Detector) checkUnresumableClose(ex *exchange, o *decode.Observation) {
	e := o.End
	if !revAtLeast(ex.rev, revPriming) || ex.sessionless || !ex.sse || ex.method != "POST" || !ex.ok2xx() {
		return
	}
	if ex.sawID || e.HasLastID || e.HasPartialID {
		return
	}
	if e.ClientClosed {
		return // the client gave the stream up; the server did not end it
	}

	s := ex.sess
	var pending []string
	tool := ""
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Type != decode.MsgRequest || m.ID == "" {
			continue
		}
		c := s.calls.at(m.ID)
		if c == nil || c.ex != ex.serial {
			return // not tracked (limit): cannot tell
		}
		if !c.answered {
			pending = append(pending, m.ID)
			if tool == "" {
				tool = c.tool
			}
		}
	}
	if len(pending) == 0 {
		return
	}
	if ex.limit != "" && (e.How == decode.EndClean || e.How == decode.EndTruncated) {
		// An id line, the response, or the stream's real end may be in
		// what the limit cut.
		d.unverifiable(o.Time, s, ex, "unresumable_close", ReasonLimitPrefix+ex.limit)
		return
	}
	switch e.How {
	case decode.EndClean, decode.EndTruncated:
	case decode.EndGap:
		d.unverifiable(o.Time, s, ex, "unresumable_close", ReasonCaptureGap)
		return
	default:
		return
	}
	if ex.gap {
		d.unverifiable(o.Time, s, ex, "unresumable_close", ReasonCaptureGap)
		return
	}
	d.violation(&Violation{
		Kind: KindUnresumableClose, Time: o.Time, JSONRPCIDs: pending, Tool: tool,
		Explanation: fmt.Sprintf("Under %s the server ended the SSE stream of a POST in session %s (%s) before sending the "+
			"JSON-RPC response to %v, and it had sent no event id on that stream. Without an id the client has no cursor "+
			"to resume from, so the response is lost and the call's outcome is unknown. Check the server: it may close a "+
			"request stream early only after a priming event with an id.", ex.rev, s.id, e.How, pending),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(),
			ex.evidence(o.Time, "stream end", fmt.Sprintf("ended %s after %d event(s), none with an id", e.How, e.Events))},
	}, ex, s)
}

// lostEvidence is the 404 that lost session l, where it was seen.
func lostEvidence(l *session) Evidence {
	return Evidence{Time: l.lostAt, Conn: l.lostConn.Client.String() + "->" + l.lostConn.Server.String(), Exchange: l.lostEx,
		What: "response header", Detail: fmt.Sprintf("status 404 for Mcp-Session-Id: %s", l.id)}
}
