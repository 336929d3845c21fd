package detector

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// randomObservations draws observations from small alphabets so sessions,
// ids and exchanges collide often: every odd order the decoder could
// produce (and many it cannot) is tried.
func randomObservations(r *rand.Rand, n int) []*decode.Observation {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	now := t0
	out := make([]*decode.Observation, 0, n)
	for range n {
		now = now.Add(time.Duration(r.IntN(int(3 * time.Second))))
		if r.IntN(50) == 0 {
			now = now.Add(-time.Second) // slightly out of order
		}
		conn := uint64(1 + r.IntN(4))
		c := decode.Conn{ID: conn, Client: netip.AddrPortFrom(cli.Addr(), uint16(5000+r.IntN(3))), Server: srv}
		o := &decode.Observation{Time: now, Conn: c, Exchange: 1 + r.IntN(4), Kind: decode.Kind(1 + r.IntN(6))}
		msgs := func() []decode.Message {
			var ms []decode.Message
			for range r.IntN(3) {
				ms = append(ms, decode.Message{
					Type: decode.MsgType(1 + r.IntN(5)), ID: pick("", "1", "2", "null", `"a"`), Method: pick("initialize", "tools/call", "notifications/progress", "ping", ""),
					Tool: pick("", "t"), ParamsHash: pick("", "p1", "p2"), ProgressToken: pick("", "k"), Progress: float64(r.IntN(3)), HasProgress: r.IntN(2) == 0,
					ProtocolVersion: pick("", "2025-03-26", "2025-11-25", "2026-07-28", "garbage"),
				})
			}
			return ms
		}
		if r.IntN(3) > 0 {
			o.Request = &decode.Request{Method: pick("GET", "POST", "DELETE"), MCP: r.IntN(4) > 0, Messages: msgs(), ProtocolVersion: pick("", "2025-06-18", "2025-11-25", "2026-07-28")}
			o.Request.SessionID, o.Request.HasSessionID = pick("", "S1", "S2"), r.IntN(2) == 0
			o.Request.LastEventID, o.Request.HasLastEventID = pick("", "_0", "a_1", "7", "u"), r.IntN(3) == 0
		}
		if o.Kind != decode.KindRequest && r.IntN(4) > 0 {
			o.Response = &decode.Response{Status: []int{200, 202, 400, 404, 500}[r.IntN(5)], SSE: r.IntN(2) == 0}
			o.Response.SessionID, o.Response.HasSessionID = pick("", "S1", "S2", "S3"), r.IntN(2) == 0
		}
		switch o.Kind {
		case decode.KindEvent:
			o.Event = &decode.Event{ID: pick("_0", "_1", "_2", "a_1", "a_0", "7", "3", "u", "x_1764460800000_abcd1234"), HasID: r.IntN(4) > 0, DataEmpty: r.IntN(3) == 0, Type: pick("", "prime", "close"), Messages: msgs(), DataHash: pick("", "aa", "bb", "zz")}
		case decode.KindBody:
			o.Body = &decode.Body{Messages: msgs()}
		case decode.KindEnd:
			o.End = &decode.End{How: decode.EndHow(1 + r.IntN(5)), PartialID: pick("a_2", "u"), HasPartialID: r.IntN(3) == 0}
		case decode.KindGap:
			o.Gap = &decode.Gap{Lost: -1}
		}
		if r.IntN(40) == 0 {
			o.Event, o.End, o.Body = nil, nil, nil // malformed
		}
		out = append(out, o)
	}
	return out
}

func TestRandomObservationsDoNotPanic(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{MaxSessions: 2, MaxEventsIndexedPerSession: 3, MaxStreamsPerSession: 2, MaxInflightPerSession: 2, MaxResponsesPerSession: 2, MaxProgressTokensPerSession: 1, MaxOpenExchanges: 3, MaxLostSessions: 1, SessionIdleTimeout: 5 * time.Second, LinkWindow: time.Second},
	} {
		for seed := range uint64(20) {
			rec := &recorder{}
			d := New(cfg, rec)
			for _, o := range randomObservations(rand.New(rand.NewPCG(seed, 7)), 3000) {
				d.Observe(o)
				if max := d.cfg.MaxOpenExchanges; len(d.exchanges) > max {
					t.Fatalf("seed %d: %d open exchanges, bound %d", seed, len(d.exchanges), max)
				}
				if len(d.sessions) > d.cfg.MaxSessions {
					t.Fatalf("seed %d: %d sessions, bound %d", seed, len(d.sessions), d.cfg.MaxSessions)
				}
			}
			d.Close(t0.Add(24 * time.Hour))
			checkRecords(t, "random", rec)
			st := d.Stats()
			var nv int64
			for _, n := range st.Violations {
				nv += n
			}
			if nv != int64(len(rec.violations)) {
				t.Errorf("seed %d: stats count %d violations, sink got %d", seed, nv, len(rec.violations))
			}
			var nr int64
			for _, n := range st.Resumes {
				nr += n
			}
			if nr != int64(len(rec.resumes)) {
				t.Errorf("seed %d: stats count %d resumes, sink got %d", seed, nr, len(rec.resumes))
			}
			if st.SessionsActive != 0 {
				t.Errorf("seed %d: %d sessions left after Close", seed, st.SessionsActive)
			}
		}
	}
}
