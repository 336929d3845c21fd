package decode

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// httpSample is one keep-alive connection: tools/call POSTs, each answered
// with a chunked SSE stream, and a JSON response.
func httpSample(exchanges int) (client, server []byte) {
	var c, s bytes.Buffer
	events := sseSample(8)
	for i := 0; i < exchanges; i++ {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"q%d","limit":10}}}`, i, i)
		fmt.Fprintf(&c, "POST /mcp HTTP/1.1\r\nHost: mcp.internal:8080\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: 3KQ7ZVBHXW2N4TJ6M5R8YCPDFA\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		s.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
		for p := events; len(p) > 0; {
			n := min(1000, len(p))
			fmt.Fprintf(&s, "%x\r\n%s\r\n", n, p[:n])
			p = p[n:]
		}
		s.WriteString("0\r\n\r\n")
	}
	return c.Bytes(), s.Bytes()
}

func BenchmarkHTTPDecode(b *testing.B) {
	client, server := httpSample(200)
	const piece = 1448
	b.SetBytes(int64(len(client) + len(server)))
	b.ReportAllocs()
	p := NewPipeline(DefaultConfig(), 1, func(*Observation) {})
	f := p.Factory(0)
	id := uint64(0)
	for b.Loop() {
		id++
		s := f.NewStream(ConnMeta{ID: id, A: testClient, B: testServer, SawSYN: true})
		ts := testBase.Add(time.Duration(id) * time.Second)
		// Alternate directions exchange by exchange, as on the wire.
		cp, sp := client, server
		for len(cp) > 0 || len(sp) > 0 {
			for k := 0; k < 2 && len(cp) > 0; k++ {
				n := min(piece, len(cp))
				s.Data(true, cp[:n], ts)
				cp = cp[n:]
			}
			for k := 0; k < 4 && len(sp) > 0; k++ {
				n := min(piece, len(sp))
				s.Data(false, sp[:n], ts)
				sp = sp[n:]
			}
		}
		s.Close(CloseFIN, ts)
		f.Tick(ts)
	}
	f.Done()
	p.Close()
}
