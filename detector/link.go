package detector

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// Link confidences, stated in findings and summaries: how strongly the
// wire ties a new session to the lost one (see lostIndex.link).
const (
	ConfidenceCertain = "certain"
	ConfidenceHigh    = "high"
	ConfidenceMedium  = "medium"
	// ConfidenceSameExchange: the server itself answered S1's request
	// with S2 (a swap).
	ConfidenceSameExchange = "same exchange"
)

// Evidence weights for linking a session to a lost one. Every candidate
// shares the client address; these add to that, and a known difference in
// clientInfo, Authorization or User-Agent rules a candidate out.
const (
	weightSameConnection = 4 // the 404 and the new session on one TCP connection
	weightClientInfo     = 2 // initialize's clientInfo name/version
	weightAuthorization  = 2 // the Authorization hash
	weightUserAgent      = 1
	weightIdenticalCall  = 3 // the lost session holds the very call (or cursor) the new one re-uses; never lifts a link to certain
	// linkMargin is how much better than the next candidate the best must
	// score to be linked; closer, the link is ambiguous.
	linkMargin = 2
	// maxLinkCandidates bounds the lost sessions of one address scanned
	// per link, newest first.
	maxLinkCandidates = 256
)

type addrKey struct {
	client netip.Addr
	server netip.AddrPort
}

// lostIndex remembers sessions the client lost (404 or swap) in a FIFO of
// MaxLostSessions. 404s are indexed for linking by the connection that got
// the 404 and by client address (every one, newest last). Their pending
// unknown outcomes wait LinkWindow for a re-issue before they are emitted.
type lostIndex struct {
	ring    []*session
	head    int
	n       int
	flushed int // ring entries from head whose unknown outcomes were emitted
	byConn  map[uint64]*session
	byAddr  map[addrKey][]*session
}

func newLostIndex(capacity int) lostIndex {
	return lostIndex{ring: make([]*session, capacity), byConn: map[uint64]*session{}, byAddr: map[addrKey][]*session{}}
}

func (l *lostIndex) add(d *Detector, s *session) {
	if l.n == len(l.ring) {
		old := l.ring[l.head]
		l.forget(old)
		if old.removed {
			// Out of the table, it was kept for linking only.
			d.uncharge(old)
		}
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
		k := addrKey{s.lostConn.Client.Addr(), s.lostConn.Server}
		l.byAddr[k] = append(l.byAddr[k], s)
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
	list := l.byAddr[k]
	if i := slices.Index(list, s); i >= 0 {
		list = slices.Delete(list, i, i+1)
		if len(list) == 0 {
			delete(l.byAddr, k)
		} else {
			l.byAddr[k] = list
		}
	}
}

// clientEvidence is what the wire says about who sent a request: what a
// new session is matched to a lost one by.
type clientEvidence struct {
	conn decode.Conn
	// sharedConn: conn's address and server pair carries several clients'
	// sessions on one connection, so the same connection proves nothing.
	sharedConn                  bool
	auth, userAgent, clientInfo string
	// endpoint, when set, rules out sessions of other logical endpoints
	// (evidenceOf sets it wherever a request is known).
	endpoint string
}

// evidenceOf is the evidence of session s (as seen on conn), or of a
// request without a session (s nil).
func (d *Detector) evidenceOf(conn decode.Conn, s *session, ex *exchange) clientEvidence {
	e := clientEvidence{conn: conn, sharedConn: d.connShared(conn)}
	if s != nil {
		e.auth, e.userAgent, e.clientInfo = s.auth, s.userAgent, s.clientInfo
	}
	if ex != nil {
		e.auth = cmp.Or(e.auth, ex.auth)
		e.userAgent = cmp.Or(e.userAgent, ex.userAgent)
		// A client that lost its session starts over at the same URL:
		// only the lost session's own endpoint (Host and path) says
		// anything. Another MCP server behind the same address (virtual
		// hosts on one ingress) has other clients, whose calls may match.
		e.endpoint = ex.endpoint
	}
	return e
}

// linkCandidate is a lost session scored as the previous session of a
// client.
type linkCandidate struct {
	s     *session
	score int
}

// linkResult is what link concluded: one session clearly best (s, with a
// confidence and the evidence in words), or several equally good
// (ambiguous), or none.
type linkResult struct {
	s         *session
	conf, why string
	ambiguous []linkCandidate
	all       []linkCandidate // every candidate, best first
}

// link scores every session the client at e could have lost before t:
// the one that got a 404 on the same TCP connection, and those of the same
// client address within window (newest maxLinkCandidates), by the evidence
// the wire offers (linkCandidate weights). cur (may be nil) is never linked
// to itself, and a session that already existed before the loss is not a
// re-initialisation. It links only when one candidate is clearly best.
func (l *lostIndex) link(e clientEvidence, cur *session, t time.Time, window time.Duration) linkResult {
	if l.n == 0 {
		return linkResult{}
	}
	ok := func(c *session) bool {
		return c != nil && c != cur && !c.lostAt.After(t) && (cur == nil || !cur.firstSeen.Before(c.lostAt))
	}
	var cands []linkCandidate
	byConn := l.byConn[e.conn.ID]
	if ok(byConn) {
		if sc, fits := scoreCandidate(byConn, e); fits {
			cands = append(cands, linkCandidate{s: byConn, score: sc})
		}
	}
	list := l.byAddr[addrKey{e.conn.Client.Addr(), e.conn.Server}]
	for i, n := len(list)-1, 0; i >= 0 && n < maxLinkCandidates; i, n = i-1, n+1 {
		c := list[i]
		if c == byConn || !ok(c) || t.Sub(c.lostAt) > window {
			continue
		}
		if sc, fits := scoreCandidate(c, e); fits {
			cands = append(cands, linkCandidate{s: c, score: sc})
		}
	}
	r := decideLink(cands)
	if r.s != nil {
		r.why = strings.Join(linkReasons(r.s, e), ", ")
	}
	return r
}

// linkReasons says in words what ties lost session c to the evidence e.
func linkReasons(c *session, e clientEvidence) []string {
	why := []string{"the same client address"}
	if c.lostConn.ID == e.conn.ID {
		if e.sharedConn {
			why = append(why, "the same TCP connection as the 404 (not counted: this address's connections carry several clients' sessions)")
		} else {
			why = append(why, "the same TCP connection as the 404")
		}
	}
	if c.clientInfo != "" && c.clientInfo == e.clientInfo {
		why = append(why, "clientInfo "+c.clientInfo)
	}
	if c.auth != "" && c.auth == e.auth {
		why = append(why, "the same Authorization (hash)")
	}
	if c.userAgent != "" && c.userAgent == e.userAgent {
		why = append(why, "User-Agent "+c.userAgent)
	}
	return why
}

// scoreCandidate scores lost session c against the new client's evidence;
// fits is false when a known difference rules c out. (linkReasons says the
// same in words, for the one linked.)
func scoreCandidate(c *session, e clientEvidence) (score int, fits bool) {
	if e.endpoint != "" && !inEndpoint(c.key, e.endpoint) {
		return 0, false
	}
	if c.lostConn.ID == e.conn.ID && !e.sharedConn {
		score += weightSameConnection
	}
	for _, f := range [...]struct {
		old, cur string
		weight   int
	}{
		{c.clientInfo, e.clientInfo, weightClientInfo},
		{c.auth, e.auth, weightAuthorization},
		{c.userAgent, e.userAgent, weightUserAgent},
	} {
		switch {
		case f.old == "" || f.cur == "":
		case f.old != f.cur:
			return 0, false
		default:
			score += f.weight
		}
	}
	return score, true
}

// inEndpoint says whether sessionKey key names a session of endpoint.
func inEndpoint(key, endpoint string) bool {
	return len(key) > len(endpoint) && key[len(endpoint)] == 0 && key[:len(endpoint)] == endpoint
}

// decideLink picks the clearly best candidate: the only one, or one
// scoring linkMargin more than the next (newest first among equals).
func decideLink(cands []linkCandidate) linkResult {
	if len(cands) == 0 {
		return linkResult{}
	}
	slices.SortStableFunc(cands, func(a, b linkCandidate) int {
		if a.score != b.score {
			return b.score - a.score
		}
		return b.s.lostAt.Compare(a.s.lostAt)
	})
	if len(cands) > 1 && cands[0].score-cands[1].score < linkMargin {
		n := 1
		for n < len(cands) && cands[0].score-cands[n].score < linkMargin {
			n++
		}
		return linkResult{ambiguous: cands[:n], all: cands}
	}
	best := cands[0]
	return linkResult{s: best.s, conf: confidenceOf(best.score), all: cands}
}

func confidenceOf(score int) string {
	switch {
	case score >= weightSameConnection+weightClientInfo:
		return ConfidenceCertain
	case score >= weightSameConnection:
		return ConfidenceHigh
	}
	return ConfidenceMedium
}

// resolveByState settles a link with the state the new session re-uses
// (the cursor or the call has() looks for): among equally good candidates,
// the only one that holds it is linked; and when the linked session does not
// hold it but exactly one other candidate does and that state is rare (no
// third session made the call: rare), that one is, since the evidence it
// re-uses outweighs the rest (behind a pooling proxy or a shared client
// pool, "the same TCP connection" can be another client's).
func resolveByState(r linkResult, e clientEvidence, has func(*session) bool, rare bool) linkResult {
	if r.s != nil && has(r.s) {
		return r
	}
	pool := r.ambiguous
	if r.s != nil {
		if !rare {
			return r
		}
		pool = r.all
	}
	var hit []linkCandidate
	for _, c := range pool {
		if has(c.s) {
			hit = append(hit, c)
		}
	}
	if len(hit) != 1 {
		return r
	}
	c := hit[0]
	c.score += weightIdenticalCall
	// Identical clients (one application's replicas behind one address)
	// make identical calls too: a link the state decides is never certain.
	conf := confidenceOf(c.score)
	if conf == ConfidenceCertain {
		conf = ConfidenceHigh
	}
	return linkResult{s: c.s, conf: conf, why: strings.Join(append(linkReasons(c.s, e), "the very state it re-uses"), ", "), all: r.all}
}

// callMakers is what the detector keeps of one call identity: how many
// sessions made it, and the key of the last one.
type callMakers struct {
	sessions uint8
	last     string
}

// countCall notes that session s of endpoint made the call tool(params).
// When another session that made it is still live and not lost, two
// sessions made the very same call side by side (replicas of one
// application, not a client re-making a lost session's call): the tool is
// shared.
func (d *Detector) countCall(s *session, endpoint, tool, params string) {
	k := d.serverEventKey(endpoint, tool+"\x00"+params)
	m, ok := d.callSessions[k]
	if !ok && len(d.callSessions) >= d.cfg.MaxEventsIndexedPerServer {
		return
	}
	if ok && len(d.sharedTools) < d.cfg.MaxEventsIndexedPerServer {
		if p := d.sessions[m.last]; p != nil && p != s && !p.gone {
			d.sharedTools[d.serverEventKey(endpoint, tool)] = struct{}{}
		}
	}
	if m.sessions < 255 {
		m.sessions++
	}
	m.last = s.key
	d.callSessions[k] = m
}

// rareCall says whether at most two sessions of endpoint (the lost one and
// the new one) made the call: then its re-issue tells whose client re-used
// it. A call the count does not hold (past its bound) is not rare.
func (d *Detector) rareCall(endpoint, tool, params string) bool {
	m, ok := d.callSessions[d.serverEventKey(endpoint, tool+"\x00"+params)]
	return ok && m.sessions <= 2
}

// toolShared says whether two live sessions of endpoint were seen making
// the very same call of tool (countCall), or the bound on what it notes was
// reached.
func (d *Detector) toolShared(endpoint, tool string) bool {
	if len(d.sharedTools) >= d.cfg.MaxEventsIndexedPerServer {
		return true
	}
	_, ok := d.sharedTools[d.serverEventKey(endpoint, tool)]
	return ok
}

// linkHorizon is how far back a link made at t to l (nil: none) looks for
// what may hide another client: since l began, or within LinkWindow.
func (d *Detector) linkHorizon(t time.Time, l *session) time.Time {
	since := t.Add(-d.cfg.LinkWindow)
	if l != nil && l.firstSeen.Before(since) {
		since = l.firstSeen
	}
	return since
}

// linkMayBeHidden says whether a session the capture did not fully show
// could be the one a client re-used: r is the link of the client at ex
// (time t) by evidence, link what the re-used state made of it (holds says
// whether a session holds that state). Candidates share the client address
// and server, and a link stands on being clearly best among those seen. It
// does not:
//   - when, since the linked session began or in the link window before t,
//     that pair lost bytes that may have held any session's requests or
//     status lines (pairGaps.hiding): another client's 404, its re-used
//     call or cursor, the sign that the connection was shared;
//   - when a rival may hold the state unseen: a lost session whose own
//     requests may be missing (or whose start was not captured), or one
//     that may have got a 404 unseen (pairGaps.mayBeLost). A rival is one
//     that fits the evidence and, where the link rests on its score, scores
//     within linkMargin of it;
//   - while the answer to a lost request is awaited (pairGaps.awaiting)
//     whose connection carried no session alone, or carried a rival.
func (d *Detector) linkMayBeHidden(ex *exchange, t time.Time, r, link linkResult, holds func(*session) bool) bool {
	since := d.linkHorizon(t, link.s)
	if d.hidingGapSince(since, ex.conn) {
		return true
	}
	bar := math.MinInt // the score a rival must reach
	if link.s != nil && link.s == r.s {
		bar = r.all[0].score - linkMargin + 1
	}
	mayHold := func(c *session) bool { return !c.startSeen || c.requestsLost || c.removed }
	for _, c := range r.all {
		if c.s != link.s && c.score >= bar && !holds(c.s) && mayHold(c.s) {
			return true
		}
	}
	g := d.gaps[pairOf(ex.conn)]
	if g == nil {
		return false
	}
	e := d.evidenceOf(ex.conn, ex.sess, ex)
	rival := func(c *session) bool {
		sc, fits := scoreCandidate(c, e)
		return c != link.s && c != ex.sess && fits && sc >= bar
	}
	for _, c := range g.mayBeLost {
		if t.Sub(c.mayBeLostAt) <= d.cfg.LinkWindow && (holds(c) || mayHold(c)) && rival(c) {
			return true
		}
	}
	// A lost request whose answer is still awaited: anyone's, or its
	// owner's call or 404.
	for _, lr := range g.awaiting {
		if !lr.at.Before(since) && (lr.owner == nil || rival(lr.owner)) {
			return true
		}
	}
	return false
}

// ambiguousLink records that a check could not say which lost session a
// client re-used: several candidates were equally good.
func (d *Detector) ambiguousLink(t time.Time, s *session, ex *exchange, form string, r linkResult) {
	ids := make([]string, 0, len(r.ambiguous))
	for _, c := range r.ambiguous {
		ids = append(ids, c.s.id)
	}
	sort.Strings(ids)
	d.unverifiable(t, s, ex, "silent_reinit_after_404", "ambiguous link: candidates "+strings.Join(ids, ", "), form)
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
		if d.unreadOutcome(t, s, c) {
			continue
		}
		c.unknown = true
		if c.answerLost {
			// Its response may be in the bytes the capture lost: the
			// client may know the outcome.
			d.unverifiable(t, s, nil, "unknown_outcome", ReasonCaptureGap, "call", id)
			continue
		}
		s.pendingUnknown = append(s.pendingUnknown, d.unknownOutcome(s, c, t, reason))
	}
	if how == "404" {
		s.gone = true
		d.endSession(s, "404")
	}
	d.lost.add(d, s)
}

// cancelRace: a client's notifications/cancelled, on a connection of its
// own, and the server's end of the call's stream that answers it may reach
// the capture in either order (its clock, another host's copy); one within
// this of the end is the client's give-up, not a cleaning up after a break.
const cancelRace = time.Second

func (d *Detector) unknownOutcome(s *session, c *call, t time.Time, reason string) *UnknownOutcome {
	var reissuedIn string
	if c.reissuedHere {
		reissuedIn = s.id
	}
	if c.cancelled && (c.broke == nil || c.broke.clientClosed || c.cancelledAt.Sub(c.broke.brokeAt) < cancelRace) {
		// The client gave the call up itself (a deadline, a user's
		// cancel), with its stream open or closing it first (go-sdk
		// closes, then cancels): its outcome is as unknown, but the
		// client knows it does not know. A cancellation well after the
		// stream broke under it is a time-out cleaning up after a
		// loss, which stays a loss.
		reason = UnknownCancelledPrefix + reason
	}
	return &UnknownOutcome{
		ID:                findingID("unknown_outcome", s.id, c.id, c.method, c.tool, c.paramsHash, s.client.String(), s.endpoint()),
		Time:              t,
		SessionID:         s.id,
		JSONRPCID:         c.id,
		Method:            c.method,
		Tool:              c.tool,
		ArgsHash:          c.paramsHash,
		Arguments:         c.args,
		CalledAt:          c.at,
		Client:            s.client.String(),
		Server:            s.server.String(),
		Reason:            reason,
		ReissuedInSession: reissuedIn,
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
	e := d.evidenceOf(ex.conn, s, ex)
	r := d.lost.link(e, s, o.Time, d.cfg.LinkWindow)
	if r.s == nil && s.swappedFrom == nil && len(r.ambiguous) == 0 {
		return
	}
	if r.s != nil && s.prev == "" {
		s.prev, s.linkConf = r.s.id, r.conf
	}
	d.checkOldCursor(ex, o, r)
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
		holds := func(c *session) bool { return c.toolCalls.at(key) != nil }
		// A call a third session made too (the replicas of one
		// application behind the address make the very same calls) tells
		// nothing of whose client re-used it, not even among equally good
		// candidates: only a rare one settles a link.
		link, rare := r, d.rareCall(ex.endpoint, m.Tool, m.ParamsHash)
		if rare {
			link = resolveByState(r, e, holds, true)
		}
		if link.s == nil {
			if slices.ContainsFunc(r.ambiguous, func(c linkCandidate) bool { return holds(c.s) }) {
				d.ambiguousLink(o.Time, s, ex, "form2", r)
			}
			continue
		}
		l := link.s
		c := l.toolCalls.at(key)
		if c == nil {
			continue
		}
		if !c.reissueFlagged {
			c.reissueFlagged = true
			// A limit that cut the lost session's history, which the
			// violation's evidence does not reach back to, may have hidden
			// an identical call answered there (a habit).
			historyLimit := d.limitOn(l.firstSeen, addrKey{l.client.Addr(), l.server})
			switch {
			case l.isRepeatable(m.Tool) || s.isRepeatable(m.Tool):
			case c.answered && c.failed:
				// Answered with an error: a failed call tried again, as
				// a client may (tool errors come back for the model to
				// correct and retry).
			case c.answered && l.deleteSent:
				// The client ended the lost session itself (the 404
				// answered its DELETE: the server had lost it already):
				// a completed call made again is a new run's, not a
				// replay of the old session's.
			case c.answered && c.habitual:
				// A poller's next poll: the completed call is one the
				// client made over and over, not one it replays.
			case c.habitual:
				// In flight at the 404: the re-issue may be a retry of
				// it, or the next of the calls the client makes over and
				// over, which the wire cannot tell apart.
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonHabitualCall, "form2", c.id)
			case l.callAside(m):
				// The lost session's identical call was set aside as a
				// proxy's hop (replicas of servers that number their
				// sessions send alike): its habit may be unseen.
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonHabitSetAside, "form2", c.id)
			case c.mayNotHaveReached:
				// A re-issue of a call no server may have got is no
				// duplicate: it may be the only run.
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonMayNotHaveReached, "form2", c.id)
			case (d.cfg.PartialHistory || !l.startSeen) && !l.toolsListed && !s.toolsListed:
				// The tools/list answer may be among the exchanges the
				// input missed, or came before the capture began.
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonToolsNotListed, "form2", c.id)
			case !l.startSeen:
				// Identical calls answered before the capture began
				// would make it a habit. (From spans, ones among the
				// exchanges the input missed would too; that is left
				// flagged, see the catalogue's known gap: all of a
				// crowd's replayed double charges would be lost.)
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonStartNotCaptured, "form2", c.id)
			case l.gap || s.gap || d.linkMayBeHidden(ex, o.Time, r, link, holds):
				// The tools/list answer that annotated the tool read-only
				// or idempotent, or another client's lost session holding
				// the same call, may be in the lost bytes.
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonCaptureGap, "form2", c.id)
			case historyLimit != "":
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", limitReason(historyLimit), "form2", c.id)
			case !rare && link.conf != ConfidenceCertain:
				// Not linked for certain (the same connection and
				// clientInfo), and the call is one other sessions made
				// too: S2 may be a replica's own session making its own
				// call.
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonCommonCall, "form2", c.id)
			case link.conf != ConfidenceCertain && d.toolShared(ex.endpoint, m.Tool):
				// The same, for all the wire shows: live sessions of the
				// endpoint were seen making the very same calls of the
				// tool side by side (replicas doing the same work), so a
				// call only the lost session and S2 made proves no link:
				// S2's may be a replica's own copy of it.
				d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonCallMayBeCommon, "form2", c.id)
			default:
				d.reissuedCall(ex, o, l, s, c, m, link)
			}
		}
		d.reissued(l, c, s.id)
	}
}

// noteRepeatable remembers the tools a tools/list result (decode's
// Message.Tools) annotated read-only or idempotent, at most
// decode.MaxAnnotatedTools, and returns the bytes that added.
func (s *session) noteRepeatable(tools string) (added int64) {
	s.toolsListed = true
	for line := range strings.SplitSeq(tools, "\n") {
		if line == "" || line[0] != decode.ToolRepeatable {
			continue
		}
		if s.repeatable == nil {
			s.repeatable = map[string]struct{}{}
		}
		if len(s.repeatable) >= decode.MaxAnnotatedTools {
			return
		}
		if _, ok := s.repeatable[line[1:]]; !ok {
			added += entryBytes + int64(len(line))
		}
		s.repeatable[line[1:]] = struct{}{}
	}
	return added
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
// client is replaying its log) or when its answer was not read (compressed).
func (d *Detector) reissuedCall(ex *exchange, o *decode.Observation, l, s *session, c *call, m *decode.Message, link linkResult) {
	severity, state := SeverityHigh, "had completed"
	reached := "the server accepted it and answered it"
	switch {
	case !c.answered && c.unread:
		// Its answer may have come, compressed: in flight is not shown.
		state = "had been sent (its answer, if one came, was in a body under a Content-Encoding not read here)"
		reached = "the server accepted it; whether it ran is unknown"
	case !c.answered:
		severity, state = SeverityCritical, "was in flight (its outcome unknown to the client)"
		reached = "the server had accepted it; whether it ran is unknown"
	}
	d.violation(&Violation{
		Kind: KindSilentReinitAfter404, Severity: severity, Time: o.Time, SessionID: l.id, NewSessionID: s.id,
		JSONRPCIDs: []string{c.id, m.ID}, Tool: m.Tool, Confidence: link.conf,
		Explanation: fmt.Sprintf("Session %s got 404 at %s while tools/call %s (id %s, sent %s) %s; the same client (linked with %s confidence by %s) "+
			"opened session %s and at %s issued the identical call again (same tool, same arguments) as id %s. The first "+
			"attempt reached the server (%s), so if it ran, its side effect now happens twice. Check the client's "+
			"recovery: calls of a lost session must be reconciled (idempotency key or status query) before being re-run.",
			l.id, l.lostAt.Format(time.RFC3339Nano), m.Tool, c.id, c.at.Format(time.RFC3339Nano), state, link.conf, link.why, s.id,
			o.Time.Format(time.RFC3339Nano), m.ID, reached),
		Evidence: []Evidence{
			{Time: c.at, Conn: c.client.String() + "->" + c.server.String(), Exchange: c.exNum, What: "request", Detail: fmt.Sprintf("tools/call %s id %s on session %s, arguments hash %s", c.tool, c.id, l.id, short(c.paramsHash))},
			lostEvidence(l),
			ex.requestEvidence(),
		},
	}, ex, s, "form2", c.id)
}

// checkOldCursor raises form 1: S2 resumed with an event id of the lost
// session S1. Whatever the server answered, the client is merging two
// epochs: critical when the server accepted the cursor, high when it
// rejected it (this server caught it; another would not). r is the link of
// S2 to its lost sessions.
func (d *Detector) checkOldCursor(ex *exchange, o *decode.Observation, r linkResult) {
	s := ex.sess
	if !ex.hasCursor || ex.resume == nil || s == nil {
		return
	}
	if _, own := s.events.get(ex.cursor); own {
		return
	}
	holds := func(c *session) bool {
		_, theirs := c.events.get(ex.cursor)
		_, partial := c.partial[ex.cursor]
		return theirs || partial
	}
	// A cursor is as rare as event ids are unique: only among equals.
	byEvidence := r
	if r.s == nil || !holds(r.s) {
		if r = resolveByState(r, d.evidenceOf(ex.conn, s, ex), holds, false); r.s == nil {
			if slices.ContainsFunc(r.ambiguous, func(c linkCandidate) bool { return holds(c.s) }) {
				d.ambiguousLink(o.Time, s, ex, "form1", r)
			}
			return
		}
	}
	l := r.s
	if !holds(l) {
		return
	}
	// S2 may have issued the cursor itself in bytes the capture lost: ids
	// that repeat across sessions (go-sdk numbers every standalone stream
	// _0, _1, ...) make that no rare case.
	if d.linkMayBeHidden(ex, o.Time, byEvidence, r, holds) || d.historyMayBeHidden(ex, s, s.firstSeen) {
		d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", ReasonCaptureGap, "form1")
		return
	}
	if !drawnAtRandom(ex.cursor) {
		// The cursor is an id S1 minted and S2 may have too, so S2's
		// whole history must show it did not. If S2's start was not
		// captured, or no stream of S2 was seen to break and left
		// unsettled, or a request of S2 was not seen, the stream it
		// resumes may have gone where the capture did not see it, and
		// issued the cursor. (A cancel of an unseen request is no such
		// sign here: the client may cancel S1's calls on S2.) Found
		// without the start with a TypeScript client against a go-sdk
		// server spread over three nodes (seed 17, 2026-12-05): S2's
		// initialize and standalone stream, which sent _0, went to
		// other nodes. An input that may miss whole exchanges never
		// shows S2's whole history: there, the stream of S2 seen to break
		// may be another than the one resumed (seed 27, 8 clients,
		// 2026-12-06: S2's standalone stream sent _0 and was cut on a
		// connection another node saw, as was its call's stream's
		// resume; the node saw the call's stream break, then the resume
		// from _0).
		reason := ""
		switch {
		case !s.startSeen:
			reason = ReasonStartNotCaptured
		case d.cfg.PartialHistory:
			reason = ReasonPartialHistory
		case s.unsettledBreaks(ex.resume.givenUpBefore) <= 0 || s.requestIDs.holed():
			reason = ReasonResumedStreamNotSeen
		}
		if reason != "" {
			d.unverifiable(o.Time, s, ex, "silent_reinit_after_404", reason, "form1")
			return
		}
	}
	severity, answer := SeverityCritical, "the server accepted it"
	if !ex.ok2xx() {
		severity, answer = SeverityHigh, fmt.Sprintf("this server rejected it with %d, but the client is wrong all the same", ex.status)
	}
	d.violation(&Violation{
		Kind: KindSilentReinitAfter404, Severity: severity, Time: o.Time, SessionID: l.id, NewSessionID: s.id, LastEventID: ex.cursor, Confidence: r.conf,
		Explanation: fmt.Sprintf("Session %s got 404; the same client (linked with %s confidence by %s) opened session %s and "+
			"resumed it with Last-Event-ID %s, an event id of the lost session (%s). Event ids mean something only in the "+
			"session that minted them, so the client is merging two epochs: what the new session sends is not the "+
			"continuation of what it holds. Check the client: after 404 it must drop its stream cursors and reconcile "+
			"in-flight calls.", l.id, r.conf, r.why, s.id, ex.cursor, answer),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(), lostEvidence(l)},
	}, ex, s, "form1")
}

// checkSessionlessReinit: form 3, a request without session id accepted by
// a server that had just answered 404 to the same client's session.
func (d *Detector) checkSessionlessReinit(ex *exchange, o *decode.Observation) {
	if ex.isInit || !ex.ok2xx() {
		return
	}
	if ex.method != "" && ex.method != "POST" {
		// A client carrying on without its session sends its calls; a GET
		// without a session id continues none (@ai-sdk/mcp's client opens
		// one before its initialize, and mcp-go answers it 200). A request
		// the capture lost may have been a call: unverifiable below.
		return
	}
	// Only the lost session's own endpoint says anything (evidenceOf): a
	// request to another one (another Host or path behind the same
	// address) may come from any client of a server without sessions.
	e := d.evidenceOf(ex.conn, nil, ex)
	r := d.lost.link(e, nil, o.Time, d.cfg.LinkWindow)
	if r.s == nil && len(r.ambiguous) > 0 {
		d.ambiguousLink(o.Time, nil, ex, "form3", r)
		return
	}
	l, conf := r.s, r.conf
	if l == nil || l.reinitFlagged {
		return
	}
	if l.lostConn.ID != ex.conn.ID || e.sharedConn {
		// Nothing but the connection ties a request without a session to
		// the client: on another one it may be any client of a server
		// without sessions, whose initialize the capture need not show.
		d.unverifiable(o.Time, l, ex, "silent_reinit_after_404", ReasonOtherConnection, "form3")
		return
	}
	if limit := requestLimit(o.Request); limit != "" {
		// Its body was not read (past a limit, or under an encoding not
		// read here): it may be the client's initialize, a clean start.
		// (A limit of the response's leaves the request's proof whole.)
		d.unverifiable(o.Time, l, ex, "silent_reinit_after_404", limitReason(limit), "form3")
		return
	}
	if ex.method == "" || d.gapped(ex, l.lostAt) || d.linkMayBeHidden(ex, o.Time, r, r, func(*session) bool { return true }) {
		// The request was not captured, or bytes were lost since the 404:
		// whether it really went without a session id is unknown.
		d.unverifiable(o.Time, l, ex, "silent_reinit_after_404", ReasonCaptureGap, "form3")
		return
	}
	l.reinitFlagged = true
	d.violation(&Violation{
		Kind: KindSilentReinitAfter404, Time: o.Time, SessionID: l.id, Confidence: conf,
		Explanation: fmt.Sprintf("Session %s got 404; the same client (linked with %s confidence by %s) then sent %s %s without any session id and "+
			"without initializing, and the server answered %d. The client carried on as if the session still existed and "+
			"the server executed requests outside any session, so results and notifications can no longer be tied to the "+
			"client's history. Check the client (it must re-initialize after 404) and the server (it must reject "+
			"session-less requests when it uses sessions).", l.id, conf, r.why, ex.method, ex.path, ex.status),
		Evidence: []Evidence{lostEvidence(l), ex.requestEvidence(), ex.responseEvidence()},
	}, ex, nil, "form3")
}

// sessionOnSessionless raises resume_on_sessionless_revision, once per
// session id: the server answered ex, of a revision without sessions, with
// a session id.
func (d *Detector) sessionOnSessionless(ex *exchange, o *decode.Observation) {
	if !d.firstCause(ex.endpoint, ex.respSession, "session") {
		return
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

// checkSessionless: under 2026-07-28 and later a server must neither use a
// session id nor honor Last-Event-ID.
func (d *Detector) checkSessionless(ex *exchange, o *decode.Observation) {
	if ex.hasRespSession && ex.ok2xx() {
		d.sessionOnSessionless(ex, o)
	}
	if ex.resume == nil {
		return
	}
	switch {
	case ex.method == "GET" && ex.ok2xx() && ex.sse:
		if !d.firstCause(ex.endpoint, ex.reqSession, "resume") {
			// This server's resumption under the revision is reported
			// once per session (or once without one).
			d.resolveResume(ex, o.Time, ResumeViolated, "resumption under "+ex.rev+", already reported for this session")
			return
		}
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

// firstCause says whether session id (of endpoint) is seen for the first
// time with cause: findings reported once per session and cause
// (resume_on_sessionless_revision: "session", minted or echoed, and
// "resume", a resumption honoured; unknown_session_not_404: "not404").
// Past MaxSessions remembered, every one is first.
func (d *Detector) firstCause(endpoint, id, cause string) bool {
	k := cause + "\x00" + sessionKey(endpoint, id)
	if _, done := d.causesReported[k]; done {
		return false
	}
	if len(d.causesReported) < d.cfg.MaxSessions {
		d.causesReported[k] = struct{}{}
	}
	return true
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
	if s.deleteSent {
		return // the client ended the session, and with it its streams
	}
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
		if !c.answered && !c.cancelled {
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
		d.unverifiable(o.Time, s, ex, "unresumable_close", limitReason(ex.limit))
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
	if ex.gap || d.requestsMayBeHidden(s, ex.conn) {
		// Lost bytes may hold the client's cancellation of the call, or
		// its DELETE of the session.
		d.unverifiable(o.Time, s, ex, "unresumable_close", ReasonCaptureGap)
		return
	}
	if e.CutMidEvent {
		// The server may have sent an id in the part of the event the cut
		// took (@hono/mcp writes it after the data): cut, not ended early.
		d.unverifiable(o.Time, s, ex, "unresumable_close", ReasonCutMidEvent)
		return
	}
	if ex.revAsked {
		// The initialize itself went unanswered: the server may speak an
		// older revision than the client asked for, where this is no rule.
		d.unverifiable(o.Time, s, ex, "unresumable_close", ReasonRevisionNotSeen)
		return
	}
	if d.cfg.PartialHistory {
		// So may an exchange the input never showed.
		d.unverifiable(o.Time, s, ex, "unresumable_close", ReasonPartialHistory)
		return
	}
	// A server that ends the session ends its streams too (a restart, an
	// expiry), and the client's way back is then a new session, cursor or
	// not: the finding waits for the session's next answer.
	d.holdClose(&Violation{
		Kind: KindUnresumableClose, Time: o.Time, JSONRPCIDs: pending, Tool: tool,
		Explanation: fmt.Sprintf("Under %s the server ended the SSE stream of a POST in session %s (%s) before sending the "+
			"JSON-RPC response to %v, and it had sent no event id on that stream. Without an id the client has no cursor "+
			"to resume from, so the response is lost and the call's outcome is unknown. The session outlived the stream: "+
			"a later request of it was answered. Check the server: it may close a request stream early only after a "+
			"priming event with an id.", ex.rev, s.id, e.How, pending),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(),
			ex.evidence(o.Time, "stream end", fmt.Sprintf("ended %s after %d event(s), none with an id", e.How, e.Events))},
	}, ex, s)
}

// answerHeldCloses settles s's held unresumable_close findings by ex's
// answer: a 404 after a stream ended says the server ended the session
// with it, which is not this finding; a 2xx to a request sent after it
// says the session outlived the stream, which is. Other answers say
// neither: a gateway's 503 while the server restarts, a redirect that
// reached no MCP handler, a 400 or 401 that may be the dead session's.
func (d *Detector) answerHeldCloses(s *session, ex *exchange) {
	held := s.heldCloses[:0]
	for _, v := range s.heldCloses {
		switch {
		case ex.status == 404 && ex.respAt.After(v.Time):
		case ex.ok2xx() && ex.start.After(v.Time):
			v.Evidence = append(v.Evidence, ex.requestEvidence(), ex.responseEvidence())
			d.emitViolation(v, s)
		default:
			held = append(held, v)
		}
	}
	clear(s.heldCloses[len(held):])
	s.heldCloses = held
}

// settleHeldCloses decides what s still holds when it ends: nothing after
// a 404 (the session ended), else unverifiable, since no answer showed
// whether the session outlived the stream.
func (d *Detector) settleHeldCloses(s *session, how string) {
	for _, v := range s.heldCloses {
		if how != "404" {
			d.unverifiableFinding(v, ReasonSessionFateUnseen)
		}
	}
	s.heldCloses = nil
}

// lostEvidence is the 404 that lost session l, where it was seen.
func lostEvidence(l *session) Evidence {
	return Evidence{Time: l.lostAt, Conn: l.lostConn.Client.String() + "->" + l.lostConn.Server.String(), Exchange: l.lostEx,
		What: "response header", Detail: fmt.Sprintf("status 404 for Mcp-Session-Id: %s", l.id)}
}
