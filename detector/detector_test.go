package detector

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// The must-not-flag cases, one test each, named after what must stay quiet.
// Their traffic and expectations live in testdata; TestSpecs runs them too.
func TestNoFindingOnCorrectResume(t *testing.T) {
	runSpec(t, "testdata/no_finding_correct_resume.test")
}
func TestNoFindingOn404ThenFreshSession(t *testing.T) {
	runSpec(t, "testdata/no_finding_404_fresh_session.test")
}
func TestNoFindingOnPrimingAndPolling(t *testing.T) {
	runSpec(t, "testdata/no_finding_priming_polling.test")
}
func TestNoFindingOnPythonPrimingAfterReplay(t *testing.T) {
	runSpec(t, "testdata/no_finding_python_priming_after_replay.test")
}
func TestNoFindingOnResponseWithoutSessionHeader(t *testing.T) {
	runSpec(t, "testdata/no_finding_response_without_session_header.test")
}
func TestNoFindingOn202ForNotifications(t *testing.T) {
	runSpec(t, "testdata/no_finding_202_notifications.test")
}
func TestNoFindingOnDelete(t *testing.T)    { runSpec(t, "testdata/no_finding_delete.test") }
func TestNoFindingOnStateless(t *testing.T) { runSpec(t, "testdata/no_finding_stateless.test") }
func TestNoFindingOnNonMCPHTTP(t *testing.T) {
	runSpec(t, "testdata/no_finding_non_mcp_http.test")
}
func TestNoFindingOnGoSDK400ForUnknownCursor(t *testing.T) {
	runSpec(t, "testdata/no_finding_gosdk_400_unknown_cursor.test")
}
func TestNoFindingOnTypeScriptGETStreamRejected(t *testing.T) {
	runSpec(t, "testdata/no_finding_ts_get_stream_rejected.test")
}
func TestNoFindingOnMcpGoSharedCounter(t *testing.T) {
	runSpec(t, "testdata/no_finding_mcpgo_shared_counter.test")
}
func TestNoFindingOnUnresumableCloseBefore20251125(t *testing.T) {
	runSpec(t, "testdata/no_finding_unresumable_close_older_revision.test")
}

func TestParseEventID(t *testing.T) {
	for _, tc := range []struct {
		id     string
		shape  idShape
		prefix string
		num    uint64
	}{
		{"_0", shapeGoSDK, "", 0},
		{"_17", shapeGoSDK, "", 17},
		{"ABCDEFGHIJKLMNOPQRSTUVWXYZ_5", shapeGoSDK, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 5},
		{"a_b_5", shapeOpaque, "", 0}, // go-sdk's parser rejects two '_'
		{"x_-1", shapeOpaque, "", 0},
		{"2c9a1b5e-7d3f-4f7e-9a55-2f6d9e0b1c11_1764460800000_a1b2c3d4", shapeTS, "2c9a1b5e-7d3f-4f7e-9a55-2f6d9e0b1c11", 1764460800000},
		{"_GET_stream_1764460800000_k3j4h5g6", shapeTS, "_GET_stream", 1764460800000},
		{"s_1764460800000_ABCDEFGH", shapeOpaque, "", 0}, // upper case is not base36 from toString(36)
		{"4107", shapeDecimal, "", 4107},
		{"0", shapeDecimal, "", 0},
		{"99999999999999999999", shapeOpaque, "", 0}, // beyond uint64: not a counter we can order
		{"9d6c1a3e-0b4f-4e8a-9c2d-1f0e3a5b7c90", shapeOpaque, "", 0},
		{"", shapeOpaque, "", 0},
	} {
		got := parseEventID(tc.id)
		if got.shape != tc.shape || got.prefix != tc.prefix || got.num != tc.num {
			t.Errorf("parseEventID(%q) = %+v, want shape %v prefix %q num %d", tc.id, got, tc.shape, tc.prefix, tc.num)
		}
	}
}

func TestShapeMerge(t *testing.T) {
	for _, tc := range []struct{ a, b, want idShape }{
		{shapeNone, shapeGoSDK, shapeGoSDK},
		{shapeGoSDK, shapeGoSDK, shapeGoSDK},
		{shapeGoSDK, shapeDecimal, shapeMixed},
		{shapeMixed, shapeGoSDK, shapeMixed},
	} {
		if got := tc.a.merge(tc.b); got != tc.want {
			t.Errorf("%v.merge(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// shiftRun rewrites a spec's observations as another agent would see them:
// other connection ids, a clock offset, and every server behind another
// address (the client's node sees the Service address the client dialled,
// the server's node the pod behind it). Finding ids must not change.
func shiftRun(obs []*decode.Observation, idOffset uint64, dt time.Duration) []*decode.Observation {
	out := make([]*decode.Observation, len(obs))
	for i, o := range obs {
		c := *o
		c.Conn.ID += idOffset
		c.Time = c.Time.Add(dt)
		a := c.Conn.Server.Addr().As4()
		a[0], a[1] = 10, 96
		c.Conn.Server = netip.AddrPortFrom(netip.AddrFrom4(a), c.Conn.Server.Port()+1)
		out[i] = &c
	}
	return out
}

func TestFindingIDsAreDeterministic(t *testing.T) {
	for _, file := range []string{"session_swap", "silent_reinit_after_404_toolcall", "incomplete_replay", "duplicate_delivery",
		"reissued_call_after_break", "unverifiable_silent_reinit_ambiguous_link", "unresumable_close"} {
		t.Run(file, func(t *testing.T) {
			r := parseSpec(t, "testdata/"+file+".test")
			ids := func(obs []*decode.Observation) []string {
				rec := &recorder{}
				d := New(r.cfg, rec)
				for _, o := range obs {
					d.Observe(o)
				}
				d.Close(obs[len(obs)-1].Time.Add(time.Second))
				var out []string
				for _, v := range rec.violations {
					out = append(out, v.ID)
				}
				for _, a := range rec.resumes {
					out = append(out, a.ID)
				}
				for _, u := range rec.unknowns {
					out = append(out, u.ID)
				}
				for _, u := range rec.unverifiable {
					out = append(out, u.ID)
				}
				return out
			}
			a := ids(r.obs)
			b := ids(shiftRun(r.obs, 1000, 3*time.Hour))
			if len(a) == 0 {
				t.Fatal("no findings to compare")
			}
			if strings.Join(a, ",") != strings.Join(b, ",") {
				t.Errorf("ids differ between agents:\n %v\n %v", a, b)
			}
		})
	}
}

func TestFindingIDSeparatesParts(t *testing.T) {
	if findingID("k", "ab", "c") == findingID("k", "a", "bc") {
		t.Error("parts are not separated")
	}
	if len(findingID("k")) != 32 {
		t.Error("want 16 bytes in hex")
	}
}

var (
	cli = netip.MustParseAddrPort("10.0.0.1:5000")
	srv = netip.MustParseAddrPort("10.0.0.2:8080")
	t0  = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
)

func TestMalformedObservationsDoNotPanic(t *testing.T) {
	conn := decode.Conn{ID: 1, Client: cli, Server: srv}
	req := &decode.Request{Method: "GET", MCP: true, SessionID: "S", HasSessionID: true, LastEventID: "x", HasLastEventID: true}
	resp := &decode.Response{Status: 200, SSE: true}
	for _, tc := range []struct {
		name string
		obs  []*decode.Observation
	}{
		{"nil", []*decode.Observation{nil}},
		{"request without Request", []*decode.Observation{{Kind: decode.KindRequest, Time: t0, Conn: conn}}},
		{"event without Event", []*decode.Observation{{Kind: decode.KindEvent, Time: t0, Conn: conn, Response: resp}}},
		{"unknown kind", []*decode.Observation{{Kind: 99, Time: t0, Conn: conn}}},
		{"end without exchange", []*decode.Observation{{Kind: decode.KindEnd, Time: t0, Conn: conn, Exchange: 7, End: &decode.End{How: decode.EndClean}}}},
		{"event before its request", []*decode.Observation{{Kind: decode.KindEvent, Time: t0, Conn: conn, Exchange: 1, Request: req, Response: resp, Event: &decode.Event{ID: "y", HasID: true}}}},
		{"event with no request or response seen", []*decode.Observation{{Kind: decode.KindEvent, Time: t0, Conn: conn, Exchange: 1, Response: &decode.Response{Status: 200, SessionID: "S", HasSessionID: true}, Event: &decode.Event{ID: "y", HasID: true}}}},
		{"time going backwards", []*decode.Observation{
			{Kind: decode.KindRequest, Time: t0.Add(time.Hour), Conn: conn, Exchange: 1, Request: req},
			{Kind: decode.KindResponse, Time: t0, Conn: conn, Exchange: 1, Request: req, Response: resp},
			{Kind: decode.KindEvent, Time: t0, Conn: conn, Exchange: 1, Request: req, Response: resp, Event: &decode.Event{ID: "y", HasID: true}},
		}},
		{"gap with no exchange", []*decode.Observation{{Kind: decode.KindGap, Time: t0, Conn: conn, Gap: &decode.Gap{Lost: -1}}}},
		{"response twice", []*decode.Observation{
			{Kind: decode.KindRequest, Time: t0, Conn: conn, Exchange: 1, Request: req},
			{Kind: decode.KindResponse, Time: t0, Conn: conn, Exchange: 1, Request: req, Response: resp},
			{Kind: decode.KindResponse, Time: t0, Conn: conn, Exchange: 1, Request: req, Response: &decode.Response{Status: 404}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			d := New(Config{}, rec)
			for _, o := range tc.obs {
				d.Observe(o)
			}
			d.Close(t0.Add(2 * time.Hour))
			d.Observe(tc.obs[0]) // after Close: ignored
			if len(rec.violations) != 0 {
				t.Errorf("violations from malformed input: %v", describe([]any{rec.violations[0]}))
			}
		})
	}
	rec := &recorder{}
	d := New(Config{}, rec)
	d.Observe(nil)
	d.Observe(&decode.Observation{Kind: decode.KindBody, Time: t0})
	if s := d.Stats(); s.Malformed != 2 || s.Observations != 2 {
		t.Errorf("malformed not counted: %+v", s)
	}
}

func TestConfig(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"zero sessions", func(c *Config) { c.MaxSessions = 0 }, "MaxSessions"},
		{"negative window", func(c *Config) { c.LinkWindow = -time.Second }, "LinkWindow"},
		{"zero index", func(c *Config) { c.MaxEventsIndexedPerSession = 0 }, "MaxEventsIndexedPerSession"},
		{"negative reorder", func(c *Config) { c.ReorderTolerance = -1 }, "ReorderTolerance"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	if got := (Config{MaxSessions: 5}).withDefaults(); got.MaxSessions != 5 || got.SessionIdleTimeout != DefaultSessionIdleTimeout {
		t.Errorf("withDefaults: %+v", got)
	}
}

// feeder builds observations for Go-level tests.
type feeder struct {
	d   *Detector
	now time.Time
	ex  map[uint64]int
}

func newFeeder(cfg Config, sink Sink) *feeder {
	return &feeder{d: New(cfg, sink), now: t0, ex: map[uint64]int{}}
}

// exchange feeds one whole exchange: request, response, events, end.
func (f *feeder) exchange(conn uint64, req *decode.Request, resp *decode.Response, events []*decode.Event, how decode.EndHow) {
	c := decode.Conn{ID: conn, Client: netip.AddrPortFrom(cli.Addr(), uint16(5000+conn)), Server: srv}
	f.ex[conn]++
	n := f.ex[conn]
	step := func(o *decode.Observation) {
		f.now = f.now.Add(time.Millisecond)
		o.Time, o.Conn, o.Exchange, o.Request = f.now, c, n, req
		f.d.Observe(o)
	}
	step(&decode.Observation{Kind: decode.KindRequest})
	step(&decode.Observation{Kind: decode.KindResponse, Response: resp})
	for _, ev := range events {
		step(&decode.Observation{Kind: decode.KindEvent, Response: resp, Event: ev})
	}
	step(&decode.Observation{Kind: decode.KindEnd, Response: resp, End: &decode.End{How: how, Events: len(events)}})
}

func initialize(f *feeder, conn uint64, session string) {
	f.exchange(conn,
		&decode.Request{Method: "POST", MCP: true, Messages: []decode.Message{{Type: decode.MsgRequest, ID: "1", Method: "initialize", ProtocolVersion: "2025-11-25"}}},
		&decode.Response{Status: 200, SessionID: session, HasSessionID: true},
		nil, decode.EndClean)
}

func sseGET(session, cursor string) *decode.Request {
	r := &decode.Request{Method: "GET", MCP: true, SessionID: session, HasSessionID: true, ProtocolVersion: "2025-11-25"}
	if cursor != "" {
		r.LastEventID, r.HasLastEventID = cursor, true
	}
	return r
}

func msgEvent(id string) *decode.Event {
	return &decode.Event{ID: id, HasID: true, DataHash: fakeHash(id), Messages: []decode.Message{{Type: decode.MsgNotification, Method: "notifications/message"}}}
}

func TestLimitsDegradeToUnverifiable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		limit string
	}{
		{"streams", Config{MaxStreamsPerSession: 1}, "MaxStreamsPerSession"},
		{"events", Config{MaxEventsIndexedPerSession: 2}, "MaxEventsIndexedPerSession"},
		{"inflight", Config{MaxInflightPerSession: 1}, "MaxInflightPerSession"},
		{"sessions", Config{MaxSessions: 1}, "MaxSessions"},
		{"state bytes", Config{MaxStateBytes: 1}, "MaxStateBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			f := newFeeder(tc.cfg, rec)
			initialize(f, 1, "S1")
			for i := 0; i < 3; i++ {
				f.exchange(1, &decode.Request{Method: "POST", MCP: true, SessionID: "S1", HasSessionID: true, ProtocolVersion: "2025-11-25",
					Messages: []decode.Message{{Type: decode.MsgRequest, ID: fmt.Sprint(10 + i), Method: "tools/call", Tool: "t"}}},
					&decode.Response{Status: 200, SSE: true},
					[]*decode.Event{msgEvent(fmt.Sprintf("o%d-a", i)), msgEvent(fmt.Sprintf("o%d-b", i)), {ID: fmt.Sprintf("o%d-c", i), HasID: true, Messages: []decode.Message{{Type: decode.MsgResponse, ID: fmt.Sprint(10 + i)}}}},
					decode.EndClean)
			}
			initialize(f, 2, "S2")
			// A resume from the last id, which may not have been indexed.
			f.exchange(1, sseGET("S1", "o2-c"), &decode.Response{Status: 200, SSE: true}, []*decode.Event{msgEvent("o9")}, decode.EndClean)
			f.d.Close(f.now)
			st := f.d.Stats()
			if st.LimitsHit[tc.limit] == 0 {
				t.Errorf("limit %s not counted: %v", tc.limit, st.LimitsHit)
			}
			if len(rec.violations) != 0 {
				t.Errorf("a limit produced a violation: %s", describe([]any{rec.violations[0]}))
			}
			found := false
			for _, u := range rec.unverifiable {
				found = found || strings.Contains(u.Reason, tc.limit)
			}
			if !found {
				t.Errorf("no unverifiable names %s: %d records", tc.limit, len(rec.unverifiable))
			}
		})
	}
}

func TestStatsCount(t *testing.T) {
	rec := &recorder{}
	f := newFeeder(Config{}, rec)
	initialize(f, 1, "S1")
	f.exchange(1, sseGET("S1", ""), &decode.Response{Status: 200, SSE: true}, []*decode.Event{msgEvent("a"), msgEvent("b")}, decode.EndReset)
	f.exchange(1, sseGET("S1", "a"), &decode.Response{Status: 200, SSE: true}, []*decode.Event{msgEvent("a")}, decode.EndClean)
	f.exchange(1, sseGET("S1", "zz"), &decode.Response{Status: 400}, nil, decode.EndClean)
	f.exchange(1, &decode.Request{Method: "GET", Path: "/healthz"}, &decode.Response{Status: 200}, nil, decode.EndClean)
	f.d.Close(f.now)
	st := f.d.Stats()
	want := Stats{Observations: 18, MCPExchanges: 4, NonMCPExchanges: 1, SessionsSeen: 1}
	if st.Observations != want.Observations || st.MCPExchanges != want.MCPExchanges || st.NonMCPExchanges != want.NonMCPExchanges || st.SessionsSeen != want.SessionsSeen {
		t.Errorf("stats %+v", st)
	}
	if st.Resumes[ResumeViolated] != 1 || st.Resumes[ResumeRejected4xx] != 1 || st.Violations[KindReplayedEvent] != 1 || st.SessionsEnded["capture_end"] != 1 {
		t.Errorf("stats maps: resumes %v violations %v ended %v", st.Resumes, st.Violations, st.SessionsEnded)
	}
	// Stats is a copy.
	st.Violations[KindReplayedEvent] = 99
	if f.d.Stats().Violations[KindReplayedEvent] != 1 {
		t.Error("Stats shares its maps")
	}
}

func TestRepeatedResumesHaveDistinctIDs(t *testing.T) {
	r, rec, d := observeSpec(t, "testdata/no_finding_priming_polling.test")
	d.Close(r.now)
	if len(rec.resumes) != 2 || rec.resumes[0].ID == rec.resumes[1].ID {
		t.Fatalf("two polls with the same cursor need two ids: %d resumes", len(rec.resumes))
	}
}

// A deleted session leaves the table at once and its state is freed when
// the last exchange opened before the DELETE ends; later requests for its
// id neither reopen it nor emit a second summary.
func TestDeletedSessionIsReleased(t *testing.T) {
	r := parseSpec(t, "testdata/no_finding_delete_open_stream.test")
	rec := &recorder{}
	d := New(r.cfg, rec)
	var s1 *session
	for _, o := range r.obs {
		d.Observe(o)
		if s := sessionByID(d, "S1"); s != nil {
			s1 = s
		}
		if o.Kind == decode.KindResponse && o.Request != nil && o.Request.Method == "DELETE" {
			if live := sessionByID(d, "S1") != nil; live || s1.events == nil {
				t.Fatalf("after DELETE: in table %v, index freed %v; want out of the table, index kept for the open GET stream", live, s1.events == nil)
			}
		}
	}
	if s1.events != nil || s1.calls.len() != 0 || s1.streams != nil || len(d.retiring) != 0 {
		t.Errorf("after the last stream of the deleted session ended its state is still held")
	}
	if _, ok := d.tombs.byID[s1.key]; !ok {
		t.Errorf("no tombstone for the deleted session")
	}
	d.Close(r.now.Add(time.Second))
	if st := d.Stats(); st.SessionsSeen != 1 || len(rec.sessions) != 1 {
		t.Errorf("sessions seen %d, summaries %d; want 1 and 1", st.SessionsSeen, len(rec.sessions))
	}
}

func TestTombstonesExpireAndAreBounded(t *testing.T) {
	d := New(Config{MaxSessions: 2, SessionIdleTimeout: time.Minute}, discard{})
	ts := &d.tombs
	ts.add(d, "a", "", t0)
	ts.add(d, "b", "", t0.Add(time.Second))
	ts.use("a", t0.Add(50*time.Second)) // used again: kept past its deletion + idle
	ts.expire(t0.Add(70*time.Second), time.Minute)
	if _, ok := ts.byID["a"]; !ok {
		t.Errorf("a was used 20 s ago and expired")
	}
	if _, ok := ts.byID["b"]; ok {
		t.Errorf("b idle 69 s did not expire")
	}
	ts.add(d, "c", "", t0.Add(71*time.Second))
	ts.add(d, "d", "", t0.Add(72*time.Second)) // over MaxSessions: the oldest goes
	if len(ts.byID) != 2 || d.stats.LimitsHit["MaxSessions"] != 1 {
		t.Errorf("tombstones %v, limit hits %d; want 2 and 1", ts.byID, d.stats.LimitsHit["MaxSessions"])
	}
	ts.expire(t0.Add(time.Hour), time.Minute)
	if len(ts.byID) != 0 {
		t.Errorf("tombstones left after an hour: %v", ts.byID)
	}
}

// TestAdvanceExpiresQuietSessions: on a live network that goes quiet, the
// agent's clock (Advance) expires idle sessions; nothing else about them
// changes.
func TestAdvanceExpiresQuietSessions(t *testing.T) {
	r := parseSpec(t, "testdata/session_expiry.test")
	rec := &recorder{}
	d := New(r.cfg, rec)
	d.Observe(r.obs[0]) // S1's initialize request, at time 0
	for _, o := range r.obs[1:4] {
		if o.Time.Sub(r.obs[0].Time) < time.Second {
			d.Observe(o)
		}
	}
	d.Advance(specBase.Add(5 * time.Minute))
	if len(rec.sessions) != 0 {
		t.Fatalf("expired before the idle timeout: %+v", rec.sessions[0])
	}
	d.Advance(specBase.Add(11 * time.Minute))
	if len(rec.sessions) != 1 || rec.sessions[0].SessionID != "S1" || rec.sessions[0].Ended != "expired" {
		t.Fatalf("after the idle timeout: %d sessions %+v", len(rec.sessions), rec.sessions)
	}
	d.Advance(specBase) // time never goes back
	d.Close(specBase.Add(12 * time.Minute))
	if len(rec.violations) != 0 || len(rec.sessions) != 1 {
		t.Fatalf("after close: %d violations, %d sessions", len(rec.violations), len(rec.sessions))
	}
}

// TestNoViolationAfterCaptureLoss: a live capture whose kernel dropped
// packets cannot say which connection lost them. Every kind of violation in
// the spec files that rests on something being absent must turn into
// unverifiable when the loss is noted before it is judged.
func TestNoViolationAfterCaptureLoss(t *testing.T) {
	for _, name := range []string{"unknown_last_event_id_accepted", "incomplete_replay", "duplicate_delivery", "event_id_reset"} {
		t.Run(name, func(t *testing.T) {
			r := parseSpec(t, "testdata/"+name+".test")
			rec := &recorder{}
			d := New(r.cfg, rec)
			for i, o := range r.obs {
				if i == len(r.obs)/2 {
					d.NoteCaptureLoss(o.Time)
				}
				d.Observe(o)
			}
			d.Close(r.now.Add(time.Second))
			for _, v := range rec.violations {
				// An id seen twice with different content is seen, not
				// inferred from an absence: loss cannot make it.
				positive := v.Kind == KindEventIDReset && strings.Contains(v.Explanation, "different content")
				if string(v.Kind) == name && !positive {
					t.Errorf("%s raised although the capture lost packets during the session: %s", v.Kind, v.Explanation)
				}
			}
			said := len(rec.unverifiable) > 0
			for _, a := range rec.resumes {
				said = said || a.Outcome == ResumeUnverifiable
			}
			if !said {
				t.Error("no unverifiable record or resume for the lost evidence")
			}
		})
	}
}

// sessionByID finds a live session by its wire id, whatever its endpoint.
func sessionByID(d *Detector, id string) *session {
	for _, s := range d.sessions {
		if s.id == id {
			return s
		}
	}
	return nil
}

// TestKindsAreTheCatalogue: Kinds lists every kind that has a severity,
// once, and nothing else, so what iterates the catalogue (alert rules,
// metrics) misses no kind.
func TestKindsAreTheCatalogue(t *testing.T) {
	seen := map[Kind]bool{}
	for _, k := range Kinds() {
		if seen[k] || SeverityOf(k) == "" {
			t.Errorf("%s: twice, or without a severity", k)
		}
		seen[k] = true
	}
	if len(seen) != len(severities) {
		t.Errorf("Kinds has %d kinds, the severities %d", len(seen), len(severities))
	}
}

// TestHeaderMismatch: Mcp-Method and Mcp-Name must say what the body says;
// a disagreement is recorded with the call the server really runs.
func TestHeaderMismatch(t *testing.T) {
	call := []decode.Message{{Type: decode.MsgRequest, ID: "2", Method: "tools/call", Tool: "charge_card"}}
	for _, c := range []struct {
		method, name string
		msgs         []decode.Message
		want         string
	}{
		{"tools/call", "charge_card", call, ""},
		{"", "", call, ""},
		{"tools/call", "get_order", call, "Mcp-Name: get_order but the body calls tool charge_card (the server runs charge_card)"},
		{"tools/list", "", call, "Mcp-Method: tools/list but the body calls tools/call (the server runs tools/call)"},
		{"tools/call", "x", append(slices.Clone(call), call...), ""}, // a batch names no one method
	} {
		r := &decode.Request{MCPMethod: c.method, MCPName: c.name, Messages: c.msgs}
		if got := headerMismatch(r); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.name, got, c.want)
		}
	}
}

// TestIsEndpoint: the fast path of endpointOf says yes only where spelling
// the endpoint again would give the same string.
func TestIsEndpoint(t *testing.T) {
	for _, c := range []struct {
		e, host, path string
		want          bool
	}{
		{"mcp.example:8080/mcp", "mcp.example:8080", "/mcp", true},
		{"mcp.example:8080/mcp", "MCP.Example:8080", "/mcp", true},
		{"mcp.example:8080/mcp", "mcp.example:8080", "/MCP", false},
		{"mcp.example:8080/mcp", "mcp.example:8081", "/mcp", false},
		{"mcp.example:8080/mcp", "mcp.example:8080/", "mcp", true}, // the same string either way
		{"mcp.example/mcp/x", "mcp.example", "/mcp", false},
		{"", "", "", true},
		{"é.example/mcp", "É.example", "/mcp", false}, // not ASCII: spelled by ToLower
		{"é.example/mcp", "é.example", "/mcp", false},
	} {
		got := isEndpoint(c.e, c.host, c.path)
		if got != c.want {
			t.Errorf("isEndpoint(%q, %q, %q) = %v", c.e, c.host, c.path, got)
		}
		if got && strings.ToLower(c.host)+c.path != c.e {
			t.Errorf("isEndpoint(%q, %q, %q): yes, but ToLower gives %q", c.e, c.host, c.path, strings.ToLower(c.host)+c.path)
		}
	}
}
