package decode

import (
	"bytes"
	"strings"
)

// Helpers for HTTP/1.x start lines and header fields (RFC 9112). They work on
// byte slices of one line, without allocating.

// trimEOL drops a trailing LF or CRLF.
func trimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
	}
	return line
}

// trimOWS drops optional whitespace (SP, HTAB) around a field value.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// isTchar reports an RFC 9110 token character.
func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// maxMethodLen bounds a request method; real ones are short, and a long
// token is more likely to be the middle of something else.
const maxMethodLen = 24

// parseRequestLine splits "METHOD SP target SP HTTP/1.x".
func parseRequestLine(line []byte) (method, target []byte, ok bool) {
	line = trimEOL(line)
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || sp > maxMethodLen {
		return nil, nil, false
	}
	method = line[:sp]
	if method[0] < 'A' || method[0] > 'Z' {
		return nil, nil, false
	}
	for _, c := range method {
		if !isTchar(c) {
			return nil, nil, false
		}
	}
	rest := line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp <= 0 {
		return nil, nil, false
	}
	target = rest[:sp]
	for _, c := range target {
		if c <= ' ' || c == 0x7f {
			return nil, nil, false
		}
	}
	if !isHTTP1Version(rest[sp+1:]) {
		return nil, nil, false
	}
	return method, target, true
}

func isHTTP1Version(v []byte) bool {
	return len(v) == 8 && string(v[:7]) == "HTTP/1." && v[7] >= '0' && v[7] <= '9'
}

// parseStatusLine reads "HTTP/1.x SP NNN [SP reason]".
func parseStatusLine(line []byte) (status int, ok bool) {
	line = trimEOL(line)
	if len(line) < 12 || !isHTTP1Version(line[:8]) || line[8] != ' ' {
		return 0, false
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, false
		}
		status = status*10 + int(c-'0')
	}
	if len(line) > 12 && line[12] != ' ' {
		return 0, false
	}
	if status < 100 {
		return 0, false
	}
	return status, true
}

// parseContentLength accepts digits only (a list of equal values, which some
// proxies produce, is accepted too).
func parseContentLength(v []byte) (int64, bool) {
	var first int64 = -1
	for len(v) > 0 {
		var part []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			part, v = trimOWS(v[:i]), v[i+1:]
		} else {
			part, v = trimOWS(v), nil
		}
		if len(part) == 0 || len(part) > 18 {
			return 0, false
		}
		var n int64
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int64(c-'0')
		}
		if first >= 0 && n != first {
			return 0, false
		}
		first = n
	}
	return first, first >= 0
}

// lastCodingIsChunked says whether a Transfer-Encoding list ends in chunked.
func lastCodingIsChunked(v []byte) bool {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	v = trimOWS(v)
	if i := bytes.IndexByte(v, ';'); i >= 0 {
		v = trimOWS(v[:i])
	}
	return bytes.EqualFold(v, []byte("chunked"))
}

// parseChunkSize reads the hex size of a chunk-size line, ignoring chunk
// extensions.
func parseChunkSize(line []byte) (int64, bool) {
	line = trimEOL(line)
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = trimOWS(line)
	if len(line) == 0 {
		return 0, false
	}
	// Leading zeros are legal in any number (RFC 9112 7.1: 1*HEXDIG);
	// 15 digits after them fit an int64.
	for len(line) > 1 && line[0] == '0' {
		line = line[1:]
	}
	if len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(v)
	}
	return n, true
}

// mediaTypeIs compares the media type of a Content-Type value, ignoring
// parameters and case.
func mediaTypeIs(ct, want string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), want)
}
