package detector

import (
	"fmt"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// A resumed stream that breaks again before delivering any event id must
// be resumed with the same cursor: the client has nothing newer. The
// TypeScript client 1.32.2 keeps a stream's cursor only from events that
// carry an id, never from the token it resumed with, so it reconnects with
// no Last-Event-ID (typescript-sdk #2499) and waits forever, or gets the
// stream from scratch: cursor_dropped.

// droppableCursor is a resumed GET of a session that ended before any
// event id: the cursor the client still owes its next GET.
type droppableCursor struct {
	cursor string
	// streamUnknown: the cursor is not in the session's index, so whether
	// it was the standalone stream's is unknown.
	streamUnknown bool
	endedAt       time.Time
	how           decode.EndHow
	resume        Evidence
	end           Evidence
}

// noteResumeEnded: a session's exchange ended. A GET that resumed the
// standalone stream with a cursor, was answered with a stream and delivered
// no event id leaves that cursor owed. A call's stream is not owed: a GET
// without a cursor opens the standalone stream and never continues a
// call's (go-sdk's client gives up on a call whose resumed stream ends
// empty, and its next GET is the standalone stream's). Nor is the cursor
// of a stream that sent an empty id field: under the SSE rules that clears
// the client's last event id, so a client that follows them (EventSource)
// sends none, and one that ignores it (the SDKs) sends the cursor it had.
func (d *Detector) noteResumeEnded(ex *exchange, o *decode.Observation) {
	e := o.End
	if ex.method != "GET" || !ex.hasCursor || !ex.ok2xx() || !ex.sse || ex.sawID || e.How == decode.EndUnknown ||
		e.HasLastID && e.LastID == "" {
		return
	}
	// The resume set ex.stream to the cursor's stream when the session
	// issued the cursor.
	if ex.stream != nil && !ex.stream.standalone {
		return
	}
	how := e.How
	ex.sess.droppable = &droppableCursor{cursor: ex.cursor, streamUnknown: ex.stream == nil, endedAt: o.Time, how: how,
		resume: ex.requestEvidence(),
		end:    ex.evidence(o.Time, "stream end", fmt.Sprintf("ended %s after %d SSE event(s), none with an id", how, ex.events))}
}

// checkCursorKept: a GET of a session that owes a cursor. Carrying one
// settles it; carrying none drops it, judged on the GET's answer.
func (d *Detector) checkCursorKept(ex *exchange) {
	s := ex.sess
	p := s.droppable
	if p == nil || ex.method != "GET" {
		return
	}
	s.droppable = nil
	if !ex.hasCursor {
		ex.dropped = p
	}
}

// judgeDroppedCursor: the answer to a GET that dropped its session's
// cursor. A 404 says the server had lost the session, so nothing was left
// to replay, and the client may have learnt so first: in the TypeScript
// SDK's traffic its resume of a call's stream, answered 404 on another
// connection, comes between, and a capture without that connection (one
// another node's agent saw, or whose bytes were lost) showed the GET after
// it as the next. A redirect ran nothing: the GET sent where it points is
// the one to judge. Any other answer (200, or the TypeScript server's 409
// for a standalone stream it still holds open) leaves the cursor dropped.
func (d *Detector) judgeDroppedCursor(ex *exchange) {
	s, p := ex.sess, ex.dropped
	ex.dropped = nil
	switch {
	case ex.status == 404:
	case ex.status >= 300 && ex.status < 400:
		if s.droppable == nil {
			s.droppable = p
		}
	case p.how == decode.EndGap || d.historyMayBeHidden(ex, s, p.endedAt):
		// An event with an id may be in the lost bytes.
		d.unverifiable(ex.respAt, s, ex, string(KindCursorDropped), ReasonCaptureGap, p.cursor)
	case p.streamUnknown:
		d.unverifiable(ex.respAt, s, ex, string(KindCursorDropped), ReasonCursorStreamUnknown, p.cursor)
	default:
		d.violation(&Violation{
			Kind: KindCursorDropped, Time: ex.start, LastEventID: p.cursor,
			Explanation: fmt.Sprintf("Session %s resumed its standalone stream with Last-Event-ID %s; that stream ended (%s at %s) before "+
				"delivering any event id, so %s was still the client's last event. Its next GET carried no Last-Event-ID: "+
				"the client dropped its cursor, so the server cannot replay what it missed (it waits for events already sent, "+
				"or gets the stream from the start). Check the client: a resumed stream's cursor is the one it resumed with "+
				"until an event brings a newer id (typescript-sdk #2499; go-sdk v1.8.0's client too).",
				s.id, p.cursor, p.how, p.endedAt.Format(time.RFC3339Nano), p.cursor),
			Evidence: []Evidence{p.resume, p.end, ex.requestEvidence()},
		}, ex, s, p.cursor)
	}
}
