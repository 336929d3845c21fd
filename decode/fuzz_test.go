package decode

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// piecesOf cuts b into random pieces drawn from seed.
func piecesOf(b []byte, seed int64) [][]byte {
	return randomPieces(seed)(b)
}

// fuzzScript is a connection with all client bytes, then all server bytes.
func fuzzScript(client, server []byte, syn bool) script {
	sc := script{syn: syn, cfg: DefaultConfig()}
	sc.cfg.MaxHeaderBytes = 512
	sc.cfg.MaxBodyBytes = 512
	sc.cfg.MaxSSELineBytes = 64
	sc.cfg.MaxEventBytes = 256
	if len(client) > 0 {
		sc.steps = append(sc.steps, step{op: "data", fromA: true, data: client})
	}
	if len(server) > 0 {
		sc.steps = append(sc.steps, step{op: "data", fromA: false, data: server})
	}
	sc.steps = append(sc.steps, step{op: "fin", fromA: false})
	return sc
}

// checkInvariants asserts what must hold for any input.
func checkInvariants(t *testing.T, obs []*Observation) {
	t.Helper()
	ends := map[int]int{}
	for _, o := range obs {
		switch o.Kind {
		case KindRequest:
			if o.Request == nil {
				t.Fatal("request observation without Request")
			}
		case KindResponse, KindBody, KindEvent:
			if o.Response == nil {
				t.Fatalf("%s observation without Response", o.Kind)
			}
		case KindEnd:
			ends[o.Exchange]++
			if ends[o.Exchange] > 1 {
				t.Fatalf("exchange %d ended twice", o.Exchange)
			}
		}
	}
}

// checkSplitDelivery decodes sc whole and in random pieces: same output.
func checkSplitDelivery(t *testing.T, sc script, seed int64) {
	obs, stats := run(t, sc.cfg, whole, sc)
	checkInvariants(t, obs)
	want := render(obs) + renderStats(stats)
	split, splitStats := run(t, sc.cfg, func(b []byte) [][]byte { return piecesOf(b, seed) }, sc)
	if got := render(split) + renderStats(splitStats); got != want {
		t.Fatalf("split delivery differs:\n%s\nwant\n%s", got, want)
	}
}

func FuzzHTTP(f *testing.F) {
	f.Add([]byte("POST /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.1\r\n\r\n"),
		[]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n0\r\n\r\nHTTP/1.1 204 OK\r\n\r\n"), int64(1), true)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n  folded\r\n\r\n"), []byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"), int64(2), false)
	f.Add([]byte("\x16\x03\x01"), []byte("garbage\nHTTP/1.1 200 OK\n\n"), int64(3), false)
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x02\x00\x00GET / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 204 No Content\r\n\r\n"), int64(6), true)
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x05\x20\x01\x0d\xb8\x00GET / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 204 No Content\r\n\r\n"), int64(8), true)
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 204 No Content\r\n\r\n"), int64(7), true)
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"), []byte("\x00\x00\x00\x04\x01\x00\x00\x00\x00"), int64(4), true)
	f.Add([]byte("POST /mcp HTTP/1.1\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}"), []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n\x00\x00\x00\x04"), int64(5), true)
	f.Fuzz(func(t *testing.T, client, server []byte, seed int64, syn bool) {
		checkSplitDelivery(t, fuzzScript(client, server, syn), seed)
	})
}

// FuzzInflate: an SSE stream compressed with gzip (a sync flush every
// flushEvery bytes, as a middleware flushes per write) must give the
// events the plain stream gives, delivered whole or split; and the same
// compressed bytes with one byte flipped must not break the decoder
// (checkSplitDelivery's invariants), whatever they inflate to.
func FuzzInflate(f *testing.F) {
	f.Add([]byte("id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\nid: 2\ndata:\n\n"), uint8(7), uint16(0), int64(1))
	f.Add([]byte("data: a\r\n\r\n: comment\n\nevent: close\nretry: 5\n\n"), uint8(0), uint16(40), int64(2))
	f.Fuzz(checkInflate)
}

func checkInflate(t *testing.T, plain []byte, flushEvery uint8, flip uint16, seed int64) {
	{
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		for rest := plain; len(rest) > 0; {
			n := min(len(rest), int(flushEvery)+1)
			zw.Write(rest[:n])
			zw.Flush()
			rest = rest[n:]
		}
		zw.Close()
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
		request := []byte("GET / HTTP/1.1\r\n\r\n")
		events := func(sc script) string {
			obs, _ := run(t, sc.cfg, whole, sc)
			var b strings.Builder
			for _, line := range strings.Split(render(obs), "\n") {
				if !strings.Contains(line, " response ") { // the only line naming the coding
					b.WriteString(line + "\n")
				}
			}
			return b.String()
		}
		compressed := fuzzScript(request, append([]byte(head+"Content-Encoding: gzip\r\n\r\n"), z.Bytes()...), true)
		if got, want := events(compressed), events(fuzzScript(request, append([]byte(head+"\r\n"), plain...), true)); got != want {
			t.Fatalf("gzip stream reads differently from the plain one:\n%s\nwant\n%s", got, want)
		}
		checkSplitDelivery(t, compressed, seed)
		if z.Len() > 0 {
			z.Bytes()[int(flip)%z.Len()] ^= 0x5a
			checkSplitDelivery(t, fuzzScript(request, append([]byte(head+"Content-Encoding: gzip\r\n\r\n"), z.Bytes()...), true), seed)
		}
	}
}

func FuzzChunked(f *testing.F) {
	f.Add([]byte("5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n"), int64(1))
	f.Add([]byte("A\nid: 1\ndata:\n\n0\n\n"), int64(2))
	f.Add([]byte("ffffffffffffffffff\r\n"), int64(3))
	f.Fuzz(func(t *testing.T, body []byte, seed int64) {
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
		checkSplitDelivery(t, fuzzScript([]byte("GET / HTTP/1.1\r\n\r\n"), append([]byte(head), body...), true), seed)
	})
}

// sseTrace renders everything SSEDecoder reports.
func sseTrace(stream []byte, split func([]byte) [][]byte) string {
	var b strings.Builder
	d := NewSSEDecoder(64, 256, func(e *SSEEvent) {
		fmt.Fprintf(&b, "%q %v %q %q %d %q %v %d %x\n", e.ID, e.HasID, e.LastEventID, e.Type, e.Retry, e.Data, e.DataTruncated, e.DataBytes, e.DataHash)
	})
	for _, p := range split(stream) {
		d.Write(append([]byte(nil), p...))
	}
	id, has := d.PartialID()
	last, hasLast := d.LastEventID()
	fmt.Fprintf(&b, "mid=%v partial=%q/%v last=%q/%v hits=%d/%d", d.MidEvent(), id, has, last, hasLast, d.LineLimitHits, d.EventLimitHits)
	return b.String()
}

func FuzzSSE(f *testing.F) {
	f.Add([]byte("\xEF\xBB\xBFid: 1\r\ndata: a\r\rdata: b\n\n"), int64(1))
	f.Add([]byte(": c\nretry: 10\nevent: e\nid\ndata\n\nid: x\x00\ndata: "+strings.Repeat("z", 300)+"\n\n"), int64(2))
	f.Add([]byte("data: a\r\ndata: b\r"), int64(3))
	f.Fuzz(func(t *testing.T, stream []byte, seed int64) {
		want := sseTrace(stream, whole)
		if got := sseTrace(stream, byteByByte); got != want {
			t.Fatalf("byte-by-byte differs:\n%s\nwant\n%s", got, want)
		}
		rng := rand.New(rand.NewSource(seed))
		if got := sseTrace(stream, randomPieces(rng.Int63())); got != want {
			t.Fatalf("random pieces differ:\n%s\nwant\n%s", got, want)
		}
	})
}
