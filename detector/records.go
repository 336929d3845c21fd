package detector

import "time"

// Severity of a violation.
type Severity string

const (
	SeverityCritical Severity = "critical"
	SeverityHigh     Severity = "high"
	SeverityMedium   Severity = "medium"
)

// Kind names a violation; the values are the catalogue's names exactly
// (docs/catalogue.md) and are part of the output contract.
type Kind string

const (
	KindSessionSwap                 Kind = "session_swap"
	KindReplayedEvent               Kind = "replayed_event"
	KindCrossStreamReplay           Kind = "cross_stream_replay"
	KindDuplicateDelivery           Kind = "duplicate_delivery"
	KindUnknownLastEventIDAccepted  Kind = "unknown_last_event_id_accepted"
	KindEventIDReset                Kind = "event_id_reset"
	KindTruncatedResume             Kind = "truncated_resume"
	KindSilentReinitAfter404        Kind = "silent_reinit_after_404"
	KindIncompleteReplay            Kind = "incomplete_replay"
	KindUnresumableClose            Kind = "unresumable_close"
	KindProgressReplay              Kind = "progress_replay"
	KindResumeOnSessionlessRevision Kind = "resume_on_sessionless_revision"
	KindReissuedCallAfterBreak      Kind = "reissued_call_after_break"
	KindUnknownSessionNot404        Kind = "unknown_session_not_404"
	KindCursorDropped               Kind = "cursor_dropped"
)

// Evidence is one fact a finding rests on, as seen on the wire.
type Evidence struct {
	Time     time.Time `json:"time"`
	Conn     string    `json:"connection"` // "client->server"
	Exchange int       `json:"exchange"`   // HTTP exchange on that connection (1-based)
	// What was seen, e.g. "response header", "sse event", "request".
	What string `json:"what"`
	// Detail in plain words with the header values or event ids involved,
	// e.g. `Mcp-Session-Id: S2` or `event id 3_5 (position 5 on stream 3)`.
	Detail string `json:"detail"`
}

// Violation is one breach of the resume contract.
type Violation struct {
	ID              string // deterministic: hash of kind and evidence (see findingID)
	Kind            Kind
	Severity        Severity
	Time            time.Time
	SessionID       string
	NewSessionID    string
	LastEventID     string
	FirstEventID    string
	StreamID        string
	ProtocolVersion string
	Client          string // ip:port
	Server          string // ip:port
	JSONRPCIDs      []string
	Tool            string
	Explanation     string
	Evidence        []Evidence
	// Confidence is set where the finding rests on an inference, linking a
	// client across sessions: "certain" (the 404's TCP connection and the
	// same clientInfo or Authorization), "high" or "medium" (the address and
	// what little else the wire offers); the explanation names the evidence.
	// Empty where no link is inferred: a swap is seen on one exchange (its
	// new session's record says "same exchange").
	Confidence string
	// Source is the input the record came from: "pcap", "live" or "otlp"
	// (set by the pipeline, not by the detector).
	Source string
}

// ResumeOutcome is how one resume attempt ended.
type ResumeOutcome string

const (
	ResumeResumed      ResumeOutcome = "resumed"
	ResumeRejected404  ResumeOutcome = "rejected_404"
	ResumeRejected4xx  ResumeOutcome = "rejected_4xx"
	ResumeViolated     ResumeOutcome = "violated"
	ResumeUnverifiable ResumeOutcome = "unverifiable"
)

// ResumeAttempt is one request carrying Last-Event-ID and what came of it.
type ResumeAttempt struct {
	ID              string
	Time            time.Time
	SessionID       string
	ResponseSession string // Mcp-Session-Id on the response, if any
	LastEventID     string
	FirstEventID    string // first non-priming event id delivered on the resumed stream
	StreamID        string
	Status          int
	Outcome         ResumeOutcome
	Reason          string // why, in plain words (also for unverifiable)
	ProtocolVersion string
	Client          string
	Server          string
	Replayed        int // events delivered on the resumed stream
	ViolationIDs    []string
	// Source is the input the record came from: "pcap", "live" or "otlp"
	// (set by the pipeline, not by the detector).
	Source string
}

// SessionSummary is one session's lifecycle, emitted when it ends (404,
// DELETE, expiry, end of capture).
type SessionSummary struct {
	SessionID       string
	ProtocolVersion string
	Client          string
	Server          string
	FirstSeen       time.Time
	LastSeen        time.Time
	// StartSeen is true when the initialize exchange was captured.
	StartSeen  bool
	Requests   int
	Events     int
	Streams    int
	Resumes    int
	Violations int
	// Ended is how it ended: "deleted", "404", "expired", "capture_end".
	Ended string
	// PreviousSession links a session the same client opened after this one
	// got 404 (or before it), with LinkConfidence.
	PreviousSession string
	LinkConfidence  string
	// Source is the input the record came from: "pcap", "live" or "otlp"
	// (set by the pipeline, not by the detector).
	Source string
}

// UnknownCancelledPrefix begins the Reason of an UnknownOutcome whose call
// the client cancelled (notifications/cancelled) before any response, with
// its stream open or closing it first: a client's time-out, not a loss on
// the server's side, which alerts leave out. A cancellation sent more than
// a second after the stream broke under the call does not make one.
const UnknownCancelledPrefix = "the client cancelled the call; "

// UnknownOutcome is a tools/call that was in flight when its
// session was lost: the client cannot know whether it ran.
type UnknownOutcome struct {
	ID        string
	Time      time.Time // when the session was lost
	SessionID string
	JSONRPCID string
	Method    string
	Tool      string
	ArgsHash  string
	// Arguments is the call's arguments as JSON text, only when the
	// operator opted in to keeping them (decode.Config.KeepToolArguments);
	// "" otherwise.
	Arguments string
	CalledAt  time.Time
	Client    string
	Server    string
	Reason    string
	// Reissued is set when the same call was seen again on a later session.
	ReissuedInSession string
	// Source is the input the record came from: "pcap", "live" or "otlp"
	// (set by the pipeline, not by the detector).
	Source string
}

// Unverifiable is a place where the capture cannot prove either way (lost
// bytes, a session whose start was not captured, a limit hit). It is never a
// violation.
type Unverifiable struct {
	ID        string
	Time      time.Time
	SessionID string
	Client    string
	Server    string
	Reason    string
	// Check names what could not be verified, e.g. "resume", "event order".
	Check string
	// Source is the input the record came from: "pcap", "live" or "otlp"
	// (set by the pipeline, not by the detector).
	Source string
}

// Sink receives the detector's output. Calls come from one goroutine.
type Sink interface {
	Violation(*Violation)
	Resume(*ResumeAttempt)
	Session(*SessionSummary)
	UnknownOutcome(*UnknownOutcome)
	Unverifiable(*Unverifiable)
}

// StreamEvent is one SSE event delivered on a session's stream: the
// session's timeline, event by event. Only sinks that implement EventSink get
// them (the ClickHouse sink's stream_events table); the payload is kept as a
// hash only.
type StreamEvent struct {
	// ID is deterministic: the session, the event id and which delivery of
	// it this is; for an event without an id (or beyond the event index),
	// the session, the ordinal of its exchange in the session and its
	// index in the response. The same capture always gives the same ids.
	ID        string
	Time      time.Time
	SessionID string
	StreamID  string // the detector's name for the logical stream ("" unknown)
	EventID   string
	// Position is the event's place on its stream at first delivery; -1
	// when it has no id or was not indexed.
	Position int32
	// Delivery is 1 for the first delivery of this id in the session, 2
	// and on for replays and duplicates.
	Delivery  int
	Resumed   bool // on a stream opened with Last-Event-ID
	Priming   bool // an empty event that only sets the id
	Method    string
	JSONRPCID string // of the first message; "" when none
	Messages  int
	DataBytes int
	DataHash  string
	Client    string
	Server    string
	// Source is the input the record came from: "pcap", "live" or "otlp"
	// (set by the pipeline, not by the detector).
	Source string
}

// EventSink is a Sink that also takes every SSE event of every tracked
// session. Calls come from the detector's goroutine.
type EventSink interface {
	StreamEvent(*StreamEvent)
}

// Inputs a record can come from (its Source).
const (
	SourcePcap = "pcap" // capture files (analyze)
	SourceLive = "live" // live packet capture (agent)
	SourceOTLP = "otlp" // OpenTelemetry spans
)
