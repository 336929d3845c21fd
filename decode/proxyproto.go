// The PROXY protocol: a load balancer (HAProxy send-proxy, an AWS Network
// Load Balancer, Envoy) may open each connection to a backend with a header
// naming the original client, before the HTTP. It is skipped and counted,
// and the client it names is the connection's: behind the balancer every
// connection comes from the balancer's own address, which would make all
// its clients one crowd.

package decode

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"strings"
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
// header (state stProxy): the fixed part into d.buf, then the client's
// address, then the rest of the header is skipped. Bytes that turn out not
// to be a header are read as ever.
func (d *dir) proxyV2(p []byte) []byte {
	for len(p) > 0 && d.state == stProxy {
		switch {
		case len(d.buf) < proxyV2FixedBytes:
			if d.buf == nil {
				d.buf = d.c.w.getBuf()
			}
			n := min(len(p), proxyV2FixedBytes-len(d.buf))
			d.buf = append(d.buf, p[:n]...)
			p = p[n:]
			sig := min(len(d.buf), len(proxyV2Signature))
			if string(d.buf[:sig]) != proxyV2Signature[:sig] {
				// Not a header (blank lines before a request, say): read
				// what was held back as the connection's first bytes.
				held := append([]byte(nil), d.buf...)
				d.buf = d.buf[:0]
				d.state = stSync
				d.feed(held)
				return p
			}
			if len(d.buf) == proxyV2FixedBytes {
				d.c.w.stats.proxyHeaders.Add(1)
				d.proxySkip = int(binary.BigEndian.Uint16(d.buf[proxyV2FixedBytes-2:]))
				if a := proxyV2AddrBytes(d.buf[12], d.buf[13]); a <= d.proxySkip {
					d.proxyAddr = a // else too short to hold them: skipped unread
				}
			}
		case d.proxyAddr > 0:
			n := min(len(p), d.proxyAddr)
			d.buf = append(d.buf, p[:n]...)
			p = p[n:]
			d.proxyAddr -= n
			d.proxySkip -= n
			if d.proxyAddr == 0 {
				d.c.proxiedClient = proxyV2Client(d.buf[13], d.buf[proxyV2FixedBytes:])
			}
		default:
			n := min(len(p), d.proxySkip)
			d.proxySkip -= n
			p = p[n:]
		}
		if len(d.buf) >= proxyV2FixedBytes && d.proxyAddr == 0 && d.proxySkip == 0 {
			d.buf = d.buf[:0]
			d.state = stSync
		}
	}
	return p
}

// proxyV2AddrBytes is how many bytes of a version 2 header's address block
// name the client, given its version-and-command and family bytes: 12 for
// TCP over IPv4 and 36 for TCP over IPv6 from a PROXY command; 0 for a
// LOCAL one (the balancer's own health check) or another family.
func proxyV2AddrBytes(verCmd, family byte) int {
	if verCmd != 0x21 {
		return 0
	}
	switch family {
	case 0x11:
		return 12
	case 0x21:
		return 36
	}
	return 0
}

// proxyV2Client is the client a version 2 address block names.
func proxyV2Client(family byte, addr []byte) netip.AddrPort {
	if family == 0x11 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(addr[0:4])), binary.BigEndian.Uint16(addr[8:10]))
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(addr[0:16])), binary.BigEndian.Uint16(addr[32:34]))
}

// proxyV1Client is the client a version 1 header line names ("PROXY TCP4
// <client> <server> <client port> <server port>"), or the zero AddrPort
// (PROXY UNKNOWN, or a line that does not parse).
func proxyV1Client(line []byte) netip.AddrPort {
	f := strings.Fields(string(line))
	if len(f) != 6 || (f[1] != "TCP4" && f[1] != "TCP6") {
		return netip.AddrPort{}
	}
	addr, err := netip.ParseAddr(f[2])
	port, perr := strconv.ParseUint(f[4], 10, 16)
	if err != nil || perr != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(addr, uint16(port))
}
