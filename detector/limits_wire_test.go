package detector

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// wireConn is one TCP connection of a wire test: the bytes each side sends,
// in order. Client steps start with "C>", server steps with "S>"; "\n" in a
// step is sent as CRLF unless the step starts with "s>" or "c>" (raw).
type wireConn struct {
	client, server netip.AddrPort
	steps          []string
}

// wireRun decodes conns (one after the other, 1 ms a step) with dcfg and runs
// the detector with cfg over the observations: the real decoder's output,
// for limits the decoder enforces.
func wireRun(t *testing.T, dcfg decode.Config, cfg Config, conns ...wireConn) (*recorder, decode.Stats, Stats) {
	t.Helper()
	var obs []*decode.Observation
	p := decode.NewPipeline(dcfg, 1, func(o *decode.Observation) { obs = append(obs, o) })
	f := p.Factory(0)
	now := t0
	for i, c := range conns {
		now = now.Add(time.Millisecond)
		s := f.NewStream(decode.ConnMeta{ID: uint64(i + 1), A: c.client, B: c.server, Start: now, SawSYN: true})
		for _, st := range c.steps {
			now = now.Add(time.Millisecond)
			data, body, _ := strings.Cut(st[2:], "\x00")
			if st[0] == 'C' || st[0] == 'S' {
				data = strings.ReplaceAll(data, "\n", "\r\n")
			}
			data += body
			s.Data(st[0] == 'C' || st[0] == 'c', []byte(data), now)
		}
		now = now.Add(time.Millisecond)
		s.Fin(false, now) // the server ends its streams
		s.Close(decode.CloseFIN, now)
		f.Tick(now)
	}
	f.Done()
	p.Close()
	rec := &recorder{}
	d := New(cfg, rec)
	for _, o := range obs {
		d.Observe(o)
	}
	d.Close(now.Add(time.Second))
	checkRecords(t, t.Name(), rec)
	return rec, p.Stats(), d.Stats()
}

// wireMsg is an HTTP message for a wire step: start line, header lines
// (each ending in "\n"), and a body with its Content-Length.
func wireMsg(client bool, start, headers, body string) string {
	side := "S>"
	if client {
		side = "C>"
	}
	h := start + "\n" + headers
	if body != "" || !client {
		h += "Content-Length: " + strconv.Itoa(len(body)) + "\n"
	}
	return side + h + "\n" + "\x00" + body
}

// assertDegraded: no violation, an unverifiable record naming limit.
func assertDegraded(t *testing.T, rec *recorder, limit string) {
	t.Helper()
	for _, v := range rec.violations {
		t.Errorf("limit %s: violation %s", limit, describe([]any{v}))
	}
	for _, u := range rec.unverifiable {
		if strings.Contains(u.Reason, ReasonLimitPrefix) && strings.Contains(u.Reason, limit) {
			return
		}
	}
	var have []any
	for _, u := range rec.unverifiable {
		have = append(have, u)
	}
	t.Errorf("no unverifiable names %s; have %s", limit, describe(have))
}

const wireJSON = "Content-Type: application/json\n"

var wireInit = wireMsg(true, "POST /mcp HTTP/1.1", wireJSON, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`)

func wireInitOK(session string) string {
	return wireMsg(false, "HTTP/1.1 200 OK", wireJSON+"Mcp-Session-Id: "+session+"\n", `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}`)
}

func TestWireHeaderLimitSwap(t *testing.T) {
	big := "X-Big: " + strings.Repeat("a", 400) + "\n"
	c := wireConn{client: netip.MustParseAddrPort("10.0.0.1:5000"), server: srv, steps: []string{
		wireInit,
		wireInitOK("S1"),
		wireMsg(true, "POST /mcp HTTP/1.1", wireJSON+big+"Mcp-Session-Id: S1\n", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`),
		wireMsg(false, "HTTP/1.1 200 OK", wireJSON+"Mcp-Session-Id: S2\n", `{"jsonrpc":"2.0","id":2,"result":{}}`),
	}}
	rec, ds, st := wireRun(t, decode.Config{MaxHeaderBytes: 256}, Config{}, c)
	t.Logf("decode %+v\ndetector limits %v", ds, st.LimitsHit)
	var all []any
	for _, v := range rec.violations {
		all = append(all, v)
	}
	for _, v := range rec.unverifiable {
		all = append(all, v)
	}
	for _, v := range rec.sessions {
		all = append(all, v)
	}
	t.Log(describe(all))
	assertDegraded(t, rec, "MaxHeaderBytes")
}

// TestWireDecodeLimitsDegrade drives each decoder limit, set small, in
// traffic that would be a violation if the limit were taken for the server's
// doing: no violation, an Unverifiable naming the limit, and the decoder's
// counter for it.
func TestWireDecodeLimitsDegrade(t *testing.T) {
	cli := netip.MustParseAddrPort("10.0.0.1:5000")
	sse := "Content-Type: text/event-stream\n"
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow"}}`
	post := func(extra, body string) string {
		return wireMsg(true, "POST /mcp HTTP/1.1", wireJSON+"Mcp-Session-Id: S1\nMCP-Protocol-Version: 2025-11-25\n"+extra, body)
	}
	// A POST stream ending without an id and without its response looks
	// like unresumable_close; here the limit hid the id or the response.
	sseHead := "S>HTTP/1.1 200 OK\n" + sse + "\n"
	for _, tc := range []struct {
		name    string
		dcfg    decode.Config
		steps   []string
		limit   string
		counter func(decode.Stats) int64
	}{
		{"MaxBodyBytes", decode.Config{MaxBodyBytes: 32},
			[]string{post("", `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`),
				wireMsg(false, "HTTP/1.1 200 OK", wireJSON+"Mcp-Session-Id: S2\n", `{}`)},
			"MaxBodyBytes", func(s decode.Stats) int64 { return s.BodyLimitHits }},
		{"MaxEventBytes", decode.Config{MaxEventBytes: 16},
			[]string{post("", call), sseHead, `s>data: {"jsonrpc":"2.0","id":2,"result":{}}` + "\n\n"},
			"MaxEventBytes", func(s decode.Stats) int64 { return s.EventLimitHits }},
		{"MaxSSELineBytes", decode.Config{MaxSSELineBytes: 16},
			[]string{post("", call), sseHead, "s>id: " + strings.Repeat("7", 40) + "\ndata: x\n\n"},
			"MaxSSELineBytes", func(s decode.Stats) int64 { return s.LineLimitHits }},
		{"MaxChunkLineBytes", decode.Config{},
			[]string{post("", call), "S>HTTP/1.1 200 OK\n" + sse + "Transfer-Encoding: chunked\n\n", "s>" + strings.Repeat("0", decode.MaxChunkLineBytes+10) + "\r\n"},
			"MaxChunkLineBytes", func(s decode.Stats) int64 { return s.ParseErrors["bad_chunk"] }},
		{"MaxHeaderBytes response", decode.Config{MaxHeaderBytes: 256},
			[]string{post("", call), "S>HTTP/1.1 200 OK\n" + sse + "X-Big: " + strings.Repeat("a", 400) + "\nMcp-Session-Id: S2\n\n"},
			"MaxHeaderBytes", func(s decode.Stats) int64 { return s.HeaderLimitHits }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := append([]string{wireInit, wireInitOK("S1")}, tc.steps...)
			rec, ds, _ := wireRun(t, tc.dcfg, Config{}, wireConn{client: cli, server: srv, steps: steps})
			assertDegraded(t, rec, tc.limit)
			if tc.counter(ds) == 0 {
				t.Errorf("decode counter for %s not incremented: %+v", tc.limit, ds)
			}
		})
	}
}

// TestWirePipelineOverflow: more than MaxPipelinedRequests requests before
// any response. The oldest is forgotten, so every response pairs with the
// request after its own: S1's requests answered with S2's session id would
// look like session swaps.
func TestWirePipelineOverflow(t *testing.T) {
	cli := netip.MustParseAddrPort("10.0.0.1:5000")
	steps := []string{wireInit, wireInitOK("S1"),
		wireMsg(true, "POST /mcp HTTP/1.1", wireJSON+"Mcp-Session-Id: S2\n", `{"jsonrpc":"2.0","method":"notifications/x"}`)}
	for range decode.MaxPipelinedRequests {
		steps = append(steps, wireMsg(true, "POST /mcp HTTP/1.1", wireJSON+"Mcp-Session-Id: S1\n", `{"jsonrpc":"2.0","method":"notifications/x"}`))
	}
	steps = append(steps, wireMsg(false, "HTTP/1.1 202 Accepted", "Mcp-Session-Id: S2\n", ""))
	for range decode.MaxPipelinedRequests {
		steps = append(steps, wireMsg(false, "HTTP/1.1 202 Accepted", "Mcp-Session-Id: S1\n", ""))
	}
	rec, ds, _ := wireRun(t, decode.Config{}, Config{}, wireConn{client: cli, server: srv, steps: steps})
	assertDegraded(t, rec, "MaxPipelinedRequests")
	if ds.PipelineOverflows == 0 {
		t.Errorf("PipelineOverflows not counted: %+v", ds)
	}
}
