package detector

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// resumeState follows one request carrying Last-Event-ID until its outcome
// is known.
type resumeState struct {
	attempt ResumeAttempt
	// active: the server accepted the resume (2xx, same session) and the
	// stream is being judged against the cursor.
	active bool
	// stream/pos: where the cursor was issued; stream is -1 when the cursor
	// is not in the index.
	stream int32
	pos    int32
	// Owed: positions pos+1..owedMax the server had sent on the stream
	// before the break. got marks those replayed (any order: the
	// TypeScript example store sorts by id), owedLeft counts the
	// non-priming ones still missing, maxGot is the highest replayed.
	owedMax, maxGot int32
	got             []uint64
	owedLeft        int
	// moved: a new event arrived (at movedAt; movedPast describes it)
	// while owed events were still missing. A server may interleave its
	// replay with new events, so the missing ones are judged only once
	// interleavedReplayGrace has passed since, or at the stream's end.
	moved     bool
	movedAt   time.Time
	movedPast string
	// go-sdk ids are dense: after cursor P_n the next event must be P_(n+1).
	goPrefix     string
	goCursor     int64
	goNext       int64
	goOK         bool
	unverifiable string // why absence-based checks cannot be made
	sawFirst     bool
	delivered    int
	violations   []string
	emitted      bool
	// limitHidden: a violation against this resume was made Unverifiable
	// with this reason (limitOnEvidence).
	limitHidden string
	// heldUnknown is an unknown_last_event_id_accepted waiting for the
	// stream (heldUnknownCursor); heldBreaks the session's broken streams
	// then, less those given up before the request.
	heldUnknown *Violation
	heldBreaks  int
	// givenUpBefore: the session's givenUpBreaks at the request.
	givenUpBefore int
	// parked: heldUnknown, found, waits for the session's broken stream
	// to be resumed (park), and the attempt's record with it.
	parked *parkedFinding
}

func (d *Detector) newResume(ex *exchange, o *decode.Observation) *resumeState {
	rs := &resumeState{stream: -1}
	rs.attempt = ResumeAttempt{
		Time:            o.Time,
		SessionID:       ex.reqSession,
		LastEventID:     ex.cursor,
		ProtocolVersion: ex.rev,
		Client:          ex.conn.Client.String(),
		Server:          ex.conn.Server.String(),
	}
	rs.attempt.ID = findingID("resume", ex.requestIdentity())
	if s := ex.sess; s != nil {
		s.resumes++
		// Counted at the request: the client chose the stream then, and
		// an answer of 404 (its session gone) says nothing against that.
		if ref, known := s.events.get(ex.cursor); known {
			s.resumedFrom(s.streams[ref.stream])
			if len(d.parked) > 0 {
				d.settleParkedOf(s, false, time.Time{})
			}
		}
		rs.givenUpBefore = s.givenUpBreaks
	}
	return rs
}

// resolveResume emits the attempt once. Any violation raised against it
// makes it "violated" whatever outcome was otherwise reached.
func (d *Detector) resolveResume(ex *exchange, t time.Time, outcome ResumeOutcome, reason string) {
	rs := ex.resume
	if rs == nil || rs.emitted {
		return
	}
	rs.emitted = true
	a := &rs.attempt
	a.Status = ex.status
	a.ResponseSession = ex.respSession
	a.Replayed = rs.delivered
	a.ProtocolVersion = ex.rev
	if ex.stream != nil {
		a.StreamID = streamName(ex.stream)
	} else if rs.stream >= 0 && ex.sess != nil && ex.sess.streams != nil {
		a.StreamID = streamName(ex.sess.streams[rs.stream])
	}
	a.Outcome, a.Reason = outcome, reason
	if p := rs.parked; p != nil {
		p.due, p.resolvedAt = true, t
		return
	}
	d.emitResume(t, ex.sess, ex, nil, rs)
}

// emitResume sends rs's attempt, of ex or, once ex was recycled, of the
// request at: violated when a violation was raised against it, whatever
// outcome was otherwise reached.
func (d *Detector) emitResume(t time.Time, s *session, ex *exchange, at *requestOrigin, rs *resumeState) {
	a := &rs.attempt
	outcome, reason := a.Outcome, a.Reason
	if len(rs.violations) > 0 {
		outcome = ResumeViolated
		reason = fmt.Sprintf("%d violation(s) raised against this resume", len(rs.violations))
	} else if rs.limitHidden != "" && (outcome == ResumeViolated || outcome == ResumeResumed) {
		// A violation was turned into Unverifiable by a pipeline limit.
		outcome, reason = ResumeUnverifiable, rs.limitHidden
	}
	a.Outcome, a.Reason, a.ViolationIDs = outcome, reason, rs.violations
	d.stats.Resumes[outcome]++
	if outcome == ResumeUnverifiable {
		if ex != nil {
			d.unverifiable(t, s, ex, "resume", unverifiableCode(reason), a.LastEventID)
		} else {
			d.unverifiableFrom(t, s, *at, "resume", unverifiableCode(reason), a.LastEventID)
		}
	}
	d.sink.Resume(a)
}

// unverifiableCode maps a resume's detailed reason to the stable phrase
// Stats counts by.
func unverifiableCode(reason string) string {
	switch reason {
	case ReasonCaptureGap, ReasonStartNotCaptured, ReasonCaptureEnded, ReasonStreamCut, ReasonOwedNotReplayed,
		ReasonIndexLimit, ReasonStreamLimit, ReasonSessionEvicted, ReasonStateEvicted, ReasonSessionDeleted, ReasonTSGetStream,
		ReasonPartialHistory, ReasonResumedStreamNotSeen, ReasonBrokenStreamsUnresumed, ReasonBroadcast:
		return reason
	}
	if contentUnread(reason) {
		return reason // a limit's name is stable, and so are ReasonEncodedBody and ReasonHTTP2
	}
	return "resume outcome not shown by the capture"
}

// resolveRejected: the server answered the resume with an error status.
func (d *Detector) resolveRejected(ex *exchange, outcome ResumeOutcome) {
	if ex.resume == nil || outcome == "" {
		return
	}
	d.resolveResume(ex, ex.respAt, outcome, "server answered "+strconv.Itoa(ex.status))
}

// resumeResponse judges a 2xx answer to a resume in the same session.
func (d *Detector) resumeResponse(ex *exchange, o *decode.Observation) {
	rs, s := ex.resume, ex.sess
	if rs.emitted {
		return
	}
	if s.removed {
		// The session left the table while the resume waited for its
		// answer (evicted, expired, or released after a DELETE): its event
		// index is gone, so the cursor can be judged against nothing.
		reason := "session state dropped (" + s.ended + ") before the answer"
		switch {
		case s.deleted:
			reason = ReasonSessionDeleted
		case s.ended == "evicted":
			reason = s.evictedBy
		}
		d.resolveResume(ex, o.Time, ResumeUnverifiable, reason)
		return
	}
	if ex.swapped {
		// The stream belongs to another session: nothing to judge
		// against the cursor.
		d.resolveResume(ex, o.Time, ResumeViolated, "")
		return
	}
	ref, known := s.events.get(ex.cursor)
	if letGo, cut := s.partial[ex.cursor]; cut && !known {
		// A replay that delivered the event whole, and so gave the client
		// its id, may be in the lost bytes, or on a lost span.
		reason := ""
		switch {
		case letGo:
			reason = ReasonLetGoMidEvent
		case d.historyMayBeHidden(ex, s, s.firstSeen):
			reason = ReasonCaptureGap
		case d.cfg.PartialHistory:
			reason = ReasonPartialHistory
		case !s.startSeen:
			// The event may have come whole before the capture began
			// (a replay of it, cut here, is the server's doing).
			reason = ReasonStartNotCaptured
		}
		if reason != "" {
			d.unverifiable(o.Time, s, ex, string(KindTruncatedResume), reason, ex.cursor)
			d.resolveResume(ex, o.Time, ResumeUnverifiable, reason)
			return
		}
		d.truncatedResume(ex, s, o)
		d.resolveResume(ex, o.Time, ResumeViolated, "")
		return
	}
	rs.active = true
	if p := parseEventID(ex.cursor); p.shape == shapeGoSDK && s.shape == shapeGoSDK && s.countersPerStream() {
		rs.goPrefix, rs.goCursor, rs.goNext, rs.goOK = p.prefix, int64(p.num), int64(p.num)+1, true
	}
	if known {
		st := s.streams[ref.stream]
		rs.stream, rs.pos = ref.stream, ref.pos
		rs.owedMax, rs.maxGot = st.next-1, ref.pos
		for p := ref.pos + 1; p <= rs.owedMax; p++ {
			if !st.isPriming(p) {
				rs.owedLeft++
			}
		}
		if rs.owedLeft > 0 {
			rs.got = make([]uint64, (rs.owedMax-ref.pos+63)/64)
		}
		ex.stream = st
		if ex.limit != "" {
			rs.unverifiable = limitReason(ex.limit)
		} else if st.primingFull {
			rs.unverifiable = ReasonLimitPrefix + "maxPrimingPositions"
		} else if st.gap || d.historyMayBeHidden(ex, s, s.firstSeen) {
			// Lost bytes since the session began may hold events the
			// server did replay.
			rs.unverifiable = ReasonCaptureGap
		} else if s.indexLimit != "" {
			rs.unverifiable = limitReason(s.indexLimit)
		}
		return
	}
	switch {
	case ex.limit != "":
		rs.unverifiable = limitReason(ex.limit)
	case !s.startSeen:
		rs.unverifiable = ReasonStartNotCaptured
	case s.indexLimit != "":
		rs.unverifiable = limitReason(s.indexLimit)
	case d.historyMayBeHidden(ex, s, s.firstSeen):
		rs.unverifiable = ReasonCaptureGap
	case !ex.sse:
		rs.unverifiable = "resume answered without a stream"
	case d.cfg.PartialHistory:
		rs.unverifiable = ReasonPartialHistory
	default:
		another := d.sentByAnother(ex, s)
		if !another && (s.unsettledBreaks(rs.givenUpBefore) <= 0 || s.partlyElsewhere()) {
			rs.unverifiable = ReasonResumedStreamNotSeen
			return
		}
		v := &Violation{
			Kind: KindUnknownLastEventIDAccepted, Time: o.Time, LastEventID: ex.cursor,
			Explanation: fmt.Sprintf("The client resumed session %s from event id %s, which this session never issued "+
				"(its whole history was captured), and the server answered %d with a stream instead of rejecting it. The "+
				"client now believes it is continuing its stream, but whatever follows is not the continuation of what it "+
				"holds. Check that the server validates Last-Event-ID against the session's event store and answers 400/404 "+
				"when it cannot replay.", s.id, ex.cursor, ex.status),
			Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(),
				ex.evidence(o.Time, "event index", fmt.Sprintf("%d event ids indexed for session %s since its initialize; %s is not among them", len(s.events), s.id, ex.cursor))},
		}
		if another {
			d.violation(v, ex, s)
			return
		}
		rs.heldUnknown, rs.heldBreaks = v, s.brokenStreams-rs.givenUpBefore
	}
}

// heldUnknownCursor settles an unknown_last_event_id_accepted held for the
// stream of ex, a resume from an id the session never sent: the stream
// ended, or the capture did, or its first event had no new id (newID
// false), so the server accepted a cursor it could not continue from; or
// one came (newID), so the server went on after the cursor: it knew the
// id, from a stream of the session the capture did not see (a connection
// another node's agent saw). So it is too when every stream of the session
// seen to break before the resume, and not given up before its request,
// has since been resumed from an id it sent: the resume was none of
// theirs, and so it is when a connection of the session went another
// way (partlyElsewhere), before or after. Until
// 2026-12-05 the finding was raised at the answer's head. A stream cut
// (truncated or reset) before either shows nothing of what the server
// would have sent (cut). It reports whether a pipeline limit on the
// evidence made the finding unverifiable (limitOnEvidence): the resume's
// outcome then names it.
func (d *Detector) heldUnknownCursor(ex *exchange, t time.Time, newID, cut bool) (hidden bool) {
	rs, s := ex.resume, ex.sess
	v := rs.heldUnknown
	if v == nil || s == nil || s.removed {
		return false
	}
	rs.heldUnknown = nil
	reason := ReasonResumedStreamNotSeen
	switch {
	case newID, rs.otherStreamShown(s):
	case rs.heldBreaks-s.resumedBreaks > 1:
		// Which of the streams the resume continued, if any, the wire
		// does not say: the others' resumes may come later, or go to
		// another node.
		reason = ReasonBrokenStreamsUnresumed
	case ex.gap:
		// The lost bytes may hold the new event.
		reason = ReasonCaptureGap
	case cut:
		reason = ReasonStreamCut
	case ex.tsGetStreamUnreplayed():
		// That store answers so from an id it sent or not.
		reason = ReasonTSGetStream
	default:
		before := rs.limitHidden
		if s.ended != "" {
			d.violation(v, ex, s)
		} else if v = d.completeViolation(v, ex, s); v != nil {
			d.park(ex, v, t)
		}
		return rs.limitHidden != before
	}
	d.unverifiable(t, s, ex, string(KindUnknownLastEventIDAccepted), reason, ex.cursor)
	if rs.unverifiable == "" {
		rs.unverifiable = reason
	}
	return false
}

// otherStreamShown says whether the wire shows that a resume of s from an
// id s never sent continued a stream the capture did not see: every
// stream of s seen to break before it, and not given up before its
// request, has since been resumed from an id s sent, or s shows its
// history partly elsewhere.
func (rs *resumeState) otherStreamShown(s *session) bool {
	return rs.heldBreaks <= s.resumedBreaks || s.partlyElsewhere()
}

// maxParkedFindings bounds the unknown_last_event_id_accepted findings
// waiting for their sessions' broken streams to be resumed (park).
const maxParkedFindings = 256

// parkedFinding is an unknown_last_event_id_accepted found while one
// broken stream of its session was left unsettled, the one the resume
// seemed to continue. The stream the resume continued may instead be one
// the capture did not see (another node's), as the client's resuming the
// broken one later from an id of it would show. Found with a 20-client
// TypeScript probe against @hono/mcp's transport, one connection gone
// (seed 18, 2026-12-05): the node saw a call's stream break and a resume
// from an id of the standalone stream (on the connection gone) answered
// with nothing, and 0.3 s later the call stream's resume. So the finding
// waits: it is unverifiable once every broken stream was resumed from an
// id the session sent, or the session shows its history partly elsewhere
// (partlyElsewhere), and raised LinkWindow after (a client resumes its
// streams within that, as it comes back to a lost session), or when the
// session ends or the capture does. The resume's record waits with it.
type parkedFinding struct {
	s      *session
	rs     *resumeState
	v      *Violation
	at     time.Time
	conn   decode.Conn   // the resume's connection
	origin requestOrigin // the resume's request, recycled before the finding settles
	// due: the attempt was resolved, at resolvedAt (its outcome and
	// reason in it), and goes out when the finding settles.
	due        bool
	resolvedAt time.Time
}

func (d *Detector) park(ex *exchange, v *Violation, t time.Time) {
	if len(d.parked) == maxParkedFindings {
		d.stats.LimitsHit["maxParkedFindings"]++
		d.settleParked(0, ReasonLimitPrefix+"maxParkedFindings")
	}
	p := &parkedFinding{s: ex.sess, rs: ex.resume, v: v, at: t, conn: ex.conn, origin: originOf(ex)}
	ex.resume.parked = p
	d.parked = append(d.parked, p)
}

// settleParked decides d.parked[i]: raised when reason is empty, else
// unverifiable for that reason; the resume's record goes out if it was
// due.
func (d *Detector) settleParked(i int, reason string) {
	p := d.parked[i]
	d.parked = slices.Delete(d.parked, i, i+1)
	rs := p.rs
	rs.parked = nil
	if reason == "" {
		d.emitViolation(p.v, p.s)
	} else {
		rs.violations = slices.DeleteFunc(rs.violations, func(id string) bool { return id == p.v.ID })
		d.unverifiableFrom(p.at, p.s, p.origin, string(KindUnknownLastEventIDAccepted), reason, p.v.LastEventID)
		if rs.unverifiable == "" {
			rs.unverifiable = reason
		}
		if a := &rs.attempt; a.Outcome == ResumeResumed {
			a.Outcome, a.Reason = ResumeUnverifiable, reason
		}
	}
	if p.due {
		d.emitResume(p.resolvedAt, p.s, nil, &p.origin, rs)
	}
}

// settleParkedOf decides the parked findings of s (nil: every session's)
// that the wire now settles: unverifiable once the broken stream was
// resumed, or s shows its history partly elsewhere. With final, or for
// those parked before due (LinkWindow ago), the rest are raised, unless
// bytes lost since may have held the broken stream's resume.
func (d *Detector) settleParkedOf(s *session, final bool, due time.Time) {
	for i := 0; i < len(d.parked); {
		p := d.parked[i]
		switch {
		case s != nil && p.s != s:
		case p.rs.otherStreamShown(p.s):
			d.settleParked(i, ReasonResumedStreamNotSeen)
			continue
		case !final && !p.at.Before(due):
		case d.pairMayHideHistory(p.conn, p.s, p.at):
			d.settleParked(i, ReasonCaptureGap)
			continue
		default:
			d.settleParked(i, "")
			continue
		}
		i++
	}
}

func (d *Detector) truncatedResume(ex *exchange, s *session, o *decode.Observation) {
	d.violation(&Violation{
		Kind: KindTruncatedResume, Time: o.Time, LastEventID: ex.cursor,
		Explanation: fmt.Sprintf("A stream of session %s was cut in the middle of event %s: its id line arrived but the "+
			"event never completed. The client then resumed with Last-Event-ID %s, telling the server it had that event, "+
			"so the server replays from after it and the event is lost to the client for good. Check the client's SSE "+
			"parser: the last event id must only be committed when the event is dispatched.", s.id, ex.cursor, ex.cursor),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(),
			ex.evidence(o.Time, "stream end", fmt.Sprintf("an earlier stream of this session ended mid-event with partial id %s", ex.cursor))},
	}, ex, s, "partial")
}

// resumeEvent judges one non-priming event on an accepted resume.
// reused: the id was already issued for other content (a reset was raised),
// so its number says nothing about replay order.
func (d *Detector) resumeEvent(ex *exchange, o *decode.Observation, known, reused bool, ref eventRef) {
	rs, s, ev := ex.resume, ex.sess, o.Event
	if !rs.emitted {
		rs.delivered++
	}
	newID := ev.HasID && !known && !reused
	if rs.heldUnknown != nil && newID {
		d.heldUnknownCursor(ex, o.Time, true, false)
	}
	if rs.stream < 0 && !rs.sawFirst && newID {
		// The server went on after a cursor the capture never saw the
		// session send: it sent it on a connection another node saw, as
		// may the cursor of a later resume. Found with a 16-client
		// ts-chaos probe spread over two nodes (2026-12-05): after such a
		// resume the node saw another, from an id of a stream the other
		// node saw, answered with nothing while a stream it saw break was
		// left unresumed, and read it as unknown_last_event_id_accepted.
		s.historyElsewhere = true
		if len(d.parked) > 0 {
			d.settleParkedOf(s, false, time.Time{})
		}
	}
	if !rs.sawFirst {
		rs.sawFirst = true
		if ev.HasID {
			rs.attempt.FirstEventID = ev.ID
		}
		if ev.HasID && ev.ID == ex.cursor && ex.once(onceReplayed) {
			d.replayed(ex, s, o, "the first event after the resume has the id the client resumed from")
		}
	}
	if known && rs.stream >= 0 {
		switch {
		case ref.stream != rs.stream:
			if ex.once(onceCross) {
				d.crossStream(ex, s, o, ref)
			}
		case ref.pos <= rs.pos:
			if ex.once(onceReplayed) {
				d.replayed(ex, s, o, fmt.Sprintf("event %s was at position %d of the stream, at or before the cursor's position %d", ev.ID, ref.pos, rs.pos))
			}
		case ref.pos <= rs.owedMax:
			rs.markOwed(ref.pos, s.streams[rs.stream])
		}
	} else if !known && !rs.moved {
		rs.moved, rs.movedAt, rs.movedPast = true, o.Time, describeEvent(o)
	}
	if ev.HasID && rs.goOK && !reused {
		if p := parseEventID(ev.ID); p.shape == shapeGoSDK && p.prefix == rs.goPrefix {
			n := int64(p.num)
			switch {
			case n == rs.goCursor && ex.once(onceReplayed):
				d.replayed(ex, s, o, "the stream delivered the id the client resumed from again")
			case n < rs.goCursor && !known && s.indexLimit != "":
				// Not indexed need not mean never delivered: the index
				// was full.
				if ex.once(onceReset) {
					d.unverifiable(o.Time, s, ex, "event order", limitReason(s.indexLimit), ev.ID)
				}
			case n < rs.goCursor && !known && ex.once(onceReset):
				// Ordered before the cursor, yet never delivered in this
				// capture: the ids went backwards. Calling it a replay
				// would claim a delivery the capture does not show.
				d.eventIDReset(ex, s, ex.stream, o, fmt.Sprintf("go-sdk index %d after resuming from index %d, an id this capture never saw delivered", n, rs.goCursor))
			case n > rs.goNext && (ex.gap || ex.limit != "" || rs.unverifiable == ReasonCaptureGap ||
				contentUnread(rs.unverifiable) || d.historyMayBeHidden(ex, s, s.firstSeen)):
				// Lost or unread bytes, or a limit, may hold the events
				// between (lost bytes of the session count whatever
				// the resume's own reason: a start not captured comes
				// first there).
			case n > rs.goNext && rs.primingBetween(s, rs.goNext, n):
				// The ids between were priming events this capture saw:
				// empty data, never owed.
			case n > rs.goNext && ex.once(onceIncomplete):
				d.incomplete(ex, s, o, fmt.Sprintf("go-sdk ids are dense per stream: after %s_%d came %s, so %d event(s) were never delivered", rs.goPrefix, rs.goNext-1, ev.ID, n-rs.goNext))
			}
			if n >= rs.goNext {
				rs.goNext = n + 1
			}
		}
	}
	overdue := rs.moved && rs.stream >= 0 && rs.owedLeft > 0 && o.Time.Sub(rs.movedAt) > interleavedReplayGrace
	if overdue {
		d.checkOwed(ex, s, o, rs.owedMax, rs.movedPast+" arrived instead")
	}
	// The outcome is known once the replay is over: the cursor was not
	// indexed (nothing owed we could know of), every owed event came, or
	// the server moved on to new events and the owed ones did not follow.
	if !rs.emitted && (rs.stream < 0 || rs.owedLeft == 0 || overdue) {
		d.finishResume(ex, o.Time)
	}
}

// interleavedReplayGrace is how long after a resumed stream's first new
// event the owed events it has not replayed yet may still come: nothing in
// the protocol orders a replay before new events, and a server may send
// both as they are ready (the catalogue's "in any order or interleaved with
// new ones"). A replay comes from the server's own store, so well within it.
const interleavedReplayGrace = 2 * time.Second

// maxPrimingScan bounds primingBetween's walk over the ids a go-sdk replay
// skipped.
const maxPrimingScan = 1024

// primingBetween reports whether every go-sdk id from index from up to (not
// including) to was seen on the resumed stream as a priming event.
func (rs *resumeState) primingBetween(s *session, from, to int64) bool {
	if rs.stream < 0 || to-from > maxPrimingScan {
		return false
	}
	st := s.streams[rs.stream]
	for k := from; k < to; k++ {
		ref, ok := s.events.get(rs.goPrefix + "_" + strconv.FormatInt(k, 10))
		if !ok || ref.stream != rs.stream || !st.isPriming(ref.pos) {
			return false
		}
	}
	return true
}

func (rs *resumeState) markOwed(pos int32, st *stream) {
	i := pos - rs.pos - 1
	if rs.got == nil || rs.got[i/64]&(1<<(i%64)) != 0 {
		return
	}
	rs.got[i/64] |= 1 << (i % 64)
	if !st.isPriming(pos) {
		rs.owedLeft--
	}
	if pos > rs.maxGot {
		rs.maxGot = pos
	}
}

// missingOwed lists the non-priming owed positions up to upto that were
// not replayed.
func (rs *resumeState) missingOwed(st *stream, upto int32) []int32 {
	var out []int32
	for p := rs.pos + 1; p <= upto && p <= rs.owedMax; p++ {
		i := p - rs.pos - 1
		if rs.got[i/64]&(1<<(i%64)) == 0 && !st.isPriming(p) {
			out = append(out, p)
		}
	}
	return out
}

// checkOwed raises incomplete_replay when owed positions up to upto were
// not replayed although the server went past them.
func (d *Detector) checkOwed(ex *exchange, s *session, o *decode.Observation, upto int32, what string) {
	rs := ex.resume
	if rs.owedLeft == 0 || rs.unverifiable != "" || ex.gap || ex.limit != "" {
		return // nothing owed, or lost bytes could hold the missing events
	}
	st := s.streams[rs.stream]
	missing := rs.missingOwed(st, upto)
	if len(missing) == 0 || !ex.once(onceIncomplete) {
		return
	}
	d.incomplete(ex, s, o, fmt.Sprintf("%d event(s) the server sent on stream %s after the cursor before the break (positions %s) were never replayed; %s", len(missing), streamName(st), positions(missing), what))
}

// positions prints at most a few positions.
func positions(ps []int32) string {
	const most = 5
	var b strings.Builder
	for i, p := range ps {
		if i == most {
			fmt.Fprintf(&b, ", ... (%d more)", len(ps)-most)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(int(p)))
	}
	return b.String()
}

func describeEvent(o *decode.Observation) string {
	if o.Event.HasID {
		return "event " + o.Event.ID
	}
	return "an event without id"
}

func (d *Detector) finishResume(ex *exchange, t time.Time) {
	rs := ex.resume
	// An event with no new id ended the replay of a cursor the session
	// never sent: the server did not go on from it.
	d.heldUnknownCursor(ex, t, false, false)
	switch {
	case rs.unverifiable != "" && len(rs.violations) == 0:
		d.resolveResume(ex, t, ResumeUnverifiable, rs.unverifiable)
	default:
		d.resolveResume(ex, t, ResumeResumed, "same session; the stream continued strictly after the cursor")
	}
}

// tsGetStreamUnreplayed says whether ex resumed the TypeScript example
// store's standalone stream and got nothing: that store cannot replay it
// (tsGetStreamPrefix), so such an answer proves nothing either way.
func (ex *exchange) tsGetStreamUnreplayed() bool {
	return ex.resume.delivered == 0 && strings.HasPrefix(ex.cursor, tsGetStreamPrefix)
}

// resumeEnd resolves a resume whose stream ended before its outcome showed.
func (d *Detector) resumeEnd(ex *exchange, o *decode.Observation) {
	rs := ex.resume
	if rs.heldUnknown != nil {
		// An event cut after its id line came: the server went on too.
		_, known := ex.sess.events.get(o.End.PartialID)
		wentOn := o.End.HasPartialID && o.End.PartialID != "" && !known
		cut := o.End.How == decode.EndTruncated || o.End.How == decode.EndReset
		if d.heldUnknownCursor(ex, o.Time, wentOn, cut) {
			d.resolveResume(ex, o.Time, ResumeUnverifiable, rs.limitHidden)
			return
		}
	}
	if !rs.active {
		reason := ReasonStreamCut
		if !ex.hasResponse {
			reason = "no response captured"
		} else if ex.limit != "" {
			reason = limitReason(ex.limit)
		}
		d.resolveResume(ex, o.Time, ResumeUnverifiable, reason)
		return
	}
	if ex.limit != "" && (o.End.How != decode.EndClean || o.End.Limit != "") {
		// The limit, not the server, may have cut the stream.
		d.resolveResume(ex, o.Time, ResumeUnverifiable, limitReason(ex.limit))
		return
	}
	if o.End.How != decode.EndClean && rs.moved && rs.stream >= 0 && rs.owedLeft > 0 && o.Time.Sub(rs.movedAt) > interleavedReplayGrace {
		// The server went on past the missing events long before the
		// stream broke: they were not coming.
		d.checkOwed(ex, ex.sess, o, rs.owedMax, rs.movedPast+" arrived instead")
	}
	switch o.End.How {
	case decode.EndClean:
		if rs.owedLeft > 0 && rs.moved {
			// New events sent instead of the missing ones, and the
			// stream closed: the client's cursor is past them, lost.
			d.checkOwed(ex, ex.sess, o, rs.owedMax, rs.movedPast+" arrived instead, and the stream ended cleanly")
			d.finishResume(ex, o.Time)
			return
		}
		if rs.owedLeft > 0 {
			// Events replayed past a missing one leave the client a
			// cursor beyond it: lost. Otherwise it may resume again.
			d.checkOwed(ex, ex.sess, o, rs.maxGot, "the stream ended cleanly")
			reason := ReasonOwedNotReplayed
			if rs.unverifiable != "" && contentUnread(rs.unverifiable) {
				reason = rs.unverifiable
			}
			d.resolveResume(ex, o.Time, ResumeUnverifiable, reason)
			return
		}
		if rs.unverifiable != "" {
			d.resolveResume(ex, o.Time, ResumeUnverifiable, rs.unverifiable)
			return
		}
		if ex.tsGetStreamUnreplayed() {
			d.resolveResume(ex, o.Time, ResumeUnverifiable, ReasonTSGetStream)
			return
		}
		d.resolveResume(ex, o.Time, ResumeResumed, "same session; the stream closed cleanly with nothing owed (polling)")
	case decode.EndGap:
		d.resolveResume(ex, o.Time, ResumeUnverifiable, ReasonCaptureGap)
	case decode.EndUnknown:
		d.resolveResume(ex, o.Time, ResumeUnverifiable, ReasonCaptureEnded)
	default:
		d.resolveResume(ex, o.Time, ResumeUnverifiable, ReasonStreamCut)
	}
}

func (d *Detector) replayed(ex *exchange, s *session, o *decode.Observation, why string) {
	d.violation(&Violation{
		Kind: KindReplayedEvent, Time: o.Time, LastEventID: ex.cursor, FirstEventID: o.Event.ID, StreamID: streamName(ex.stream),
		Explanation: fmt.Sprintf("The client resumed session %s from event %s and the server sent it an event it already had "+
			"(%s). The client appends it again: a progress notification, tool result or server request (sampling, elicitation) it already acted on is acted on twice. "+
			"Check the event store's replay: it must return only events strictly after Last-Event-ID.", s.id, ex.cursor, why),
		Evidence: append([]Evidence{ex.requestEvidence(), ex.responseEvidence(), ex.evidence(o.Time, "sse event", why)}, firstSent(s, o.Event.ID, ex.cursor)...),
	}, ex, s, o.Event.ID)
}

// firstSent is evidence of when the session's index first saw ids.
func firstSent(s *session, ids ...string) []Evidence {
	var out []Evidence
	for i, id := range ids {
		if i > 0 && id == ids[0] {
			continue
		}
		if ref, ok := s.events.get(id); ok {
			out = append(out, Evidence{Time: time.Unix(0, ref.at).UTC(), What: "first delivery",
				Detail: fmt.Sprintf("event id %s first sent at position %d of stream %s", id, ref.pos, streamName(s.streams[ref.stream]))})
		}
	}
	return out
}

func (d *Detector) crossStream(ex *exchange, s *session, o *decode.Observation, ref eventRef) {
	cur := s.streams[ex.resume.stream]
	orig := s.streams[ref.stream]
	why := fmt.Sprintf("event %s was first sent on stream %s, but the resume continues stream %s", o.Event.ID, streamName(orig), streamName(cur))
	d.violation(&Violation{
		Kind: KindCrossStreamReplay, Time: o.Time, LastEventID: ex.cursor, FirstEventID: o.Event.ID, StreamID: streamName(cur),
		Explanation: fmt.Sprintf("The client resumed stream %s of session %s from event %s and the server replayed an event "+
			"from another stream (%s). The spec forbids it: the client mixes another request's messages into this one "+
			"and may resolve the wrong request. Check how the event store maps Last-Event-ID to its stream.", streamName(cur), s.id, ex.cursor, why),
		Evidence: append([]Evidence{ex.requestEvidence(), ex.responseEvidence(), ex.evidence(o.Time, "sse event", why)}, firstSent(s, o.Event.ID, ex.cursor)...),
	}, ex, s, o.Event.ID)
}

func (d *Detector) incomplete(ex *exchange, s *session, o *decode.Observation, why string) {
	d.violation(&Violation{
		Kind: KindIncompleteReplay, Time: o.Time, LastEventID: ex.cursor, FirstEventID: ex.resume.attempt.FirstEventID, StreamID: streamName(ex.stream),
		Explanation: fmt.Sprintf("The client resumed session %s from event %s and the server accepted, but the replay left "+
			"out events it had sent after that cursor (%s). The client never receives them: a response or notification is "+
			"silently lost. Check the event store: it must replay every event after the cursor or refuse the resume, never "+
			"return partial results.", s.id, ex.cursor, why),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(), ex.evidence(o.Time, o.Kind.String(), why)},
	}, ex, s)
}
