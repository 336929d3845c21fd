package guard

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/replaywatch/replaywatch/decode"
)

// tracerName is the instrumentation scope of the guard's spans.
const tracerName = "github.com/replaywatch/replaywatch/guard"

// The headers a span carries (docs/otlp.md), by their lower-case names as
// the HTTP conventions spell header attributes.
var (
	spanRequestHeaders  = []string{"mcp-session-id", "last-event-id", "mcp-protocol-version"}
	spanResponseHeaders = []string{"mcp-session-id", "content-type"}
)

// span is one round trip's HTTP CLIENT span, in the shape replaywatch's
// OTLP input reads (docs/otlp.md). A nil *span is a Transport without a
// TracerProvider: every method is then a no-op, so the guard costs nothing
// more.
type span struct {
	trace.Span
	ctx context.Context // the request's: done means the caller gave up
	// attrs is scratch for an event's attributes (the SDK copies them),
	// used under the body's lock.
	attrs []attribute.KeyValue
}

// startSpan starts the span of req, a child of the span in req's context;
// nil without a TracerProvider.
func (t *Transport) startSpan(req *http.Request) *span {
	if t.TracerProvider == nil {
		return nil
	}
	u := req.URL
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		attribute.String("http.request.method", req.Method),
		attribute.String("url.full", redactedURL(u)),
		attribute.String("server.address", u.Hostname()),
		attribute.Int("server.port", urlPort(u)))
	if ua := req.Header.Get("User-Agent"); ua != "" {
		attrs = append(attrs, attribute.String("user_agent.original", ua))
	}
	attrs = headerAttrs(attrs, "http.request.header.", req.Header, spanRequestHeaders)
	_, s := t.TracerProvider.Tracer(tracerName).Start(req.Context(), req.Method,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return &span{Span: s, ctx: req.Context()}
}

// headerAttrs appends each of names that h carries as a string array
// (the HTTP conventions' form). A header not sent is left out, not given
// as an empty array: replaywatch's reader takes the two alike.
func headerAttrs(attrs []attribute.KeyValue, prefix string, h http.Header, names []string) []attribute.KeyValue {
	for _, name := range names {
		if v := h.Values(name); len(v) > 0 {
			attrs = append(attrs, attribute.StringSlice(prefix+name, v))
		}
	}
	return attrs
}

// redactedURL is u for url.full, its credentials redacted as the HTTP
// conventions require.
func redactedURL(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = url.UserPassword("REDACTED", "REDACTED")
	return c.String()
}

func urlPort(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// request records the JSON-RPC request or notification the POST carried:
// a single message only (a batch has no one method to name).
func (s *span) request(msgs []decode.Message, batch bool) {
	if s == nil || batch || len(msgs) != 1 {
		return
	}
	m := &msgs[0]
	if m.Type != decode.MsgRequest && m.Type != decode.MsgNotification {
		return
	}
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", m.Method)}
	if m.ID != "" {
		attrs = append(attrs, attribute.String("jsonrpc.request.id", m.ID))
	}
	if m.Tool != "" {
		attrs = append(attrs, attribute.String("gen_ai.tool.name", m.Tool))
	}
	if m.ParamsHash != "" {
		// The guard's own call identity (canonical params without _meta,
		// unkeyed SHA-256): equal for the same call however it was sent.
		attrs = append(attrs, attribute.String("mcp.request.params_hash", m.ParamsHash))
	}
	if m.ProgressToken != "" {
		attrs = append(attrs, attribute.String("mcp.progress.token", m.ProgressToken))
	}
	if m.ClientInfo != "" {
		attrs = append(attrs, attribute.String("mcp.client.info", m.ClientInfo))
	}
	if m.ProtocolVersion != "" {
		attrs = append(attrs, attribute.String("mcp.protocol.version", m.ProtocolVersion))
	}
	s.SetAttributes(attrs...)
}

// response records the response head.
func (s *span) response(resp *http.Response) {
	if s == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", resp.StatusCode)}
	s.SetAttributes(headerAttrs(attrs, "http.response.header.", resp.Header, spanResponseHeaders)...)
	if resp.StatusCode >= 400 {
		s.SetStatus(codes.Error, "") // the HTTP conventions, for a client span
	}
}

// recordSSE marks the span as one whose stream's events are recorded, so
// that a stream without mcp.sse.event is known to have been empty.
func (s *span) recordSSE() {
	if s != nil {
		s.SetAttributes(attribute.Bool("mcp.sse.recorded", true))
	}
}

// refused records a refusal (also in ObserveOnly mode, where it is the
// refusal the guard would have made).
func (s *span) refused(err error) {
	if s != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
}

// fail ends the span of a round trip that got no response.
func (s *span) fail(err error) {
	if s != nil {
		s.refused(err)
		s.End()
	}
}

// end ends the span of a response whose body nobody reads.
func (s *span) end() {
	if s != nil {
		s.End()
	}
}

// bodySize records the size of a response body known whole (0 for a
// response without one): a reader then knows an empty body hid no message.
func (s *span) bodySize(n int64) {
	if s != nil {
		s.SetAttributes(attribute.Int64("http.response.body.size", n))
	}
}

// event records one dispatched SSE event and the message it carried.
func (s *span) event(e *decode.SSEEvent, msgs []decode.Message) {
	if s == nil {
		return
	}
	attrs := s.attrs[:0]
	if e.HasID {
		attrs = append(attrs, attribute.String("mcp.sse.event.id", e.ID))
	}
	if e.Type != "" && e.Type != "message" {
		attrs = append(attrs, attribute.String("mcp.sse.event.type", e.Type))
	}
	var h [8]byte
	binary.BigEndian.PutUint64(h[:], e.DataHash)
	attrs = append(attrs,
		attribute.Int("mcp.sse.event.data_size", e.DataBytes),
		attribute.String("mcp.sse.event.data_hash", hex.EncodeToString(h[:])))
	if len(msgs) == 1 && msgs[0].Type != decode.MsgInvalid {
		m := &msgs[0]
		attrs = messageAttrs(attrs, m)
		if m.Method != "" {
			attrs = append(attrs, attribute.String("mcp.method.name", m.Method))
		}
		if m.ProgressToken != "" {
			attrs = append(attrs, attribute.String("mcp.progress.token", m.ProgressToken))
		}
		if m.HasProgress {
			attrs = append(attrs, attribute.Float64("mcp.progress.value", m.Progress))
		}
		if m.HasTotal {
			attrs = append(attrs, attribute.Float64("mcp.progress.total", m.ProgressTotal))
		}
	}
	s.AddEvent("mcp.sse.event", trace.WithAttributes(attrs...))
	s.attrs = attrs[:0]
}

// messageAttrs appends a message's type, id, error code and tool error.
func messageAttrs(attrs []attribute.KeyValue, m *decode.Message) []attribute.KeyValue {
	attrs = append(attrs, attribute.String("jsonrpc.message.type", m.Type.String()))
	if m.ID != "" {
		attrs = append(attrs, attribute.String("jsonrpc.request.id", m.ID))
	}
	if m.Type == decode.MsgError {
		// A string, as the RPC conventions have it ("-32602").
		attrs = append(attrs, attribute.String("rpc.response.status_code", strconv.Itoa(m.ErrorCode)))
		if m.UnknownSession {
			attrs = append(attrs, attribute.Bool("mcp.error.unknown_session", true))
		}
	}
	if m.ToolError {
		// The MCP semantic conventions' mark of a failed tool call.
		attrs = append(attrs, attribute.String("error.type", "tool_error"))
	}
	if m.Tools != "" {
		attrs = append(attrs, toolAttrs(m.Tools)...)
	}
	return attrs
}

// toolAttrs spells a tools/list answer's annotations (decode's
// Message.Tools: a mark and a name per line) as docs/otlp.md's three
// name lists, so a receiver can tell a read-only re-call from a
// destructive one.
func toolAttrs(tools string) []attribute.KeyValue {
	var repeatable, destructive, plain []string
	for line := range strings.SplitSeq(tools, "\n") {
		if line == "" {
			continue
		}
		switch line[0] {
		case decode.ToolRepeatable:
			repeatable = append(repeatable, line[1:])
		case decode.ToolDestructive:
			destructive = append(destructive, line[1:])
		default:
			plain = append(plain, line[1:])
		}
	}
	var attrs []attribute.KeyValue
	for _, l := range []struct {
		key   string
		names []string
	}{{"mcp.tools.repeatable", repeatable}, {"mcp.tools.destructive", destructive}, {"mcp.tools.plain", plain}} {
		if len(l.names) > 0 {
			attrs = append(attrs, attribute.StringSlice(l.key, l.names))
		}
	}
	return attrs
}

// finish records how the body ended and ends the span. dec is the
// stream's decoder (nil for a JSON body, whose messages are msgs, and whose
// size is known, or -1, when it was read whole: an empty one shows a
// reader that the span hides nothing); err is the read's (io.EOF at the
// end, nil at Close or a refusal); closed says the client gave the body up
// before its end.
func (s *span) finish(dec *decode.SSEDecoder, msgs []decode.Message, size int64, err error, closed bool) {
	if s == nil {
		return
	}
	readErr := err != nil && err != io.EOF
	if readErr && s.ctx.Err() != nil {
		closed = true // the caller cancelled the request: it gave the stream up
	}
	if dec == nil {
		if size >= 0 {
			s.bodySize(size)
		}
		for i := range msgs {
			if msgs[i].Type != decode.MsgInvalid {
				s.AddEvent("mcp.response.message", trace.WithAttributes(messageAttrs(nil, &msgs[i])...))
			}
		}
		s.End()
		return
	}
	how := "clean"
	switch {
	case dec.MidEvent():
		how = "truncated"
		// An event whose id line arrived: a client may resume from it
		// (a cursor it never got whole), so its id is evidence.
		if id, ok := dec.PartialID(); ok {
			s.AddEvent("mcp.sse.event", trace.WithAttributes(
				attribute.String("mcp.sse.event.id", id), attribute.Bool("mcp.sse.event.complete", false)))
		}
	case readErr && !closed && errors.Is(err, syscall.ECONNRESET):
		how = "reset"
		// A read error at an event boundary otherwise (a FIN without the
		// chunked terminator) is "clean", as the packet decoder says: no
		// event was cut.
	}
	s.AddEvent("mcp.sse.end", trace.WithAttributes(
		attribute.String("mcp.sse.end.how", how), attribute.Bool("mcp.sse.end.client_closed", closed)))
	s.End()
}
