// The PROXY protocol: a load balancer (HAProxy send-proxy, an AWS Network
// Load Balancer, Envoy) may open each connection to a backend with a header
// naming the original client, before the HTTP. It is skipped, and counted.

package decode

import (
	"bytes"
	"encoding/binary"
)

// proxyV2Signature opens a PROXY protocol version 2 header; 4 more bytes
// (version and command, family, address length) complete its fixed part.
const proxyV2Signature = "\r\n\r\n\x00\r\nQUIT\n"

const proxyV2FixedBytes = len(proxyV2Signature) + 4

// proxyV1MaxBytes is the longest version 1 header line, CRLF included
// (the specification's 107).
const proxyV1MaxBytes = 107

// proxyV1 says whether line (a complete first line of the client's bytes)
// is a PROXY protocol version 1 header.
func proxyV1(line []byte) bool {
	return len(line) <= proxyV1MaxBytes && bytes.HasPrefix(line, []byte("PROXY ")) && bytes.HasSuffix(line, []byte("\r\n"))
}

// proxyV2 reads the client's first bytes while they may be a version 2
// header (state stProxy): the fixed part into d.buf, then its addresses
// are skipped. Bytes that turn out not to be one are read as ever.
func (d *dir) proxyV2(p []byte) []byte {
	if d.proxySkip > 0 {
		n := min(len(p), d.proxySkip)
		d.proxySkip -= n
		if d.proxySkip == 0 {
			d.state = stSync
		}
		return p[n:]
	}
	if d.buf == nil {
		d.buf = d.c.w.getBuf()
	}
	n := min(len(p), proxyV2FixedBytes-len(d.buf))
	d.buf = append(d.buf, p[:n]...)
	p = p[n:]
	sig := min(len(d.buf), len(proxyV2Signature))
	if string(d.buf[:sig]) != proxyV2Signature[:sig] {
		// Not a header (blank lines before a request, say): read what
		// was held back as the connection's first bytes.
		held := append([]byte(nil), d.buf...)
		d.buf = d.buf[:0]
		d.state = stSync
		d.feed(held)
		return p
	}
	if len(d.buf) < proxyV2FixedBytes {
		return p
	}
	d.c.w.stats.proxyHeaders.Add(1)
	d.proxySkip = int(binary.BigEndian.Uint16(d.buf[proxyV2FixedBytes-2:]))
	d.buf = d.buf[:0]
	if d.proxySkip == 0 {
		d.state = stSync
	}
	return p
}
