package decode

import (
	"bytes"

	"github.com/cespare/xxhash/v2"
)

// SSEEvent is one dispatched server-sent event as SSEDecoder hands it over.
// The decoder reuses it: it and Data are valid only during the callback.
type SSEEvent struct {
	ID    string // this event's id field; see HasID
	HasID bool   // the event carried an id field without NUL
	// LastEventID is the stream's last-event-id buffer at dispatch: what a
	// browser client would send as Last-Event-ID on reconnect.
	LastEventID string
	Type        string // event field; "" means "message"
	Retry       int    // milliseconds from this event's retry field; -1 when absent
	// Data is the event's data lines joined with "\n", as far as
	// MaxEventBytes allowed; DataTruncated says it stopped short.
	Data          []byte
	DataTruncated bool
	DataBytes     int    // full data length, counted past the limit
	DataHash      uint64 // XXH64 of the full data, hashed past the limit (streaming)
}

// Line buffering modes of SSEDecoder.
const (
	sseLineBuffer  = iota // the line fits: keep it until its end
	sseLineData           // an overlong data line: stream its value into the event
	sseLineDiscard        // an overlong line of another field: drop it
)

var (
	utf8BOM = []byte{0xEF, 0xBB, 0xBF}
	newline = []byte{'\n'}
)

// SSEDecoder parses a text/event-stream body incrementally, following the
// WHATWG HTML "event stream interpretation" rules. Bytes may arrive in any
// pieces; an event is handed to OnEvent when its blank line arrives.
// The zero value is not usable; call NewSSEDecoder.
type SSEDecoder struct {
	maxLine, maxEvent int
	onEvent           func(*SSEEvent)

	bomDone bool
	bomN    int  // bytes of a leading BOM matched so far
	afterCR bool // the previous line ended in CR: a leading LF belongs to it

	line       []byte
	lineMode   uint8
	stripSpace bool // an overlong data line's value may still start with the one space to drop

	// The event being built.
	data      []byte
	dataLines int
	dataBytes int
	dataTrunc bool
	hasher    xxhash.Digest // used only once data outgrew the buffer
	typ       []byte
	id        string
	hasID     bool
	retry     int
	pending   bool // a field line arrived since the last blank line

	lastID    string
	hasLastID bool
	lastType  string // reused when the next event has the same type
	ev        SSEEvent

	// Events counts dispatched events; the limit counters say how often an
	// overlong line or event data stopped being buffered.
	Events         int
	LineLimitHits  int
	EventLimitHits int
}

// NewSSEDecoder returns a decoder that calls onEvent for each dispatched
// event. maxLine bounds one buffered line and maxEvent one event's buffered
// data; past either the decoder keeps counting and hashing, not buffering.
func NewSSEDecoder(maxLine, maxEvent int, onEvent func(*SSEEvent)) *SSEDecoder {
	if maxLine < 16 {
		maxLine = 16
	}
	if maxEvent < 0 {
		maxEvent = 0
	}
	return &SSEDecoder{maxLine: maxLine, maxEvent: maxEvent, onEvent: onEvent, retry: -1}
}

// Reset prepares the decoder for a new stream, keeping its buffers.
func (d *SSEDecoder) Reset() {
	*d = SSEDecoder{
		maxLine: d.maxLine, maxEvent: d.maxEvent, onEvent: d.onEvent, retry: -1,
		line: d.line[:0], data: d.data[:0], typ: d.typ[:0],
	}
}

// Write feeds the next bytes of the stream.
func (d *SSEDecoder) Write(p []byte) {
	if !d.bomDone {
		for len(p) > 0 && d.bomN < len(utf8BOM) {
			if p[0] != utf8BOM[d.bomN] {
				// Not a BOM after all: the bytes held back are content.
				d.bomDone = true
				held := d.bomN
				d.bomN = 0
				d.write(utf8BOM[:held])
				break
			}
			d.bomN++
			p = p[1:]
		}
		if d.bomN == len(utf8BOM) {
			d.bomDone = true
			d.bomN = 0
		}
		if !d.bomDone {
			return
		}
	}
	d.write(p)
}

func (d *SSEDecoder) write(p []byte) {
	// lf caches the next LF at or after off so CR-only streams stay linear;
	// cr the next CR likewise, so a stream without CRs (nearly all of them)
	// is searched for one once per write rather than once per line.
	lf, cr := -2, -2
	off := 0
	for off < len(p) {
		if d.afterCR {
			d.afterCR = false
			if p[off] == '\n' {
				off++
				continue
			}
		}
		if lf != -1 && lf < off {
			lf = bytes.IndexByte(p[off:], '\n')
			if lf >= 0 {
				lf += off
			}
		}
		if cr != -1 && cr < off {
			cr = bytes.IndexByte(p[off:], '\r')
			if cr >= 0 {
				cr += off
			}
		}
		// The line ends at the first CR or LF.
		var eol int
		if cr >= 0 && (lf < 0 || cr < lf) {
			eol = cr
		} else if lf >= 0 {
			eol = lf
		} else {
			d.appendLine(p[off:])
			return
		}
		if len(d.line) == 0 && d.lineMode == sseLineBuffer && eol-off <= d.maxLine {
			// The whole line is in p: parse it in place rather than
			// copying it into d.line first.
			d.afterCR = p[eol] == '\r'
			d.processLine(p[off:eol])
			off = eol + 1
			continue
		}
		d.appendLine(p[off:eol])
		d.afterCR = p[eol] == '\r'
		off = eol + 1
		d.endLine()
	}
}

func (d *SSEDecoder) appendLine(b []byte) {
	switch d.lineMode {
	case sseLineData:
		d.writeOverlongValue(b)
		return
	case sseLineDiscard:
		return
	}
	room := d.maxLine - len(d.line)
	if len(b) <= room {
		d.line = append(d.line, b...)
		return
	}
	d.line = append(d.line, b[:room]...)
	d.LineLimitHits++
	// The field name is known by now (or longer than any real one): a data
	// line keeps flowing into the event's hash, anything else is dropped.
	colon := bytes.IndexByte(d.line, ':')
	if colon < 0 || string(d.line[:colon]) != "data" {
		d.lineMode = sseLineDiscard
		d.line = d.line[:0]
		return
	}
	d.lineMode = sseLineData
	d.pending = true
	d.startDataLine()
	d.stripSpace = true
	d.writeOverlongValue(d.line[colon+1:])
	d.line = d.line[:0]
	d.writeOverlongValue(b[room:])
}

func (d *SSEDecoder) writeOverlongValue(b []byte) {
	if d.stripSpace && len(b) > 0 {
		d.stripSpace = false
		if b[0] == ' ' {
			b = b[1:]
		}
	}
	d.writeData(b)
}

func (d *SSEDecoder) endLine() {
	mode := d.lineMode
	d.lineMode = sseLineBuffer
	d.stripSpace = false
	if mode != sseLineBuffer {
		return
	}
	d.processLine(d.line)
	d.line = trimBuf(d.line, maxKeptSSEBuffer)
}

func (d *SSEDecoder) processLine(line []byte) {
	if len(line) == 0 {
		d.dispatch()
		return
	}
	if line[0] == ':' {
		return // comment
	}
	d.pending = true
	name, value := line, line[len(line):]
	if colon := bytes.IndexByte(line, ':'); colon >= 0 {
		name, value = line[:colon], line[colon+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		d.startDataLine()
		d.writeData(value)
	case "event":
		d.typ = append(d.typ[:0], value...)
	case "id":
		if bytes.IndexByte(value, 0) >= 0 {
			return
		}
		switch {
		case len(value) > MaxIDBytes:
			d.lastID = longID(value)
		case !d.hasLastID || d.lastID != string(value):
			d.lastID = string(value)
		}
		d.hasLastID = true
		d.id, d.hasID = d.lastID, true
	case "retry":
		if n, ok := parseRetry(value); ok {
			d.retry = n
		}
	}
}

// parseRetry accepts ASCII digits only, saturating instead of overflowing.
func parseRetry(v []byte) (int, bool) {
	if len(v) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < 1<<40 {
			n = n*10 + int(c-'0')
		}
	}
	return n, true
}

func (d *SSEDecoder) startDataLine() {
	if d.dataLines > 0 {
		d.writeData(newline)
	}
	d.dataLines++
}

func (d *SSEDecoder) writeData(b []byte) {
	d.dataBytes += len(b)
	if !d.dataTrunc {
		if len(d.data)+len(b) <= d.maxEvent {
			d.data = append(d.data, b...)
			return
		}
		// Past the limit: hash what was buffered, then stream.
		d.dataTrunc = true
		d.EventLimitHits++
		d.hasher.Reset()
		d.hasher.Write(d.data)
		d.data = d.data[:0]
	}
	d.hasher.Write(b)
}

func (d *SSEDecoder) dispatch() {
	if d.dataLines > 0 {
		ev := &d.ev
		ev.ID, ev.HasID = d.id, d.hasID
		ev.LastEventID = d.lastID
		if string(d.typ) != d.lastType {
			// A stream often opens with one other type (a priming event)
			// before its messages, so the last type alone misses once per
			// stream; the usual "message" costs no allocation.
			if string(d.typ) == "message" {
				d.lastType = "message"
			} else {
				d.lastType = string(d.typ)
			}
		}
		ev.Type = d.lastType
		ev.Retry = d.retry
		ev.DataBytes = d.dataBytes
		ev.DataTruncated = d.dataTrunc
		if d.dataTrunc {
			ev.Data = nil
			ev.DataHash = d.hasher.Sum64()
		} else {
			ev.Data = d.data
			ev.DataHash = xxhash.Sum64(d.data)
		}
		d.Events++
		if d.onEvent != nil {
			d.onEvent(ev)
		}
		ev.Data = nil
	}
	// A large event's buffer is not kept for the next: a stream that sent
	// one would hold it while idle (the decoder's MaxBufferedBytes).
	d.data = trimBuf(d.data, maxKeptSSEBuffer)
	d.dataLines, d.dataBytes, d.dataTrunc = 0, 0, false
	d.typ = d.typ[:0]
	d.id, d.hasID = "", false
	d.retry = -1
	d.pending = false
}

// MidEvent says the stream stopped inside an event: a field line arrived, or
// a line is incomplete, since the last blank line. Such an event is never
// dispatched.
func (d *SSEDecoder) MidEvent() bool {
	if d.pending || d.lineMode != sseLineBuffer {
		return true
	}
	return len(d.line) > 0 && d.line[0] != ':'
}

// PartialID returns the id field of the unterminated event, if one arrived.
func (d *SSEDecoder) PartialID() (string, bool) { return d.id, d.hasID }

// LastEventID returns the stream's last-event-id buffer.
func (d *SSEDecoder) LastEventID() (string, bool) { return d.lastID, d.hasLastID }
