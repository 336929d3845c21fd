package decode

import (
	"strings"
	"testing"
	"time"
)

// TestBufferedBytesBounded: many connections each stalled in the middle of
// a 60 KiB head would hold 12 MiB; with MaxBufferedBytes at 1 MiB the
// decoder sheds the largest holders, tells the detector with a momentary
// limit gap, never holds much more than its share between counts, and a
// shed connection's next request is decoded again.
func TestBufferedBytesBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBufferedBytes = 1 << 20
	var obs []*Observation
	p := NewPipeline(cfg, 1, func(o *Observation) { obs = append(obs, o) })
	f := p.Factory(0)
	long := "GET /mcp HTTP/1.1\r\nMcp-Session-Id: " + strings.Repeat("S", 60<<10) // no end of head
	var streams []TCPStream
	for i := range 200 {
		s := f.NewStream(ConnMeta{ID: uint64(i + 1), A: testClient, B: testServer, Start: testBase, SawSYN: true})
		s.Data(true, []byte(long), testBase.Add(time.Duration(i)*time.Millisecond))
		streams = append(streams, s)
	}
	// A shed connection (its buffer let go) carries on with the rest of
	// the head, then a whole request.
	var shed *conn
	for _, s := range streams {
		if c := s.(*conn); c.dirs[0].buf == nil && shed == nil {
			shed = c
		}
	}
	if shed == nil {
		t.Fatal("no connection's buffer was let go")
	}
	shed.Data(true, []byte("\r\n\r\nGET /after HTTP/1.1\r\nHost: h\r\n\r\n"), testBase.Add(time.Second))
	shedID := shed.meta.ID // a closed stream may be reused
	for _, s := range streams {
		s.Close(CloseEOF, testBase.Add(2*time.Second))
	}
	f.Done()
	p.Close()
	st := p.Stats()
	if st.BufferLimitHits == 0 {
		t.Fatal("no connection was shed")
	}
	if st.PeakBufferedBytes > 2*cfg.MaxBufferedBytes {
		t.Errorf("the buffers held %d bytes at a count, over twice MaxBufferedBytes (%d)", st.PeakBufferedBytes, cfg.MaxBufferedBytes)
	}
	gaps, after := 0, false
	for _, o := range obs {
		if o.Kind == KindGap && o.Gap.Limit == "MaxBufferedBytes" && o.Gap.Momentary {
			gaps++
		}
		after = after || o.Kind == KindRequest && o.Conn.ID == shedID && o.Request.Path == "/after"
	}
	if int64(gaps) != st.BufferLimitHits {
		t.Errorf("%d limit gaps for %d connections shed", gaps, st.BufferLimitHits)
	}
	if !after {
		t.Error("the shed connection's next request was not decoded")
	}
	t.Logf("%d of 200 connections shed; peak %d bytes held", st.BufferLimitHits, st.PeakBufferedBytes)
}

// TestClosedConnectionsAreReused: a closed connection's memory serves the
// next one, which starts from nothing: its own id, endpoints and header
// values, not the closed one's.
func TestClosedConnectionsAreReused(t *testing.T) {
	var obs []*Observation
	p := NewPipeline(DefaultConfig(), 1, func(o *Observation) { obs = append(obs, o) })
	f := p.Factory(0)
	first := f.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, Start: testBase, SawSYN: true})
	first.Data(true, []byte("POST /mcp HTTP/1.1\r\nHost: one\r\nMcp-Session-Id: s1\r\nContent-Length: 0\r\n\r\n"), testBase)
	first.Close(CloseFIN, testBase.Add(time.Millisecond))
	second := f.NewStream(ConnMeta{ID: 2, A: testServer, B: testClient, Start: testBase, SawSYN: true})
	if second != first {
		t.Fatal("the closed connection was not reused")
	}
	second.Data(true, []byte("POST /other HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), testBase.Add(2*time.Millisecond))
	second.Close(CloseFIN, testBase.Add(3*time.Millisecond))
	f.Done()
	p.Close()
	var reqs []*Observation
	for _, o := range obs {
		if o.Kind == KindRequest {
			reqs = append(reqs, o)
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	got, want := reqs[1], Conn{ID: 2, Client: testServer, Server: testClient, StartSeen: true}
	if got.Conn != want || got.Exchange != 1 || got.Request.Path != "/other" || got.Request.Host != "" || got.Request.HasSessionID {
		t.Errorf("the second connection's request: %+v on %v, exchange %d; want a fresh one on %v", got.Request, got.Conn, got.Exchange, want)
	}
	if r := reqs[0].Request; r.Host != "one" || r.SessionID != "s1" {
		t.Errorf("the first request changed: %+v", r)
	}
}
