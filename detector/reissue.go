package detector

import (
	"fmt"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// Revision 2026-07-28 has no sessions and no resumption: a response stream
// that breaks loses the call in flight, and the client must re-issue it as
// a new request. The first attempt may already have run (the go-sdk server
// finishes a tool whose stream broke), so a re-issue of a side-effecting
// tool may run it twice: reissued_call_after_break.

// maxBrokenCalls bounds the sessionless tools/calls whose stream broke that
// wait LinkWindow for a re-issue. Past it a broken call is not tracked (its
// re-issue is missed, never misjudged), counted as a limit hit.
const maxBrokenCalls = 10000

// callBreak is how a tools/call's exchange ended without the JSON-RPC
// response to it: what a reissued_call_after_break says of the first
// attempt, under every revision.
type callBreak struct {
	id       string
	at       time.Time // the request
	brokeAt  time.Time
	how      string // what became of it, in words ("reached the server, and ...")
	progress int    // progress notifications before the break: the tool had started
	request  Evidence
	broke    Evidence
	// clientClosed: the client ended the stream itself (its FIN came
	// first): with a notifications/cancelled for the call, before or
	// after, it gave the call up.
	clientClosed bool
}

// brokenCall is a sessionless tools/call whose request reached the server
// and whose response stream ended before the JSON-RPC response to it, with
// what the client's history says of it. (A session's call keeps its
// callBreak, the rest being the session's: call.broke.)
type brokenCall struct {
	callBreak
	gap bool // the capture lost bytes of it: unverifiable
	// habitual: the client's identical call had been answered with a
	// result before this one was sent: it makes the call over and over.
	habitual bool
	// startUnseen: sent within LinkWindow of the capture's beginning by a
	// client whose server/discover was not seen: its habit may be older
	// than the capture.
	startUnseen bool
	// mayNotHaveReached: a gateway answered it 502 or 503, which it also
	// answers when no server got the request.
	mayNotHaveReached bool
	// habitAside: calls of the client at the endpoint were set aside as a
	// proxy's hops while habits are kept: its habit may be in them.
	habitAside bool
}

// toolNote is what a tools/list answer of an endpoint said about a tool:
// its decode.Message.Tools mark (0 while no answer listed it).
type toolNote byte

// noteToolAnnotations remembers, per endpoint, the tools a tools/list
// answer listed and their annotations (at most MaxEventsIndexedPerServer
// tools).
func (d *Detector) noteToolAnnotations(endpoint, tools string) {
	for line := range strings.SplitSeq(tools, "\n") {
		if len(line) < 2 {
			continue
		}
		k := d.serverEventKey(endpoint, "tool\x00"+line[1:])
		if _, ok := d.toolNotes[k]; ok || len(d.toolNotes) < d.cfg.MaxEventsIndexedPerServer {
			d.toolNotes[k] = toolNote(line[0])
		}
	}
}

// annotationsOf is what the endpoint's tools/list answers said of tool.
func (d *Detector) annotationsOf(endpoint, tool string) toolNote {
	return d.toolNotes[d.serverEventKey(endpoint, "tool\x00"+tool)]
}

// sessionlessMessages follows what a sessionless exchange's response
// carried at t: the answer to its call.
func (d *Detector) sessionlessMessages(ex *exchange, msgs []decode.Message, t time.Time) {
	for i := range msgs {
		m := &msgs[i]
		if (m.Type != decode.MsgResponse && m.Type != decode.MsgError) || m.ID == "" {
			continue
		}
		for j := range ex.msgs {
			req := &ex.msgs[j]
			if req.Type != decode.MsgRequest || req.ID != m.ID {
				continue
			}
			ex.answered = true
			ex.taskCreated = ex.taskCreated || m.CreatesTask
			if m.Type == decode.MsgResponse && !m.CreatesTask && !m.ToolError && req.Method == "tools/call" {
				d.noteHabit(d.brokenKey(ex, req), t, true)
			}
		}
	}
}

// partyKey names the client of a sessionless request by what the wire
// says about it: address, Authorization hash, clientInfo (from _meta) and
// User-Agent. Without sessions it is the unit of history.
func (ex *exchange) partyKey(m *decode.Message) string {
	return strings.Join([]string{ex.conn.Client.Addr().String(), ex.auth, m.ClientInfo, ex.userAgent}, "\x00")
}

// brokenKey is the key of a call of ex's client in the broken-call table.
func (d *Detector) brokenKey(ex *exchange, m *decode.Message) uint64 {
	return d.serverEventKey(ex.endpoint, ex.partyKey(m)+"\x00"+m.Tool+"\x00"+m.ParamsHash)
}

// noteBrokenCall: a sessionless exchange ended. If it carried a tools/call
// that reached the server and its stream ended without the answer, or was
// answered with a task (tasks extension: the call runs on, to be polled),
// or with a 5xx and no answer, the call waits LinkWindow for a re-issue. A
// 5xx is no refusal, as under the session revisions (onResponse): the
// server's own 500, or a gateway's 504 (it forwarded the request and gave
// up waiting), may come after the call ran; a gateway's 502 or 503 may
// too, or may say that no server got the request. Any other non-2xx
// refused the call.
func (d *Detector) noteBrokenCall(ex *exchange, o *decode.Observation) {
	failed := ex.hasResponse && ex.status >= 500
	if (ex.answered && !ex.taskCreated) || ex.method != "POST" || (ex.hasResponse && !ex.ok2xx() && !failed) {
		return
	}
	how := o.End.How
	if (how == decode.EndUnknown || ex.endedWhole(how)) && !ex.taskCreated {
		// The capture ended first, or the server ended a whole answer
		// that was no stream: nothing broke on the wire.
		return
	}
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Type != decode.MsgRequest || m.Method != "tools/call" {
			continue
		}
		k := d.brokenKey(ex, m)
		answered, maybe := d.habits.by(k, ex.start)
		b := &brokenCall{callBreak: ex.callBreak(m.ID, o.Time, how), habitual: answered,
			startUnseen: !answered && !d.clientHistoryWhole(ex, m), mayNotHaveReached: failed && ex.mayNotHaveReached(),
			habitAside: !answered && d.callsSetAside(ex, m, d.habits.reach(ex.start.Add(-2*d.cfg.LinkWindow)))}
		if ex.taskCreated {
			// The answer (a task) was seen whole: nothing rests on lost bytes.
			b.how = "reached the server, and the server answered it with a task (tasks extension: polled with tasks/get, not re-requested)"
			b.broke = ex.evidence(o.Time, "response", fmt.Sprintf("id %s answered with a task: the call runs on", m.ID))
		} else {
			if ex.gap || how == decode.EndGap || ex.limit != "" {
				// Its answer may be in the lost bytes: a habit may be
				// out of sight for the identical calls after it.
				b.gap = true
				d.noteHabit(k, o.Time, false)
			}
			// An identical call before it may have been answered unseen:
			// its answer lost on its own connection, or its request in
			// lost bytes of the pair that no session owned.
			b.gap = b.gap || !answered && (maybe || d.pairRequestsMayBeHidden(ex.start.Add(-d.cfg.LinkWindow), ex.conn))
		}
		if _, ok := d.brokenCalls[k]; !ok && len(d.brokenCalls) >= maxBrokenCalls {
			d.expireBrokenCalls(o.Time)
			if len(d.brokenCalls) >= maxBrokenCalls {
				d.limitHit("maxBrokenCalls", o.Time, nil, string(KindReissuedCallAfterBreak))
				continue
			}
		}
		d.brokenCalls[k] = b
	}
}

// callBreak describes call id of ex, which ended at t (how) without the
// JSON-RPC response to it: with a 5xx status, or with its stream or
// connection ending first.
func (ex *exchange) callBreak(id string, t time.Time, how decode.EndHow) callBreak {
	b := callBreak{id: id, at: ex.start, brokeAt: t, progress: ex.progress, request: ex.requestEvidence()}
	if ex.hasResponse && ex.status >= 500 {
		b.how = fmt.Sprintf("was answered %d without a JSON-RPC response (a gateway that gave up waiting on the server, or a failing server, answers so after a call ran as well as before)", ex.status)
		b.broke = ex.evidence(t, "response", fmt.Sprintf("HTTP %d and no response to id %s", ex.status, id))
		return b
	}
	words := breakWords(ex, how)
	b.how = "reached the server, and " + words + " before its response"
	b.broke = ex.evidence(t, "stream end", fmt.Sprintf("%s after %d SSE event(s), %d of them progress, and no response to id %s", words, ex.events, b.progress, id))
	return b
}

// endedWhole says whether ex's answer, ended as how, was a 2xx that was no
// stream (a JSON body, or a 202 without one) and ended whole: the server was
// done with the exchange, and whatever it did with a request it left
// unanswered there (a 202 is the answer of a server that sends the response
// on another stream), nothing broke on the wire.
func (ex *exchange) endedWhole(how decode.EndHow) bool {
	return how == decode.EndClean && ex.hasResponse && ex.ok2xx() && !ex.sse
}

func breakWords(ex *exchange, how decode.EndHow) string {
	switch {
	case !ex.hasResponse:
		return "the connection ended before any response"
	case how == decode.EndReset:
		return "the stream was reset"
	case how == decode.EndTruncated:
		return "the stream was cut"
	case how == decode.EndGap:
		return "the capture lost bytes of the stream"
	}
	return "the stream ended"
}

// expireBrokenCalls forgets broken calls older than LinkWindow.
func (d *Detector) expireBrokenCalls(now time.Time) {
	for k, b := range d.brokenCalls {
		if now.Sub(b.brokeAt) > d.cfg.LinkWindow {
			delete(d.brokenCalls, k)
		}
	}
}

// checkReissue: a sessionless tools/call request, answered 2xx (a re-issue
// refused ran nothing, and the broken call waits for the next). If the
// same client's identical call (tool and arguments; never _meta) broke
// within LinkWindow, this re-issue may run it a second time: critical for a
// tool annotated destructiveHint, high for one not annotated, nothing for
// one annotated readOnlyHint or idempotentHint.
func (d *Detector) checkReissue(ex *exchange, o *decode.Observation) {
	if len(d.brokenCalls) == 0 {
		return // the usual case: no key to hash for every call
	}
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Type != decode.MsgRequest || m.Method != "tools/call" {
			continue
		}
		k := d.brokenKey(ex, m)
		b := d.brokenCalls[k]
		if b == nil || b.brokeAt.After(ex.start) {
			// Sent before the break (an identical call in parallel):
			// not its re-issue; the broken call waits for that.
			continue
		}
		delete(d.brokenCalls, k)
		if ex.start.Sub(b.brokeAt) > d.cfg.LinkWindow {
			continue
		}
		note := d.annotationsOf(ex.endpoint, m.Tool)
		switch {
		case note == decode.ToolRepeatable:
			d.stats.RepeatableReissues++
			continue
		case b.habitual:
			// The client makes this call over and over (a poller, a
			// scheduled job): the re-issue may be a retry of the broken
			// one or the next of them, which the wire cannot tell apart.
			d.unverifiable(o.Time, nil, ex, string(KindReissuedCallAfterBreak), ReasonHabitualCall, b.id, m.ID)
			continue
		case b.habitAside:
			d.unverifiable(o.Time, nil, ex, string(KindReissuedCallAfterBreak), ReasonHabitSetAside, b.id, m.ID)
			continue
		case b.gap || ex.gap:
			// The break or the answer may be in lost bytes.
			d.unverifiable(o.Time, nil, ex, string(KindReissuedCallAfterBreak), ReasonCaptureGap, b.id, m.ID)
			continue
		case b.mayNotHaveReached:
			d.unverifiable(o.Time, nil, ex, string(KindReissuedCallAfterBreak), ReasonMayNotHaveReached, b.id, m.ID)
			continue
		case note == 0:
			// No tools/list answer seen lists the tool: it may be
			// annotated read-only in one the capture missed.
			d.unverifiable(o.Time, nil, ex, string(KindReissuedCallAfterBreak), ReasonToolsNotListed, b.id, m.ID)
			continue
		case b.startUnseen:
			// Identical calls answered before the capture began would
			// make it a habit, as for a session whose start was not
			// captured.
			d.unverifiable(o.Time, nil, ex, string(KindReissuedCallAfterBreak), ReasonClientStartNotCaptured, b.id, m.ID)
			continue
		}
		d.raiseReissue(ex, o, o.Time, nil, &b.callBreak, m, note, "the same client (address, Authorization, clientInfo and User-Agent alike)",
			fmt.Sprintf("Under revision %s there is no resumption: a client that must not run a call twice needs an "+
				"idempotency key in its arguments or the tasks extension.", ex.rev))
	}
}

// checkSessionReissue: a 2xx answer to a request of a session (revisions
// before 2026-07-28). A tools/call in it that took the place of the
// session's identical call whose exchange had ended without the response
// (a cut or reset stream, a connection closed, a 5xx), and which no resume
// had answered, is the client sending a call that may have run again, as
// without sessions: the session names the client. Judged on the answer,
// not the request: a re-issue refused (a 404 for a session the server
// lost) ran nothing, and its re-issue in a new session is
// silent_reinit_after_404's. A call the client had cancelled
// (notifications/cancelled) before its exchange ended is no break: it gave
// the call up itself (endExchange); a cancellation after the break, a
// client's time-out cleaning up, changes nothing, as closing the stream
// changes nothing without sessions.
func (d *Detector) checkSessionReissue(ex *exchange, o *decode.Observation) {
	s := ex.sess
	for i := range ex.msgs {
		m := &ex.msgs[i]
		if m.Type != decode.MsgRequest || m.Method != "tools/call" {
			continue
		}
		c := s.calls.at(m.ID)
		if c == nil || c.ex != ex.serial || c.replaced == nil {
			continue
		}
		first := c.replaced
		b := first.broke
		if b == nil || b.brokeAt.After(c.at) || c.at.Sub(b.brokeAt) > d.cfg.LinkWindow {
			continue
		}
		if b.clientClosed && first.cancelled {
			// The client closed the stream and cancelled the call (go-sdk
			// and mcp-go cancel through the context: the close first,
			// then the notification, racing the server's end of the
			// stream): it gave the call up, as a client that cancels with
			// the stream open does, and may make it again.
			continue
		}
		note := d.annotationsOf(ex.endpoint, m.Tool)
		reason := ""
		switch l := d.limitOn(first.at, addrKey{s.client.Addr(), s.server}); {
		case note == decode.ToolRepeatable || s.isRepeatable(m.Tool):
			d.stats.RepeatableReissues++
			continue
		case first.habitual:
			reason = ReasonHabitualCall
		case s.callAside(m):
			// The session's identical call was set aside as a proxy's
			// hop (a server numbering its sessions gives replicas'
			// requests the same print): its habit may be unseen.
			reason = ReasonHabitSetAside
		case first.mayNotHaveReached:
			reason = ReasonMayNotHaveReached
		case first.unread:
			// Its answer may have come in a body not read.
			reason = ReasonEncodedBody
		case s.gap || ex.gap || d.requestsMayBeHidden(s, ex.conn):
			// The answer, or a resume that delivered it, may be in the
			// lost bytes.
			reason = ReasonCaptureGap
		case l != "":
			reason = limitReason(l)
		case !s.startSeen:
			// Identical calls answered before the capture began would
			// make it a habit, and its tools/list may be there.
			reason = ReasonStartNotCaptured
		case note == 0 || !s.toolsListed:
			// No tools/list answer named the tool, or none was seen
			// in this session. Another session's answer grades the
			// severity, but does not make the finding: what one
			// capture holds must not change with the sessions of
			// others captured beside it.
			reason = ReasonToolsNotListed
		}
		if reason != "" {
			d.unverifiable(o.Time, s, ex, string(KindReissuedCallAfterBreak), reason, b.id, m.ID)
			continue
		}
		d.raiseReissue(ex, o, c.at, s, b, m, note, fmt.Sprintf("the client, in the same session %s (answered %d),", s.id, ex.status),
			fmt.Sprintf("Under revision %s a client resumes a broken stream with Last-Event-ID when it carried an event id, "+
				"and learns the call's outcome; one that sends the call again instead needs an idempotency key in its "+
				"arguments, or must reconcile the first attempt before.", ex.rev))
	}
}

// raiseReissue raises reissued_call_after_break: call b, broken, sent again
// as m (in ex, at sent) by who; note is what the endpoint's tools/list said
// of the tool (destructive: critical).
func (d *Detector) raiseReissue(ex *exchange, o *decode.Observation, sent time.Time, s *session, b *callBreak, m *decode.Message, note toolNote, who, advice string) {
	severity, annotated := SeverityHigh, "not annotated read-only or idempotent"
	if note == decode.ToolDestructive {
		severity, annotated = SeverityCritical, "annotated destructiveHint"
	}
	started := "no progress was seen, so whether it started is unknown"
	if b.progress > 0 {
		started = fmt.Sprintf("%d progress notification(s) show it had started", b.progress)
	}
	d.violation(&Violation{
		Kind: KindReissuedCallAfterBreak, Severity: severity, Time: o.Time, Tool: m.Tool, JSONRPCIDs: []string{b.id, m.ID},
		Explanation: fmt.Sprintf("tools/call %s (id %s, sent %s) %s at %s; at %s %s sent the identical call (same tool, "+
			"same arguments) as id %s. The first attempt may have run (%s), and the server runs the re-issue too: the "+
			"tool (%s) may have run twice. %s",
			m.Tool, b.id, b.at.Format(time.RFC3339Nano), b.how, b.brokeAt.Format(time.RFC3339Nano), sent.Format(time.RFC3339Nano),
			who, m.ID, started, annotated, advice),
		Evidence: []Evidence{b.request, b.broke, ex.requestEvidence()},
	}, ex, s, b.id, m.Tool, m.ParamsHash)
}

// callHabits remembers, per sessionless client and call (brokenKey), when
// an identical call was first answered with a result, and when one first
// ended in lost bytes that may have held its answer. Without sessions there
// is no history to hold them, so they are kept in two generations: the
// current one is retired whole when a new call is noted after it is
// LinkWindow old (in a quiet capture it lasts) or once it holds
// maxBrokenCalls, and a call noted again is noted in the current one. A
// call answered within LinkWindow of a break is found; a re-issue further
// off is not linked.
type callHabits struct {
	cur, old map[uint64]habitNote
	since    time.Time // when cur began
	oldSince time.Time // when old began
	// starts: the clients (endpoint and partyKey) seen sending
	// server/discover, the revision's handshake, within LinkWindow of the
	// capture's first observation (began), at most maxBrokenCalls. Only a
	// call sent in that first window can have a habit older than the
	// capture that the generations do not hold.
	starts map[uint64]struct{}
	began  time.Time
}

// habitNote: when an identical call was first seen answered with a result,
// and when one first ended with its answer possibly lost (zero: never).
type habitNote struct{ answered, maybe time.Time }

// noteHabit notes call k answered at t (or possibly answered, in lost
// bytes). A generation retired because it was full is a limit hit: the
// older one goes with it within the window, and a re-issue of a call only it
// held is flagged as if no habit were seen.
func (d *Detector) noteHabit(k uint64, t time.Time, answered bool) {
	h := &d.habits
	n, ok := h.cur[k]
	if !ok && (h.cur == nil || len(h.cur) >= maxBrokenCalls || t.Sub(h.since) > d.cfg.LinkWindow) {
		if len(h.cur) >= maxBrokenCalls {
			d.stats.LimitsHit["maxBrokenCalls"]++
		}
		h.old, h.cur, h.oldSince, h.since = h.cur, make(map[uint64]habitNote), h.since, t
	}
	switch {
	case answered && n.answered.IsZero():
		n.answered = t
	case !answered && n.maybe.IsZero():
		n.maybe = t
	}
	h.cur[k] = n
}

// reach is how far back a habit the generations hold may go: t, or when
// the older of them began, if that is earlier (a quiet capture keeps its
// current generation for longer than LinkWindow).
func (h *callHabits) reach(t time.Time) time.Time {
	began := h.since
	if h.old != nil {
		began = h.oldSince
	}
	if h.cur != nil && began.Before(t) {
		return began
	}
	return t
}

// noteStart notes a sessionless server/discover of ex's client.
func (d *Detector) noteStart(ex *exchange, m *decode.Message) {
	h := &d.habits
	if ex.start.Sub(h.began) >= d.cfg.LinkWindow {
		return
	}
	if len(h.starts) >= maxBrokenCalls {
		// Its calls' re-issues are judged as if its start were unseen.
		d.stats.LimitsHit["maxBrokenCalls"]++
		return
	}
	if h.starts == nil {
		h.starts = make(map[uint64]struct{})
	}
	h.starts[d.startKey(ex, m)] = struct{}{}
}

// startKey is the key of m's client in callHabits.starts.
func (d *Detector) startKey(ex *exchange, m *decode.Message) uint64 {
	return d.serverEventKey(ex.endpoint, "start\x00"+ex.partyKey(m))
}

// clientHistoryWhole says whether every identical call of m's client that
// could make it a habit (answered within LinkWindow before ex) was in the
// capture: it began LinkWindow before ex, or the client started in it.
func (d *Detector) clientHistoryWhole(ex *exchange, m *decode.Message) bool {
	if ex.start.Sub(d.habits.began) >= d.cfg.LinkWindow {
		return true
	}
	_, ok := d.habits.starts[d.startKey(ex, m)]
	return ok
}

// by says whether call k had been answered with a result by t, and whether
// an identical call had ended by then with its answer possibly lost.
func (h *callHabits) by(k uint64, t time.Time) (answered, maybe bool) {
	for _, n := range [2]habitNote{h.old[k], h.cur[k]} {
		answered = answered || !n.answered.IsZero() && !n.answered.After(t)
		maybe = maybe || !n.maybe.IsZero() && !n.maybe.After(t)
	}
	return answered, maybe
}

// headerMismatch compares a request's Mcp-Method and Mcp-Name headers
// (2026-07-28, for routers that do not read bodies) with its one JSON-RPC
// message; a router trusting the header can route, rate-limit or
// authorise a call the server does not run.
func headerMismatch(r *decode.Request) string {
	if (r.MCPMethod == "" && r.MCPName == "") || len(r.Messages) != 1 {
		return ""
	}
	m := &r.Messages[0]
	switch {
	case r.MCPMethod != "" && r.MCPMethod != m.Method:
		return fmt.Sprintf("Mcp-Method: %s but the body calls %s (the server runs %s)", r.MCPMethod, m.Method, m.Method)
	case r.MCPName != "" && m.Method == "tools/call" && r.MCPName != m.Tool:
		return fmt.Sprintf("Mcp-Name: %s but the body calls tool %s (the server runs %s)", r.MCPName, m.Tool, m.Tool)
	}
	return ""
}

// maxRevisionsCounted bounds Stats.Revisions: revision strings come from
// the wire.
const maxRevisionsCounted = 16

// maxRevisionPairs bounds Stats.PairRevisions.
const maxRevisionPairs = 256

// countRevision counts a request of ex's client/server pair that spoke rev.
// Pairs are keyed by address here (every MCP request passes: no string is
// built for them) and named only when Stats is asked.
func (d *Detector) countRevision(ex *exchange, rev string) {
	if _, ok := d.stats.Revisions[rev]; !ok && len(d.stats.Revisions) >= maxRevisionsCounted-1 {
		rev = "other"
	}
	d.stats.Revisions[rev]++
	pair := pairOf(ex.conn)
	revs, ok := d.pairRevisions[pair]
	if !ok {
		if len(d.pairRevisions) >= maxRevisionPairs {
			return
		}
		revs = map[string]int64{}
		d.pairRevisions[pair] = revs
	}
	revs[rev]++
}
