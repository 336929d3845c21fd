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
		after = after || o.Kind == KindRequest && o.Conn.ID == shed.meta.ID && o.Request.Path == "/after"
	}
	if int64(gaps) != st.BufferLimitHits {
		t.Errorf("%d limit gaps for %d connections shed", gaps, st.BufferLimitHits)
	}
	if !after {
		t.Error("the shed connection's next request was not decoded")
	}
	t.Logf("%d of 200 connections shed; peak %d bytes held", st.BufferLimitHits, st.PeakBufferedBytes)
}
