package detector

import (
	"crypto/sha256"

	"encoding/hex"
	"fmt"
	"github.com/replaywatch/replaywatch/decode"
	"strconv"
	"strings"
	"time"
)

// findingID is a deterministic id: SHA-256 over the kind and the evidence
// that identifies a finding, truncated to 16 bytes. Only wire facts go in
// (session ids, event ids, JSON-RPC ids, endpoints, the request's identity),
// never ConnMeta.ID or wall clock, so two agents seeing the same traffic store
// the same row.
func findingID(kind string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	for _, p := range parts {
		// A separator that cannot occur in header values keeps
		// ("ab","c") and ("a","bc") apart.
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

var severities = map[Kind]Severity{
	KindSessionSwap:                 SeverityCritical,
	KindReplayedEvent:               SeverityCritical,
	KindCrossStreamReplay:           SeverityCritical,
	KindDuplicateDelivery:           SeverityHigh,
	KindUnknownLastEventIDAccepted:  SeverityHigh,
	KindEventIDReset:                SeverityHigh,
	KindTruncatedResume:             SeverityHigh,
	KindSilentReinitAfter404:        SeverityCritical,
	KindIncompleteReplay:            SeverityHigh,
	KindUnresumableClose:            SeverityMedium,
	KindProgressReplay:              SeverityMedium,
	KindResumeOnSessionlessRevision: SeverityMedium,
	KindReissuedCallAfterBreak:      SeverityCritical,
	KindUnknownSessionNot404:        SeverityHigh,
	KindCursorDropped:               SeverityHigh,
}

// lowerSeverities are the kinds whose findings may carry a lower severity
// than the catalogue's (Violation.Severity) when the wire shows less at
// stake: another session of the same client (cross_stream_replay); a call
// that had completed before the 404, or an old cursor the server rejected
// (silent_reinit_after_404); a tool not annotated destructive
// (reissued_call_after_break).
var lowerSeverities = map[Kind][]Severity{
	KindCrossStreamReplay:    {SeverityHigh},
	KindSilentReinitAfter404: {SeverityHigh},
	// a tool not annotated destructiveHint
	KindReissuedCallAfterBreak: {SeverityHigh},
}

// Kinds returns the violation catalogue, in its order.
func Kinds() []Kind {
	return []Kind{
		KindSessionSwap, KindReplayedEvent, KindCrossStreamReplay, KindDuplicateDelivery,
		KindUnknownLastEventIDAccepted, KindEventIDReset, KindTruncatedResume, KindSilentReinitAfter404,
		KindIncompleteReplay, KindUnresumableClose, KindProgressReplay, KindResumeOnSessionlessRevision,
		KindReissuedCallAfterBreak, KindUnknownSessionNot404, KindCursorDropped,
	}
}

// SeverityOf returns the catalogue severity of kind.
func SeverityOf(k Kind) Severity { return severities[k] }

// SeveritiesOf returns every severity a finding of kind can carry, the
// catalogue's first: what alert rules must route.
func SeveritiesOf(k Kind) []Severity {
	return append([]Severity{severities[k]}, lowerSeverities[k]...)
}

// requestIdentity names an exchange by what its request said on the wire.
func (ex *exchange) requestIdentity() string {
	var b strings.Builder
	b.WriteString(ex.conn.Client.String())
	b.WriteByte(' ')
	b.WriteString(ex.method)
	b.WriteByte(' ')
	b.WriteString(ex.path)
	b.WriteString(" session=")
	b.WriteString(ex.reqSession)
	if ex.hasCursor {
		b.WriteString(" last-event-id=")
		b.WriteString(ex.cursor)
	}
	for _, m := range ex.msgs {
		b.WriteString(" rpc=")
		b.WriteString(m.ID)
		b.WriteString(m.Method)
	}
	// Two identical requests on one connection (a client polling with the
	// same cursor) are told apart by their place on it, which every agent
	// that saw the connection open numbers alike.
	if ex.conn.StartSeen {
		b.WriteString(" exchange=")
		b.WriteString(strconv.Itoa(ex.key.ex))
	}
	return b.String()
}

func (ex *exchange) connString() string {
	return ex.conn.Client.String() + "->" + ex.conn.Server.String()
}

func (ex *exchange) evidence(t time.Time, what, detail string) Evidence {
	return Evidence{Time: t, Conn: ex.connString(), Exchange: ex.key.ex, What: what, Detail: detail}
}

// requestEvidence describes the request head of ex.
func (ex *exchange) requestEvidence() Evidence {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", ex.method, ex.path)
	if ex.hasReqSession {
		fmt.Fprintf(&b, ", Mcp-Session-Id: %s", ex.reqSession)
	} else {
		b.WriteString(", no Mcp-Session-Id")
	}
	if ex.hasCursor {
		fmt.Fprintf(&b, ", Last-Event-ID: %s", ex.cursor)
	}
	if ex.protoHeader != "" {
		fmt.Fprintf(&b, ", MCP-Protocol-Version: %s", ex.protoHeader)
	}
	for _, m := range ex.msgs {
		if m.Method != "" {
			fmt.Fprintf(&b, ", JSON-RPC %s", m.Method)
			if m.ID != "" {
				fmt.Fprintf(&b, " id %s", m.ID)
			}
			if m.Tool != "" {
				fmt.Fprintf(&b, " tool %s (params hash %s)", m.Tool, short(m.ParamsHash))
			}
		}
	}
	if ex.headerMismatch != "" {
		b.WriteString(", ")
		b.WriteString(ex.headerMismatch)
	}
	return ex.evidence(ex.start, "request", b.String())
}

// responseEvidence describes the response head of ex.
func (ex *exchange) responseEvidence() Evidence {
	d := "status " + strconv.Itoa(ex.status)
	if ex.hasRespSession {
		d += ", Mcp-Session-Id: " + ex.respSession
	} else {
		d += ", no Mcp-Session-Id"
	}
	if ex.sse {
		d += ", text/event-stream"
	}
	return ex.evidence(ex.respAt, "response header", d)
}

// idServer is what a finding id names the server by: its logical
// endpoint (Host and path), which every agent sees alike, where the
// server's address may differ. Through a Service (destination NAT) the
// client's node sees the address the client dialled and the server's node
// the pod behind it, and both agents must give one finding one id.
func idServer(ex *exchange, s *session, server string) string {
	switch {
	case ex != nil:
		return ex.endpoint
	case s != nil:
		return s.endpoint()
	}
	return server
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// violation fills the common fields of v from ex and s, gives it its id and
// hands it to the sink. idParts identify this finding beyond kind, session
// and request identity.
func (d *Detector) violation(v *Violation, ex *exchange, s *session, idParts ...string) *Violation {
	if v = d.completeViolation(v, ex, s, idParts...); v != nil {
		d.emitViolation(v, s)
	}
	return v
}

// holdClose completes an unresumable_close finding as violation does and
// keeps it on s until an answer of the session settles it
// (answerHeldCloses, settleHeldCloses). Past maxHeldClosesPerSession the
// oldest is settled unverifiable.
func (d *Detector) holdClose(v *Violation, ex *exchange, s *session) {
	if v = d.completeViolation(v, ex, s); v == nil {
		return
	}
	if len(s.heldCloses) == maxHeldClosesPerSession {
		d.stats.LimitsHit["maxHeldClosesPerSession"]++
		d.unverifiableFinding(s.heldCloses[0], ReasonLimitPrefix+"maxHeldClosesPerSession")
		s.heldCloses = append(s.heldCloses[:0], s.heldCloses[1:]...)
	}
	s.heldCloses = append(s.heldCloses, v)
}

func (d *Detector) emitViolation(v *Violation, s *session) {
	if s != nil {
		s.violations++
	}
	d.stats.Violations[v.Kind]++
	d.sink.Violation(v)
}

// unverifiableFinding turns a completed violation that no later evidence
// confirmed into the check's unverifiable record.
func (d *Detector) unverifiableFinding(v *Violation, reason string) {
	u := &Unverifiable{Time: v.Time, SessionID: v.SessionID, Client: v.Client, Server: v.Server, Reason: reason, Check: string(v.Kind)}
	u.ID = findingID("unverifiable", string(v.Kind), reason, v.ID)
	d.emitUnverifiable(u)
}

// completeViolation fills the common fields of v from ex and s and gives
// it its id; it returns nil when a pipeline limit cut the evidence, having
// recorded the check as unverifiable instead.
func (d *Detector) completeViolation(v *Violation, ex *exchange, s *session, idParts ...string) *Violation {
	var ev *decode.Event
	if d.cur != nil {
		ev = d.cur.Event
	}
	if l := d.limitOnEvidence(ex, s, v.Evidence); l != "" {
		// A pipeline limit cut or reordered the evidence of this pair:
		// what looks like a violation may be the limit's doing.
		reason := limitReason(l)
		var parts []string
		if s != nil {
			parts = append(parts, s.id)
		}
		d.unverifiable(v.Time, s, ex, string(v.Kind), reason, append(append(parts, v.LastEventID, v.FirstEventID, v.NewSessionID), idParts...)...)
		if ex != nil && ex.resume != nil && !ex.resume.emitted && ex.resume.limitHidden == "" {
			ex.resume.limitHidden = reason
		}
		return nil
	}
	if v.Severity == "" {
		v.Severity = severities[v.Kind]
	}
	if s != nil {
		if v.SessionID == "" {
			v.SessionID = s.id
		}
		if v.ProtocolVersion == "" {
			v.ProtocolVersion = s.rev
		}
	}
	if ex != nil {
		if v.Client == "" {
			v.Client = ex.conn.Client.String()
			v.Server = ex.conn.Server.String()
		}
		if v.ProtocolVersion == "" {
			v.ProtocolVersion = ex.rev
		}
	}
	rpcIDs := v.JSONRPCIDs
	if len(v.JSONRPCIDs) == 0 && v.FirstEventID != "" && ev != nil {
		v.JSONRPCIDs = eventIDs(ev.Messages, true)
		// The id keeps every id the event carried, as before 2026-12-06:
		// agents of both versions in one deployment (a rolling upgrade)
		// name one finding alike.
		rpcIDs = eventIDs(ev.Messages, false)
	}
	parts := append([]string{v.SessionID, v.NewSessionID, v.LastEventID, v.FirstEventID, v.Client, idServer(ex, s, v.Server), strings.Join(rpcIDs, ",")}, idParts...)
	if ex != nil {
		parts = append(parts, ex.requestIdentity())
	}
	v.ID = findingID(string(v.Kind), parts...)
	if ex != nil && ex.resume != nil && !ex.resume.emitted {
		ex.resume.violations = append(ex.resume.violations, v.ID)
	}
	return v
}

// Unverifiable reasons. They are stable phrases: Stats counts by them.
const (
	ReasonCaptureGap = "capture gap in the evidence"
	// ReasonToolsNotListed: no tools/list answer seen names the tool, so
	// whether it is annotated read-only or idempotent is unknown.
	ReasonToolsNotListed = "tool annotations not seen"
	// ReasonHabitualCall: the client made the call over and over (in the
	// lost session, or without sessions), so its re-issue after a call in
	// flight or broken may be the next of them (a poller's next poll), not
	// a retry of that one.
	ReasonHabitualCall = "call the client made over and over"
	// ReasonCommonCall: a call re-made in a new session was made by
	// other sessions too, and the link to the lost session is not
	// certain (the same connection and clientInfo): the new session may be
	// another replica's, making its own call.
	ReasonCommonCall = "call other sessions made too, linked by what identical clients share"
	// ReasonCallMayBeCommon: as ReasonCommonCall, where no other session
	// was seen making the call, but live sessions of the endpoint were seen
	// making the very same calls of the tool side by side: its clients are
	// replicas doing the same work, and the new session may be another
	// replica's, making its own copy of the call.
	ReasonCallMayBeCommon = "the endpoint's clients were seen making the very same calls of the tool, linked by what identical clients share"
	// ReasonMayNotHaveReached: the first attempt was answered 502 or 503,
	// which a gateway also answers when no server got the request.
	ReasonMayNotHaveReached = "first attempt answered 502 or 503: it may never have reached a server"
	// ReasonHabitSetAside: calls of the re-issuing client at the endpoint
	// were set aside as a proxy's hops (identical to another client's
	// within the second), so its habit of making the call may be unseen.
	ReasonHabitSetAside    = "requests of the client at the endpoint were taken for a proxy's hops: its habit may be in them"
	ReasonStartNotCaptured = "session start not captured"
	// ReasonBroadcast: an event another session was sent too is a
	// notification a server may send every session alike (a list changed,
	// a resource updated), with the same data and, from a shared log, the
	// same id: it proves no leak.
	ReasonBroadcast = "notification a server may broadcast to every session"
	// ReasonClientStartNotCaptured: without sessions, a call broke within
	// LinkWindow of the capture's beginning, and the client's
	// server/discover was not seen: identical calls answered before the
	// capture began would make its re-issue a habit.
	ReasonClientStartNotCaptured = "client start not captured"
	// ReasonPartialHistory: the input may miss whole exchanges
	// (Config.PartialHistory) and the check rests on one not being seen.
	ReasonPartialHistory = "input may miss whole exchanges"
	// ReasonResumedStreamNotSeen: a resume from an id the session never
	// sent (and no other session sent at random) came with no stream of
	// the session seen to break and left unsettled (not resumed from an id
	// of it, whatever the answer, nor its calls cancelled before), or the
	// client cancelled a request of the session the capture never saw, or
	// the server went on after the cursor: the stream it resumes, with the
	// ids it carried, was on a connection the capture did not see (a load
	// balancer spreads a session's connections over nodes, and a node's
	// agent sees only its own).
	ReasonResumedStreamNotSeen = "the stream it resumes was not captured"
	// ReasonBrokenStreamsUnresumed: a resume from an id the session never
	// sent, with more than one broken stream of the session left
	// unresumed, may have continued any of them or a stream the capture
	// did not see.
	ReasonBrokenStreamsUnresumed = "several broken streams of the session left unresumed"
	ReasonCaptureEnded           = "capture ended with the stream open"
	ReasonStreamCut              = "stream cut before the outcome was shown"
	ReasonOwedNotReplayed        = "stream closed before the owed events were replayed"
	ReasonLimitPrefix            = "limit hit: "
	ReasonSessionEvicted         = "session evicted (limit hit: MaxSessions)"
	ReasonStateEvicted           = "session evicted (limit hit: MaxStateBytes)"
	ReasonSessionDeleted         = "session deleted before the request"
	// ReasonRevisionNotSeen: an initialize's stream ended before its
	// result, so the revision is the one the client asked for; the server
	// may have chosen an older one (a server that does not speak the
	// client's latest answers with its own).
	ReasonRevisionNotSeen = "revision the server chose not seen"
	// ReasonCutMidEvent: the connection ended inside an event whose id
	// line, if any, would have come after the cut.
	ReasonCutMidEvent = "stream cut inside an event whose id line may have followed"
	// ReasonLetGoMidEvent: the capture stopped following a stream (its
	// idle timeout, an eviction) inside an event whose id line it had
	// seen: the event may have completed unseen, and its id reached the
	// client.
	ReasonLetGoMidEvent = "stream let go inside an event that may have completed unseen"
	// ReasonSessionFateUnseen: a stream ended without a cursor, and no
	// later answer of the session showed whether the session outlived it
	// (a server that ends a session ends its streams with it).
	ReasonSessionFateUnseen = "no later answer showed the session outlived the stream"
	// ReasonOtherConnection: a request without a session id came on
	// another connection than the lost session's 404. Any client of a
	// server that runs without sessions (2025-11-25 allows one) sends such
	// requests, and its initialize may have come before the capture.
	ReasonOtherConnection = "request without a session id on another connection than the 404"
	// ReasonTokenRequestNotSeen: progress went back for a token no
	// request of the session seen carried, though the session's start was
	// seen: its requests went on connections the capture did not see (a
	// load balancer spreading the session over nodes), and one of them may
	// have re-used the token.
	ReasonTokenRequestNotSeen = "no request carrying the progress token was captured"
	// ReasonProgressOffItsStream: progress went back on a stream that is
	// not its call's own (the standalone GET), which would also carry the
	// progress of a second call re-using the token, sent on a connection
	// the capture did not see.
	ReasonProgressOffItsStream = "progress went back outside its call's stream"
	// ReasonSharedProgressToken: two calls of the session carried one
	// progress token, and a value may be either's: their progress
	// interleaves, and either's may come late.
	ReasonSharedProgressToken = "progress token carried by two requests"
	// ReasonProgressTotalChanged: progress went back with another total
	// than the value before it. A call counts on one total, so the two
	// may be two calls' (a second, re-using the token, sent on a
	// connection the capture did not see), not one call's count going
	// back.
	ReasonProgressTotalChanged = "progress went back on another total"
	// ReasonCursorStreamUnknown: a resumed stream ended before any event
	// id, but its cursor is not in the session's index, so whether the
	// GET without a cursor that followed continues it (the standalone
	// stream) or opens the standalone stream beside a call's is unknown.
	ReasonCursorStreamUnknown = "stream of the cursor not seen"
	// ReasonAnswerNotSeen: the check rests on the request's answer (a
	// 404 changes it), and the capture lost it or ended first.
	ReasonAnswerNotSeen = "answer to the request not captured"
	// ReasonTSGetStream: the TypeScript SDK's example event store cannot
	// resume its standalone GET stream (it splits "_GET_stream_<ms>_<rand>"
	// on the first "_" and finds no stream), so it answers 200 and replays
	// nothing. Whatever the server sent there while the client was away is
	// lost without crossing the wire: the capture cannot show it either way.
	ReasonTSGetStream       = "TypeScript example store cannot resume the standalone GET stream; events sent while the client was away may be lost unseen"
	ReasonIndexLimit        = ReasonLimitPrefix + "MaxEventsIndexedPerSession"
	ReasonStreamLimit       = ReasonLimitPrefix + "MaxStreamsPerSession"
	ReasonInflightLimit     = ReasonLimitPrefix + "MaxInflightPerSession"
	ReasonResponsesLimit    = ReasonLimitPrefix + "MaxResponsesPerSession"
	ReasonProgressLimit     = ReasonLimitPrefix + "MaxProgressTokensPerSession"
	ReasonOpenExchangeLimit = ReasonLimitPrefix + "MaxOpenExchanges"
	// ReasonEncodedBody: a body the evidence needs was under a
	// Content-Encoding the decoder does not read (br, zstd; gzip and
	// deflate are inflated, unless their data would not inflate): its
	// events, ids and messages are not in the capture's reading.
	ReasonEncodedBody = "body under a Content-Encoding, not decoded"
	// ReasonAnsweredEarly: the server answered a request before its body
	// had arrived whole (decode.Request.AnsweredEarly), so what the body
	// held (an initialize, a call) is not known.
	ReasonAnsweredEarly = "request answered before its body ended, body not read"
	// ReasonHTTP2: a connection between the same client address and
	// server spoke HTTP/2 (h2c), which the decoder does not read, while the
	// evidence was gathered: it may have carried the client's requests or
	// the server's answers.
	ReasonHTTP2 = "HTTP/2 connection, not decoded"
)

// encodedBody stands in ex.limit and session.indexLimit where a limit's
// name would: what made an exchange's content, or a session's event index,
// incomplete. It is not a limit and is never counted as one.
const encodedBody = decode.EndNotInflated

// answeredEarly stands in ex.limit for a request answered before its body
// ended: as for encodedBody, its body is not read, and it is no limit.
const answeredEarly = "answered early"

// limitReason is the Unverifiable reason for what ex.limit or
// session.indexLimit names.
func limitReason(name string) string {
	switch name {
	case encodedBody:
		return ReasonEncodedBody
	case answeredEarly:
		return ReasonAnsweredEarly
	case decode.GapHTTP2:
		return ReasonHTTP2
	}
	return ReasonLimitPrefix + name
}

// contentUnread says a reason is a limit's, an encoded body's or HTTP/2's:
// content the capture carried but the pipeline did not read, where anything
// may be.
func contentUnread(reason string) bool {
	return reason == ReasonEncodedBody || reason == ReasonAnsweredEarly || reason == ReasonHTTP2 ||
		strings.HasPrefix(reason, ReasonLimitPrefix)
}

func (d *Detector) unverifiable(t time.Time, s *session, ex *exchange, check, reason string, idParts ...string) {
	var at requestOrigin
	if ex != nil {
		at = originOf(ex)
	}
	d.unverifiableFrom(t, s, at, check, reason, idParts...)
}

// requestOrigin is what a record takes from the request it concerns, kept
// for records made after its exchange was recycled (parkedFinding).
type requestOrigin struct {
	client, server, endpoint, identity string
}

func originOf(ex *exchange) requestOrigin {
	return requestOrigin{ex.conn.Client.String(), ex.conn.Server.String(), ex.endpoint, ex.requestIdentity()}
}

// unverifiableFrom is unverifiable for the request at (zero: none).
func (d *Detector) unverifiableFrom(t time.Time, s *session, at requestOrigin, check, reason string, idParts ...string) {
	u := &Unverifiable{Time: t, Reason: reason, Check: check}
	if s != nil {
		u.SessionID = s.id
		u.Client, u.Server = s.client.String(), s.server.String()
	}
	server := idServer(nil, s, u.Server)
	if at.identity != "" {
		u.Client, u.Server, server = at.client, at.server, at.endpoint
		idParts = append(idParts, at.identity)
	}
	u.ID = findingID("unverifiable", append([]string{check, reason, u.SessionID, u.Client, server}, idParts...)...)
	d.emitUnverifiable(u)
}

func (d *Detector) emitUnverifiable(u *Unverifiable) {
	d.stats.Unverifiable[u.Reason]++
	d.sink.Unverifiable(u)
}

// limitHit counts a bound being reached; the first time per session it also
// records an Unverifiable so the gap in coverage is visible.
func (d *Detector) limitHit(field string, t time.Time, s *session, check string) {
	d.stats.LimitsHit[field]++
	if s == nil {
		return
	}
	bit := limitBit(field)
	if s.limitsReported&bit != 0 {
		return
	}
	s.limitsReported |= bit
	d.unverifiable(t, s, nil, check, ReasonLimitPrefix+field)
}

func limitBit(field string) uint16 {
	switch field {
	case "MaxOpenExchanges":
		return 32
	case "maxPrimingPositions":
		return 64
	case "maxPartialIDsPerSession":
		return 256
	case "MaxEventsIndexedPerSession":
		return 1
	case "MaxStreamsPerSession":
		return 2
	case "MaxInflightPerSession":
		return 4
	case "MaxResponsesPerSession":
		return 8
	case "MaxProgressTokensPerSession":
		return 16
	}
	return 128
}

// eventIDs lists the JSON-RPC ids an event carried; with answersOnly, those
// of the client's requests it answered, so that a finding on an event names
// the requests it touched. A request of the server's own (sampling,
// elicitation, ping) has an id of the server's numbering, which overlaps the
// client's (both count from 0).
func eventIDs(msgs []decode.Message, answersOnly bool) []string {
	var ids []string
	for i := range msgs {
		m := &msgs[i]
		answer := m.Type == decode.MsgResponse || m.Type == decode.MsgError
		if id := m.ID; id != "" && id != "null" && (answer || !answersOnly) {
			ids = append(ids, id)
		}
	}
	return ids
}
