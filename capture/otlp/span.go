// Reading spans: what one HTTP span or MCP span says, taken out of pdata so
// that nothing of the export request is held while a trace settles.

package otlp

import (
	"crypto/sha256"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/replaywatch/replaywatch/decode"
)

// Attribute keys read from spans: the OpenTelemetry HTTP and MCP semantic
// conventions, and replaywatch's own SSE span events (docs/otlp.md).
const (
	attrMethod          = "http.request.method"
	attrStatus          = "http.response.status_code"
	attrURLFull         = "url.full"
	attrURLPath         = "url.path"
	attrServerAddress   = "server.address"
	attrServerPort      = "server.port"
	attrClientAddress   = "client.address"
	attrClientPort      = "client.port"
	attrUserAgent       = "user_agent.original"
	attrReqSession      = "http.request.header.mcp-session-id"
	attrReqLastEventID  = "http.request.header.last-event-id"
	attrReqProtocol     = "http.request.header.mcp-protocol-version"
	attrRespSession     = "http.response.header.mcp-session-id"
	attrRespContentType = "http.response.header.content-type"
	attrRespBodySize    = "http.response.body.size"

	attrMCPMethod    = "mcp.method.name"
	attrMCPProtocol  = "mcp.protocol.version"
	attrRequestID    = "jsonrpc.request.id"
	attrToolName     = "gen_ai.tool.name"
	attrToolArgs     = "gen_ai.tool.call.arguments"
	attrParamsHash   = "mcp.request.params_hash"
	attrRPCStatus    = "rpc.response.status_code"
	attrMessageType  = "jsonrpc.message.type"
	attrSSERecorded  = "mcp.sse.recorded"
	attrEventID      = "mcp.sse.event.id"
	attrEventType    = "mcp.sse.event.type"
	attrEventSize    = "mcp.sse.event.data_size"
	attrEventHash    = "mcp.sse.event.data_hash"
	attrEventDone    = "mcp.sse.event.complete"
	attrProgressTok  = "mcp.progress.token"
	attrProgressVal  = "mcp.progress.value"
	attrProgressTot  = "mcp.progress.total"
	attrToolsRepeat  = "mcp.tools.repeatable"
	attrToolsDestroy = "mcp.tools.destructive"
	attrToolsPlain   = "mcp.tools.plain"
	attrUnknownSess  = "mcp.error.unknown_session"
	attrErrorType    = "error.type" // "tool_error": a result whose isError says the tool failed (MCP semconv)
	attrClientInfo   = "mcp.client.info"
	attrEndHow       = "mcp.sse.end.how"
	attrClientClosed = "mcp.sse.end.client_closed"

	eventSSE     = "mcp.sse.event"
	eventSSEEnd  = "mcp.sse.end"
	eventBodyMsg = "mcp.response.message"
)

// spanKey names a span across traces.
type spanKey struct {
	trace pcommon.TraceID
	span  pcommon.SpanID
}

// rpcRequest is the JSON-RPC request an HTTP request carried, from the
// span itself or from its MCP span.
type rpcRequest struct {
	method, id, tool string
	// identity is the call's identity hash; unknown, a value no other
	// call has.
	identity string
	// protocol is mcp.protocol.version. (mcp.session.id is not read: the
	// C# SDK sets it to a per-client GUID, not the Mcp-Session-Id header.)
	protocol      string
	clientInfo    string // "name/version"
	progressToken string
}

func (r rpcRequest) known() bool { return r.method != "" }

// sseEvent is one mcp.sse.event span event.
type sseEvent struct {
	at      time.Time
	id      string
	hasID   bool
	typ     string
	size    int
	hash    string
	partial bool
	msg     decode.Message
	hasMsg  bool
}

// httpSpan is what one HTTP span says about one exchange.
type httpSpan struct {
	key        spanKey
	parent     pcommon.SpanID
	links      []spanKey
	server     bool // a SERVER span (else CLIENT)
	start, end time.Time
	statusErr  bool

	method, path, host string
	serverAddr         netip.AddrPort
	clientAddr         netip.AddrPort
	userAgent          string
	status             int

	reqSession, lastEventID, protocol string
	hasReqSession, hasLastEventID     bool
	respSession, contentType          string
	hasRespSession                    bool

	rpc rpcRequest

	recorded  bool // the emitter records SSE events (mcp.sse.recorded)
	events    []sseEvent
	endHow    string // mcp.sse.end.how ("" none)
	endAt     time.Time
	cliClosed bool
	bodyMsgs  []decode.Message
	// emptyBody: http.response.body.size says the body held no byte, so
	// a 2xx without mcp.response.message hides nothing.
	emptyBody bool
}

// mcpLike says whether h shows it carried MCP: a session or protocol
// header, a cursor, a JSON-RPC request, or an event stream.
func (h *httpSpan) mcpLike() bool {
	return h.hasReqSession || h.hasRespSession || h.hasLastEventID || h.protocol != "" || h.rpc.known() || h.eventStream()
}

// eventStream says whether h's answer was a text/event-stream.
func (h *httpSpan) eventStream() bool {
	return strings.Contains(strings.ToLower(h.contentType), "text/event-stream")
}

// mcpSpan is an MCP span (mcp.method.name without HTTP attributes): the
// JSON-RPC request that one or more HTTP spans carried.
type mcpSpan struct {
	key    spanKey
	parent pcommon.SpanID
	links  []spanKey
	rpc    rpcRequest
}

// reader turns pdata spans into httpSpans and mcpSpans. It hashes
// arguments and event data hashes under the deployment key on arrival.
type reader struct {
	pk *decode.Peeker
}

// read classifies one span. ok is false for spans that are neither HTTP
// nor MCP (they are counted, never kept).
func (r *reader) read(res pcommon.Map, sp ptrace.Span) (h *httpSpan, m *mcpSpan) {
	attrs := sp.Attributes()
	key := spanKey{sp.TraceID(), sp.SpanID()}
	if _, ok := attrs.Get(attrMethod); !ok {
		if v, ok := attrs.Get(attrMCPMethod); ok && v.Str() != "" {
			return nil, &mcpSpan{key: key, parent: sp.ParentSpanID(), links: links(sp), rpc: r.rpcOf(attrs, key)}
		}
		return nil, nil
	}
	if sp.DroppedAttributesCount() > 0 {
		// An attribute limit dropped some: a header that is absent may
		// have been dropped, and absent means "not sent" here.
		return nil, nil
	}
	h = &httpSpan{
		key: key, parent: sp.ParentSpanID(), links: links(sp),
		server: sp.Kind() == ptrace.SpanKindServer,
		start:  sp.StartTimestamp().AsTime(), end: sp.EndTimestamp().AsTime(),
		statusErr: sp.Status().Code() == ptrace.StatusCodeError,
		method:    strings.ToUpper(keptStr(attrs, attrMethod)),
		userAgent: keptStr(attrs, attrUserAgent),
		status:    int(num(attrs, attrStatus)),
	}
	if h.end.Before(h.start) {
		h.end = h.start
	}
	r.readURL(h, attrs, res, key.trace)
	h.reqSession, h.hasReqSession = header(attrs, attrReqSession)
	h.lastEventID, h.hasLastEventID = header(attrs, attrReqLastEventID)
	h.protocol, _ = header(attrs, attrReqProtocol)
	h.respSession, h.hasRespSession = header(attrs, attrRespSession)
	h.contentType, _ = header(attrs, attrRespContentType)
	if v, ok := attrs.Get(attrSSERecorded); ok && v.Bool() {
		h.recorded = true
	}
	if v, ok := attrs.Get(attrRespBodySize); ok {
		n, err := strconv.ParseInt(v.AsString(), 10, 64)
		h.emptyBody = err == nil && n == 0
	}
	if _, ok := attrs.Get(attrMCPMethod); ok {
		h.rpc = r.rpcOf(attrs, key)
	}
	if h.protocol == "" {
		h.protocol = h.rpc.protocol
	}
	r.readEvents(h, sp.Events())
	if sp.DroppedEventsCount() > 0 {
		// The SDK's span limits dropped events: the stream's record has
		// holes, so its content is unknown.
		h.recorded = false
	}
	return h, nil
}

// readURL fills the path, host and the two endpoints.
func (r *reader) readURL(h *httpSpan, attrs, res pcommon.Map, trace pcommon.TraceID) {
	host, port := str(attrs, attrServerAddress), int(num(attrs, attrServerPort))
	h.path = str(attrs, attrURLPath)
	if u, err := url.Parse(str(attrs, attrURLFull)); err == nil && u.Host != "" {
		if h.path == "" {
			h.path = u.EscapedPath()
		}
		if host == "" {
			host = u.Hostname()
		}
		if port == 0 {
			port, _ = strconv.Atoi(u.Port())
			if port == 0 && u.Scheme == "https" {
				port = 443
			} else if port == 0 {
				port = 80
			}
		}
	}
	if h.path == "" {
		h.path = "/"
	}
	h.path, host = decode.BoundID(h.path), decode.BoundID(host)
	h.host = host
	if port != 0 && host != "" {
		h.host = host + ":" + strconv.Itoa(port)
	}
	h.serverAddr = addrOf(host, port)
	if h.server {
		if a := str(attrs, attrClientAddress); a != "" {
			h.clientAddr = addrOf(a, int(num(attrs, attrClientPort)))
			return
		}
	}
	// A client span's client is the process that emitted it.
	h.clientAddr = netip.AddrPortFrom(resourceAddr(res, trace), 0)
}

// rpcOf reads the MCP request attributes.
func (r *reader) rpcOf(attrs pcommon.Map, key spanKey) rpcRequest {
	rq := rpcRequest{
		method: keptStr(attrs, attrMCPMethod), id: keptStr(attrs, attrRequestID), tool: keptStr(attrs, attrToolName),
		protocol:   keptStr(attrs, attrMCPProtocol),
		clientInfo: keptStr(attrs, attrClientInfo), progressToken: keptStr(attrs, attrProgressTok),
	}
	switch {
	case str(attrs, attrParamsHash) != "":
		rq.identity = r.pk.HashValue([]byte("params\x00" + rq.tool + "\x00" + str(attrs, attrParamsHash)))
	case str(attrs, attrToolArgs) != "":
		// Opt-in raw arguments: hashed here, never kept.
		rq.identity = r.pk.HashValue([]byte("arguments\x00" + rq.tool + "\x00" + r.pk.HashJSON([]byte(str(attrs, attrToolArgs)))))
	default:
		// Unknown identity: unique, so never taken for another call.
		rq.identity = "unknown:" + key.trace.String() + key.span.String()
	}
	return rq
}

// readEvents reads the SSE span events and the end of the stream.
func (r *reader) readEvents(h *httpSpan, evs ptrace.SpanEventSlice) {
	for i := 0; i < evs.Len(); i++ {
		ev := evs.At(i)
		a := ev.Attributes()
		switch ev.Name() {
		case eventSSE:
			e := sseEvent{at: ev.Timestamp().AsTime(), typ: keptStr(a, attrEventType), size: int(num(a, attrEventSize))}
			e.id, e.hasID = strOK(a, attrEventID)
			e.id = decode.BoundID(e.id)
			if v, ok := a.Get(attrEventDone); ok && v.Type() == pcommon.ValueTypeBool && !v.Bool() {
				e.partial = true
			}
			if hv := str(a, attrEventHash); hv != "" {
				e.hash = r.pk.HashValue([]byte(hv))[:16]
			}
			e.msg, e.hasMsg = messageOf(a)
			h.events = append(h.events, e)
		case eventSSEEnd:
			h.endHow, h.endAt = keptStr(a, attrEndHow), ev.Timestamp().AsTime()
			if v, ok := a.Get(attrClientClosed); ok && v.Bool() {
				h.cliClosed = true
			}
		case eventBodyMsg:
			if m, ok := messageOf(a); ok {
				h.bodyMsgs = append(h.bodyMsgs, m)
			}
		}
	}
}

// messageOf reads the JSON-RPC message a span event names.
func messageOf(a pcommon.Map) (decode.Message, bool) {
	var m decode.Message
	switch str(a, attrMessageType) {
	case "request":
		m.Type = decode.MsgRequest
	case "notification":
		m.Type = decode.MsgNotification
	case "response":
		m.Type = decode.MsgResponse
	case "error":
		m.Type = decode.MsgError
	default:
		return m, false
	}
	m.ID, m.Method = keptStr(a, attrRequestID), keptStr(a, attrMCPMethod)
	if m.Type == decode.MsgError {
		m.ErrorCode = int(num(a, attrRPCStatus))
		if v, ok := a.Get(attrUnknownSess); ok && v.Bool() {
			m.UnknownSession = true
		}
	}
	m.ToolError = m.Type == decode.MsgResponse && str(a, attrErrorType) == "tool_error"
	m.Tools = toolMarks(a)
	if tok := str(a, attrProgressTok); tok != "" {
		m.ProgressToken = tok
		m.Progress, m.HasProgress = numFloat(a, attrProgressVal)
		m.ProgressTotal, m.HasTotal = numFloat(a, attrProgressTot)
	}
	return m, true
}

// toolMarks is a tools/list answer's annotations as decode.Message.Tools
// spells them: a mark and a name per line.
func toolMarks(a pcommon.Map) string {
	var b strings.Builder
	n := 0
	for _, f := range [...]struct {
		key  string
		mark byte
	}{{attrToolsRepeat, decode.ToolRepeatable}, {attrToolsDestroy, decode.ToolDestructive}, {attrToolsPlain, decode.ToolPlain}} {
		v, ok := a.Get(f.key)
		if !ok || v.Type() != pcommon.ValueTypeSlice {
			continue
		}
		for i := 0; i < v.Slice().Len() && n < decode.MaxAnnotatedTools; i++ {
			b.WriteByte(f.mark)
			b.WriteString(decode.BoundID(v.Slice().At(i).AsString()))
			b.WriteByte('\n')
			n++
		}
	}
	return b.String()
}

func links(sp ptrace.Span) []spanKey {
	ls := sp.Links()
	if ls.Len() == 0 {
		return nil
	}
	out := make([]spanKey, 0, ls.Len())
	for i := 0; i < ls.Len(); i++ {
		out = append(out, spanKey{ls.At(i).TraceID(), ls.At(i).SpanID()})
	}
	return out
}

// str reads a string attribute (any scalar as text).
// keptStr is str for a value a buffered span keeps: bounded as the packet
// path bounds ids (decode.BoundID: at most MaxIDBytes whole, else a short
// form), so that a settling trace holds a bounded number of bytes however
// long the attributes an exporter sends.
func keptStr(a pcommon.Map, k string) string { return decode.BoundID(str(a, k)) }

func str(a pcommon.Map, k string) string {
	s, _ := strOK(a, k)
	return s
}

func strOK(a pcommon.Map, k string) (string, bool) {
	v, ok := a.Get(k)
	if !ok {
		return "", false
	}
	if v.Type() == pcommon.ValueTypeStr {
		return v.Str(), true
	}
	return v.AsString(), true
}

// numFloat reads a number attribute, given as a double or an int.
func numFloat(a pcommon.Map, k string) (float64, bool) {
	v, ok := a.Get(k)
	if !ok {
		return 0, false
	}
	if v.Type() == pcommon.ValueTypeInt {
		return float64(v.Int()), true
	}
	return v.Double(), true
}

// num reads an integer attribute, given as an int or as text.
func num(a pcommon.Map, k string) int64 {
	v, ok := a.Get(k)
	if !ok {
		return 0
	}
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int()
	case pcommon.ValueTypeDouble:
		return int64(v.Double())
	case pcommon.ValueTypeStr:
		n, _ := strconv.ParseInt(v.Str(), 10, 64)
		return n
	}
	return 0
}

// header reads a captured header attribute: a string array by the
// conventions (the first value, as a server reads a single-valued header),
// or a plain string. Absent means the header was not captured or not sent.
func header(a pcommon.Map, k string) (string, bool) {
	v, ok := a.Get(k)
	if !ok {
		return "", false
	}
	if v.Type() == pcommon.ValueTypeSlice {
		s := v.Slice()
		if s.Len() == 0 {
			return "", false
		}
		return decode.BoundID(s.At(0).AsString()), true
	}
	return decode.BoundID(v.AsString()), true
}

// addrOf is host:port as an address: the IP when host is one, else a
// stable synthetic address standing for the name (a hostname in a span is
// not resolved: what it meant when the span was made is unknown).
func addrOf(host string, port int) netip.AddrPort {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return netip.AddrPortFrom(a.Unmap(), uint16(port))
	}
	return netip.AddrPortFrom(synthetic("host", host), uint16(port))
}

// instanceAttrs tell one process of a service from another, most specific
// first; service.name alone does not (every replica of a deployment shares
// it, and the SDKs' default resource carries nothing more).
var instanceAttrs = []string{"service.instance.id", "k8s.pod.uid", "host.name", "process.pid"}

// resourceAddr stands for the process a client span came from: the client
// of every exchange it made, as an address keys a client on the wire. A
// resource that names no instance says nothing of which process sent the
// span: each trace is then a client of its own, so that two replicas are
// never taken for one client re-making another's call.
func resourceAddr(res pcommon.Map, trace pcommon.TraceID) netip.Addr {
	var b strings.Builder
	for _, k := range instanceAttrs {
		if v, ok := res.Get(k); ok {
			b.WriteString(k + "=" + v.AsString() + "\x00")
		}
	}
	if b.Len() == 0 {
		return synthetic("trace", string(trace[:]))
	}
	if v, ok := res.Get("service.name"); ok {
		b.WriteString("service.name=" + v.AsString() + "\x00")
	}
	return synthetic("process", b.String())
}

// synthetic is an address in the unique-local range fd00::/8 derived from
// a name: never a real peer's address, the same for the same name.
func synthetic(kind, name string) netip.Addr {
	sum := sha256.Sum256([]byte(kind + "\x00" + name))
	var a [16]byte
	a[0] = 0xfd
	copy(a[1:], sum[:15])
	return netip.AddrFrom16(a)
}
