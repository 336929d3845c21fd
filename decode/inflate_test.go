package decode

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// A decompression bomb is cut at maxInflateRatio: the rest is not read, the
// End says which bound cut it, and the bound's hit is counted.
func TestInflateRatioCutsABomb(t *testing.T) {
	bomb := gzipped(t, append([]byte("data: "), make([]byte, 64<<20)...)) // about 64 KiB that inflate to 64 MiB
	server := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", len(bomb))
	sc := fuzzScript([]byte("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"), append(server, bomb...), true)
	obs, stats := run(t, sc.cfg, whole, sc)
	var end *End
	for _, o := range obs {
		if o.Kind == KindEnd {
			end = o.End
		}
	}
	if end == nil || end.Limit != "maxInflateRatio" {
		t.Fatalf("end %+v, want one cut at maxInflateRatio", end)
	}
	if stats.InflateLimitHits != 1 || stats.InflatedBodies != 1 {
		t.Errorf("inflate limit hits %d, inflated %d; want 1, 1", stats.InflateLimitHits, stats.InflatedBodies)
	}
}

// Past MaxInflatingBodies open at once, a gzip stream is not inflated but
// delimited and counted (EncodedUnread); every inflater's goroutine ends
// with its connection.
func TestInflatingBodiesAreBounded(t *testing.T) {
	before := runtime.NumGoroutine()
	var responses []*Response
	p := NewPipeline(DefaultConfig(), 1, func(o *Observation) {
		if o.Kind == KindResponse {
			r := *o.Response
			responses = append(responses, &r)
		}
	})
	f := p.Factory(0)
	head := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
	event := gzipped(t, []byte("id: 1\ndata: x\n\n"))
	chunk := fmt.Appendf(nil, "%x\r\n%s\r\n", len(event)/2, event[:len(event)/2]) // the stream stays open
	const extra = 3
	var streams []TCPStream
	for i := range MaxInflatingBodies + extra {
		ts := testBase.Add(time.Duration(i) * time.Microsecond)
		s := f.NewStream(ConnMeta{ID: uint64(i + 1), A: testClient, B: testServer, Start: testBase, SawSYN: true})
		s.Data(true, []byte("GET /mcp HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"), ts)
		s.Data(false, append(append([]byte(nil), head...), chunk...), ts)
		streams = append(streams, s)
	}
	if n := runtime.NumGoroutine() - before; n < MaxInflatingBodies {
		t.Errorf("%d goroutines more, want at least %d inflaters", n, MaxInflatingBodies)
	}
	for i, s := range streams {
		s.Close(CloseEOF, testBase.Add(time.Second+time.Duration(i)))
	}
	f.Done()
	p.Close()
	unread := 0
	for _, r := range responses {
		if r.EncodedUnread {
			unread++
		}
	}
	if st := p.Stats(); unread != extra || st.InflateLimitHits != extra {
		t.Errorf("%d responses unread, %d limit hits; want %d of %d", unread, st.InflateLimitHits, extra, len(responses))
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines left, %d before: an inflater outlived its connection", n, before)
	}
}

// A transfer coding before chunked ("gzip, chunked", as a server answering
// "TE: gzip" sends), or alone on a body delimited by close, is a coding of
// the body as a content coding is: read when it is one the decoder
// inflates, counted and not read otherwise, never read as plain text.
func TestTransferCodingsAreDecoded(t *testing.T) {
	plain := "id: 1\ndata: x\n\nid: 2\ndata: y\n\n"
	events := gzipped(t, []byte(plain))
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(events), events)
	tests := []struct {
		name, head, body string
		want             string // the events' ids, or "unread"
	}{
		{"gzip, chunked", "Transfer-Encoding: gzip, chunked\r\n", chunked, `"1" "2"`},
		{"x-gzip, chunked", "Transfer-Encoding: x-gzip , chunked\r\n", chunked, `"1" "2"`},
		{"gzip then chunked in two fields", "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", chunked, `"1" "2"`},
		{"gzip alone, delimited by close", "Transfer-Encoding: gzip\r\n", string(events), `"1" "2"`},
		{"identity, chunked", "Transfer-Encoding: identity, chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(plain), plain), `"1" "2"`},
		{"br, chunked", "Transfer-Encoding: br, chunked\r\n", chunked, "unread"},
		{"gzip transfer over gzip content", "Content-Encoding: gzip\r\nTransfer-Encoding: gzip, chunked\r\n", chunked, "unread"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + tt.head + "\r\n" + tt.body
			sc := fuzzScript([]byte("GET /mcp HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"), []byte(server), true)
			obs, _ := run(t, DefaultConfig(), whole, sc)
			var got []string
			for _, o := range obs {
				switch {
				case o.Kind == KindEvent:
					got = append(got, fmt.Sprintf("%q", o.Event.ID))
				case o.Kind == KindResponse && o.Response.EncodedUnread:
					got = append(got, "unread")
				}
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("got %s, want %s (%s)", g, tt.want, summary(obs))
			}
		})
	}
}
