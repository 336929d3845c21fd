// Package spanproj projects a packet capture onto the OpenTelemetry spans
// an instrumented client would have exported for the same traffic: one
// CLIENT span per HTTP exchange, shaped as a given emitter shapes them.
// Tests use it to hold the OTLP path to the packet path on every fixture
// (the OTLP path may see less, never more), and benchmarks to make spans.
package spanproj

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
)

// Shape is how much of an exchange an emitter puts in its span.
type Shape int

const (
	// Guard: everything replaywatch's guard records: headers, the
	// JSON-RPC request, every SSE event and how the stream ended
	// (docs/otlp.md's span events).
	Guard Shape = iota
	// Headers: an HTTP client instrumentation with the MCP headers
	// captured and nothing of the bodies (otelhttp with header capture).
	Headers
	// ServerHeaders: the same on the server's side (a SERVER span with the
	// peer's client.address and client.port, url.path instead of url.full),
	// as a server or eBPF instrumentation shapes it.
	ServerHeaders
)

func (s Shape) String() string {
	switch s {
	case Headers:
		return "headers"
	case ServerHeaders:
		return "server-headers"
	}
	return "guard"
}

type exKey struct {
	conn uint64
	ex   int
}

// exchange is one HTTP exchange being gathered.
type exchange struct {
	first              int // order of its first observation
	conn               decode.Conn
	req                *decode.Request
	resp               *decode.Response
	start, respAt, end time.Time
	events             []*decode.Observation
	bodyMsgs           []decode.Message
	endObs             *decode.End
	gap                bool
}

// Projector gathers observations into exchanges. Not safe for concurrent use.
type Projector struct {
	// Seed makes the span ids of this projection differ from another's
	// (FromPcap seeds with the file names).
	Seed  string
	shape Shape
	exs   map[exKey]*exchange
	n     int
	gaps  map[uint64]bool // connections with a capture gap
}

// New returns a projector for shape.
func New(shape Shape) *Projector {
	return &Projector{shape: shape, exs: map[exKey]*exchange{}, gaps: map[uint64]bool{}}
}

// Observe takes one observation from the decoder.
func (p *Projector) Observe(o *decode.Observation) {
	if o.Kind == decode.KindGap {
		p.gaps[o.Conn.ID] = true
		for k, ex := range p.exs {
			if k.conn == o.Conn.ID && ex.endObs == nil {
				ex.gap = true
			}
		}
		return
	}
	k := exKey{o.Conn.ID, o.Exchange}
	ex := p.exs[k]
	if ex == nil {
		p.n++
		ex = &exchange{first: p.n, conn: o.Conn, start: o.Time}
		p.exs[k] = ex
	}
	if o.Request != nil && ex.req == nil {
		ex.req = o.Request
	}
	switch o.Kind {
	case decode.KindResponse:
		ex.resp, ex.respAt = o.Response, o.Time
	case decode.KindEvent:
		ex.events = append(ex.events, o)
	case decode.KindBody:
		ex.bodyMsgs = append(ex.bodyMsgs, o.Body.Messages...)
	case decode.KindEnd:
		ex.endObs, ex.end = o.End, o.Time
	}
	if o.Response != nil && ex.resp == nil {
		ex.resp = o.Response
	}
}

// Traces is one span per exchange whose request and response were both
// seen, each in a trace of its own, in order of their end (as exporters
// send them).
func (p *Projector) Traces() ptrace.Traces {
	var exs []*exchange
	for _, ex := range p.exs {
		if ex.req != nil && ex.resp != nil && ex.req.MCP {
			if ex.end.IsZero() {
				ex.end = ex.start
				if n := len(ex.events); n > 0 {
					ex.end = ex.events[n-1].Time
				}
			}
			exs = append(exs, ex)
		}
	}
	slices.SortFunc(exs, func(a, b *exchange) int {
		if c := a.end.Compare(b.end); c != 0 {
			return c
		}
		return a.first - b.first
	})
	// One resource per span keeps the spans in order of their end
	// across clients.
	td := ptrace.NewTraces()
	for _, ex := range exs {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "mcp-client")
		rs.Resource().Attributes().PutStr("service.instance.id", ex.conn.Client.Addr().String())
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("spanproj/" + p.shape.String())
		p.span(ss.Spans().AppendEmpty(), ex)
	}
	return td
}

func (p *Projector) span(sp ptrace.Span, ex *exchange) {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/%d", p.Seed, ex.conn.ID, ex.first)))
	sp.SetTraceID(pcommon.TraceID(sum[:16]))
	sp.SetSpanID(pcommon.SpanID(sum[16:24]))
	sp.SetKind(ptrace.SpanKindClient)
	if p.shape == ServerHeaders {
		sp.SetKind(ptrace.SpanKindServer)
	}
	sp.SetName(ex.req.Method)
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(ex.start))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(ex.end))
	a := sp.Attributes()
	a.PutStr("http.request.method", ex.req.Method)
	host := ex.req.Host
	if host == "" {
		host = ex.conn.Server.String()
	}
	if p.shape == ServerHeaders {
		a.PutStr("url.path", ex.req.Path)
		a.PutStr("client.address", ex.conn.Client.Addr().String())
		a.PutInt("client.port", int64(ex.conn.Client.Port()))
	} else {
		a.PutStr("url.full", "http://"+host+ex.req.Path)
	}
	a.PutStr("server.address", ex.conn.Server.Addr().String())
	a.PutInt("server.port", int64(ex.conn.Server.Port()))
	a.PutInt("http.response.status_code", int64(ex.resp.Status))
	if ex.req.UserAgent != "" {
		a.PutStr("user_agent.original", ex.req.UserAgent)
	}
	header := func(k, v string, has bool) {
		if has {
			a.PutEmptySlice(k).AppendEmpty().SetStr(v)
		}
	}
	header("http.request.header.mcp-session-id", ex.req.SessionID, ex.req.HasSessionID)
	header("http.request.header.last-event-id", ex.req.LastEventID, ex.req.HasLastEventID)
	header("http.request.header.mcp-protocol-version", ex.req.ProtocolVersion, ex.req.ProtocolVersion != "")
	header("http.response.header.mcp-session-id", ex.resp.SessionID, ex.resp.HasSessionID)
	header("http.response.header.content-type", ex.resp.ContentType, ex.resp.ContentType != "")
	if p.shape != Guard {
		return
	}
	if len(ex.req.Messages) == 1 && !ex.req.BodyIncomplete {
		m := ex.req.Messages[0]
		if m.Method != "" {
			a.PutStr("mcp.method.name", m.Method)
			if m.ID != "" {
				a.PutStr("jsonrpc.request.id", m.ID)
			}
			if m.Tool != "" {
				a.PutStr("gen_ai.tool.name", m.Tool)
			}
			if m.ParamsHash != "" {
				a.PutStr("mcp.request.params_hash", m.ParamsHash)
			}
			if v := m.ProtocolVersion; v != "" {
				a.PutStr("mcp.protocol.version", v)
			}
			if m.ProgressToken != "" {
				a.PutStr("mcp.progress.token", m.ProgressToken)
			}
			if m.ClientInfo != "" {
				a.PutStr("mcp.client.info", m.ClientInfo)
			}
		}
	}
	// A gap in the capture is no part of what a client saw: such an
	// exchange is projected as an emitter that did not record the body.
	// So is a body under a Content-Encoding not read: a client reads it
	// decoded, the packets do not show it.
	if ex.gap || p.gaps[ex.conn.ID] || ex.endObs == nil || ex.endObs.How == decode.EndGap || ex.endObs.Limit != "" ||
		ex.resp.EncodedUnread {
		return
	}
	evs := sp.Events()
	if ex.resp.SSE {
		a.PutBool("mcp.sse.recorded", true)
		for _, o := range ex.events {
			ev := o.Event
			se := evs.AppendEmpty()
			se.SetName("mcp.sse.event")
			se.SetTimestamp(pcommon.NewTimestampFromTime(o.Time))
			ea := se.Attributes()
			if ev.HasID {
				ea.PutStr("mcp.sse.event.id", ev.ID)
			}
			if ev.Type != "" {
				ea.PutStr("mcp.sse.event.type", ev.Type)
			}
			ea.PutInt("mcp.sse.event.data_size", int64(ev.DataBytes))
			ea.PutStr("mcp.sse.event.data_hash", ev.DataHash)
			if len(ev.Messages) == 1 {
				putMessage(ea, ev.Messages[0])
			}
		}
		e := ex.endObs
		if e.HasPartialID {
			se := evs.AppendEmpty()
			se.SetName("mcp.sse.event")
			se.SetTimestamp(pcommon.NewTimestampFromTime(ex.end))
			se.Attributes().PutStr("mcp.sse.event.id", e.PartialID)
			se.Attributes().PutBool("mcp.sse.event.complete", false)
		}
		if how := endHow(e.How); how != "" {
			se := evs.AppendEmpty()
			se.SetName("mcp.sse.end")
			se.SetTimestamp(pcommon.NewTimestampFromTime(ex.end))
			se.Attributes().PutStr("mcp.sse.end.how", how)
			if e.ClientClosed {
				se.Attributes().PutBool("mcp.sse.end.client_closed", true)
			}
		}
		return
	}
	if ex.resp.ContentLength >= 0 {
		// The guard gives the size of a body its client read whole;
		// the projection takes every answer for read whole.
		a.PutInt("http.response.body.size", ex.resp.ContentLength)
	}
	for _, m := range ex.bodyMsgs {
		se := evs.AppendEmpty()
		se.SetName("mcp.response.message")
		se.SetTimestamp(pcommon.NewTimestampFromTime(ex.end))
		putMessage(se.Attributes(), m)
	}
}

func putMessage(a pcommon.Map, m decode.Message) {
	typ := map[decode.MsgType]string{decode.MsgRequest: "request", decode.MsgNotification: "notification",
		decode.MsgResponse: "response", decode.MsgError: "error"}[m.Type]
	if typ == "" {
		return
	}
	a.PutStr("jsonrpc.message.type", typ)
	if m.ID != "" {
		a.PutStr("jsonrpc.request.id", m.ID)
	}
	if m.Method != "" {
		a.PutStr("mcp.method.name", m.Method)
	}
	if m.ToolError {
		a.PutStr("error.type", "tool_error")
	}
	if m.Type == decode.MsgError {
		a.PutStr("rpc.response.status_code", strconv.Itoa(m.ErrorCode))
		if m.UnknownSession {
			a.PutBool("mcp.error.unknown_session", true)
		}
	}
	if m.ProgressToken != "" {
		a.PutStr("mcp.progress.token", m.ProgressToken)
		if m.HasProgress {
			a.PutDouble("mcp.progress.value", m.Progress)
		}
		if m.HasTotal {
			a.PutDouble("mcp.progress.total", m.ProgressTotal)
		}
	}
	if m.Tools != "" {
		keys := map[byte]string{decode.ToolRepeatable: "mcp.tools.repeatable", decode.ToolDestructive: "mcp.tools.destructive", decode.ToolPlain: "mcp.tools.plain"}
		for _, line := range strings.Split(strings.TrimSuffix(m.Tools, "\n"), "\n") {
			k, ok := keys[line[0]]
			if !ok {
				continue
			}
			v, found := a.Get(k)
			if !found {
				v = a.PutEmptySlice(k).AppendEmpty()
				v.SetStr(line[1:])
				continue
			}
			v.Slice().AppendEmpty().SetStr(line[1:])
		}
	}
}

func endHow(h decode.EndHow) string {
	switch h {
	case decode.EndClean:
		return "clean"
	case decode.EndTruncated:
		return "truncated"
	case decode.EndReset:
		return "reset"
	}
	return ""
}

// FromPcap decodes capture files and projects them.
func FromPcap(ctx context.Context, files []string, shape Shape) (ptrace.Traces, error) {
	p := New(shape)
	p.Seed = strings.Join(files, "\x00")
	ccfg := capture.DefaultConfig().WithDefaults()
	pipe := decode.NewPipeline(decode.DefaultConfig(), ccfg.Workers, p.Observe)
	_, err := capture.ReadFiles(ctx, files, ccfg, func(w int) decode.StreamFactory { return pipe.Factory(w) })
	pipe.Close()
	if err != nil {
		return ptrace.Traces{}, err
	}
	return p.Traces(), nil
}

// WriteJSONLines writes td as OTLP JSON, perLine spans to a line (an
// export each), as the Collector's file exporter does.
func WriteJSONLines(path string, td ptrace.Traces, perLine int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var m ptrace.JSONMarshaler
	for _, part := range Split(td, perLine) {
		b, err := m.MarshalTraces(part)
		if err != nil {
			f.Close()
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Split cuts td into exports of at most n resources (one span each, as
// Traces makes them), in order.
func Split(td ptrace.Traces, n int) []ptrace.Traces {
	var out []ptrace.Traces
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i += n {
		part := ptrace.NewTraces()
		for j := i; j < min(i+n, rss.Len()); j++ {
			rss.At(j).CopyTo(part.ResourceSpans().AppendEmpty())
		}
		out = append(out, part)
	}
	return out
}
