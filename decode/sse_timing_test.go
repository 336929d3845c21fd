package decode

import (
	"bytes"
	"fmt"
	"testing"
)

// sseSample is a stream shaped like MCP traffic: a priming event, progress
// notifications and tool results of a few hundred bytes, CRLF line ends.
func sseSample(events int) []byte {
	var b bytes.Buffer
	b.WriteString("id: s_0\r\nretry: 3000\r\ndata:\r\n\r\n")
	for i := 1; i <= events; i++ {
		if i%4 == 0 {
			fmt.Fprintf(&b, "id: s_%d\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],\"isError\":false}}\r\n\r\n", i, i, bytes.Repeat([]byte("lorem ipsum "), 20))
		} else {
			fmt.Fprintf(&b, "id: s_%d\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%d,\"progress\":%d,\"total\":100}}\r\n\r\n", i, i/4, i%100)
		}
	}
	return b.Bytes()
}

func BenchmarkSSEDecode(b *testing.B) {
	stream := sseSample(2000)
	d := NewSSEDecoder(DefaultMaxSSELineBytes, DefaultMaxEventBytes, func(*SSEEvent) {})
	const piece = 1448 // one TCP segment's payload
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		d.Reset()
		for p := stream; len(p) > 0; {
			n := min(piece, len(p))
			d.Write(p[:n])
			p = p[n:]
		}
	}
}
