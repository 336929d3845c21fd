// Package jsonl writes the detector's output as JSON Lines: one record per
// line, each with a "type" and, but for the summary, the "source" it came
// from. The format is a contract other tools parse (README "Output format"):
// field names never change meaning, empty values are null rather than
// omitted, times are RFC 3339 with nanoseconds in UTC.
//
// Records are encoded by hand (appendString and friends) rather than through
// encoding/json: a large capture yields a resume and a session record per
// session, and reflection made the writer a visible share of the detector's
// goroutine. TestMatchesEncodingJSON holds the output to encoding/json's.
package jsonl

import (
	"bufio"
	"encoding/json"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/replaywatch/replaywatch/detector"
)

// Record types, the value of every line's "type".
const (
	TypeViolation      = "violation"
	TypeResume         = "resume"
	TypeSession        = "session"
	TypeUnknownOutcome = "unknown_outcome"
	TypeUnverifiable   = "unverifiable"
	TypeSummary        = "summary"
)

// Writer is a detector.Sink that encodes each record as it arrives. It is not
// safe for concurrent use (the detector calls it from one goroutine).
type Writer struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// New returns a Writer on w. Call Flush when done.
func New(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10)}
}

// Err returns the first write error.
func (w *Writer) Err() error { return w.err }

// Flush writes out buffered lines.
func (w *Writer) Flush() error {
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// line is one record being built: fields are appended in order and the line
// is closed by end.
type line struct{ b []byte }

func (w *Writer) begin(typ string) line {
	l := line{b: append(w.buf[:0], `{"type":"`...)}
	l.b = append(l.b, typ...)
	l.b = append(l.b, '"')
	return l
}

// record begins a line of one of the detector's records: "type", then
// "source", the input the record came from (detector.SourcePcap, SourceLive,
// SourceOTLP; null when the pipeline did not say). Source comes second on
// every record type, so a reader that splits one stream by input finds it in
// the same place whatever the type. The summary line has none: it describes
// the run.
func (w *Writer) record(typ, source string) line {
	l := w.begin(typ)
	l.str("source", source)
	return l
}

func (w *Writer) end(l line) {
	l.b = append(l.b, '}', '\n')
	w.buf = l.b
	if w.err == nil {
		_, w.err = w.w.Write(l.b)
	}
}

func (l *line) key(k string) {
	l.b = append(l.b, ',', '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':')
}

// str appends a string field, null when empty.
func (l *line) str(k, v string) {
	l.key(k)
	if v == "" {
		l.b = append(l.b, "null"...)
		return
	}
	l.b = appendString(l.b, v)
}

// time appends a time field as RFC 3339 with nanoseconds in UTC, null when zero.
func (l *line) time(k string, t time.Time) {
	l.key(k)
	l.b = appendTime(l.b, t)
}

func (l *line) int(k string, v int) {
	l.key(k)
	l.b = strconv.AppendInt(l.b, int64(v), 10)
}

func (l *line) bool(k string, v bool) {
	l.key(k)
	l.b = strconv.AppendBool(l.b, v)
}

// strs appends a list of strings, null when empty.
func (l *line) strs(k string, v []string) {
	l.key(k)
	if len(v) == 0 {
		l.b = append(l.b, "null"...)
		return
	}
	l.b = append(l.b, '[')
	for i, s := range v {
		if i > 0 {
			l.b = append(l.b, ',')
		}
		l.b = appendString(l.b, s)
	}
	l.b = append(l.b, ']')
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does with
// HTML escaping off: control characters escaped, invalid UTF-8 replaced by
// U+FFFD, U+2028 and U+2029 escaped (they end lines in JavaScript).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Violation implements detector.Sink.
func (w *Writer) Violation(v *detector.Violation) {
	l := w.record(TypeViolation, v.Source)
	l.str("id", v.ID)
	l.str("kind", string(v.Kind))
	l.str("severity", string(v.Severity))
	l.time("time", v.Time)
	l.str("session_id", v.SessionID)
	l.str("new_session_id", v.NewSessionID)
	l.str("last_event_id", v.LastEventID)
	l.str("first_event_id", v.FirstEventID)
	l.str("stream_id", v.StreamID)
	l.str("protocol_version", v.ProtocolVersion)
	l.str("client", v.Client)
	l.str("server", v.Server)
	l.strs("jsonrpc_ids", v.JSONRPCIDs)
	l.str("tool", v.Tool)
	l.str("confidence", v.Confidence)
	l.str("explanation", v.Explanation)
	l.key("evidence")
	l.b = append(l.b, '[')
	for i, e := range v.Evidence {
		if i > 0 {
			l.b = append(l.b, ',')
		}
		l.b = append(l.b, `{"time":`...)
		l.b = appendTime(l.b, e.Time)
		l.str("connection", e.Conn)
		l.int("exchange", e.Exchange)
		l.str("what", e.What)
		l.str("detail", e.Detail)
		l.b = append(l.b, '}')
	}
	l.b = append(l.b, ']')
	w.end(l)
}

// Resume implements detector.Sink.
func (w *Writer) Resume(r *detector.ResumeAttempt) {
	l := w.record(TypeResume, r.Source)
	l.str("id", r.ID)
	l.time("time", r.Time)
	l.str("session_id", r.SessionID)
	l.str("response_session_id", r.ResponseSession)
	l.str("last_event_id", r.LastEventID)
	l.str("first_event_id", r.FirstEventID)
	l.str("stream_id", r.StreamID)
	l.int("status", r.Status)
	l.str("outcome", string(r.Outcome))
	l.str("reason", r.Reason)
	l.str("protocol_version", r.ProtocolVersion)
	l.str("client", r.Client)
	l.str("server", r.Server)
	l.int("replayed", r.Replayed)
	l.strs("violation_ids", r.ViolationIDs)
	w.end(l)
}

// Session implements detector.Sink.
func (w *Writer) Session(s *detector.SessionSummary) {
	l := w.record(TypeSession, s.Source)
	l.str("session_id", s.SessionID)
	l.str("protocol_version", s.ProtocolVersion)
	l.str("client", s.Client)
	l.str("server", s.Server)
	l.time("first_seen", s.FirstSeen)
	l.time("last_seen", s.LastSeen)
	l.bool("start_seen", s.StartSeen)
	l.int("requests", s.Requests)
	l.int("events", s.Events)
	l.int("streams", s.Streams)
	l.int("resumes", s.Resumes)
	l.int("violations", s.Violations)
	l.str("ended", s.Ended)
	l.str("previous_session", s.PreviousSession)
	l.str("link_confidence", s.LinkConfidence)
	w.end(l)
}

// UnknownOutcome implements detector.Sink.
func (w *Writer) UnknownOutcome(u *detector.UnknownOutcome) {
	l := w.record(TypeUnknownOutcome, u.Source)
	l.str("id", u.ID)
	l.time("time", u.Time)
	l.str("session_id", u.SessionID)
	l.str("jsonrpc_id", u.JSONRPCID)
	l.str("method", u.Method)
	l.str("tool", u.Tool)
	l.str("args_hash", u.ArgsHash)
	l.time("called_at", u.CalledAt)
	l.str("client", u.Client)
	l.str("server", u.Server)
	l.str("reason", u.Reason)
	l.str("reissued_in_session", u.ReissuedInSession)
	w.end(l)
}

// Unverifiable implements detector.Sink.
func (w *Writer) Unverifiable(u *detector.Unverifiable) {
	l := w.record(TypeUnverifiable, u.Source)
	l.str("id", u.ID)
	l.time("time", u.Time)
	l.str("session_id", u.SessionID)
	l.str("client", u.Client)
	l.str("server", u.Server)
	l.str("check", u.Check)
	l.str("reason", u.Reason)
	w.end(l)
}

// Summary writes the closing summary line. s is any JSON-encodable value
// that encodes as an object (sink.Summary); its fields follow "type".
func (w *Writer) Summary(s any) {
	b, err := json.Marshal(s)
	if err != nil {
		if w.err == nil {
			w.err = err
		}
		return
	}
	l := w.begin(TypeSummary)
	if len(b) >= 2 && b[0] == '{' {
		if len(b) > 2 {
			l.b = append(l.b, ',')
			l.b = append(l.b, b[1:len(b)-1]...)
		}
	} else {
		l.key("value")
		l.b = append(l.b, b...)
	}
	w.end(l)
}
