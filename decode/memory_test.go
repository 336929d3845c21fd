package decode

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// TestHostileInputMemoryBounded feeds 50 MB of input built to grow buffers
// (an endless header, an endless SSE line, an endless chunk-size line, one
// endless SSE event) and checks the heap stays near the configured limits.
func TestHostileInputMemoryBounded(t *testing.T) {
	const total = 50 << 20
	const piece = 64 << 10
	tests := []struct {
		name   string
		client string
		server string // when set, the filler goes to the server side
		filler byte
		hits   func(s Stats) int64
	}{
		{name: "endless header", client: "GET / HTTP/1.1\r\nX-Long: ", filler: 'a',
			hits: func(s Stats) int64 { return s.HeaderLimitHits }},
		{name: "endless SSE line", client: "GET / HTTP/1.1\r\n\r\n",
			server: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ", filler: 'x',
			hits: func(s Stats) int64 { return s.LineLimitHits }},
		{name: "endless chunk size", client: "GET / HTTP/1.1\r\n\r\n",
			server: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=", filler: 'e',
			hits: func(s Stats) int64 { return s.ParseErrors["bad_chunk"] }},
		{name: "endless SSE event", client: "GET / HTTP/1.1\r\n\r\n",
			server: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", filler: '\n',
			hits: func(s Stats) int64 { return s.EventLimitHits }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			filler := bytes.Repeat([]byte{tt.filler}, piece)
			if tt.name == "endless SSE event" {
				// Many short data lines: the event grows, no line does.
				filler = bytes.Repeat([]byte("data: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n"), piece/57)
			}
			p := NewPipeline(DefaultConfig(), 1, func(*Observation) {})
			f := p.Factory(0)
			s := f.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
			fromA := tt.server == ""
			s.Data(true, []byte(tt.client), testBase)
			if !fromA {
				s.Data(false, []byte(tt.server), testBase)
			}
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			var peak uint64
			for sent := 0; sent < total; sent += len(filler) {
				s.Data(fromA, filler, testBase.Add(time.Duration(sent)))
				if sent%(5<<20) < len(filler) {
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapAlloc)
				}
			}
			s.Close(CloseEOF, testBase.Add(time.Hour))
			f.Done()
			p.Close()
			// The largest buffer any of these can grow is MaxEventBytes
			// (4 MiB, maybe doubled by append); allow slack for the runtime.
			t.Logf("heap before %d KiB, peak %d KiB", before.HeapAlloc>>10, peak>>10)
			const bound = 24 << 20
			if grown := int64(peak) - int64(before.HeapAlloc); grown > bound {
				t.Errorf("heap grew by %d MiB while feeding %d MiB", grown>>20, total>>20)
			}
			if n := tt.hits(p.Stats()); n < 1 {
				t.Errorf("limit hit not counted: %+v", p.Stats())
			}
		})
	}
}
