package detector

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/replaywatch/replaywatch/decode"
)

// lossMode says what a damaged case does with the connection after its
// lost bytes.
type lossMode struct {
	name string
	// truncate: nothing more of the connection is seen (the capture lost
	// the rest of it, both ways, and says so). Otherwise the decoder reads
	// on from the next start line, as decode's conn.Gap does: later
	// requests are paired with nothing, later responses are reported
	// without a request.
	truncate bool
	// partial: a lost event's id line arrived but not its end, so the cut
	// response reports it as End.PartialID.
	partial bool
}

var lossModes = []lossMode{
	{name: "resync"},
	{name: "resync, partial event", partial: true},
	{name: "truncate", truncate: true},
	{name: "truncate, partial event", truncate: true, partial: true},
}

// lossAt returns obs as the decoder would report them had the capture lost
// the bytes of obs[k] on its connection: the response being read ends as a
// gap, a gap observation follows, and every request still waiting for its
// response ends as a gap (decode's conn.Gap and conn.endQueued). The rest
// of that exchange's direction is lost with it. After the gap, pairing is
// lost (decode's conn.popExchange): each later response is reported
// without a request, and requests waiting when it comes end as gaps.
// Observations of other connections are untouched.
func lossAt(obs []*decode.Observation, k int, mode lossMode) []*decode.Observation {
	hit := obs[k]
	id := hit.Conn.ID
	fromClient := hit.Kind == decode.KindRequest
	type exchange struct {
		n      int
		req    *decode.Request
		resp   *decode.Response
		events int
		ended  bool
	}
	var queue []*exchange        // requests waiting for a response, in order
	var reading *exchange        // the response being read
	byOld := map[int]*exchange{} // original exchange index -> its exchange as the decoder sees it
	next := 0
	out := slices.Clone(obs[:k])
	for _, o := range obs[:k] {
		if o.Conn.ID != id {
			continue
		}
		next = max(next, o.Exchange)
		x := byOld[o.Exchange]
		if x == nil {
			x = &exchange{n: o.Exchange, req: o.Request}
			byOld[o.Exchange] = x
		}
		switch o.Kind {
		case decode.KindRequest:
			queue = append(queue, x)
		case decode.KindResponse:
			queue = slices.DeleteFunc(queue, func(q *exchange) bool { return q == x })
			x.resp, reading = o.Response, x
		case decode.KindEvent:
			x.events++
		case decode.KindEnd:
			x.ended = true
			if reading == x {
				reading = nil
			}
		}
	}
	at := hit.Time
	end := func(x *exchange, partial string) {
		e := &decode.End{How: decode.EndGap, Events: x.events}
		if partial != "" {
			e.PartialID, e.HasPartialID = partial, true
		}
		out = append(out, &decode.Observation{Kind: decode.KindEnd, Time: at, Conn: hit.Conn, Exchange: x.n, Request: x.req, Response: x.resp, End: e})
		x.ended = true
	}
	endQueued := func() {
		for _, x := range queue {
			end(x, "")
		}
		queue = nil
	}
	gapExchange := 0
	if !fromClient && reading != nil && !reading.ended {
		partial := ""
		if mode.partial && hit.Kind == decode.KindEvent && hit.Event.HasID {
			partial = hit.Event.ID
		}
		gapExchange = reading.n
		end(reading, partial)
	}
	out = append(out, &decode.Observation{Kind: decode.KindGap, Time: at, Conn: hit.Conn, Exchange: gapExchange, Gap: &decode.Gap{FromClient: fromClient, Lost: -1}})
	if mode.truncate {
		// Both directions are lost from here on, and capture proves it
		// from the sequence and acknowledgement numbers of what it saw.
		out = append(out, &decode.Observation{Kind: decode.KindGap, Time: at, Conn: hit.Conn, Gap: &decode.Gap{FromClient: !fromClient, Lost: -1}})
	}
	endQueued()
	lostServerSide := !fromClient && byOld[hit.Exchange] != nil && byOld[hit.Exchange].resp != nil
	fresh := map[int]*exchange{} // original index -> exchange after the gap
	for _, o := range obs[k+1:] {
		if o.Conn.ID != id {
			out = append(out, o)
			continue
		}
		if mode.truncate || (lostServerSide && o.Exchange == hit.Exchange && o.Kind != decode.KindRequest) {
			continue
		}
		at = o.Time
		c := *o
		switch o.Kind {
		case decode.KindRequest:
			next++
			x := &exchange{n: next, req: o.Request}
			fresh[o.Exchange] = x
			queue = append(queue, x)
			c.Exchange = x.n
		case decode.KindResponse:
			endQueued()
			next++
			x := &exchange{n: next, resp: o.Response}
			fresh[o.Exchange] = x
			c.Exchange, c.Request = x.n, nil
		case decode.KindGap:
			c.Exchange = 0
		default:
			x := fresh[o.Exchange]
			if x == nil || x.ended {
				continue // its response was lost
			}
			if o.Kind == decode.KindEnd {
				x.ended = true
			}
			c.Exchange, c.Request = x.n, nil
		}
		out = append(out, &c)
	}
	return out
}

// startAt returns obs as a capture that began at obs[k] would give them:
// what came before is missing, a connection already open is one whose
// start was not captured, and the rest of a response already under way is
// skipped (the decoder reads such a connection from its next start line).
// A response whose request came before is reported without one.
func startAt(obs []*decode.Observation, k int) []*decode.Observation {
	type exchange struct {
		n       int  // its index as the decoder numbers it
		early   bool // it began before the capture did
		started bool // its response head came before the capture began
	}
	open := map[uint64]bool{}           // connections seen before obs[k]
	before := map[[2]uint64]*exchange{} // exchanges by connection and original index
	next := map[uint64]int{}            // exchanges numbered per connection
	for _, o := range obs[:k] {
		id := o.Conn.ID
		open[id] = true
		x := before[[2]uint64{id, uint64(o.Exchange)}]
		if x == nil {
			x = &exchange{early: true}
			before[[2]uint64{id, uint64(o.Exchange)}] = x
		}
		if o.Kind == decode.KindResponse {
			x.started = true
		}
	}
	var out []*decode.Observation
	for _, o := range obs[k:] {
		id := o.Conn.ID
		if !open[id] {
			out = append(out, o)
			continue
		}
		c := *o
		c.Conn.StartSeen = false
		if o.Kind == decode.KindGap {
			c.Exchange = 0
			out = append(out, &c)
			continue
		}
		key := [2]uint64{id, uint64(o.Exchange)}
		x := before[key]
		switch {
		case x != nil && x.started:
			continue // the rest of a response under way
		case x != nil && x.early:
			// Its request came before: the response is unpaired.
			if o.Kind == decode.KindRequest {
				continue
			}
			c.Request = nil
		case x == nil:
			x = &exchange{}
			before[key] = x
		}
		if x.n == 0 {
			next[id]++
			x.n = next[id]
		}
		c.Exchange = x.n
		out = append(out, &c)
	}
	return out
}

// violationKeys names a run's violations by kind and session, the
// identity TestDamageNeverAddsAViolation (pipeline) compares.
func violationKeys(rec *recorder) []string {
	var keys []string
	for _, v := range rec.violations {
		keys = append(keys, string(v.Kind)+" "+v.SessionID)
	}
	return keys
}

// allowedKeys are the violations a damaged run of a case may report: the
// intact run's, and those the detector with room would report. A check the
// intact case could not make for want of room may be made once damage frees
// the room, and what it finds must be what the detector with room finds:
// the intact run with every Config limit at its default, and, for a fixed
// bound (an unexported constant such as maxPartialIDsPerSession, which no
// run can lift), the check it left unverifiable on that session (checks
// are named after the violation they would report).
func allowedKeys(whole *recorder, cfg Config, obs []*decode.Observation, closeAt time.Time) []string {
	def := DefaultConfig()
	cfg.MaxEventsIndexedPerSession, cfg.MaxSessions, cfg.MaxStreamsPerSession = def.MaxEventsIndexedPerSession, def.MaxSessions, def.MaxStreamsPerSession
	cfg.MaxOpenExchanges, cfg.MaxEventsIndexedPerServer, cfg.MaxLostSessions = def.MaxOpenExchanges, def.MaxEventsIndexedPerServer, def.MaxLostSessions
	cfg.MaxInflightPerSession, cfg.MaxResponsesPerSession, cfg.MaxProgressTokensPerSession = def.MaxInflightPerSession, def.MaxResponsesPerSession, def.MaxProgressTokensPerSession
	keys := append(violationKeys(whole), violationKeys(observeAll(cfg, obs, closeAt))...)
	for _, u := range whole.unverifiable {
		if bound, ok := strings.CutPrefix(u.Reason, ReasonLimitPrefix); ok && bound != "" && unicode.IsLower(rune(bound[0])) {
			keys = append(keys, u.Check+" "+u.SessionID)
		}
	}
	return keys
}

func observeAll(cfg Config, obs []*decode.Observation, closeAt time.Time) *recorder {
	rec := &recorder{}
	d := New(cfg, rec)
	for _, o := range obs {
		d.Observe(o)
	}
	d.Close(closeAt)
	return rec
}

// knownLateGains are the violations a capture begun late is known to add,
// by case and violation, with the reason (docs/catalogue.md says the same).
var knownLateGains = map[string]string{
	"unverifiable_tombstone_limit: session_swap S1": "a capture begun after S1's DELETE cannot know S1 was " +
		"deleted, so S1's id answered 2xx with another session's reads as a swap of a live session",
	"unverifiable_session_swap_lost_request: session_swap S1": "the same, for a capture begun after the lost " +
		"request that may have been S1's DELETE",
	"unverifiable_session_swap_replica_set_aside: session_swap SB": "the same, for a capture begun after the " +
		"bytes lost on the connection of SB's set-aside initialize, which may have held SB's DELETE",
}

// specDamage is one damaged form of a case: what it is, and how to make it
// from the case's observations.
type specDamage struct {
	what string
	make func(obs []*decode.Observation) []*decode.Observation
}

// checkSpecsDamaged runs every testdata/*.test case intact and in each
// form damages gives it, and fails on a violation (kind and session) a
// damaged run reports that allowedKeys does not allow and known does not
// name ("CASE: KIND SESSION").
func checkSpecsDamaged(t *testing.T, known map[string]string, damages func(obs []*decode.Observation) []specDamage) {
	checkSpecsDamagedWith(t, nil, known, damages)
}

// checkSpecsDamagedWith is checkSpecsDamaged with the damaged runs'
// configuration changed by tune (nil: each case's own).
func checkSpecsDamagedWith(t *testing.T, tune func(*Config), known map[string]string, damages func(obs []*decode.Observation) []specDamage) {
	files, err := filepath.Glob("testdata/*.test")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.test files (%v)", err)
	}
	cases, lost, gained, knownHit := 0, 0, 0, 0
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".test")
		r := parseSpec(t, f)
		closeAt := r.closeAt
		if closeAt.IsZero() {
			closeAt = r.now.Add(time.Second)
		}
		whole := observeAll(r.cfg, r.obs, closeAt)
		intact, allowed := violationKeys(whole), allowedKeys(whole, r.cfg, parseSpec(t, f).obs, closeAt)
		for _, dmg := range damages(r.obs) {
			cases++
			what := name + ": " + dmg.what
			// A fresh parse: the detector may keep what it was given.
			d := parseSpec(t, f)
			if tune != nil {
				tune(&d.cfg)
			}
			rec := observeAll(d.cfg, dmg.make(d.obs), closeAt)
			checkRecords(t, what, rec)
			got := violationKeys(rec)
			for _, v := range got {
				if slices.Contains(allowed, v) {
					continue
				}
				if known[name+": "+v] != "" {
					knownHit++
					continue
				}
				gained++
				t.Errorf("%s: gained %s (intact: %v)\n%s", what, v, intact, describe(violationsOf(rec)))
			}
			for _, v := range intact {
				if !slices.Contains(got, v) {
					lost++
				}
			}
		}
	}
	t.Logf("%d damaged cases over %d files: %d violations lost, %d gained (and %d known)", cases, len(files), lost, gained, knownHit)
}

// TestSpecsDamagedNeverAddAViolation runs every testdata/*.test case again
// with the bytes of each of its HTTP observations lost in turn, in every
// lossMode, as the decoder would report the loss. The architecture's rule
// on lossy captures holds at the detector's level too: a damaged case may
// lose violations, never gain one (same kind, same session), except one
// the intact case left unverifiable at a limit. The pcap damage suite
// (pipeline) covers the same rule through real captures; this one covers
// every rule's case file, including the shapes no SDK fixture has.
func TestSpecsDamagedNeverAddAViolation(t *testing.T) {
	checkSpecsDamaged(t, nil, func(obs []*decode.Observation) []specDamage {
		var out []specDamage
		for k, o := range obs {
			if o.Kind == decode.KindGap {
				continue
			}
			for _, mode := range lossModes {
				if mode.partial && (o.Kind != decode.KindEvent || !o.Event.HasID) {
					continue
				}
				out = append(out, specDamage{
					what: fmt.Sprintf("%s lost at %gs on conn %d (observation %d, %s)", o.Kind, o.Time.Sub(specBase).Seconds(), o.Conn.ID, k+1, mode.name),
					make: func(obs []*decode.Observation) []*decode.Observation { return lossAt(obs, k, mode) },
				})
			}
		}
		return out
	})
}

// TestSpecsStartedLateNeverAddAViolation runs every testdata/*.test case as
// if the capture had begun at each of its observations in turn (startAt):
// a capture that starts late may lose violations, never gain one, but for
// one documented gap (knownLateGains).
func TestSpecsStartedLateNeverAddAViolation(t *testing.T) {
	checkSpecsDamaged(t, knownLateGains, func(obs []*decode.Observation) []specDamage {
		var out []specDamage
		for k := 1; k < len(obs); k++ {
			out = append(out, specDamage{
				what: fmt.Sprintf("capture begun at %gs (observation %d)", obs[k].Time.Sub(specBase).Seconds(), k+1),
				make: func(obs []*decode.Observation) []*decode.Observation { return startAt(obs, k) },
			})
		}
		return out
	})
}

func violationsOf(rec *recorder) []any {
	var out []any
	for _, v := range rec.violations {
		out = append(out, v)
	}
	return out
}

// knownElsewhereGains are the violations a capture point that sees only
// some of a session's connections is known to add, by case and violation,
// with the reason (docs/catalogue.md, "A session may be spread over capture points", says
// the same). Each rests on a connection that went to another node, where
// the evidence that held the finding back was: with
// detector.Config.PartialHistory (--partial-history) all but the first
// two are unverifiable.
var knownElsewhereGains = map[string]string{
	"unverifiable_session_swap_lost_request: session_swap S1": "S1's DELETE may have gone to another node: " +
		"an answer for S1 after it reads as a swap of a live session (as for a capture begun after a DELETE)",
	"unverifiable_session_swap_replica_set_aside: session_swap SB": "SB's DELETE may have gone to another node " +
		"(with the connection whose lost bytes may hold it): as for unverifiable_session_swap_lost_request",
	"unverifiable_silent_reinit_ambiguous_link: silent_reinit_after_404 S1":          identicalElsewhere,
	"unverifiable_silent_reinit_ambiguous_link: silent_reinit_after_404 S3":          identicalElsewhere,
	"unverifiable_silent_reinit_lost_request: silent_reinit_after_404 S1":            identicalElsewhere,
	"unverifiable_silent_reinit_unanswered_lost_request: silent_reinit_after_404 S1": identicalElsewhere,
	"unverifiable_silent_reinit_common_call: silent_reinit_after_404 S1": "the replicas' sessions that made the " +
		"same call too went to another node: " + identicalElsewhere,
	"unverifiable_silent_reinit_call_made_by_third_session: silent_reinit_after_404 S1": "the replicas' sessions " +
		"that made the same call too, so that it is no rare state, went to another node: " + identicalElsewhere,
	"unverifiable_silent_reinit_third_session_request_lost: silent_reinit_after_404 S1":       alikeElsewhere,
	"unverifiable_silent_reinit_third_session_first_request_lost: silent_reinit_after_404 S1": alikeElsewhere,
	"unverifiable_silent_reinit_third_session_endpoint_unseen: silent_reinit_after_404 S1":    alikeElsewhere,
	"unverifiable_silent_reinit_third_session_start_unseen: silent_reinit_after_404 S1":       alikeElsewhere,
	"unverifiable_silent_reinit_shared_connection: silent_reinit_after_404 S1": "the other sessions of the pooled " +
		"connection, which make it no evidence of one client, went to another node",
	"unverifiable_silent_reinit_annotations_lost: silent_reinit_after_404 S1": "S2's tools/list answer, which may " +
		"mark the tool read-only, went to another node",
	"unverifiable_truncated_resume_replay_lost: truncated_resume S1": "the resume that replayed the cut event " +
		"whole, giving the client its id, went to another node",
	"unverifiable_progress_token_shared_same_total: progress_replay S1": "a second call re-using the token, " +
		"whose progress the server sent on the seen call's stream on the same total, went to another node",
	"unverifiable_unknown_cursor_breaks_left_unresumed: unknown_last_event_id_accepted S1":           oneBreakSeen,
	"unverifiable_unknown_cursor_one_of_two_breaks_resumed_after: unknown_last_event_id_accepted S1": oneBreakSeen,
	"unverifiable_unknown_cursor_other_breaks_resumed_after: unknown_last_event_id_accepted S1":      oneBreakSeen,
	"unverifiable_unknown_cursor_broken_stream_resumed_later: unknown_last_event_id_accepted S1": "the broken " +
		"stream's resume, which showed the resume before it was of another stream, went to another node: the violation's shape",
	"unverifiable_unknown_cursor_after_resume_went_on: unknown_last_event_id_accepted S1": "the resume the server went " +
		"on from, which showed S1's history partly elsewhere, went to another node: one broken stream is left, the violation's shape",
}

// oneBreakSeen: two streams of the session broke at once, one on a
// connection another node saw, and this node saw no later resume of the
// one it saw break (the catalogue's known gap): one broken stream is left,
// as when a resume from an id the server never sent continued it.
const oneBreakSeen = "one of two broken streams went to another node: the resume from an id this node never saw is taken for the one seen"

// identicalElsewhere: identical clients behind one address (the
// catalogue's known gap), the other one's session seen elsewhere.
const identicalElsewhere = "a second client behind the address made the very same call, on connections another node saw"

// alikeElsewhere: the same, where two of the three replicas seen making
// the very same calls side by side went to another node: this node sees no
// clients making calls alike.
const alikeElsewhere = "two of the three replicas seen making the very same calls went to another node: " + identicalElsewhere

// TestSpecsConnectionElsewhereNeverAddAViolation runs every testdata/*.test
// case without each of its connections in turn, and without each pair: a
// load balancer without session affinity spreads a session's connections
// over servers on several nodes, and each node's agent sees only its own.
// Nothing on the wire says a connection went elsewhere, so a check that
// rests on something not being seen must hold its finding back until the
// wire shows the session's history is whole: a case may lose violations,
// never gain one.
func TestSpecsConnectionElsewhereNeverAddAViolation(t *testing.T) {
	t.Run("default", func(t *testing.T) { checkSpecsElsewhere(t, nil, knownElsewhereGains) })
	t.Run("partial history", func(t *testing.T) {
		known := map[string]string{}
		for _, key := range []string{"unverifiable_session_swap_lost_request: session_swap S1", "unverifiable_session_swap_replica_set_aside: session_swap SB"} {
			known[key] = knownElsewhereGains[key]
		}
		checkSpecsElsewhere(t, func(c *Config) { c.PartialHistory = true }, known)
	})
}

func checkSpecsElsewhere(t *testing.T, tune func(*Config), known map[string]string) {
	checkSpecsDamagedWith(t, tune, known, func(obs []*decode.Observation) []specDamage {
		var conns []uint64
		for _, o := range obs {
			if !slices.Contains(conns, o.Conn.ID) {
				conns = append(conns, o.Conn.ID)
			}
		}
		without := func(gone ...uint64) func(obs []*decode.Observation) []*decode.Observation {
			return func(obs []*decode.Observation) []*decode.Observation {
				var out []*decode.Observation
				for _, o := range obs {
					if !slices.Contains(gone, o.Conn.ID) {
						out = append(out, o)
					}
				}
				return out
			}
		}
		var out []specDamage
		for i, a := range conns {
			out = append(out, specDamage{what: fmt.Sprintf("conn %d elsewhere", a), make: without(a)})
			for _, b := range conns[i+1:] {
				out = append(out, specDamage{what: fmt.Sprintf("conns %d and %d elsewhere", a, b), make: without(a, b)})
			}
		}
		return out
	})
}
