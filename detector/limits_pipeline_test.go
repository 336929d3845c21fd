package detector

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// wireStep is one delivery to a connection of a hand-timed wire run: bytes
// from the client or server at a time, a close, or a tick of the worker.
type wireStep struct {
	conn   int // index into conns; -1: tick only
	client bool
	data   string // "\n" sent as CRLF
	at     time.Duration
	close  bool // an RST
	fin    bool // both sides' FIN
}

// wireTimed runs steps through a one-worker decode pipeline in the order
// given (times need not increase: capture can hand a stream bytes stamped
// before what it already ticked past), then the detector over what the
// pipeline delivered. A conn whose SawSYN is set was midstream (the flag
// is inverted). legacy hides what the pipeline did not say before issue 9
// (Observation.Late, limit gaps): the detector as it was, to show that a
// scenario is a false violation without them.
func wireTimed(t *testing.T, dcfg decode.Config, legacy bool, conns []decode.ConnMeta, steps []wireStep) (*recorder, decode.Stats) {
	t.Helper()
	var obs []*decode.Observation
	p := decode.NewPipeline(dcfg, 1, func(o *decode.Observation) { obs = append(obs, o) })
	f := p.Factory(0)
	streams := make([]decode.TCPStream, len(conns))
	for i, m := range conns {
		m.ID, m.Start, m.SawSYN = uint64(i+1), t0, !m.SawSYN
		streams[i] = f.NewStream(m)
	}
	last := t0
	for _, st := range steps {
		now := t0.Add(st.at)
		switch {
		case st.conn < 0:
		case st.close:
			streams[st.conn].Close(decode.CloseReset, now)
		case st.fin:
			streams[st.conn].Close(decode.CloseFIN, now)
		default:
			streams[st.conn].Data(st.client, []byte(strings.ReplaceAll(st.data, "\n", "\r\n")), now)
		}
		if now.After(last) {
			last = now
		}
		f.Tick(last)
	}
	f.Done()
	p.Close()
	rec := &recorder{}
	d := New(Config{}, rec)
	for _, o := range obs {
		if legacy {
			o.Late = decode.NotLate
			if o.Gap != nil && o.Gap.Limit != "" {
				continue
			}
		}
		d.Observe(o)
	}
	d.Close(last.Add(time.Second))
	checkRecords(t, t.Name(), rec)
	return rec, p.Stats()
}

// TestWireLateObservation: event _2 of session S1's GET stream on c1 is
// handed to the decoder after the worker ticked past it (capture held the
// segment), so the pipeline delivers it after the resume on c2 that
// correctly replayed _2. In that order _2 looks delivered twice on a stream
// that is no resume: a duplicate_delivery the server never made. The
// pipeline marks _2 late and the detector makes the check Unverifiable
// naming the limit: ReorderWindow, or MaxBufferedObservations when the
// merger's buffer released the newer observations early.
func TestWireLateObservation(t *testing.T) {
	cli1 := netip.MustParseAddrPort("10.0.0.1:5000")
	cli2 := netip.MustParseAddrPort("10.0.0.1:5001")
	conns := []decode.ConnMeta{{A: cli1, B: srv}, {A: cli2, B: srv}}
	ms := time.Millisecond
	hdr := "Mcp-Session-Id: S1\nMCP-Protocol-Version: 2025-11-25\n"
	sseHead := "HTTP/1.1 200 OK\nContent-Type: text/event-stream\n\n"
	ev := func(id string, n int) string {
		return "id: " + id + "\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"n\":" + string(rune('0'+n)) + "}}\n\n"
	}
	init := strings.ReplaceAll(strings.TrimPrefix(wireInit, "C>"), "\x00", "")
	initOK := strings.ReplaceAll(strings.TrimPrefix(wireInitOK("S1"), "S>"), "\x00", "")
	steps := []wireStep{
		{conn: 0, client: true, data: init, at: 1 * ms},
		{conn: 0, data: initOK, at: 2 * ms},
		{conn: 0, client: true, data: "GET /mcp HTTP/1.1\n" + hdr + "\n", at: 100 * ms},
		{conn: 0, data: sseHead + ev("_0", 0) + ev("_1", 1), at: 110 * ms},
		{conn: 1, client: true, data: "GET /mcp HTTP/1.1\n" + hdr + "Last-Event-ID: _1\n\n", at: 1000 * ms},
		{conn: 1, data: sseHead + ev("_2", 2) + ev("_3", 3), at: 1010 * ms},
		{conn: -1, at: 2000 * ms},
		// Captured at 120 ms, handed over only now.
		{conn: 0, data: ev("_2", 2), at: 120 * ms},
		{conn: 0, close: true, at: 130 * ms},
		{conn: 1, close: true, at: 2100 * ms},
	}
	for _, tc := range []struct {
		name    string
		dcfg    decode.Config
		limit   string
		counter func(decode.Stats) int64
	}{
		{"ReorderWindow", decode.Config{ReorderWindow: 10 * ms}, "ReorderWindow",
			func(s decode.Stats) int64 { return s.LateObservations }},
		{"MaxBufferedObservations", decode.Config{ReorderWindow: time.Hour, MaxBufferedObservations: 1}, "MaxBufferedObservations",
			func(s decode.Stats) int64 { return min(s.LateObservations, s.EarlyReleases) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Without the mark the detector is fooled: the scenario
			// really produces the false violation.
			rec, _ := wireTimed(t, tc.dcfg, true, conns, steps)
			if len(rec.violations) == 0 || rec.violations[0].Kind != KindDuplicateDelivery {
				t.Fatalf("scenario without the late mark: want a false duplicate_delivery, have %s", describe([]any{rec.violations}))
			}
			rec, ds := wireTimed(t, tc.dcfg, false, conns, steps)
			assertDegraded(t, rec, tc.limit)
			if tc.counter(ds) == 0 {
				t.Errorf("decode counter for %s not incremented: %+v", tc.limit, ds)
			}
		})
	}
}

// TestWireNonHTTPScanLimit: the capture began while c2, a keep-alive
// connection of the client of session S1, was inside a long compressed
// (binary) response body. After NonHTTPScanLimit bytes without a start line
// the decoder gives c2 up, so the GET stream the client then opened on it
// (events _0, _1) is never read. The client's resume from _1 on c3 then
// names an id the detector never saw: without a signal that is
// unknown_last_event_id_accepted, although the server did issue _1.
func TestWireNonHTTPScanLimit(t *testing.T) {
	ms := time.Millisecond
	binary := strings.Repeat("\x00\x01\x02\x1f\x8b", decode.NonHTTPScanLimit/5+100)
	conns, steps := resumeAfterUnread(true,
		wireStep{conn: 1, data: binary, at: 50 * ms},
		wireStep{conn: 1, client: true, data: "GET /mcp HTTP/1.1\n" + wireS1 + "\n", at: 100 * ms},
		wireStep{conn: 1, data: wireSSEHead + "id: _0\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\nid: _1\ndata: {}\n\n", at: 110 * ms})
	rec, _ := wireTimed(t, decode.Config{}, true, conns, steps)
	if len(rec.violations) == 0 || rec.violations[0].Kind != KindUnknownLastEventIDAccepted {
		t.Fatalf("scenario without the limit gap: want a false unknown_last_event_id_accepted, have %s", describe([]any{rec.violations}))
	}
	rec, ds := wireTimed(t, decode.Config{}, false, conns, steps)
	assertDegraded(t, rec, "NonHTTPScanLimit")
	if ds.NonHTTPConnections != 1 {
		t.Errorf("NonHTTPConnections = %d, want 1", ds.NonHTTPConnections)
	}
	for _, a := range rec.resumes {
		if a.Outcome != ResumeUnverifiable || !strings.Contains(a.Reason, "NonHTTPScanLimit") {
			t.Errorf("resume %s: %s", a.Outcome, a.Reason)
		}
	}
}

// TestWireHTTP2: the client of session S1 (HTTP/1.1 on c0) opens c1 with
// the HTTP/2 preface (h2c with prior knowledge, as a proxy in front of it
// may), and its GET stream, events _0 and _1, flows there in frames the
// decoder does not read. The resume from _1 on c2 then names an id the
// detector never saw: without the HTTP/2 report that is
// unknown_last_event_id_accepted, although the server issued _1. With it,
// the pair's checks are unverifiable while c1 is open.
func TestWireHTTP2(t *testing.T) {
	ms := time.Millisecond
	// Frames carry no CR or LF here: wireTimed turns LF into CRLF.
	frames := "\x00\x00\x2c\x01\x04\x00\x00\x00\x01\x82\x86"
	conns, steps := resumeAfterUnread(false,
		wireStep{conn: 1, client: true, data: "PRI * HTTP/2.0\n\nSM\n\n" + frames, at: 100 * ms},
		wireStep{conn: 1, data: frames, at: 110 * ms})
	rec, _ := wireTimed(t, decode.Config{}, true, conns, steps)
	if len(rec.violations) == 0 || rec.violations[0].Kind != KindUnknownLastEventIDAccepted {
		t.Fatalf("scenario without the HTTP/2 report: want a false unknown_last_event_id_accepted, have %s", describe([]any{rec.violations}))
	}
	rec, ds := wireTimed(t, decode.Config{}, false, conns, steps)
	for _, v := range rec.violations {
		t.Errorf("violation %s", describe([]any{v}))
	}
	if ds.HTTP2Connections != 1 || ds.NonHTTPConnections != 0 {
		t.Errorf("HTTP2Connections = %d, NonHTTPConnections = %d, want 1 and 0", ds.HTTP2Connections, ds.NonHTTPConnections)
	}
	if len(rec.resumes) == 0 {
		t.Fatal("no resume recorded")
	}
	for _, a := range rec.resumes {
		if a.Outcome != ResumeUnverifiable || a.Reason != ReasonHTTP2 {
			t.Errorf("resume %s: %s, want unverifiable: %s", a.Outcome, a.Reason, ReasonHTTP2)
		}
	}
}

const (
	wireS1      = "Mcp-Session-Id: S1\nMCP-Protocol-Version: 2025-11-25\n"
	wireSSEHead = "HTTP/1.1 200 OK\nContent-Type: text/event-stream\n\n"
)

// resumeAfterUnread is the scenario of the tests of unread connections:
// session S1 starts on c0 (10.0.0.1:5000), whose standalone GET stream
// then breaks after an event (so a stream the client resumes was seen), c1
// carries unread (c1's start not captured when midstream), and the client
// resumes from _1 on c2, which only c1 may have shown issued; the answer
// carries only a priming event (a new event after the cursor would show
// the server knew it), and the server ends it (a cut would hide what it
// would have sent).
func resumeAfterUnread(midstream bool, unread ...wireStep) ([]decode.ConnMeta, []wireStep) {
	ms := time.Millisecond
	conns := []decode.ConnMeta{
		{A: netip.MustParseAddrPort("10.0.0.1:5000"), B: srv},
		{A: netip.MustParseAddrPort("10.0.0.1:5001"), B: srv, SawSYN: midstream}, // wireTimed flips SawSYN
		{A: netip.MustParseAddrPort("10.0.0.1:5002"), B: srv},
	}
	init := strings.ReplaceAll(strings.TrimPrefix(wireInit, "C>"), "\x00", "")
	initOK := strings.ReplaceAll(strings.TrimPrefix(wireInitOK("S1"), "S>"), "\x00", "")
	steps := []wireStep{
		{conn: 0, client: true, data: init, at: 1 * ms},
		{conn: 0, data: initOK, at: 2 * ms},
		{conn: 0, client: true, data: "GET /mcp HTTP/1.1\n" + wireS1 + "\n", at: 3 * ms},
		{conn: 0, data: wireSSEHead + "id: s0\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n", at: 4 * ms},
		{conn: 0, close: true, at: 900 * ms},
	}
	steps = append(steps, unread...)
	return conns, append(steps,
		wireStep{conn: 2, client: true, data: "GET /mcp HTTP/1.1\n" + wireS1 + "Last-Event-ID: _1\n\n", at: 1000 * ms},
		wireStep{conn: 2, data: wireSSEHead + "id: _2\ndata:\n\n", at: 1010 * ms},
		wireStep{conn: 2, fin: true, at: 1100 * ms},
		wireStep{conn: 1, close: true, at: 1200 * ms})
}
