// Package jsonl writes the detector's output as JSON Lines: one record per
// line, each with a "type". The format is a contract other tools parse
// (README "Output format"): field names never change meaning, empty values are
// null rather than omitted, times are RFC 3339 with nanoseconds in UTC.
package jsonl

import (
	"bufio"
	"encoding/json"
	"io"
	"time"

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
	enc *json.Encoder
	err error
}

// New returns a Writer on w. Call Flush when done.
func New(w io.Writer) *Writer {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &Writer{w: bw, enc: enc}
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

func (w *Writer) write(v any) {
	if w.err == nil {
		w.err = w.enc.Encode(v)
	}
}

// str is a string that encodes as null when empty.
type str string

func (s str) MarshalJSON() ([]byte, error) {
	if s == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(s))
}

// ts is a time that encodes as RFC 3339 with nanoseconds, or null when zero.
type ts time.Time

func (t ts) MarshalJSON() ([]byte, error) {
	tt := time.Time(t)
	if tt.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(tt.UTC().Format(time.RFC3339Nano))
}

// strs encodes a list as null when empty.
type strs []string

func (s strs) MarshalJSON() ([]byte, error) {
	if len(s) == 0 {
		return []byte("null"), nil
	}
	return json.Marshal([]string(s))
}

type evidence struct {
	Time     ts  `json:"time"`
	Conn     str `json:"connection"`
	Exchange int `json:"exchange"`
	What     str `json:"what"`
	Detail   str `json:"detail"`
}

// ViolationRecord is the JSON shape of a violation line.
type ViolationRecord struct {
	Type            string     `json:"type"`
	ID              str        `json:"id"`
	Kind            str        `json:"kind"`
	Severity        str        `json:"severity"`
	Time            ts         `json:"time"`
	SessionID       str        `json:"session_id"`
	NewSessionID    str        `json:"new_session_id"`
	LastEventID     str        `json:"last_event_id"`
	FirstEventID    str        `json:"first_event_id"`
	StreamID        str        `json:"stream_id"`
	ProtocolVersion str        `json:"protocol_version"`
	Client          str        `json:"client"`
	Server          str        `json:"server"`
	JSONRPCIDs      strs       `json:"jsonrpc_ids"`
	Tool            str        `json:"tool"`
	Confidence      str        `json:"confidence"`
	Explanation     str        `json:"explanation"`
	Evidence        []evidence `json:"evidence"`
}

// Violation implements detector.Sink.
func (w *Writer) Violation(v *detector.Violation) { w.write(FromViolation(v)) }

// FromViolation converts a violation to its JSON record.
func FromViolation(v *detector.Violation) ViolationRecord {
	ev := make([]evidence, len(v.Evidence))
	for i, e := range v.Evidence {
		ev[i] = evidence{Time: ts(e.Time), Conn: str(e.Conn), Exchange: e.Exchange, What: str(e.What), Detail: str(e.Detail)}
	}
	return ViolationRecord{
		Type: TypeViolation, ID: str(v.ID), Kind: str(v.Kind), Severity: str(v.Severity), Time: ts(v.Time),
		SessionID: str(v.SessionID), NewSessionID: str(v.NewSessionID), LastEventID: str(v.LastEventID),
		FirstEventID: str(v.FirstEventID), StreamID: str(v.StreamID), ProtocolVersion: str(v.ProtocolVersion),
		Client: str(v.Client), Server: str(v.Server), JSONRPCIDs: strs(v.JSONRPCIDs), Tool: str(v.Tool),
		Confidence: str(v.Confidence), Explanation: str(v.Explanation), Evidence: ev,
	}
}

type resumeRecord struct {
	Type            string `json:"type"`
	ID              str    `json:"id"`
	Time            ts     `json:"time"`
	SessionID       str    `json:"session_id"`
	ResponseSession str    `json:"response_session_id"`
	LastEventID     str    `json:"last_event_id"`
	FirstEventID    str    `json:"first_event_id"`
	StreamID        str    `json:"stream_id"`
	Status          int    `json:"status"`
	Outcome         str    `json:"outcome"`
	Reason          str    `json:"reason"`
	ProtocolVersion str    `json:"protocol_version"`
	Client          str    `json:"client"`
	Server          str    `json:"server"`
	Replayed        int    `json:"replayed"`
	ViolationIDs    strs   `json:"violation_ids"`
}

// Resume implements detector.Sink.
func (w *Writer) Resume(r *detector.ResumeAttempt) {
	w.write(resumeRecord{
		Type: TypeResume, ID: str(r.ID), Time: ts(r.Time), SessionID: str(r.SessionID),
		ResponseSession: str(r.ResponseSession), LastEventID: str(r.LastEventID), FirstEventID: str(r.FirstEventID),
		StreamID: str(r.StreamID), Status: r.Status, Outcome: str(r.Outcome), Reason: str(r.Reason),
		ProtocolVersion: str(r.ProtocolVersion), Client: str(r.Client), Server: str(r.Server),
		Replayed: r.Replayed, ViolationIDs: strs(r.ViolationIDs),
	})
}

type sessionRecord struct {
	Type            string `json:"type"`
	SessionID       str    `json:"session_id"`
	ProtocolVersion str    `json:"protocol_version"`
	Client          str    `json:"client"`
	Server          str    `json:"server"`
	FirstSeen       ts     `json:"first_seen"`
	LastSeen        ts     `json:"last_seen"`
	StartSeen       bool   `json:"start_seen"`
	Requests        int    `json:"requests"`
	Events          int    `json:"events"`
	Streams         int    `json:"streams"`
	Resumes         int    `json:"resumes"`
	Violations      int    `json:"violations"`
	Ended           str    `json:"ended"`
	PreviousSession str    `json:"previous_session"`
	LinkConfidence  str    `json:"link_confidence"`
}

// Session implements detector.Sink.
func (w *Writer) Session(s *detector.SessionSummary) {
	w.write(sessionRecord{
		Type: TypeSession, SessionID: str(s.SessionID), ProtocolVersion: str(s.ProtocolVersion),
		Client: str(s.Client), Server: str(s.Server), FirstSeen: ts(s.FirstSeen), LastSeen: ts(s.LastSeen),
		StartSeen: s.StartSeen, Requests: s.Requests, Events: s.Events, Streams: s.Streams, Resumes: s.Resumes,
		Violations: s.Violations, Ended: str(s.Ended), PreviousSession: str(s.PreviousSession),
		LinkConfidence: str(s.LinkConfidence),
	})
}

type unknownOutcomeRecord struct {
	Type              string `json:"type"`
	ID                str    `json:"id"`
	Time              ts     `json:"time"`
	SessionID         str    `json:"session_id"`
	JSONRPCID         str    `json:"jsonrpc_id"`
	Method            str    `json:"method"`
	Tool              str    `json:"tool"`
	ArgsHash          str    `json:"args_hash"`
	CalledAt          ts     `json:"called_at"`
	Client            str    `json:"client"`
	Server            str    `json:"server"`
	Reason            str    `json:"reason"`
	ReissuedInSession str    `json:"reissued_in_session"`
}

// UnknownOutcome implements detector.Sink.
func (w *Writer) UnknownOutcome(u *detector.UnknownOutcome) {
	w.write(unknownOutcomeRecord{
		Type: TypeUnknownOutcome, ID: str(u.ID), Time: ts(u.Time), SessionID: str(u.SessionID),
		JSONRPCID: str(u.JSONRPCID), Method: str(u.Method), Tool: str(u.Tool), ArgsHash: str(u.ArgsHash),
		CalledAt: ts(u.CalledAt), Client: str(u.Client), Server: str(u.Server), Reason: str(u.Reason),
		ReissuedInSession: str(u.ReissuedInSession),
	})
}

type unverifiableRecord struct {
	Type      string `json:"type"`
	ID        str    `json:"id"`
	Time      ts     `json:"time"`
	SessionID str    `json:"session_id"`
	Client    str    `json:"client"`
	Server    str    `json:"server"`
	Check     str    `json:"check"`
	Reason    str    `json:"reason"`
}

// Unverifiable implements detector.Sink.
func (w *Writer) Unverifiable(u *detector.Unverifiable) {
	w.write(unverifiableRecord{
		Type: TypeUnverifiable, ID: str(u.ID), Time: ts(u.Time), SessionID: str(u.SessionID),
		Client: str(u.Client), Server: str(u.Server), Check: str(u.Check), Reason: str(u.Reason),
	})
}

// Summary writes the closing summary line. s is any JSON-encodable value;
// the writer adds "type":"summary" in front of its fields.
func (w *Writer) Summary(s any) {
	b, err := json.Marshal(s)
	if err != nil {
		w.err = err
		return
	}
	if len(b) < 2 || b[0] != '{' {
		w.write(map[string]any{"type": TypeSummary, "value": json.RawMessage(b)})
		return
	}
	if w.err == nil {
		_, w.err = w.w.WriteString(`{"type":"summary"`)
	}
	if w.err == nil && len(b) > 2 {
		w.w.WriteByte(',')
	}
	if w.err == nil {
		_, w.err = w.w.Write(append(b[1:], '\n'))
	}
}
