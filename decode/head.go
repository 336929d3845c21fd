// HTTP heads: collecting header lines within MaxHeaderBytes, the start
// line, the header iterator and the framing fields.

package decode

import (
	"bytes"
)

// head collects header lines up to the blank line, bounded by MaxHeaderBytes.
func (d *dir) head(p []byte) []byte {
	for len(p) > 0 {
		seg, rest, complete := cutLine(p)
		if len(d.buf)+len(seg) > d.c.w.cfg.MaxHeaderBytes {
			d.skipped(d.buf, seg)
			d.headTooLarge(!complete)
			return rest
		}
		d.buf = append(d.buf, seg...)
		p = rest
		if d.trackLine(seg) {
			d.headDone()
			return p
		}
	}
	return nil
}

// cutLine splits p after its first LF; complete is false when there is none.
func cutLine(p []byte) (seg, rest []byte, complete bool) {
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		return p[:i+1], p[i+1:], true
	}
	return p, nil, false
}

// trackLine follows the lines of a head or trailer section piece by piece
// and reports whether seg completed the blank line that ends it.
func (d *dir) trackLine(seg []byte) (blank bool) {
	if len(seg) == 0 {
		return false
	}
	if d.lineLen == 0 {
		d.lineFirst = seg[0]
	}
	d.lineLen += len(seg)
	if seg[len(seg)-1] != '\n' {
		return false
	}
	blank = d.lineLen == 1 || (d.lineLen == 2 && d.lineFirst == '\r')
	d.lineLen = 0
	return blank
}

// headTooLarge reports what arrived of a head over MaxHeaderBytes, marked
// HeadTruncated, and resynchronises: the body's framing is unknown. The
// exchange keeps its place in the pipeline, so later responses still pair
// with the right requests.
func (d *dir) headTooLarge(midLine bool) {
	d.c.w.stats.headerLimitHits.Add(1)
	if d.role == roleClient {
		ro, _ := d.parseRequestHead()
		ro.req.HeadTruncated = true
		d.ex = d.c.newExchange(ro.req.Method)
		d.req = ro
		d.resetBody()
		d.finishRequest(true)
	} else if ro, _ := d.parseResponseHead(); ro.resp.Status >= 200 {
		ro.resp.HeadTruncated = true
		ex := d.c.popExchange(d.ts)
		d.ex, d.resp = ex, ro
		d.resetBody()
		d.emitResponse(ro)
		d.limit = "MaxHeaderBytes"
		d.endResponse(EndTruncated, false)
	}
	d.enterSync()
	d.skipLine = midLine
}

// firstLine returns the start line of a head, with its line end.
func firstLine(head []byte) []byte {
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		return head[:i+1]
	}
	return head
}

// headerIter walks the header fields of a head (after the start line),
// with names lower-cased and obs-fold continuation lines joined by one
// space. It is an iterator rather than a callback so that the callers'
// switches run inline, without a closure call per field. lower is scratch
// space for the lower-cased names (the worker's, so that it does not escape
// to the heap on every head); a name is valid until the next call.
type headerIter struct {
	rest  []byte
	lower *[maxKnownHeaderName]byte
	bad   bool // a malformed line was skipped
}

func newHeaderIter(head []byte, lower *[maxKnownHeaderName]byte) headerIter {
	i := bytes.IndexByte(head, '\n')
	return headerIter{rest: head[i+1:], lower: lower}
}

// next returns the next field; more is false after the last one. A name
// longer than any the decoder looks at comes back as nil.
func (it *headerIter) next() (name, value []byte, more bool) {
	for len(it.rest) > 0 {
		j := bytes.IndexByte(it.rest, '\n')
		line := trimEOL(it.rest[:j+1])
		it.rest = it.rest[j+1:]
		if len(line) == 0 {
			it.rest = nil
			break
		}
		// One pass over the name finds the colon, refuses whitespace
		// (a continuation line without a field before it lands here too)
		// and lower-cases it; names are short, so a byte loop beats
		// bytes.IndexByte plus separate passes.
		colon := -1
		lower := it.lower // a local, so the loop does not reload it
		for i, c := range line {
			l := nameLower[c]
			if l == 0 && c != 0 {
				if c == ':' {
					colon = i
				}
				break
			}
			if i < len(lower) {
				lower[i] = l
			}
		}
		if colon <= 0 {
			it.bad = true
			continue
		}
		if colon <= len(lower) {
			name = lower[:colon]
		}
		value = trimOWS(line[colon+1:])
		folded := false
		for len(it.rest) > 0 && (it.rest[0] == ' ' || it.rest[0] == '\t') {
			j := bytes.IndexByte(it.rest, '\n')
			if j < 0 {
				// A head cut by MaxHeaderBytes: its last, partial line
				// ends it, as an unterminated field line does above.
				it.rest = nil
				break
			}
			cont := trimEOL(it.rest[:j+1])
			it.rest = it.rest[j+1:]
			if !folded {
				value = append([]byte(nil), value...)
				folded = true
			}
			value = append(append(value, ' '), trimOWS(cont)...)
		}
		if folded {
			// Each fold is one space, and whitespace around the value is
			// not part of it (RFC 9112 5.2): a value that begins on its
			// continuation line, or an empty continuation, adds none.
			value = trimOWS(value)
		}
		return name, value, true
	}
	return nil, nil, false
}

// nameLower maps a byte of a header name to its lower case, and the bytes
// that end a name (the colon, or whitespace, which makes the line
// malformed) to 0. NUL maps to itself, so it needs a second look.
var nameLower = func() (t [256]byte) {
	for c := range t {
		t[c] = byte(c)
		if c >= 'A' && c <= 'Z' {
			t[c] = byte(c) + 'a' - 'A'
		}
	}
	t[':'], t[' '], t['\t'], t['\r'] = 0, 0, 0, 0
	return t
}()

// maxKnownHeaderName is the longest header name the decoder looks at
// ("mcp-protocol-version"); longer names are passed on as "".
const maxKnownHeaderName = 24

// framing is what a head says about its body.
type framing struct {
	contentLength int64 // -1 when absent
	chunked       bool
	otherCoding   bool // Transfer-Encoding without chunked last
	badLength     bool
	// contentCoding is the first Content-Encoding other than identity
	// (it points into the head being parsed).
	contentCoding []byte
	// transferCodings are the Transfer-Encoding codings other than the
	// last chunked ("gzip" of "gzip, chunked"): the sender applied them
	// after any Content-Encoding, so the body, once de-chunked, is under
	// them as under a content coding.
	transferCodings []byte
}

func (f *framing) field(name, value []byte) bool {
	switch string(name) {
	case "content-length":
		n, ok := parseContentLength(value)
		if !ok || (f.contentLength >= 0 && n != f.contentLength) {
			f.badLength = true
		}
		f.contentLength = n
	case "transfer-encoding":
		// Fields of one name make one list (RFC 9110 5.3): an earlier
		// field's codings, chunked among them, come before this one's.
		prior := f.transferCodings
		if f.chunked {
			prior = joinCodings(prior, []byte("chunked"))
		}
		f.chunked = lastCodingIsChunked(value)
		f.otherCoding = !f.chunked
		if f.chunked {
			value = value[:max(bytes.LastIndexByte(value, ','), 0)]
		}
		if v := trimOWS(value); !bytes.EqualFold(v, []byte("identity")) {
			prior = joinCodings(prior, v)
		}
		f.transferCodings = prior
	case "content-encoding":
		if v := bytes.TrimSpace(value); f.contentCoding == nil && len(v) > 0 && !bytes.EqualFold(v, []byte("identity")) {
			f.contentCoding = v
		}
	default:
		return false
	}
	return true
}

// maxCodingLen bounds a kept Content-Encoding value: a coding list longer
// than this is cut (what matters is that there is one).
const maxCodingLen = 64

// coding is the head's Content-Encoding as kept in Request and Response:
// "" when absent or identity. Transfer codings other than chunked come
// first, as the last applied: a list of codings is not read.
func (f *framing) coding(in *interner) string {
	c := f.contentCoding
	if len(f.transferCodings) > 0 {
		c = joinCodings(f.transferCodings, c)
	}
	return in.str(c[:min(len(c), maxCodingLen)])
}

// joinCodings is the coding list a, b; a alone when b is empty, b alone
// when a is (no copy then: both may point into the head being parsed).
func joinCodings(a, b []byte) []byte {
	switch {
	case len(a) == 0:
		return b
	case len(b) == 0:
		return a
	}
	return append(append(append(make([]byte, 0, len(a)+2+len(b)), a...), ", "...), b...)
}

func (d *dir) headDone() {
	if d.role == roleClient {
		d.requestHead()
	} else {
		d.responseHead()
	}
}
