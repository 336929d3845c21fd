// HTTP/2: recognised, counted and reported as unread, never decoded.

package decode

import "bytes"

// GapHTTP2 is the Gap.Limit of a connection that switched to HTTP/2. Not a
// limit: the decoder reads HTTP/1.x only, so whatever MCP the connection
// carried from then on is unseen, as behind a limit.
const GapHTTP2 = "HTTP/2"

// http2PrefaceLine opens the client connection preface of HTTP/2 with prior
// knowledge (RFC 9113 3.4), the way h2c clients and proxies start.
const http2PrefaceLine = "PRI * HTTP/2.0"

// upgradesToH2C says whether a 101 response head (in d.buf) switches the
// connection to HTTP/2 (RFC 7540 3.2, Upgrade: h2c).
func (d *dir) upgradesToH2C() bool {
	it := newHeaderIter(d.buf, &d.c.w.lower)
	for {
		name, value, more := it.next()
		if !more {
			return false
		}
		if string(name) == "upgrade" && bytes.EqualFold(bytes.TrimSpace(value), []byte("h2c")) {
			return true
		}
	}
}
