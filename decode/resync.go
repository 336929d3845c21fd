// Resynchronising a direction: after a gap or garbage, find the next HTTP
// start line, one line at a time, and give up on binary streams cheaply.

package decode

import (
	"bytes"
)

func isStartLineByte(b byte) bool {
	return (b >= 'A' && b <= 'Z') || b == '\r' || b == '\n'
}

func (d *dir) enterSync() {
	d.state = stSync
	d.resyncing = true
	d.skipLine = false
	d.buf = trimBuf(d.buf, keptBufBytes)
	d.resetMessage()
}

func (d *dir) resetMessage() {
	d.dropCoding()
	d.ex, d.req, d.resp = nil, nil, nil
	d.bodyMode, d.remaining, d.chunk, d.sawCR = 0, 0, chSize, false
	d.body = trimBuf(d.body, keptBufBytes)
	d.bodyBytes, d.bodyOver, d.keepBody = 0, false, false
	d.events = 0
	d.sseOn = false
	d.limit = ""
	d.lineLen = 0
}

// skipped accounts bytes (a then b) passed over while looking for a start
// line. A connection that never synced is given up after NonHTTPScanLimit
// bytes, but only once binary bytes were seen: text may be the rest of a
// long event stream whose start the capture missed, and the next exchange on
// the connection is worth waiting for (skipping text costs little).
func (d *dir) skipped(a, b []byte) {
	n := len(a) + len(b)
	d.c.w.stats.resyncSkippedBytes.Add(int64(n))
	if d.c.synced {
		return
	}
	d.c.pickedUpUnread(d)
	if !d.sawBinary {
		d.sawBinary = isBinary(a) || isBinary(b)
	}
	d.unsynced += int64(n)
	if d.unsynced > NonHTTPScanLimit && d.sawBinary && !d.c.dead {
		d.c.giveUp()
		d.c.reportUnread("NonHTTPScanLimit", d.ts)
	}
}

// binaryBytes are the bytes that do not occur in HTTP/1.x heads or SSE text.
var binaryBytes = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = c != '\t' && c != '\n' && c != '\r'
	}
	t[0x7f] = true
	return t
}()

func isBinary(b []byte) bool {
	for _, c := range b {
		if binaryBytes[c] {
			return true
		}
	}
	return false
}

// startLike says whether a line of this direction that begins d.buf then
// seg may be a start line: a method and a space (a client), or HTTP/1. (a
// server). RFC 9112 asks for request lines of at least 8,000 bytes, and
// servers take 16 KiB and more (a long query string): such a line is read
// up to MaxHeaderBytes, the bound its head has anyway, not skipped at
// MaxStartLineBytes, which would lose its exchange.
func (d *dir) startLike(seg []byte) bool {
	// The line's first bytes, wherever the segments cut it.
	var first [maxMethodLen + 1]byte
	n := copy(first[:], d.buf)
	n += copy(first[n:], seg)
	b := first[:n]
	if d.role != roleClient && bytes.HasPrefix(b, []byte("HTTP/1.")) {
		return true
	}
	if d.role == roleServer || len(b) == 0 || b[0] < 'A' || b[0] > 'Z' {
		return false
	}
	sp := bytes.IndexByte(b, ' ')
	if sp <= 0 {
		return false
	}
	for _, c := range b[:sp] {
		if !isTchar(c) {
			return false
		}
	}
	return true
}

// startLineTooLong reports a start line past MaxHeaderBytes, skipped: its
// message is lost, so which request a later response answers is not known
// (pairingLost), and the consumer is told (a momentary gap naming the
// limit), as for a head over the limit.
func (d *dir) startLineTooLong() {
	c := d.c
	c.w.stats.headerLimitHits.Add(1)
	c.emit(&Observation{Kind: KindGap, Time: d.ts, Gap: &Gap{FromClient: d.fromA, Lost: -1, Limit: "MaxHeaderBytes", Momentary: true}})
	c.pairingLost = true
}

// sync looks for a start line, one line at a time.
func (d *dir) sync(p []byte) []byte {
	i := bytes.IndexByte(p, '\n')
	if d.skipLine {
		if i < 0 {
			d.skipped(nil, p)
			return nil
		}
		d.skipped(nil, p[:i+1])
		d.skipLine = false
		return p[i+1:]
	}
	seg := p
	if i >= 0 {
		seg = p[:i+1]
	}
	if n := len(d.buf) + len(seg); n > MaxStartLineBytes {
		if like := d.startLike(seg); !like || n > d.c.w.cfg.MaxHeaderBytes {
			if like {
				d.startLineTooLong()
			}
			d.skipped(d.buf, seg)
			d.buf = d.buf[:0]
			// Skipped bytes lose the place: the next line is searched
			// for, not taken as proof that the connection is not HTTP.
			d.resyncing = true
			if i < 0 {
				d.skipLine = true
				return nil
			}
			return p[i+1:]
		}
	}
	if d.buf == nil {
		d.buf = d.c.w.getBuf()
	}
	d.buf = append(d.buf, seg...)
	if i < 0 {
		return nil
	}
	rest := p[i+1:]
	line := d.buf
	if len(trimEOL(line)) == 0 {
		// Blank lines between messages are tolerated (RFC 9112 2.2).
		d.buf = d.buf[:0]
		return rest
	}
	role := roleUnknown
	if d.role != roleServer {
		if _, _, ok := parseRequestLine(line); ok {
			role = roleClient
		}
	}
	if role == roleUnknown && d.role != roleClient {
		if _, ok := parseStatusLine(line); ok {
			role = roleServer
		}
	}
	if role != roleUnknown && d.c.setRoles(d, role) {
		if d.resyncing {
			d.c.w.stats.resyncs.Add(1)
			d.resyncing = false
		}
		d.c.synced = true
		d.state = stHead
		d.lineLen = 0
		return rest
	}
	if !d.c.synced && !d.resyncing && d.fromA && d.c.meta.SawSYN && !d.proxied && proxyV1(line) {
		// A load balancer's PROXY protocol header: the HTTP follows.
		d.proxied = true
		d.c.w.stats.proxyHeaders.Add(1)
		d.c.proxiedClient = proxyV1Client(line)
		d.buf = d.buf[:0]
		return rest
	}
	if !d.c.synced && !d.resyncing && string(trimEOL(line)) == http2PrefaceLine {
		// HTTP/2 with prior knowledge (h2c): not read, but reported.
		d.c.switchToHTTP2(d.ts)
		d.c.w.stats.http2Bytes.Add(int64(len(line)))
		return rest
	}
	if d.c.meta.SawSYN && !d.c.synced && !d.resyncing {
		// The captured start of the connection is not HTTP/1.x.
		d.c.w.stats.parseErrors[errBadStartLine].Add(1)
		d.c.giveUp()
		return nil
	}
	d.skipped(nil, line)
	d.resyncing = true
	d.buf = d.buf[:0]
	return rest
}
