package detector

import (
	"fmt"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// A server must answer 404 to a request carrying a session id it does not
// know: that is the one signal clients re-initialise on. One that answers
// 400, 401 or 403 instead (the TypeScript SDK README's routing up to 1.23:
// 400 "Bad Request: No valid session ID provided"; rust-sdk #689) leaves
// its clients retrying a dead session forever: unknown_session_not_404,
// raised only where the capture proves the id dead.

// notFoundStatus says whether status is one a server uses instead of 404
// for a session it does not know.
func notFoundStatus(status int) bool { return status == 400 || status == 401 || status == 403 }

// checkUnknownSessionStatus: a 4xx other than 404 to a request carrying a
// session id the capture knows to be dead (deleted, or answered 404 before).
func (d *Detector) checkUnknownSessionStatus(ex *exchange, o *decode.Observation) {
	if !notFoundStatus(ex.status) || !ex.hasReqSession || ex.sessionless {
		return
	}
	if ex.status == 401 {
		// Authorization runs before the session is looked up, and an
		// expired or invalid token must get 401 (MCP's authorization
		// spec): a dead session proves nothing about a 401. Only its
		// body calling the session unknown does (unknownSessionSaid).
		return
	}
	switch s := ex.sess; {
	case ex.afterDelete && !ex.tombForgotten:
		d.unknownSessionNot404(ex, o.Time, "was deleted (DELETE answered) before")
	case s != nil && s.gone:
		d.unknownSessionNot404(ex, o.Time, fmt.Sprintf("the server itself answered 404 for at %s", s.lostAt.Format(time.RFC3339Nano)))
	}
}

// unknownSessionSaid: an error in a 400/401/403 answer says the request's
// session is not known.
func (d *Detector) unknownSessionSaid(ex *exchange, o *decode.Observation) {
	if notFoundStatus(ex.status) && ex.hasReqSession && !ex.sessionless {
		d.unknownSessionNot404(ex, o.Time, "the server's own error message calls unknown",
			ex.evidence(o.Time, "response body", "JSON-RPC error whose message says the session is not known"))
	}
}

func (d *Detector) unknownSessionNot404(ex *exchange, t time.Time, proof string, more ...Evidence) {
	if !d.firstCause(ex.endpoint, ex.reqSession, "not404") {
		return
	}
	d.violation(&Violation{
		Kind: KindUnknownSessionNot404, Time: t, SessionID: ex.reqSession,
		Explanation: fmt.Sprintf("The server answered %d to a %s carrying session %s, which %s. The protocol says a "+
			"server answers 404 for a session id it does not know, and 404 is what clients re-initialise on: with %d "+
			"they keep the dead session and retry or fail for good. Check the server's session routing (an unknown or "+
			"expired id must get 404).", ex.status, ex.method, ex.reqSession, proof, ex.status),
		Evidence: append([]Evidence{ex.requestEvidence(), ex.responseEvidence()}, more...),
	}, ex, ex.sess, "not404")
}
