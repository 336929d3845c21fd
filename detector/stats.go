package detector

import "maps"

// Stats counts what the detector has done. Maps are keyed by the names in
// the output contract (resume outcomes, violation kinds, unverifiable
// reasons, Config field names for limits), so they can be exported as
// labelled metrics directly.
type Stats struct {
	Observations    int64
	Malformed       int64 // observations missing the part their Kind promises
	CaptureLosses   int64 // NoteCaptureLoss calls: the capture dropped packets it cannot place
	MCPExchanges    int64
	NonMCPExchanges int64 // HTTP on the same port that is not MCP: ignored
	Sessionless     int64 // MCP exchanges without any session id (stateless servers)
	SessionsSeen    int64
	SessionsActive  int
	SessionsEnded   map[string]int64 // by SessionSummary.Ended
	Resumes         map[ResumeOutcome]int64
	Violations      map[Kind]int64
	Unverifiable    map[string]int64 // by Unverifiable.Reason
	UnknownOutcomes int64
	// Revisions counts MCP requests by the protocol revision they spoke
	// (the header, initialize or _meta; the session's; else the default),
	// at most maxRevisionsCounted values, the rest as "other".
	Revisions map[string]int64
	// PairRevisions counts the same per client address and server
	// ("10.0.0.5 -> 10.0.0.9:8080"): which revision each pair spoke, for
	// at most maxRevisionPairs pairs (later pairs are counted only in
	// Revisions).
	PairRevisions map[string]map[string]int64
	// HeaderMismatches: requests whose Mcp-Method or Mcp-Name header
	// disagrees with the body (the server runs what the body says).
	HeaderMismatches int64
	// RepeatableReissues: sessionless calls re-issued after their stream
	// broke, to tools annotated read-only or idempotent (no finding).
	RepeatableReissues int64
	// ProxyHops: requests set aside as a proxy's second hop, or a NAT
	// copy, of a request already seen (hops.go): the same request from
	// another client address to another server address, or from the same
	// client socket to another server address, within a second.
	ProxyHops int64
	LimitsHit map[string]int64 // by the Config field whose bound was reached
	// StateBytes is the session state (and the pairs' capture gaps) held
	// now, as counted toward MaxStateBytes; ShedBytes what evictions at
	// that bound let go.
	StateBytes, ShedBytes int64
}

func newStats() Stats {
	return Stats{
		SessionsEnded: map[string]int64{},
		Resumes:       map[ResumeOutcome]int64{},
		Violations:    map[Kind]int64{},
		Unverifiable:  map[string]int64{},
		LimitsHit:     map[string]int64{},
		Revisions:     map[string]int64{},
	}
}

// Stats returns a copy of the counters.
func (d *Detector) Stats() Stats {
	s := d.stats
	s.SessionsActive = len(d.sessions)
	s.StateBytes = d.stateBytes
	s.SessionsEnded = maps.Clone(d.stats.SessionsEnded)
	s.Resumes = maps.Clone(d.stats.Resumes)
	s.Violations = maps.Clone(d.stats.Violations)
	s.Unverifiable = maps.Clone(d.stats.Unverifiable)
	s.LimitsHit = maps.Clone(d.stats.LimitsHit)
	s.Revisions = maps.Clone(d.stats.Revisions)
	s.PairRevisions = make(map[string]map[string]int64, len(d.pairRevisions))
	for pair, revs := range d.pairRevisions {
		s.PairRevisions[pair.client.String()+" -> "+pair.server.String()] = maps.Clone(revs)
	}
	return s
}

// Plus is the sum of two detectors' counters (an agent runs one per
// input: packets and spans).
func (s Stats) Plus(o Stats) Stats {
	r := Stats{
		Observations: s.Observations + o.Observations, Malformed: s.Malformed + o.Malformed,
		CaptureLosses: s.CaptureLosses + o.CaptureLosses, MCPExchanges: s.MCPExchanges + o.MCPExchanges,
		NonMCPExchanges: s.NonMCPExchanges + o.NonMCPExchanges, Sessionless: s.Sessionless + o.Sessionless,
		SessionsSeen: s.SessionsSeen + o.SessionsSeen, SessionsActive: s.SessionsActive + o.SessionsActive,
		UnknownOutcomes: s.UnknownOutcomes + o.UnknownOutcomes, HeaderMismatches: s.HeaderMismatches + o.HeaderMismatches,
		RepeatableReissues: s.RepeatableReissues + o.RepeatableReissues,
		StateBytes:         s.StateBytes + o.StateBytes, ShedBytes: s.ShedBytes + o.ShedBytes,
		SessionsEnded: sum(s.SessionsEnded, o.SessionsEnded), Resumes: sum(s.Resumes, o.Resumes),
		Violations: sum(s.Violations, o.Violations), Unverifiable: sum(s.Unverifiable, o.Unverifiable),
		Revisions: sum(s.Revisions, o.Revisions), LimitsHit: sum(s.LimitsHit, o.LimitsHit),
		PairRevisions: map[string]map[string]int64{},
	}
	for _, m := range []map[string]map[string]int64{s.PairRevisions, o.PairRevisions} {
		for pair, revs := range m {
			r.PairRevisions[pair] = sum(r.PairRevisions[pair], revs)
		}
	}
	return r
}

func sum[K comparable](a, b map[K]int64) map[K]int64 {
	r := make(map[K]int64, len(a)+len(b))
	for k, n := range a {
		r[k] += n
	}
	for k, n := range b {
		r[k] += n
	}
	return r
}
