package detector

import "time"

// tomb is what is left of a deleted session: enough to know that a later
// request for its id is for a session that no longer exists (the server
// should answer 404), not the first sight of a new one.
type tomb struct {
	rev  string // the session's revision, for requests without the header
	last int64  // deletion, or the latest request for the id since (unix ns)
}

// tombstones remembers deleted session ids for SessionIdleTimeout after
// their last use, at most MaxSessions of them, oldest forgotten first.
type tombstones struct {
	byID map[string]tomb
	// order is a FIFO of ids by the time they entered; an id used again
	// is moved to the back when it reaches the front (see expire).
	order []tombEntry
	head  int
}

type tombEntry struct {
	id string
	at int64 // unix ns
}

func newTombstones() tombstones {
	return tombstones{byID: map[string]tomb{}}
}

func (t *tombstones) add(d *Detector, id, rev string, now time.Time) {
	if _, ok := t.byID[id]; !ok && len(t.byID) >= d.cfg.MaxSessions {
		d.stats.LimitsHit["MaxSessions"]++
		t.pop()
	}
	t.byID[id] = tomb{rev: rev, last: now.UnixNano()}
	t.order = append(t.order, tombEntry{id, now.UnixNano()})
}

// use reports whether id is a deleted session's, and counts it as used.
func (t *tombstones) use(id string, now time.Time) bool {
	tb, ok := t.byID[id]
	if ok && now.UnixNano() > tb.last {
		tb.last = now.UnixNano()
		t.byID[id] = tb
	}
	return ok
}

// forget drops id: it names a live session again. Its queue entry is
// skipped when it comes up.
func (t *tombstones) forget(id string) {
	delete(t.byID, id)
}

// pop forgets the id at the front of the queue (the oldest deletion).
func (t *tombstones) pop() {
	for t.head < len(t.order) {
		e := t.order[t.head]
		t.order[t.head] = tombEntry{}
		t.head++
		if _, ok := t.byID[e.id]; ok {
			delete(t.byID, e.id)
			break
		}
	}
	t.compact()
}

// expire forgets ids unused for longer than idle.
func (t *tombstones) expire(now time.Time, idle time.Duration) {
	oldest := now.Add(-idle).UnixNano()
	for t.head < len(t.order) {
		e := t.order[t.head]
		if e.at >= oldest {
			break
		}
		t.order[t.head] = tombEntry{}
		t.head++
		tb, ok := t.byID[e.id]
		switch {
		case !ok:
			// forgotten already
		case tb.last > e.at:
			// used since it was queued: queue it again at its last use
			t.order = append(t.order, tombEntry{e.id, tb.last})
		default:
			delete(t.byID, e.id)
		}
	}
	t.compact()
}

// compact reclaims the consumed front of the queue.
func (t *tombstones) compact() {
	if t.head > 64 && t.head*2 > len(t.order) {
		n := copy(t.order, t.order[t.head:])
		clear(t.order[n:])
		t.order, t.head = t.order[:n], 0
	}
}
