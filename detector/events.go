package detector

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/replaywatch/replaywatch/decode"
)

// isPriming: an event that only carries an id (2025-11-25 priming, go-sdk
// names it "prime"). It is never a replay or a delivery of content.
func isPriming(ev *decode.Event) bool {
	return ev.HasID && len(ev.Messages) == 0 && (ev.DataEmpty || ev.Type == "prime")
}

// hash64 keeps the first 64 bits of a hex digest: enough to tell two event
// payloads apart without keeping the 64-byte string per event.
func hash64(hexDigest string) uint64 {
	var v uint64
	for i := 0; i < len(hexDigest) && i < 16; i++ {
		c := hexDigest[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return v
		}
	}
	return v
}

// onceFlag bits: one finding of a kind per exchange, so a whole duplicated
// replay is one row, not hundreds.
const (
	onceDupEvent uint16 = 1 << iota
	onceDupResponse
	onceReset
	onceProgress
	onceReplayed
	onceCross
	onceIncomplete
	onceCrossSession
)

func (ex *exchange) once(bit uint16) bool {
	if ex.flags&bit != 0 {
		return false
	}
	ex.flags |= bit
	return true
}

func (d *Detector) onEvent(ex *exchange, o *decode.Observation) {
	ex.events++
	s := ex.sess
	if ex.sessionless {
		d.onMessages(ex, o, o.Event.Messages, false)
	}
	if s == nil || ex.sessionless || s.removed {
		return
	}
	ev := o.Event
	s.eventsN++
	d.touch(s, o.Time)
	switch {
	case ev.LineDropped:
		// An id (or another field) of this event may be gone: the
		// stream's ids and the session's index are incomplete.
		ex.limit = "MaxSSELineBytes"
		if s.indexLimit == "" {
			s.indexLimit = ex.limit
		}
	case ev.DataTruncated && ex.limit == "":
		// Its JSON-RPC messages (a response) were not read.
		ex.limit = "MaxEventBytes"
	}
	priming := isPriming(ev)
	known, reused := false, false
	var ref eventRef
	if ev.HasID && ev.ID != "" {
		ex.sawID = true
		ref, known = s.events.get(ev.ID)
		data := hash64(ev.DataHash)
		if known {
			// An id re-issued for other content is a new event that
			// collides with an old id (a reset), not a replay of it.
			reused = d.knownEvent(ex, s, o, ref, data)
			known = !reused
		} else {
			if !priming && ex.resume != nil && ex.resume.active {
				d.checkCrossSession(ex, s, o, data)
			}
			d.newEvent(ex, s, o, data, priming)
			d.indexServerEvent(ex, s, o, data)
		}
	}
	// Priming and `event: close` carry no content: they neither deliver
	// anything nor end a replay.
	control := len(ev.Messages) == 0 && (ev.DataEmpty || priming)
	if rs := ex.resume; rs != nil && rs.active && !control {
		d.resumeEvent(ex, o, known, reused, ref)
	}
	d.onMessages(ex, o, ev.Messages, known)
	if d.events != nil {
		d.emitStreamEvent(ex, s, o, known || reused, priming)
	}
}

// emitStreamEvent hands one delivered event to an EventSink. again says the
// id was issued before in this session (a replay, a duplicate or a reset).
func (d *Detector) emitStreamEvent(ex *exchange, s *session, o *decode.Observation, again, priming bool) {
	ev := o.Event
	se := &StreamEvent{
		Time: o.Time, SessionID: s.id, EventID: ev.ID, Position: -1, Delivery: 1,
		Resumed: ex.resume != nil, Priming: priming, Messages: len(ev.Messages),
		DataBytes: ev.DataBytes, DataHash: strings.Clone(ev.DataHash), Client: ex.conn.Client.String(), Server: ex.conn.Server.String(),
	}
	if len(ev.Messages) > 0 {
		se.Method, se.JSONRPCID = ev.Messages[0].Method, ev.Messages[0].ID
	}
	// A session id seen again after its session ended names a new life of
	// it, with ids of its own.
	life := strconv.FormatInt(s.firstSeen.UnixNano(), 10)
	ref, indexed := eventRef{}, false
	if ev.HasID && ev.ID != "" {
		ref, indexed = s.events.get(ev.ID)
	}
	if indexed {
		se.StreamID, se.Position = streamName(s.streams[ref.stream]), ref.pos
		if again {
			if s.redelivered == nil {
				s.redelivered = map[string]int{}
			}
			if s.redelivered[ev.ID] == 0 {
				d.charge(s, entryBytes+int64(len(ev.ID)))
			}
			s.redelivered[ev.ID]++
			se.Delivery += s.redelivered[ev.ID]
		}
		se.ID = findingID("stream_event", s.id, life, ev.ID, strconv.Itoa(se.Delivery))
	} else {
		// No id (or one the index had no room for): the event is named by
		// its place, the session's exchange ordinal and its index there.
		se.StreamID = streamName(ex.stream)
		se.ID = findingID("stream_event", s.id, life, ev.ID, "exchange", strconv.Itoa(ex.seq), strconv.Itoa(ex.events))
	}
	d.events.StreamEvent(se)
}

// knownEvent handles an id the session already issued. It reports whether
// the id now carries different content (an event_id_reset).
func (d *Detector) knownEvent(ex *exchange, s *session, o *decode.Observation, ref eventRef, data uint64) bool {
	ev := o.Event
	first := s.streams[ref.stream]
	where := func() string {
		return fmt.Sprintf("event id %s (first sent at position %d of stream %s)", ev.ID, ref.pos, streamName(first))
	}
	if ref.data != data {
		if !ex.once(onceReset) {
			return true
		}
		d.violation(&Violation{
			Kind: KindEventIDReset, Time: o.Time, LastEventID: ex.cursor, FirstEventID: ev.ID, StreamID: streamName(first),
			Explanation: fmt.Sprintf("Session %s re-issued event id %s for different content than the first time. "+
				"The server lost its event store or a second backend minted ids in the same namespace, so a client resuming "+
				"from any id in this session may be handed unrelated events or skip real ones. Check that the event store "+
				"survives backend restarts and is shared by every backend that serves the session.", s.id, ev.ID),
			Evidence: []Evidence{ex.requestEvidence(), ex.evidence(o.Time, "sse event", where()+", data differs from the first delivery")},
		}, ex, s, ev.ID, "content")
		return true
	}
	if rs := ex.resume; rs != nil && rs.active {
		return false // on a resumed stream: judged by resumeEvent against the cursor
	}
	if ref.data == data && ex.once(onceDupEvent) {
		if s.requestGap || d.historyMayBeHidden(ex, s, s.firstSeen) {
			// The request that opened this stream, or the one that
			// opened the stream that first delivered it, may be the one
			// the capture lost: a resume with Last-Event-ID, or the
			// other hop of a proxy, looks the same.
			d.unverifiable(o.Time, s, ex, "duplicate_delivery", ReasonCaptureGap, ev.ID)
			return false
		}
		d.violation(&Violation{
			Kind: KindDuplicateDelivery, Time: o.Time, FirstEventID: ev.ID, StreamID: streamName(first),
			Explanation: fmt.Sprintf("Session %s delivered event %s a second time on a stream that was not a resume. "+
				"A client that does not de-duplicate by event id acts on it twice (a repeated notification or tool result). "+
				"Check whether the server replays its store when a stream is opened without Last-Event-ID.", s.id, ev.ID),
			Evidence: append([]Evidence{ex.requestEvidence(), ex.evidence(o.Time, "sse event", where())}, firstSent(s, ev.ID)...),
		}, ex, s, ev.ID)
	}
	return false
}

// newEvent indexes an id the session has not issued before and checks it
// against the order its shape promises.
func (d *Detector) newEvent(ex *exchange, s *session, o *decode.Observation, data uint64, priming bool) {
	ev := o.Event
	p := parseEventID(ev.ID)
	s.shape = s.shape.merge(p.shape)
	var st *stream
	standalone := ex.method == "GET" && !ex.hasCursor
	own := ex.stream != nil && ex.stream.hasPrefix && ex.stream.prefix == p.prefix
	if s.shape == shapeGoSDK && !own && !s.prefixNamesStream(ex, p) {
		// The prefix is not a stream's name here: trust no shape.
		s.shape = shapeMixed
	}
	switch {
	case s.shape.hasStreamPrefix() && p.shape == s.shape:
		if own {
			st = ex.stream // the common case: no map lookup per event
		} else {
			st = d.newStream(s, p.prefix, true, standalone, o.Time)
			if st != nil && st.opener == 0 {
				st.opener = ex.serial
			}
		}
	case ex.stream != nil:
		st = ex.stream
	case ex.resume != nil && ex.resume.active && ex.resume.stream >= 0:
		st = s.streams[ex.resume.stream]
	default:
		st = d.newStream(s, "", false, standalone, o.Time)
	}
	if st == nil {
		return
	}
	if ex.stream == nil {
		ex.stream = st
		for c := range unansweredCalls(s, ex) {
			c.stream = st.idx + 1
		}
	}
	if ex.gap {
		st.gap = true
	}
	if p.shape == shapeGoSDK && st.hasPrefix && st.maxNum < 0 && p.num == 0 && s.zeroStarts < provenCounters {
		s.zeroStarts++
	}
	d.checkOrder(ex, s, st, p, o)
	if len(s.events) >= d.cfg.MaxEventsIndexedPerSession {
		s.indexLimit = "MaxEventsIndexedPerSession"
		d.limitHit("MaxEventsIndexedPerSession", o.Time, s, "event index")
		return
	}
	if s.events == nil {
		// A session that sends event ids at all sends many (a priming
		// event and the messages of every stream): start past the
		// first growth steps.
		s.events = make(eventIndex, 16)
	}
	s.events[eventKey(ev.ID)] = eventRef{stream: st.idx, pos: st.next, at: o.Time.UnixNano(), data: data}
	d.charge(s, eventBytes)
	if priming {
		if len(st.priming) < maxPrimingPositions {
			st.priming = append(st.priming, st.next)
		} else if !st.primingFull {
			// Later priming positions would count as owed content.
			st.primingFull = true
			d.limitHit("maxPrimingPositions", o.Time, s, "event index")
		}
	}
	st.next++
}

// prefixNamesStream says whether a new go-sdk-shaped id p on exchange ex
// is consistent with its prefix naming one stream: the prefix is new to
// the session, or ex opened its stream, or ex resumes it. A store whose
// prefix names something wider (the session, say: <session>_<n> on every
// stream) shows one prefix on two streams, and grouping their events as
// one would make a correct replay of one look like it skipped the other's.
func (s *session) prefixNamesStream(ex *exchange, p parsedID) bool {
	i, ok := s.streamByPrefix.get(p.prefix)
	if !ok {
		return true
	}
	st := s.streams[i]
	if st.opener == ex.serial {
		return true
	}
	rs := ex.resume
	return rs != nil && (rs.stream == st.idx || (rs.stream < 0 && parseEventID(ex.cursor).prefix == p.prefix))
}

// checkOrder raises event_id_reset when a new id is not after what its
// shape says was already issued.
func (d *Detector) checkOrder(ex *exchange, s *session, st *stream, p parsedID, o *decode.Observation) {
	if s.shape != shapeGoSDK && s.shape != shapeDecimal {
		return
	}
	n := int64(p.num)
	var why string
	if st.maxNum >= 0 && n <= st.maxNum && s.orderProven() {
		why = fmt.Sprintf("new id %s is not after %d, already issued on the same stream", o.Event.ID, st.maxNum)
	} else if s.shape == shapeDecimal && st.maxNum < 0 && s.orderProven() && n < s.decMax && o.Time.Sub(s.decMaxAt) > d.cfg.ReorderTolerance {
		// mcp-go shares one counter between all sessions of a process, so
		// ids jump forward; only going back means the counter restarted.
		// Judged on a stream's first id only: a restarted process serves
		// new streams, and a server that numbers each stream in its own
		// range (unique ids, as the spec asks) goes on above its own.
		why = fmt.Sprintf("new id %s is below %d, issued in this session at %s", o.Event.ID, s.decMax, s.decMaxAt.Format("15:04:05.000"))
	}
	if n > st.maxNum {
		st.maxNum = n
	}
	if s.shape == shapeDecimal && n > s.decMax {
		s.decCounter = s.decCounter || (s.decMax >= 0 && n == s.decMax+1)
		s.decMax, s.decMaxAt = n, o.Time
	}
	if why == "" || !ex.once(onceReset) {
		return
	}
	if s.indexLimit != "" {
		// Ids the index had no room for look new when they come again
		// (a replay after a resume): their order proves nothing.
		d.unverifiable(o.Time, s, ex, "event order", limitReason(s.indexLimit), o.Event.ID)
		return
	}
	if d.historyMayBeHidden(ex, s, s.firstSeen) {
		// Lost bytes can delay one stream's events behind another's
		// (reassembly holds them until the hole times out): their order
		// no longer says what the server issued.
		d.unverifiable(o.Time, s, ex, "event order", ReasonCaptureGap, o.Event.ID)
		return
	}
	d.eventIDReset(ex, s, st, o, why)
}

// eventIDReset reports ids going backwards in session s, explained by why.
func (d *Detector) eventIDReset(ex *exchange, s *session, st *stream, o *decode.Observation, why string) {
	d.violation(&Violation{
		Kind: KindEventIDReset, Time: o.Time, LastEventID: ex.cursor, FirstEventID: o.Event.ID, StreamID: streamName(st),
		Explanation: fmt.Sprintf("Event ids in session %s went backwards (%s). The server's counter or event store restarted "+
			"while the session lived on, so ids the client already holds now name different events and a resume from them "+
			"replays or skips the wrong ones. Check for a backend restart or failover that kept the session id but lost the store.", s.id, why),
		Evidence: []Evidence{ex.requestEvidence(), ex.evidence(o.Time, "sse event", why)},
	}, ex, s, o.Event.ID, "order")
}

func streamName(st *stream) string {
	if st == nil {
		return ""
	}
	if st.prefix != "" {
		return st.prefix
	}
	return fmt.Sprintf("#%d", st.idx)
}

// onMessages handles the JSON-RPC messages of an event or body. replay is
// true when they ride on an event id already issued (a replay): the event
// checks judge those, not the message checks.
func (d *Detector) onMessages(ex *exchange, o *decode.Observation, msgs []decode.Message, replay bool) {
	s := ex.sess
	if ex.sessionless {
		d.sessionlessMessages(ex, msgs, o.Time)
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Type {
		case decode.MsgResponse, decode.MsgError:
			if m.UnknownSession {
				d.unknownSessionSaid(ex, o)
			}
			if ex.isInit && m.ProtocolVersion != "" {
				ex.rev, ex.revAsked = m.ProtocolVersion, false
				if s != nil {
					s.rev, s.revFromInit = m.ProtocolVersion, true
					if revAtLeast(m.ProtocolVersion, revSessionless) && !ex.sessionless && ex.hasRespSession && ex.ok2xx() {
						// The server chose a revision without
						// sessions, and minted one.
						d.sessionOnSessionless(ex, o)
					}
				}
			}
			if m.Tools != "" {
				if s != nil && !s.removed {
					d.charge(s, s.noteRepeatable(m.Tools))
				}
				d.noteToolAnnotations(ex.endpoint, m.Tools)
			}
			// id null answers a request the server could not read
			// (e.g. a 404 body): it names no request.
			if s != nil && !ex.sessionless && !s.removed && m.ID != "" && m.ID != "null" {
				d.deliverResponse(ex, s, o, m, replay)
			}
		case decode.MsgNotification:
			if m.Method == "notifications/progress" && !replay {
				ex.progress++ // the call had started, should its stream break (reissue.go)
			}
			if m.Method == "notifications/progress" && m.HasProgress && !replay && s != nil && !ex.sessionless && !s.removed {
				d.checkProgress(ex, s, o, m)
			}
		}
	}
}

func (d *Detector) deliverResponse(ex *exchange, s *session, o *decode.Observation, m *decode.Message, replay bool) {
	c := s.calls.at(m.ID)
	if c != nil && c.answered {
		if replay || !ex.once(onceDupResponse) {
			return
		}
		if s.requestGap || d.historyMayBeHidden(ex, s, s.firstSeen) {
			// The request that opened this stream may be a resume
			// the capture lost.
			d.unverifiable(o.Time, s, ex, "duplicate_delivery", ReasonCaptureGap, m.ID)
			return
		}
		same := "the same result"
		if c.resultHash != hash64(m.ResultHash) {
			same = "a different result"
		}
		d.violation(&Violation{
			Kind: KindDuplicateDelivery, Time: o.Time, JSONRPCIDs: []string{m.ID}, Tool: c.tool, FirstEventID: eventID(o),
			Explanation: fmt.Sprintf("Session %s delivered a second response to JSON-RPC request %s (%s, %s). The client "+
				"resolves the request twice or drops one answer, and a tool result may be applied twice. Check the server's "+
				"retry and replay paths for responses sent outside a resume.", s.id, m.ID, c.method, same),
			Evidence: []Evidence{ex.requestEvidence(), ex.evidence(o.Time, "JSON-RPC response", fmt.Sprintf("response to id %s, %s as first delivered", m.ID, same))},
		}, ex, s, m.ID, "response")
		return
	}
	if c == nil {
		if s.answered >= d.cfg.MaxResponsesPerSession {
			d.limitHit("MaxResponsesPerSession", o.Time, s, "duplicate response")
			return
		}
		c = &call{id: m.ID}
		d.chargeCall(s, c)
		s.calls.set(m.ID, c)
	} else {
		s.inflight--
	}
	if s.answered >= d.cfg.MaxResponsesPerSession {
		// Keep the in-flight bookkeeping right but forget the id.
		d.limitHit("MaxResponsesPerSession", o.Time, s, "duplicate response")
		s.calls.del(m.ID)
	} else {
		s.answered++
	}
	c.answered, c.resultHash, c.failed = true, hash64(m.ResultHash), m.Type == decode.MsgError || m.ToolError
	if c.token != "" {
		d.forgetProgress(s, c.token)
	}
}

func eventID(o *decode.Observation) string {
	if o.Event != nil && o.Event.HasID {
		return o.Event.ID
	}
	return ""
}

// progressMark is the last progress value of a token, its total (when the
// notification gave one) and the stream that carried it (progressStream).
type progressMark struct {
	value    float64
	total    float64
	stream   uint64
	hasTotal bool
}

// sameTotal says whether m counts on the scale the mark's value did: the
// same total, or none given either time.
func (p progressMark) sameTotal(m *decode.Message) bool {
	return p.hasTotal == m.HasTotal && (!p.hasTotal || p.total == m.ProgressTotal)
}

// progressStream names the stream a progress value came on: the logical
// stream its event ids belong to (a call's stream, or the standalone one,
// with their resumes), else the exchange. Values compare only on one
// stream: a server may send one call's progress on several streams, whose
// deliveries do not keep the order it sent them in (mcp-go sends it on the
// standalone GET stream or on whichever POST stream of the session reads its
// notification queue first; a resumed stream's backlog comes after what
// another stream delivered meanwhile).
func progressStream(ex *exchange) uint64 {
	if ex.stream != nil {
		return uint64(ex.stream.idx)
	}
	return 1<<63 | ex.serial
}

func (d *Detector) checkProgress(ex *exchange, s *session, o *decode.Observation, m *decode.Message) {
	mark, seen := s.progress.get(m.ProgressToken)
	last := mark.value
	if seen && mark.stream == progressStream(ex) && m.Progress <= last {
		if d.requestsMayBeHidden(s, ex.conn) || d.historyMayBeHidden(ex, s, s.firstSeen) {
			// The lost bytes may hold a new request re-using the token
			// (its progress starts again) or the answer that ended the
			// token's last one.
			d.unverifiable(o.Time, s, ex, string(KindProgressReplay), ReasonCaptureGap, m.ProgressToken)
			return
		}
		if !s.startSeen {
			// The calls that carry the token may all have come before
			// the capture began: one or two of them, or a new one.
			d.unverifiable(o.Time, s, ex, string(KindProgressReplay), ReasonStartNotCaptured, m.ProgressToken)
			return
		}
		if s.answered >= d.cfg.MaxResponsesPerSession {
			// Answered calls are forgotten past the bound: which of
			// them carried the token is not known.
			d.unverifiable(o.Time, s, ex, string(KindProgressReplay), ReasonLimitPrefix+"MaxResponsesPerSession", m.ProgressToken)
			return
		}
		holder, n := tokenHolder(s, m.ProgressToken)
		reason := ""
		switch {
		case n > 1:
			// Each call's progress counts on its own, and either's value
			// may arrive late: the values interleave.
			reason = ReasonSharedProgressToken
		case !mark.sameTotal(m):
			// A call counts on one total; a value on another is a
			// second call's, perhaps: one re-using the token on a
			// connection the capture did not see, whose progress the
			// server sent on this call's stream (mcp-go, above).
			reason = ReasonProgressTotalChanged
		case n == 0:
			// The calls that carry the token went on connections the
			// capture did not see, a second re-using it perhaps.
			reason = ReasonTokenRequestNotSeen
		case !holder.carries(ex):
			// A stream that carries any call's progress (the standalone
			// GET) would carry a second call's re-using the token, sent
			// on a connection the capture did not see.
			reason = ReasonProgressOffItsStream
		case d.cfg.PartialHistory:
			// A second request re-using the token may be one the input
			// missed; the server may send that call's progress on this
			// stream (mcp-go, above), on the same total.
			reason = ReasonPartialHistory
		}
		if reason != "" {
			d.unverifiable(o.Time, s, ex, string(KindProgressReplay), reason, m.ProgressToken)
			return
		}
		if ex.once(onceProgress) {
			d.violation(&Violation{
				Kind: KindProgressReplay, Time: o.Time, FirstEventID: eventID(o),
				Explanation: fmt.Sprintf("Progress for token %s in session %s went from %g to %g. Progress must increase; a "+
					"repeat means a notification the client already acted on was delivered again (often a replay from the "+
					"wrong cursor). Check the resume that preceded it and the server's progress reporting.", m.ProgressToken, s.id, last, m.Progress),
				Evidence: []Evidence{ex.requestEvidence(), ex.evidence(o.Time, "notifications/progress", fmt.Sprintf("token %s progress %g after %g", m.ProgressToken, m.Progress, last))},
			}, ex, s, m.ProgressToken, fmt.Sprint(m.Progress))
		}
		return
	}
	if !seen {
		if s.progress.len() >= d.cfg.MaxProgressTokensPerSession {
			d.limitHit("MaxProgressTokensPerSession", o.Time, s, "progress order")
			return
		}
		d.charge(s, entryBytes+int64(len(m.ProgressToken)))
	}
	s.progress.set(m.ProgressToken, progressMark{value: m.Progress, total: m.ProgressTotal, stream: progressStream(ex), hasTotal: m.HasTotal})
}

// tokenHolder finds the calls of s that carried token, answered or not:
// how many, and one of them. Two make a repeated or lower value no proof of
// a replay, whenever they ran: a value may be late, as one call's progress
// can come on another call's stream or in a resumed backlog after its own
// answer (mcp-go, see progressStream), and a cancelled call's server may
// send progress already under way (the TypeScript SDK's tools run on). It
// walks every call, so it runs only where a violation would otherwise be
// raised.
func tokenHolder(s *session, token string) (holder *call, n int) {
	for _, c := range s.calls.all() {
		if c.token == token {
			holder = c
			n++
		}
	}
	return holder, n
}

// carries says whether ex is c's own stream: its request's answer, or a
// resume of the stream that answer opened. Only a server that sends
// another call's progress on it (mcp-go, see progressStream) puts a second
// holder's values there.
func (c *call) carries(ex *exchange) bool {
	return ex.serial == c.ex || c.stream != 0 && ex.stream != nil && ex.stream.idx+1 == c.stream
}

// forgetProgress drops what s remembers of token's progress: the request
// that carried it was answered, or a new request re-uses the token, which
// a client may do once no active request holds it.
func (d *Detector) forgetProgress(s *session, token string) {
	if _, ok := s.progress.get(token); ok {
		s.progress.del(token)
		d.charge(s, -(entryBytes + int64(len(token))))
	}
}
