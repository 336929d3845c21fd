package detector

import (
	"hash/maphash"
	"time"
)

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
	// forgotten holds (as bits of a small filter) the ids dropped because
	// the table was full, while one may still come back (SessionIdleTimeout
	// after the last drop): a request for such an id is maybe for a deleted
	// session, which cannot be judged. False positives only make checks
	// Unverifiable.
	forgotten   []uint64
	forgottenAt time.Time
}

// forgottenBits sizes the filter of ids forgotten at MaxSessions (8 KiB).
const forgottenBits = 1 << 16

var forgottenSeed = maphash.MakeSeed()

func forgottenHash(id string) (uint64, uint64) {
	h := maphash.String(forgottenSeed, id)
	return h % forgottenBits, (h >> 32) % forgottenBits
}

// mayBeForgotten reports whether id may be a deleted session's whose
// tombstone was dropped at MaxSessions.
func (t *tombstones) mayBeForgotten(id string) bool {
	if t.forgotten == nil {
		return false
	}
	a, b := forgottenHash(id)
	return t.forgotten[a/64]&(1<<(a%64)) != 0 && t.forgotten[b/64]&(1<<(b%64)) != 0
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
		if old := t.pop(); old != "" {
			if t.forgotten == nil {
				t.forgotten = make([]uint64, forgottenBits/64)
			}
			a, b := forgottenHash(old)
			t.forgotten[a/64] |= 1 << (a % 64)
			t.forgotten[b/64] |= 1 << (b % 64)
			t.forgottenAt = now
		}
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

// pop forgets the id at the front of the queue (the oldest deletion) and
// returns it.
func (t *tombstones) pop() string {
	var id string
	for t.head < len(t.order) {
		e := t.order[t.head]
		t.order[t.head] = tombEntry{}
		t.head++
		if _, ok := t.byID[e.id]; ok {
			delete(t.byID, e.id)
			id = e.id
			break
		}
	}
	t.compact()
	return id
}

// expire forgets ids unused for longer than idle.
func (t *tombstones) expire(now time.Time, idle time.Duration) {
	if t.forgotten != nil && now.Sub(t.forgottenAt) > idle {
		// A forgotten tombstone would have expired by now.
		t.forgotten = nil
	}
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
