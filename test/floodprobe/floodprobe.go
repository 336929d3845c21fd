// Package floodprobe writes the captures an attacker (or a very busy node)
// would give replaywatch, to measure that its memory stays within the
// budget it is given: many sessions with huge session ids, one session
// streaming a million events, a burst of sessions in under a second, and
// many idle sessions. The bytes are synthesized, not recorded (pcaprec's
// connection writer on a synthetic clock), so a probe of any size and rate
// is made in seconds; the HTTP and SSE are what MCP's Streamable HTTP
// transport sends at revision 2025-11-25.
//
// cmd/replaywatch's flood tests and test/membench (scripts/bench-memory.sh)
// use it.
package floodprobe

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// Start is the capture time of a probe's first packet.
var Start = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// Server is the MCP server every probe talks to.
var Server = netip.MustParseAddrPort("10.200.0.1:8080")

// writer is one probe's recorder, its clock, and what it counts.
type writer struct {
	bw   *bufio.Writer
	rec  *pcaprec.Recorder
	now  time.Time
	step time.Duration // the clock advances this much per packet
}

func newWriter(w io.Writer, step time.Duration) (*writer, error) {
	pw := &writer{bw: bufio.NewWriterSize(w, 1<<20), now: Start, step: step}
	rec, err := pcaprec.New(pw.bw, func() time.Time {
		pw.now = pw.now.Add(pw.step)
		return pw.now
	})
	if err != nil {
		return nil, err
	}
	pw.rec = rec
	return pw, nil
}

func (w *writer) close() error {
	if err := w.rec.Close(); err != nil {
		return err
	}
	return w.bw.Flush()
}

// client is the address of the n-th client: one address per client, so no
// two share a connection or a link candidate.
func client(n int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(1 + n>>16), byte(n >> 8), byte(n)}), uint16(40000+n%20000))
}

func post(session, body string) []byte {
	var b strings.Builder
	b.WriteString("POST /mcp HTTP/1.1\r\nHost: probe\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n")
	if session != "" {
		b.WriteString("Mcp-Session-Id: " + session + "\r\nMCP-Protocol-Version: 2025-11-25\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return []byte(b.String())
}

const (
	initializeBody  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"floodprobe","version":"1"}}}`
	initializedBody = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	initResult      = `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"floodprobe","version":"1"}}}`
)

// session opens a connection from client n, initialises a session with
// the given id and sends notifications/initialized; the connection is
// left open for more, or closed.
func (w *writer) session(n int, id string, closeConn bool) *pcaprec.ConnRecorder {
	c := w.rec.NewConn(client(n), Server)
	c.Send(true, post("", initializeBody))
	c.Send(false, []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s",
		id, len(initResult), initResult)))
	c.Send(true, post(id, initializedBody))
	c.Send(false, []byte("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"))
	if closeConn {
		c.Fin(true)
		c.Fin(false)
	}
	return c
}

// sessionID is the n-th session's id, padded with a pattern to size bytes
// (at least its number's length): visible ASCII, as the transport asks.
func sessionID(n, size int) string {
	id := "s" + strconv.Itoa(n) + "-"
	if len(id) >= size {
		return id
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, size)
	copy(b, id)
	for i := len(id); i < size; i++ {
		b[i] = alphabet[(i*31+n)%len(alphabet)]
	}
	return string(b)
}

// LongIDs writes sessions sessions, each on a connection of its own, with
// session ids of idBytes bytes: every byte of every id is state a detector
// keeps per session, and a decoder buffers each head whole. The
// connections are closed after notifications/initialized, or (open) left
// open, each holding what its decoder buffered.
func LongIDs(w io.Writer, sessions, idBytes int, open bool) error {
	pw, err := newWriter(w, 10*time.Microsecond)
	if err != nil {
		return err
	}
	for n := range sessions {
		pw.session(n, sessionID(n, idBytes), !open)
	}
	return pw.close()
}

// Sessions writes sessions ordinary sessions (UUID-sized ids), each on a
// connection of its own, closed, all within the given capture time: a
// burst when within is short, idle sessions (they never send again) in any
// case.
func Sessions(w io.Writer, sessions int, within time.Duration) error {
	// About 14 packets per session.
	step := max(within/time.Duration(max(1, sessions*14)), time.Nanosecond)
	pw, err := newWriter(w, step)
	if err != nil {
		return err
	}
	for n := range sessions {
		pw.session(n, sessionID(n, 36), true)
	}
	return pw.close()
}

// OneStream writes one session whose tools/call streams events progress
// notifications on its SSE response, each with an event id, then the
// result; the stream's connection stays open until the end.
func OneStream(w io.Writer, events int) error {
	pw, err := newWriter(w, 5*time.Microsecond)
	if err != nil {
		return err
	}
	id := sessionID(0, 36)
	c := pw.session(0, id, false)
	c.Send(true, post(id, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"stream","arguments":{},"_meta":{"progressToken":"p"}}}`))
	c.Send(false, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"))
	var b []byte
	flush := func() {
		if len(b) > 0 {
			c.Send(false, b)
			b = b[:0]
		}
	}
	for i := 1; i <= events; i++ {
		b = fmt.Appendf(b, "id: %s_%d\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":%d}}\n\n", id, i, i)
		if len(b) >= 16<<10 {
			flush()
		}
	}
	b = fmt.Appendf(b, "id: %s_%d\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n", id, events+1)
	flush()
	c.Fin(false)
	c.Fin(true)
	return pw.close()
}
