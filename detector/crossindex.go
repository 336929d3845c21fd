package detector

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// eventOrigin is where an event id was first sent within its logical
// endpoint: the cross-session index, so a resume that replays another
// session's events (a shared event store whose stream ids are not scoped
// by session: typescript-sdk #1004) is seen.
type eventOrigin struct {
	// sessionKey is the first sender's sessionKey (its bytes shared with
	// the session's, not copied).
	sessionKey string
	data       uint64 // hash of the event's data
	party      uint64 // hash of the first sender's client address and Authorization hash
	at         int64  // when it was first sent (Unix ns)
	// shared: another session sent the same id too. The id scheme is then
	// not unique across sessions (go-sdk's per-session counters), and the
	// id proves nothing about where an event came from.
	shared bool
}

// maxCrossOriginsPerResume bounds the cross_stream_replay findings of one
// resume: one per session whose events it replayed, the first few only.
const maxCrossOriginsPerResume = 8

// serverEventKey hashes an event id within its endpoint: the index holds
// a hash, not the id, to stay small (a collision of 64-bit hashes among
// MaxEventsIndexedPerServer ids is not a practical concern, and it could
// only suppress or mis-attribute one finding, never raise one without
// the data hash also matching).
// The two parts are hashed apart and combined (cheaper than streaming
// them through a maphash.Hash, once per event).
func (d *Detector) serverEventKey(endpoint, id string) uint64 {
	return maphash.String(d.hashSeed, endpoint)*0x9e3779b97f4a7c15 ^ maphash.String(d.hashSeed, id)
}

// partyOf hashes who sent an exchange: its client address and the
// Authorization hash of its request.
func (d *Detector) partyOf(ex *exchange) uint64 {
	var h maphash.Hash
	h.SetSeed(d.hashSeed)
	b := ex.conn.Client.Addr().As16()
	h.Write(b[:])
	h.WriteString(ex.auth)
	return h.Sum64()
}

// indexServerEvent records where o's event id was first sent, at most
// MaxEventsIndexedPerServer ids.
func (d *Detector) indexServerEvent(ex *exchange, s *session, o *decode.Observation, data uint64) {
	key := d.serverEventKey(ex.endpoint, o.Event.ID)
	if e, ok := d.serverEvents[key]; ok {
		// A resume delivering the very event another session sent is
		// the leak checkCrossSession reports, not a second sender.
		replayed := ex.resume != nil && ex.resume.active && e.data == data
		if e.sessionKey != s.key && !e.shared && !replayed {
			e.shared = true
			d.serverEvents[key] = e
			// This endpoint's ids are not unique across sessions, so
			// no id of it can say which session first sent an event.
			if len(d.sharedIDEndpoints) < d.cfg.MaxSessions {
				d.sharedIDEndpoints[ex.endpoint] = struct{}{}
			}
		}
		return
	}
	if d.serverEventsFull() {
		d.limitHit("MaxEventsIndexedPerServer", o.Time, s, "cross_stream_replay")
		return
	}
	d.serverEvents[key] = eventOrigin{sessionKey: s.key, data: data, party: d.partyOf(ex), at: o.Time.UnixNano()}
}

// serverEventsFull says the cross-session index holds
// MaxEventsIndexedPerServer ids (it never forgets one).
func (d *Detector) serverEventsFull() bool {
	return len(d.serverEvents) >= d.cfg.MaxEventsIndexedPerServer
}

// idsShared says whether two sessions of endpoint were seen to send the
// same event id (go-sdk numbers each session's streams _0, _1, ...). Past
// MaxSessions endpoints every endpoint is taken to share.
func (d *Detector) idsShared(endpoint string) bool {
	if len(d.sharedIDEndpoints) >= d.cfg.MaxSessions {
		return true
	}
	_, ok := d.sharedIDEndpoints[endpoint]
	return ok
}

// sentByAnother says whether another session of ex's endpoint sent the id
// ex resumes from, an id no two sessions mint (drawnAtRandom, and the
// endpoint's ids were not seen shared): where the cursor came from is then
// on the wire (a client that carried its old session's cursor into a new
// one), even if s's own streams were not all captured.
func (d *Detector) sentByAnother(ex *exchange, s *session) bool {
	e, ok := d.serverEvents[d.serverEventKey(ex.endpoint, ex.cursor)]
	return ok && e.sessionKey != s.key && !e.shared && !d.idsShared(ex.endpoint) && drawnAtRandom(ex.cursor)
}

// broadcastNotification says whether ev carries only a notification whose
// content is the same for every session that gets it: a server announces a
// changed list, or an updated resource, to all its sessions (or all
// subscribers) alike, and a server whose stream is a shared log gives each
// the same id, unique within every session as the protocol asks.
func broadcastNotification(ev *decode.Event) bool {
	if len(ev.Messages) != 1 || ev.Messages[0].Type != decode.MsgNotification {
		return false
	}
	switch ev.Messages[0].Method {
	case "notifications/tools/list_changed", "notifications/prompts/list_changed",
		"notifications/resources/list_changed", "notifications/resources/updated":
		return true
	}
	return false
}

// checkCrossSession judges an event a resume of s delivers whose id s never
// sent: if another session first sent that very event (same id, same data)
// and the endpoint's ids are unique across its sessions, the server replayed another session's
// messages into this one: cross_stream_replay, critical when the other
// session belongs to another client or authorization, high when it is the
// same client's. It rests on s's whole history being captured (else the id
// may be its own, unseen).
func (d *Detector) checkCrossSession(ex *exchange, s *session, o *decode.Observation, data uint64) {
	ev := o.Event
	e, ok := d.serverEvents[d.serverEventKey(ex.endpoint, ev.ID)]
	reason := ""
	switch {
	case !ok:
		if !d.serverEventsFull() {
			return // a new event, or one first sent on this session
		}
		reason = ReasonLimitPrefix + "MaxEventsIndexedPerServer"
	case e.sessionKey == s.key || e.shared || e.data != data || d.idsShared(ex.endpoint):
		return
	case broadcastNotification(ev):
		reason = ReasonBroadcast
	case !s.startSeen:
		reason = ReasonStartNotCaptured
	case s.indexLimit != "":
		reason = limitReason(s.indexLimit)
	case d.historyMayBeHidden(ex, s, s.firstSeen):
		reason = ReasonCaptureGap
	}
	if reason != "" {
		if !ex.once(onceCrossSession) {
			return
		}
		d.unverifiable(o.Time, s, ex, "cross_stream_replay", reason, ev.ID)
		if rs := ex.resume; !rs.emitted && rs.unverifiable == "" {
			rs.unverifiable = reason
		}
		return
	}
	if len(ex.crossOrigins) >= maxCrossOriginsPerResume || slices.Contains(ex.crossOrigins, e.sessionKey) {
		return // each session's leak once per resume; the first few suffice to page
	}
	severity, whose := SeverityHigh, "the same client's"
	if e.party != d.partyOf(ex) {
		severity, whose = SeverityCritical, "another client's"
	}
	ex.crossOrigins = append(ex.crossOrigins, e.sessionKey)
	_, otherID, _ := strings.Cut(e.sessionKey, "\x00")
	why := fmt.Sprintf("event %s was first sent on session %s at %s, %s session", ev.ID, otherID,
		time.Unix(0, e.at).UTC().Format(time.RFC3339Nano), whose)
	d.violation(&Violation{
		Kind: KindCrossStreamReplay, Severity: severity, Time: o.Time, LastEventID: ex.cursor, FirstEventID: ev.ID,
		NewSessionID: otherID,
		Explanation: fmt.Sprintf("The client resumed session %s from event %s and the server replayed an event that "+
			"another session sent (%s). One session's messages reached another's client: with a shared event store whose "+
			"stream ids are not scoped by session, a tenant reads another tenant's messages. Check how the event store "+
			"keys its streams: by session and stream, never by stream id alone.", s.id, ex.cursor, why),
		Evidence: []Evidence{ex.requestEvidence(), ex.responseEvidence(), ex.evidence(o.Time, "sse event", why)},
	}, ex, s, "session", otherID)
}
