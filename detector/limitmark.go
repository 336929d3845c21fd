package detector

import (
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// limitMark says a limit outside the session state cut the evidence between
// a client address and a server: the decode pipeline delivered an
// observation of the pair out of capture order (ReorderWindow,
// MaxBufferedObservations), or stopped reading one of its connections
// (NonHTTPScanLimit, or decode.GapHTTP2: not a limit). Every check on the
// pair whose evidence began by at, or while such a connection is still
// open, is Unverifiable naming limit:
// presence-based checks too, since out-of-order evidence can fake a
// replay or a duplicate.
type limitMark struct {
	at    time.Time
	limit string
	open  int // connections of the pair given up and not yet closed
}

func pairOf(c decode.Conn) addrKey { return addrKey{c.Client.Addr(), c.Server} }

// noteMCPPair remembers that the pair carries MCP sessions, so a connection
// of it given up later is known to matter. Bounded like the sessions: when
// full, every pair counts as known.
func (d *Detector) noteMCPPair(k addrKey) {
	if d.mcpPairsAll {
		return
	}
	if _, ok := d.mcpPairs[k]; ok {
		return
	}
	if len(d.mcpPairs) >= d.cfg.MaxSessions {
		clear(d.mcpPairs)
		d.mcpPairsAll = true
		d.stats.LimitsHit["MaxSessions"]++
		return
	}
	d.mcpPairs[k] = struct{}{}
}

func (d *Detector) mcpPair(k addrKey) bool {
	_, ok := d.mcpPairs[k]
	return ok || d.mcpPairsAll
}

// noteLimit marks pair k as touched by limit at t; opened/closed count a
// connection of the pair given up (until it closes).
func (d *Detector) noteLimit(k addrKey, t time.Time, limit string, opened, closed bool) {
	m, ok := d.limitMarks[k]
	if !ok && len(d.limitMarks) >= d.cfg.MaxSessions {
		// Forget every pair; all evidence up to now counts as touched.
		clear(d.limitMarks)
		if !t.Before(d.limitFloor.at) {
			d.limitFloor = limitMark{at: t, limit: limit}
		}
		d.stats.LimitsHit["MaxSessions"]++
		if !opened {
			return
		}
	}
	if !t.Before(m.at) {
		m.at, m.limit = t, limit
	}
	switch {
	case opened:
		m.open++
	case closed && m.open > 0:
		m.open--
	}
	d.limitMarks[k] = m
}

// limitOn names the limit that touched evidence begun at start between the
// given pairs, or "".
func (d *Detector) limitOn(start time.Time, pairs ...addrKey) string {
	if d.limitFloor.limit != "" && !start.After(d.limitFloor.at) {
		return d.limitFloor.limit
	}
	if len(d.limitMarks) == 0 {
		return ""
	}
	for _, k := range pairs {
		if m, ok := d.limitMarks[k]; ok && (m.open > 0 || !start.After(m.at)) {
			return m.limit
		}
	}
	return ""
}

// limitOnEvidence is limitOn for a check about ex and s (either may be nil)
// whose evidence also goes back to the times in ev.
func (d *Detector) limitOnEvidence(ex *exchange, s *session, ev []Evidence) string {
	if len(d.limitMarks) == 0 && d.limitFloor.limit == "" {
		return ""
	}
	var start time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (start.IsZero() || t.Before(start)) {
			start = t
		}
	}
	var pairs []addrKey
	if ex != nil {
		earlier(ex.start)
		pairs = append(pairs, pairOf(ex.conn))
	}
	if s != nil {
		earlier(s.firstSeen)
		pairs = append(pairs, addrKey{s.client.Addr(), s.server})
	}
	for i := range ev {
		earlier(ev[i].Time)
	}
	if start.IsZero() {
		start = d.now
	}
	return d.limitOn(start, pairs...)
}

// onLate handles an observation the pipeline delivered out of order: its
// pair is marked from the detector's clock back, before o is judged.
func (d *Detector) onLate(o *decode.Observation) {
	k := pairOf(o.Conn)
	relevant := d.mcpPair(k) || d.exchanges[exKey{o.Conn.ID, o.Exchange}] != nil ||
		o.Request != nil && isMCPRequest(o.Request) || o.Response != nil && o.Response.HasSessionID
	if !relevant {
		return
	}
	at := d.now
	if o.Time.After(at) {
		at = o.Time
	}
	d.noteLimit(k, at, o.Late.String(), false, false)
}

// onLimitGap: the decoder gave up a connection (or it closed after that)
// because of a limit. Pairs with MCP sessions are marked; open exchanges on
// the connection lose the rest of their evidence.
func (d *Detector) onLimitGap(o *decode.Observation) {
	g := o.Gap
	pairs := []addrKey{pairOf(o.Conn)}
	if g.RolesUnknown {
		pairs = append(pairs, addrKey{o.Conn.Server.Addr(), o.Conn.Client})
	}
	for _, k := range pairs {
		switch {
		case g.Limit == decode.GapHTTP2:
			// Unread HTTP, maybe the pair's only MCP: marked whether or
			// not the pair was known to carry MCP yet, for as long as the
			// connection is open.
			d.noteLimit(k, o.Time, g.Limit, !g.Ended, g.Ended)
		case g.Momentary:
			// The decoder let go of bytes of a connection it reads on:
			// what they carried is unseen, whether or not the pair was
			// known to carry MCP yet.
			d.noteLimit(k, o.Time, g.Limit, false, false)
		case d.mcpPair(k) || d.limitMarks[k].open > 0:
			d.noteLimit(k, o.Time, g.Limit, !g.Ended, g.Ended)
		}
	}
	for ex := d.openByConn[o.Conn.ID]; ex != nil; ex = ex.nextOnConn {
		if ex.limit == "" {
			ex.limit = g.Limit
		}
	}
}
