// Package decode turns reassembled TCP byte streams into ordered MCP
// observations: HTTP/1.1 exchanges, SSE events and the JSON-RPC messages they
// carry. It knows nothing about packets (capture feeds it through the
// StreamFactory and TCPStream interfaces below) and nothing about what the
// observations mean (that is the detector's job).
package decode

import (
	"fmt"
	"net/netip"
	"time"
)

// ConnMeta describes one TCP connection as capture saw it.
//
// A is the endpoint that sent the SYN or, when the handshake was not captured,
// the sender of the first packet seen. Which side is the HTTP client is decided
// by the decoder from content (a request line versus a status line), not from A.
type ConnMeta struct {
	// ID is unique within one run and increases in order of first packet.
	ID     uint64
	A, B   netip.AddrPort
	Start  time.Time
	SawSYN bool // the handshake was captured: the connection's start is known
	// PickedUpAfter names the capture limit ("capture.IdleTimeout",
	// "capture.MaxConnections") that had made capture stop following the
	// connection while it was open; it picks it up again here, A still
	// its client. What the decoder skips to find its place again was
	// carried on the wire and never read: the limit's gap in the evidence
	// (a connection first seen mid-stream because the capture began after
	// it leaves none: nothing before it was judged whole).
	PickedUpAfter string
}

// CloseReason says why capture stopped following a connection.
type CloseReason uint8

const (
	CloseFIN     CloseReason = iota // both sides sent FIN (or one FIN and capture ended)
	CloseReset                      // an RST was seen
	CloseIdle                       // no packet for the idle timeout; state flushed
	CloseEOF                        // the capture ended with the connection open
	CloseEvicted                    // a memory limit forced the connection out
)

func (r CloseReason) String() string {
	switch r {
	case CloseFIN:
		return "fin"
	case CloseReset:
		return "reset"
	case CloseIdle:
		return "idle"
	case CloseEOF:
		return "eof"
	case CloseEvicted:
		return "evicted"
	}
	return fmt.Sprintf("close(%d)", uint8(r))
}

// TCPStream receives one connection's reassembled bytes from capture, in order
// per direction. Calls for one connection are never concurrent.
type TCPStream interface {
	// Data delivers the next in-order bytes sent by A (fromA) or by B.
	// p is only valid during the call.
	Data(fromA bool, p []byte, ts time.Time)
	// Gap reports bytes the capture lost in one direction before the next
	// Data; lost is -1 when the amount is unknown.
	Gap(fromA bool, lost int, ts time.Time)
	// Fin reports a FIN from one side: no more data from it.
	Fin(fromA bool, ts time.Time)
	// Close is called exactly once, last: the stream may be reused for
	// another connection once it returns.
	Close(reason CloseReason, ts time.Time)
}

// StreamFactory creates TCPStreams. Capture gives each worker goroutine its
// own factory; a factory and its streams are used from that goroutine only.
type StreamFactory interface {
	NewStream(meta ConnMeta) TCPStream
	// Tick says capture time on this worker has reached now: every packet
	// stamped before now has been handed to its stream (modulo reassembly
	// buffering of out-of-order segments).
	Tick(now time.Time)
	// Done says this worker will deliver nothing more.
	Done()
}

// Conn names a TCP connection once its client side is known.
type Conn struct {
	ID     uint64
	Client netip.AddrPort
	Server netip.AddrPort
	// StartSeen is false when the capture began after the connection opened.
	StartSeen bool
}

func (c Conn) String() string {
	return fmt.Sprintf("#%d %s->%s", c.ID, c.Client, c.Server)
}

// Kind is the type of an Observation.
type Kind uint8

const (
	KindRequest  Kind = iota + 1 // a request: head and body, or as much of the body as came (BodyIncomplete)
	KindResponse                 // a response head
	KindEvent                    // one complete SSE event (its blank line arrived)
	KindBody                     // a complete non-SSE response body with JSON-RPC content
	KindEnd                      // a response ended (SSE stream or body), with how
	KindGap                      // the capture lost bytes on a connection
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	case KindEvent:
		return "event"
	case KindBody:
		return "body"
	case KindEnd:
		return "end"
	case KindGap:
		return "gap"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Observation is one thing seen on the wire, stamped with the capture time of
// the packet that completed it. Exactly one of the pointer fields matching
// Kind is set. Observations of one exchange arrive in order: Request, Response,
// Event..., Body, End.
type Observation struct {
	Kind Kind
	// Late is set when the merger delivered this observation after a newer
	// one (of another connection): it names the limit that let the newer
	// one out first. Checks whose evidence spans it cannot trust the order.
	Late Late
	// reusable: the observation is the first field of an event, body or
	// end observation from a free list, to go back once delivered
	// (Config.ReuseObservations, reuse.go).
	reusable bool
	Time     time.Time
	Conn     Conn
	// Exchange is the 1-based index of the HTTP exchange on the connection.
	// Requests and responses are paired in order (HTTP/1.1 pipelining).
	Exchange int

	Request  *Request  // KindRequest; also set on later kinds when the request was seen
	Response *Response // KindResponse; also set on Event, Body and End
	Event    *Event
	Body     *Body
	End      *End
	Gap      *Gap
}

// Request is an HTTP request head and what its body carried.
type Request struct {
	Method string
	// Path is the request target; its query string is replaced by a
	// marker with its length unless Config.KeepQueryStrings.
	Path string
	Host string
	// AbsoluteForm: the target was in absolute form (http://host/path),
	// as a client sends it to a forward proxy; Path is its path and Host
	// its authority.
	AbsoluteForm bool

	SessionID       string // Mcp-Session-Id; HasSessionID says whether the header was present
	HasSessionID    bool
	LastEventID     string // Last-Event-ID (any case)
	HasLastEventID  bool
	ProtocolVersion string // MCP-Protocol-Version
	ContentType     string
	Accept          string
	// UserAgent is the User-Agent header (client software, not a person:
	// kept to tell clients behind one address apart).
	UserAgent string
	// MCPMethod and MCPName are the Mcp-Method and Mcp-Name headers
	// (revision 2026-07-28: the body's method and tool or resource name,
	// for routers that do not parse bodies); "" when absent.
	MCPMethod, MCPName string
	// AuthHash is a hex keyed SHA-256 (Config.HashKey) of the Authorization header; "" when absent.
	// The value itself is never kept. Cookies are dropped entirely.
	AuthHash string

	Messages       []Message // JSON-RPC messages in the body (a batch gives several)
	Batch          bool      // the body was a JSON array
	BodyBytes      int64
	BodyIncomplete bool // the body was cut by a gap, a limit, the end of capture, or its answer (AnsweredEarly)
	// AnsweredEarly says the response head came before the body ended (a
	// server deciding on the head: a 404 for an unknown session, a 401, a
	// 413): the request was emitted then, with BodyIncomplete and no
	// Messages, so that the response pairs with it, and the rest of its
	// body was skipped.
	AnsweredEarly bool
	// MCP is true when this request is recognisably MCP: an Mcp-Session-Id or
	// MCP-Protocol-Version header, or a JSON-RPC 2.0 "initialize" request.
	MCP bool
	// HeadTruncated says the head outgrew MaxHeaderBytes: the fields hold
	// what arrived before the limit, the body was skipped (BodyIncomplete).
	HeadTruncated bool
	// BodyTruncated says the body outgrew MaxBodyBytes: it was counted, not
	// peeked (BodyIncomplete is set too), so Messages is empty and MCP
	// rests on the headers alone.
	BodyTruncated bool
	// ContentEncoding is the Content-Encoding header ("" when absent or
	// identity), after any Transfer-Encoding coding other than chunked.
	// gzip, x-gzip and deflate bodies are inflated and read.
	ContentEncoding string
	// EncodedUnread says the body was under a Content-Encoding the decoder
	// did not read (another coding, MaxInflatingBodies reached, or data
	// that would not inflate): counted and delimited only, so Messages is
	// empty and MCP rests on the headers alone.
	EncodedUnread bool
}

// Response is an HTTP response head.
type Response struct {
	Status          int
	SessionID       string
	HasSessionID    bool
	ContentType     string
	SSE             bool // Content-Type: text/event-stream
	ProtocolVersion string
	Chunked         bool
	ContentLength   int64 // -1 when absent
	// ContentEncoding is the Content-Encoding header ("" when absent or
	// identity), gzip from a compression middleware or proxy most often,
	// after any Transfer-Encoding coding other than chunked ("gzip" of
	// "gzip, chunked"). gzip, x-gzip and deflate bodies are inflated as
	// they arrive and read.
	ContentEncoding string
	// EncodedUnread says the body is under a Content-Encoding the decoder
	// does not read (br, zstd, a list of codings, or MaxInflatingBodies
	// reached): it is counted and delimited only, an SSE stream under it
	// dispatches no events and its End has no ids. A body whose inflating
	// fails partway ends with End.Limit EndNotInflated instead.
	EncodedUnread bool
	// HeadTruncated says the head outgrew MaxHeaderBytes: the fields hold
	// what arrived before the limit, and the response ends "truncated" at once
	// because its body cannot be delimited.
	HeadTruncated bool
	// PipelineOverflow says a request on this connection was forgotten
	// past MaxPipelinedRequests before this response came: it may answer
	// another request than Request (pairing is FIFO).
	PipelineOverflow bool
}

// Event is one SSE event, dispatched when its terminating blank line arrived.
type Event struct {
	Index     int    // 0-based position of this event in its stream
	ID        string // the id field's value; see HasID
	HasID     bool   // an id field was present (and had no NUL)
	Type      string // the event field; "" means "message"
	DataEmpty bool
	Retry     int // milliseconds; -1 when absent
	// Messages holds the JSON-RPC message(s) the data carried; empty when the
	// data was not JSON-RPC.
	Messages  []Message
	DataBytes int
	// DataHash is 16 hex digits of the data's XXH64, keyed under
	// Config.HashKey (the first 8 bytes of its HMAC; XXH64 itself without a
	// key): enough to compare payloads within a deployment, not to trust
	// against a forger.
	DataHash string

	// LastEventID is the stream's last-event-id buffer at dispatch (WHATWG):
	// the id a browser-style client would resume from. It differs from ID
	// when this event carried no id field.
	LastEventID string
	// DataTruncated says the data outgrew MaxEventBytes: DataBytes and
	// DataHash still cover all of it, Messages is empty.
	DataTruncated bool
	// LineDropped says a line of this event (or of an undispatched event
	// since the previous one) outgrew MaxSSELineBytes: a data line kept
	// flowing into the data, any other field (an id) was dropped.
	LineDropped bool
}

// Body is a complete non-SSE response body that held JSON-RPC.
type Body struct {
	Messages []Message
	Batch    bool
	Bytes    int64
}

// EndHow is how a response (stream or body) ended.
type EndHow uint8

const (
	EndClean     EndHow = iota + 1 // at an event boundary, with the length reached, the chunked terminator or FIN
	EndTruncated                   // the connection closed mid-event or mid-body
	EndReset                       // an RST ended it
	EndGap                         // the capture lost bytes inside it
	EndUnknown                     // the capture ended (or the connection was flushed) with the stream still open
)

func (h EndHow) String() string {
	switch h {
	case EndClean:
		return "clean"
	case EndTruncated:
		return "truncated"
	case EndReset:
		return "reset"
	case EndGap:
		return "gap"
	case EndUnknown:
		return "open"
	}
	return fmt.Sprintf("end(%d)", uint8(h))
}

// End closes a response.
type End struct {
	How    EndHow
	Events int // SSE events dispatched on this stream
	// PartialID is the id field of an event whose id line arrived but whose
	// blank line never did (the stream was cut mid-event); HasPartialID says
	// whether there was one.
	PartialID    string
	HasPartialID bool
	// CutMidEvent: the connection, not the body's own framing, ended inside
	// an event, so the rest of it was never seen: an id line may have
	// followed its data (SSE allows any order).
	CutMidEvent bool
	// ClientClosed is true when the client had already closed its side of
	// the connection (FIN) when the response ended: the client gave the
	// stream up, the server did not end it.
	ClientClosed bool
	// LastID is the last id (SSE last-event-id buffer) the stream set.
	LastID    string
	HasLastID bool
	// Limit names the decoder limit that cut or thinned this response
	// ("MaxHeaderBytes" for its head or trailer, "MaxChunkLineBytes",
	// "MaxBodyBytes" for a body not peeked, "MaxSSELineBytes" or
	// "MaxEventBytes" when a line or event of the stream outgrew them;
	// EndInflateRatio when the body inflated past maxInflateRatio, and
	// EndNotInflated, not a limit, when it would not inflate: the rest
	// of the body was not read); "" when none did. A response cut by a limit ends "truncated" without
	// the server having ended it.
	Limit string
}

// Late names the merger limit behind an observation delivered out of capture
// order (Observation.Late).
type Late uint8

const (
	NotLate                     Late = iota
	LateReorderWindow                // it reached the merger later than Config.ReorderWindow
	LateMaxBufferedObservations      // newer ones were released early at Config.MaxBufferedObservations
)

// String is the limit's Config field name ("" when not late).
func (l Late) String() string {
	switch l {
	case LateReorderWindow:
		return "ReorderWindow"
	case LateMaxBufferedObservations:
		return "MaxBufferedObservations"
	}
	return ""
}

// Gap reports bytes lost by the capture on a connection, or (Limit set) a
// connection the decoder stopped following because of a limit.
type Gap struct {
	FromClient bool
	Lost       int // -1 when unknown
	// Limit names the decoder limit that made the connection's later bytes
	// unreadable ("NonHTTPScanLimit": given up as not HTTP); "" for bytes
	// the capture lost. Such a gap is reported when the connection is given
	// up and again when it closes: whatever it carried in between is
	// unseen.
	Limit string
	// Ended: the connection given up for Limit closed (its first report
	// said it was given up).
	Ended bool
	// Momentary: the decoder let go of what it had buffered for Limit
	// (MaxBufferedBytes) and reads the connection on from its next start
	// line, as after a capture gap: only evidence up to now is touched.
	Momentary bool
	// RolesUnknown: the connection never showed which side is the client,
	// so Conn.Client and Conn.Server are ConnMeta.A and B, maybe reversed.
	RolesUnknown bool
	// Notice: an early word of the gap this connection reports next, at
	// ProvenAt. The capture proves bytes lost only when a later packet
	// shows the hole (the next segment, or the ACK of bytes never seen),
	// while the lost bytes may have been sent right after the
	// connection's previous packet, and what they caused may already be
	// on other connections: a server's progress for a call whose request
	// was lost, on its GET stream, before the ACK. A notice carries that
	// earlier time (at most half the reorder window back), so the merger
	// hands it over first. It only says the connection lost bytes from
	// FromClient's side; everything else is the gap's.
	Notice   bool
	ProvenAt time.Time
}

// MsgType classifies a JSON-RPC message.
type MsgType uint8

const (
	MsgRequest MsgType = iota + 1
	MsgNotification
	MsgResponse
	MsgError
	MsgInvalid // JSON but not JSON-RPC 2.0
)

func (t MsgType) String() string {
	switch t {
	case MsgRequest:
		return "request"
	case MsgNotification:
		return "notification"
	case MsgResponse:
		return "response"
	case MsgError:
		return "error"
	case MsgInvalid:
		return "invalid"
	}
	return fmt.Sprintf("msg(%d)", uint8(t))
}

// Message is what the pipeline keeps of one JSON-RPC message: its shape and
// hashes, never result values, and argument values only when
// Config.KeepToolArguments is set (Arguments).
type Message struct {
	Type   MsgType
	ID     string // the id as compact JSON text (`1`, `"abc"`; a string re-escaped minimally, so `"\u00e9"` and `"é"` are one id); "" when absent
	Method string
	// Tool is params.name of a tools/call request.
	Tool string
	// ParamsHash is a hex keyed SHA-256 (Config.HashKey) of the params in canonical JSON (object
	// keys sorted), without their top-level _meta (progress token, trace
	// context), so the same call hashes equal however it was spelled and
	// whatever per-request metadata rode along: a call's identity.
	// Requests only: a notification's params are never compared, so "".
	ParamsHash string
	// ProgressToken (compact JSON) and Progress of a notifications/progress,
	// or the _meta.progressToken of a request.
	ProgressToken string
	// CancelledID is params.requestId of a notifications/cancelled, as
	// compact JSON like ID: the request its sender gave up.
	CancelledID string
	Progress    float64
	// ProgressTotal is a notifications/progress's total, when HasTotal:
	// the scale its call counts on. Two values on different totals are
	// not one count (a second call's, perhaps, re-using the token).
	ProgressTotal float64
	HasProgress   bool
	HasTotal      bool
	// ArgumentsTruncated says Arguments was cut at MaxArgumentBytes. (It
	// precedes Arguments to fill HasProgress's padding: every byte of a
	// Message is in every event observation.)
	ArgumentsTruncated bool
	// UnknownSession: an error whose message says the session is not
	// known ("Session not found", "No valid session ID provided", an
	// invalid or expired session): the server's own word that the id is
	// dead. (In the same padding.)
	UnknownSession bool
	// CreatesTask: a result that is a task (the tasks extension's
	// CreateTaskResult, {"task":{"taskId":...}}): the call runs on, to be
	// polled, not re-issued. (In the same padding.)
	CreatesTask bool
	// ToolError: a result with "isError": true, a tool reporting that it
	// failed (CallToolResult): to the client, a call to try again, as a
	// JSON-RPC error is. (In the same padding.)
	ToolError bool
	// Arguments is params.arguments of a tools/call request as JSON text:
	// as sent, without insignificant whitespace (escapes, key order and
	// numbers unchanged), cut to Config.MaxArgumentBytes at a UTF-8
	// boundary (a cut text is a prefix, not JSON to parse). It is not
	// re-encoded, so it is valid UTF-8 only if the sender's bytes were.
	// Only with Config.KeepToolArguments; "" without it, for other
	// messages and when arguments is absent (present but null gives
	// "null").
	Arguments string
	// ProtocolVersion from initialize params (request) or result (response),
	// or a request's params._meta "io.modelcontextprotocol/protocolVersion".
	ProtocolVersion string
	// ClientInfo is an initialize request's params.clientInfo, or (2026-07-28,
	// on every request) its params._meta "io.modelcontextprotocol/clientInfo",
	// as "name/version": which client software sent it.
	ClientInfo string
	ErrorCode  int
	ResultHash string // hex keyed SHA-256 (Config.HashKey) of the result in canonical JSON
	// Tools lists the tools of a tools/list result, one per line, each
	// name after a mark of its annotations: ToolRepeatable (readOnlyHint or
	// idempotentHint true: a re-issue is no corruption), ToolDestructive
	// (destructiveHint true, not read-only) or ToolPlain; at most
	// MaxAnnotatedTools. A string, so Message stays comparable (and no
	// larger). Responses only.
	Tools string
}

// Marks of a tool's annotations in Message.Tools.
const (
	ToolRepeatable  = 'r'
	ToolDestructive = 'd'
	ToolPlain       = '-'
)

// MaxAnnotatedTools bounds Message.Tools per tools/list result.
const MaxAnnotatedTools = 256
