// Package guard enforces the MCP Streamable HTTP resume contract inside a Go
// client: wrap the http.RoundTripper of the client's transport (go-sdk's
// StreamableClientTransport takes an *http.Client, as any Go MCP client
// does) and a corrupted resume becomes a typed error instead of silently
// corrupted state:
//
//   - a resume (a request with Mcp-Session-Id and Last-Event-ID) answered
//     under another session id: *SessionSwapError;
//   - a resumed stream whose first event is the cursor itself or an event
//     already delivered before it: *ReplayedEventError (from the body's Read);
//   - 404 for a request of a session: *SessionLostError, naming the tool calls
//     that were in flight in it (their outcome is unknown: reconcile them
//     before re-running them in a new session);
//   - without sessions (revision 2026-07-28), an identical tools/call sent
//     again to the same endpoint after its first attempt's stream broke
//     before the answer (or a gateway answered it 502 or 504):
//     *ReissueError, unless the tool is annotated read-only or idempotent
//     (or its annotations are unknown after a listing the guard could not
//     record whole) or the caller marked the call safe to repeat
//     (SafeToRepeat). A call rejected by any other non-2xx status is taken
//     as not run: its retry is no re-issue.
//
// Correct traffic passes untouched: the guard only reads what flows.
//
// With a TracerProvider every round trip is also an HTTP CLIENT span in the
// shape replaywatch's OTLP input reads (docs/otlp.md): the request's and
// response's MCP headers, the JSON-RPC request, one span event per SSE event
// and how the stream ended. ObserveOnly records refusals (spans, OnRefuse)
// without making them.
package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/replaywatch/replaywatch/decode"
)

// Limits of what the guard remembers, so that a long-lived client's memory
// stays bounded: MaxSessions sessions (the oldest forgotten first),
// MaxEventsPerSession delivered event ids per session, MaxCallsInFlight
// unanswered calls per session (later ones are not tracked, and a
// SessionLostError does not list them), MaxBodyBytes of a request body read
// to find its tool calls (a longer body is sent on unread) and of a
// response's answer kept to settle its call (a longer one reaches the
// client whole; its call is settled as answered, never taken for broken).
const (
	MaxSessions         = 1024
	MaxEventsPerSession = 4096
	MaxCallsInFlight    = 1024
	MaxBodyBytes        = 1 << 20
	maxSSELine          = 64 << 10
)

// Call is a JSON-RPC request the guard saw sent.
type Call struct {
	ID     string // JSON text of the id
	Method string
	Tool   string // params.name of a tools/call
	// identity is the tool and its arguments' hash (tools/call only).
	identity string
}

// SessionSwapError: a resume of Session was answered 200 under another
// session id; its events belong to another session's stream.
type SessionSwapError struct {
	Session, Got, LastEventID string
}

func (e *SessionSwapError) Error() string {
	return fmt.Sprintf("mcp guard: resume of session %q from event %q was answered by session %q: refusing another session's stream", e.Session, e.LastEventID, e.Got)
}

// ReplayedEventError: a resumed stream delivered an event the client
// already had (the cursor itself, or one before it).
type ReplayedEventError struct {
	Session, LastEventID, EventID string
}

func (e *ReplayedEventError) Error() string {
	return fmt.Sprintf("mcp guard: resume of session %q after event %q delivered event %q again", e.Session, e.LastEventID, e.EventID)
}

// SessionLostError: the server answered 404 for Session. InFlight are the
// calls sent in it without an answer: whether they ran is unknown.
type SessionLostError struct {
	Session  string
	InFlight []Call
}

func (e *SessionLostError) Error() string {
	msg := fmt.Sprintf("mcp guard: session %q is gone (404)", e.Session)
	if len(e.InFlight) > 0 {
		var calls []string
		for _, c := range e.InFlight {
			what := c.Method
			if c.Tool != "" {
				what += " " + c.Tool
			}
			calls = append(calls, fmt.Sprintf("%s (id %s)", what, c.ID))
		}
		msg += "; outcome unknown for " + strings.Join(calls, ", ") + ": reconcile before re-running them in a new session"
	}
	return msg
}

// ReissueError: an identical tools/call (same tool, same arguments) was
// sent again while its first attempt, whose stream broke before the
// answer, has an unknown outcome.
type ReissueError struct {
	Tool    string
	FirstID string // the first attempt's JSON-RPC id
}

func (e *ReissueError) Error() string {
	return fmt.Sprintf("mcp guard: tools/call %s sent again while its first attempt (id %s) broke before its answer: it may have run; reconcile it first, or mark the call safe to repeat", e.Tool, e.FirstID)
}

type safeKey struct{}

// SafeToRepeat marks the requests made with ctx as safe to re-issue (the
// caller knows the call is idempotent, or has reconciled it).
func SafeToRepeat(ctx context.Context) context.Context {
	return context.WithValue(ctx, safeKey{}, true)
}

// MaxBrokenCalls bounds the broken first attempts remembered for the
// re-issue guard (the oldest forgotten first), MaxEndpoints the endpoints
// (scheme, host and path of a request's URL) whose tool annotations and
// broken calls it keeps apart (the oldest forgotten first, its broken calls
// with it).
//
// MaxToolsPerEndpoint bounds the tool annotations kept per endpoint, and
// MaxToolNameBytes each name; the tools past them, like those past decode.MaxAnnotatedTools in one tools/list
// answer or in an answer over MaxBodyBytes, go unrecorded, and a tool whose
// annotations the guard does not have after such a listing is taken as
// repeatable: its re-issue is let through.
const (
	MaxBrokenCalls      = 1024
	MaxEndpoints        = 256
	MaxToolsPerEndpoint = 4096
	// MaxToolNameBytes: a longer tool name (MCP asks for at most 128
	// characters) goes unrecorded, as past MaxToolsPerEndpoint.
	MaxToolNameBytes = 256
)

// Transport is an http.RoundTripper that enforces the contract.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// OnRefuse, if set, is told every refusal as it happens. A client may
	// report a stream that failed to read without its cause (go-sdk v1.8
	// says "request terminated without response"); this is where the typed
	// error still arrives.
	OnRefuse func(error)
	// Tokens keeps each stream's resumption token (session and last
	// complete event id); nil means a MemoryTokens of the Transport's own.
	Tokens TokenStore
	// TracerProvider, if set, gets one HTTP CLIENT span per round trip,
	// a child of the request context's span, ended when the body ends
	// (EOF, a read error, Close) or at once without one; see
	// docs/otlp.md. A stream's span holds one event per SSE event: the
	// SDK keeps 128 per span unless told more (sdktrace.WithSpanLimits,
	// OTEL_SPAN_EVENT_COUNT_LIMIT). Nil: no spans, at no cost.
	TracerProvider trace.TracerProvider
	// ObserveOnly makes the guard record without enforcing: every refusal
	// is still told to OnRefuse and to the span (status Error), but the
	// request is sent and the response or stream reaches the client
	// untouched. To shadow a deployment before enforcing, or to compare
	// the spans with a packet capture of the same traffic.
	ObserveOnly bool

	mu       sync.Mutex
	sessions map[string]*session
	order    []string // session ids, oldest first
	// Without sessions: each endpoint's tool annotations (at most
	// MaxEndpoints, the oldest forgotten first), and the calls whose
	// stream broke before their answer, by endpoint and identity.
	endpoints   map[string]*endpoint
	endpointAge []string
	// forgotten are the endpoints forgotten (past MaxEndpoints) with the
	// annotations they had: met again, each starts partial (a refusal
	// needs proof). At most MaxEndpoints; past it, forgotMany, and every
	// new endpoint starts partial.
	forgotten  map[string]struct{}
	forgotMany bool
	broken     map[string]Call
	brokenAge  []string
	ownTokens  MemoryTokens
	// cursors maps a stream's latest cursor to its key, so that a resume
	// (a GET from the cursor, for a POST's stream too) saves its events
	// under the stream it continues; at most MaxSessions entries.
	cursors   map[string]string
	streamCur map[string]string // stream key -> its cursor in cursors
}

func (t *Transport) tokens() TokenStore {
	if t.Tokens != nil {
		return t.Tokens
	}
	return &t.ownTokens
}

type session struct {
	delivered map[string]bool // event ids delivered on the session's streams
	inflight  map[string]Call // by JSON-RPC id
	lost      bool
}

// New wraps base (nil: http.DefaultTransport).
func New(base http.RoundTripper) *Transport { return &Transport{Base: base} }

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// session returns the state of id, making it; t.mu held.
func (t *Transport) session(id string) *session {
	if t.sessions == nil {
		t.sessions = map[string]*session{}
	}
	s := t.sessions[id]
	if s == nil {
		if len(t.order) >= MaxSessions {
			delete(t.sessions, t.order[0])
			t.order = t.order[1:]
		}
		s = &session{delivered: map[string]bool{}, inflight: map[string]Call{}}
		t.sessions[id] = s
		t.order = append(t.order, id)
	}
	return s
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	sp := t.startSpan(req)
	sid := req.Header.Get("Mcp-Session-Id")
	cursor := req.Header.Get("Last-Event-ID")
	var calls []Call
	if req.Method == http.MethodPost && req.Body != nil && req.Body != http.NoBody {
		var err error
		if req, calls, err = peekRequest(req, sp); err != nil {
			sp.fail(err)
			return nil, err
		}
	}
	ep := endpointOf(req.URL)
	if sid == "" {
		if err := t.refuse(sp, t.checkReissue(req.Context(), ep, calls)); err != nil {
			sp.end()
			return nil, err
		}
	} else {
		t.mu.Lock()
		s := t.session(sid)
		for _, c := range calls {
			if len(s.inflight) < MaxCallsInFlight {
				s.inflight[c.ID] = c
			}
		}
		t.mu.Unlock()
	}
	resp, err := t.base().RoundTrip(req)
	if err != nil {
		if sid == "" {
			t.broke(ep, calls)
		}
		sp.fail(err)
		return resp, err
	}
	sp.response(resp)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var w watcher // what the guard reads in the body; nil: nothing
	switch {
	case sid == "":
		pending := calls
		if !mayHaveRun(resp.StatusCode) {
			pending = nil // rejected: the calls did not run, a retry is no re-issue
		}
		if len(pending) > 0 || sse {
			w = &answerWatch{t: t, ep: ep, pending: pending}
		}
	case resp.StatusCode == http.StatusNotFound:
		t.mu.Lock()
		s := t.session(sid)
		s.lost = true
		for _, c := range calls {
			delete(s.inflight, c.ID) // refused with the 404: they did not run
		}
		lost := &SessionLostError{Session: sid}
		for _, c := range s.inflight {
			lost.InFlight = append(lost.InFlight, c)
		}
		t.mu.Unlock()
		slices.SortFunc(lost.InFlight, func(a, b Call) int { return strings.Compare(a.ID, b.ID) })
		if err := t.refuse(sp, lost); err != nil {
			resp.Body.Close()
			sp.end()
			return nil, err
		}
	case !mayHaveRun(resp.StatusCode):
		if len(calls) > 0 { // rejected: the calls did not run, no answer will come
			t.settle(sid, "", calls)
		}
	default:
		if got := resp.Header.Get("Mcp-Session-Id"); cursor != "" && resp.StatusCode == http.StatusOK && got != "" && got != sid {
			if err := t.refuse(sp, &SessionSwapError{Session: sid, Got: got, LastEventID: cursor}); err != nil {
				resp.Body.Close()
				sp.end()
				return nil, err
			}
		}
		if sse {
			first := ""
			if len(calls) > 0 {
				first = calls[0].ID
			}
			key := StreamKey(req.Method, sid, first)
			if cursor != "" {
				t.mu.Lock()
				if k, ok := t.cursors[sid+"\x00"+cursor]; ok {
					key = k
				}
				t.mu.Unlock()
			}
			w = &streamWatch{t: t, sid: sid, cursor: cursor, stream: key, first: cursor != "", calls: calls}
		} else if resp.StatusCode == http.StatusOK && len(calls) > 0 {
			w = &jsonWatch{t: t, sid: sid, calls: calls}
		}
	}
	if w == nil && (sp == nil || resp.Body == http.NoBody) {
		if !sse {
			sp.bodySize(0) // http.NoBody: Content-Length 0, or a status without a body
		}
		sp.end()
		return resp, nil
	}
	b := &body{rc: resp.Body, t: t, w: w, sp: sp}
	if sse {
		b.dec = decode.NewSSEDecoder(maxSSELine, MaxBodyBytes, b.event)
		sp.recordSSE()
	}
	resp.Body = b
	return resp, nil
}

// mayHaveRun reports whether a response with status may follow the
// server acting on the request's calls: any 2xx, and a gateway's 502 or 504
// (the upstream may have received the request before it failed or timed
// out: the outcome is unknown, as after a broken stream). Any other status
// (429, 503, 400, 401, 403, 404, 405, 413, 415, 500, a redirect, ...) is
// taken as a rejection of the request: its calls are taken as not run, and
// a retry of them is no re-issue. (A 500 may follow a tool that ran; a
// refusal needs proof, so the guard errs toward letting the retry through.)
func mayHaveRun(status int) bool {
	return status/100 == 2 || status == http.StatusBadGateway || status == http.StatusGatewayTimeout
}

// peekRequest reads req's body to find its calls, and returns the request
// to send on, with the same body. A body longer than MaxBodyBytes is sent on
// whole and not peeked: its calls stay unknown to the guard (a call's
// identity is the hash of all of its arguments, and a part would make two
// different calls look alike).
func peekRequest(req *http.Request, sp *span) (*http.Request, []Call, error) {
	head, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes+1))
	if err != nil {
		req.Body.Close()
		return nil, nil, err
	}
	orig := req.Body
	req = req.Clone(req.Context())
	if len(head) > MaxBodyBytes {
		// The rest is read by the base transport as the client sent it;
		// GetBody, if the client set one, still gives the whole body.
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), orig), orig}
		return req, nil, nil
	}
	orig.Close()
	var pk decode.Peeker
	msgs, batch, _ := pk.PeekJSONRPC(head)
	sp.request(msgs, batch)
	req.Body = io.NopCloser(bytes.NewReader(head))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(head)), nil }
	return req, requestCalls(msgs), nil
}

// noteCursor records that stream's cursor is now id; t.mu held.
func (t *Transport) noteCursor(sid, id, stream string) {
	if t.cursors == nil {
		t.cursors, t.streamCur = map[string]string{}, map[string]string{}
	}
	if old, ok := t.streamCur[stream]; ok {
		delete(t.cursors, old)
	} else if len(t.streamCur) >= MaxSessions {
		clear(t.cursors) // bounded; a resume then starts its own key
		clear(t.streamCur)
	}
	c := sid + "\x00" + id
	t.cursors[c], t.streamCur[stream] = stream, c
}

// refuse tells OnRefuse and the span of a refusal (err non-nil) and
// returns it, or nil in ObserveOnly mode: then the exchange goes on.
func (t *Transport) refuse(sp *span, err error) error {
	if err == nil {
		return nil
	}
	if t.OnRefuse != nil {
		t.OnRefuse(err)
	}
	sp.refused(err)
	if t.ObserveOnly {
		return nil
	}
	return err
}

// requestCalls returns the JSON-RPC requests (with an id) among msgs.
func requestCalls(msgs []decode.Message) []Call {
	var calls []Call
	for _, m := range msgs {
		if m.Type == decode.MsgRequest && m.ID != "" {
			c := Call{ID: m.ID, Method: m.Method, Tool: m.Tool}
			if m.Method == "tools/call" {
				c.identity = m.Tool + "\x00" + m.ParamsHash
			}
			calls = append(calls, c)
		}
	}
	return calls
}

// endpoint is what the guard knows of one server endpoint without
// sessions: its tools' annotations.
type endpoint struct {
	repeatable map[string]bool // tool name: read-only or idempotent
	// partial: the endpoint listed tools the guard could not record (a
	// tools/list answer at decode.MaxAnnotatedTools tools, over
	// MaxBodyBytes, or past MaxToolsPerEndpoint): a tool not in repeatable
	// may be one of them, read-only for all the guard knows.
	partial bool
}

// mayRepeat reports whether a re-issue of tool is let through: the tool is
// annotated read-only or idempotent, or its annotations are unknown after
// a listing the guard could not record whole (a refusal needs proof).
func (e *endpoint) mayRepeat(tool string) bool {
	rep, known := e.repeatable[tool]
	return rep || !known && e.partial
}

// endpointOf names the endpoint a request goes to: the scheme, host and path
// of its URL. Tool names, annotations and call identities are a server's
// own: one guard shared by clients of several servers keeps them apart.
func endpointOf(u *url.URL) string {
	return u.Scheme + "://" + strings.ToLower(u.Host) + u.Path
}

// endpoint returns the state of ep, making it; t.mu held. Forgetting an
// endpoint (past MaxEndpoints, the oldest first) forgets its broken calls
// with its annotations: a re-issue is refused only with both at hand.
func (t *Transport) endpoint(ep string) *endpoint {
	if t.endpoints == nil {
		t.endpoints = map[string]*endpoint{}
	}
	e := t.endpoints[ep]
	if e == nil {
		if len(t.endpointAge) >= MaxEndpoints {
			old := t.endpointAge[0]
			t.endpointAge = t.endpointAge[1:]
			if o := t.endpoints[old]; len(o.repeatable) > 0 || o.partial {
				t.forget(old)
			}
			delete(t.endpoints, old)
			for k := range t.broken {
				if strings.HasPrefix(k, old+"\x00") {
					delete(t.broken, k)
				}
			}
		}
		_, forgot := t.forgotten[ep]
		e = &endpoint{repeatable: map[string]bool{}, partial: forgot || t.forgotMany}
		t.endpoints[ep] = e
		t.endpointAge = append(t.endpointAge, ep)
	}
	return e
}

// forget notes that ep was forgotten with annotations; t.mu held.
func (t *Transport) forget(ep string) {
	if t.forgotten == nil {
		t.forgotten = map[string]struct{}{}
	}
	if len(t.forgotten) >= MaxEndpoints {
		t.forgotMany = true
		return
	}
	t.forgotten[ep] = struct{}{}
}

// checkReissue returns the refusal of a tools/call to ep identical to one
// whose stream broke before its answer, unless it is repeatable or marked
// safe.
func (t *Transport) checkReissue(ctx context.Context, ep string, calls []Call) error {
	safe, _ := ctx.Value(safeKey{}).(bool)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range calls {
		if c.identity == "" {
			continue
		}
		key := ep + "\x00" + c.identity
		first, ok := t.broken[key]
		if !ok {
			continue
		}
		delete(t.broken, key) // settled either way: refused, or repeated knowingly
		if safe || t.endpoint(ep).mayRepeat(c.Tool) {
			continue
		}
		return &ReissueError{Tool: c.Tool, FirstID: first.ID}
	}
	return nil
}

// broke records calls to ep whose answer did not come.
func (t *Transport) broke(ep string, calls []Call) {
	if !slices.ContainsFunc(calls, func(c Call) bool { return c.identity != "" }) {
		return // nothing to remember, and no endpoint to make
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broken == nil {
		t.broken = map[string]Call{}
	}
	t.endpoint(ep) // its age: forgotten, it takes its broken calls along
	for _, c := range calls {
		if c.identity == "" {
			continue
		}
		if len(t.brokenAge) >= MaxBrokenCalls {
			delete(t.broken, t.brokenAge[0])
			t.brokenAge = t.brokenAge[1:]
		}
		key := ep + "\x00" + c.identity
		t.broken[key] = c
		t.brokenAge = append(t.brokenAge, key)
	}
}

// learnTools records the tools a tools/list answer of ep marks repeatable,
// at most MaxToolsPerEndpoint of them.
func (t *Transport) learnTools(ep string, msgs []decode.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		if m.Tools == "" {
			continue
		}
		e := t.endpoint(ep)
		n := 0
		for line := range strings.Lines(m.Tools) {
			n++
			line = strings.TrimSuffix(line, "\n")
			if len(line) < 2 {
				continue
			}
			name := line[1:]
			if _, known := e.repeatable[name]; !known && (len(e.repeatable) >= MaxToolsPerEndpoint || len(name) > MaxToolNameBytes) {
				e.partial = true
				continue
			}
			e.repeatable[name] = line[0] == decode.ToolRepeatable
		}
		if n >= decode.MaxAnnotatedTools {
			e.partial = true // the decoder stopped there: more tools may follow
		}
	}
}

// unlisted marks ep's tool listing partial: a tools/list answer reached the
// client that the guard could not read.
func (t *Transport) unlisted(ep string) {
	t.mu.Lock()
	t.endpoint(ep).partial = true
	t.mu.Unlock()
}

// body hands the client a response body as the server sent it and reads
// it on the way: an SSE body's events, or a JSON body (up to MaxBodyBytes)
// at its end, go to the guard's watcher and to the span; its end (EOF, a
// read error, a refusal or Close) settles both, once.
type body struct {
	rc  io.ReadCloser
	t   *Transport
	w   watcher // nil: only the span reads
	sp  *span   // nil: no spans
	dec *decode.SSEDecoder
	pk  decode.Peeker
	buf bytes.Buffer // a JSON body, its first MaxBodyBytes
	// over: the JSON body outgrew MaxBodyBytes and is not peeked; whole
	// then follows it to the end of its JSON value.
	over  bool
	whole valueEnd
	// mu: a client may Close the body while a Read runs.
	mu      sync.Mutex
	refused error
	done    bool
}

// watcher is what the guard checks in one kind of response body.
type watcher interface {
	// event sees an SSE event and the JSON-RPC messages it carried (nil
	// unless it may answer a call, or the span wants them); an error
	// refuses it.
	event(e *decode.SSEEvent, msgs []decode.Message) error
	// unread sees a message the client got whole but the guard could not
	// read (over MaxBodyBytes) and that may answer a call: the call with
	// JSON-RPC id id, or any of them when id is "".
	unread(id string)
	// end settles the body: msgs of a JSON body.
	end(msgs []decode.Message)
}

func (b *body) event(e *decode.SSEEvent) {
	if b.refused != nil {
		return // the client gets no event after a refused one
	}
	var msgs []decode.Message
	if !e.DataTruncated && (b.sp != nil || mayAnswer(e.Data)) {
		msgs, _, _ = b.pk.PeekJSONRPC(e.Data)
	}
	b.sp.event(e, msgs)
	if b.w != nil {
		b.refused = b.t.refuse(b.sp, b.w.event(e, msgs))
		// An event is dispatched only whole: one whose data outgrew
		// MaxBodyBytes reached the client, but the decoder kept none of
		// it, so it may answer any of the calls.
		if b.refused == nil && e.DataTruncated {
			b.w.unread("")
		}
	}
}

// Read hands the client the bytes the server sent, up to an event the
// guard refuses: from then on Read returns the refusal. The bytes of the
// refused event itself may already be in the client's buffer, but the
// error reaches it before the event is complete there: an SSE event is
// dispatched only at its blank line, which is in this very read.
func (b *body) Read(p []byte) (int, error) {
	if b.refused != nil {
		return 0, b.refused
	}
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 {
		if b.dec != nil {
			b.dec.Write(p[:n])
		} else if !b.over && b.buf.Len()+n <= MaxBodyBytes {
			b.buf.Write(p[:n])
		} else {
			if !b.over {
				b.over = true
				b.whole.write(b.buf.Bytes())
			}
			b.whole.write(p[:n])
		}
	}
	if b.refused != nil {
		b.finish(nil, true) // the guard, in the client, gave the stream up
		return 0, b.refused
	}
	if err != nil {
		b.finish(err, false)
	}
	return n, err
}

func (b *body) Close() error {
	b.mu.Lock()
	b.finish(nil, true)
	b.mu.Unlock()
	return b.rc.Close()
}

// finish settles the body once; b.mu held.
func (b *body) finish(err error, closed bool) {
	if b.done {
		return
	}
	b.done = true
	var msgs []decode.Message
	size := int64(-1)
	if b.dec == nil && !b.over {
		msgs, _, _ = b.pk.PeekJSONRPC(b.buf.Bytes())
		if err == io.EOF {
			size = int64(b.buf.Len()) // read whole
		}
	}
	if b.w != nil {
		if b.dec == nil && b.over && b.whole.done && mayAnswer(b.buf.Bytes()) {
			// The client read the whole JSON value; the guard has its start.
			if id, maybe := unreadAnswer(b.buf.Bytes()); maybe {
				b.w.unread(id)
			}
		}
		b.w.end(msgs)
	}
	b.sp.finish(b.dec, msgs, size, err, closed)
}

// answerWatch reads a response to sessionless requests: the answers it
// carries settle their calls, tools/list answers teach which tools are
// repeatable, and calls still unanswered when the body ends broke.
type answerWatch struct {
	t       *Transport
	ep      string // the endpoint the requests went to
	pending []Call
}

func (a *answerWatch) messages(msgs []decode.Message) {
	a.t.learnTools(a.ep, msgs)
	for _, m := range msgs {
		if m.Type == decode.MsgResponse || m.Type == decode.MsgError {
			a.pending = slices.DeleteFunc(a.pending, func(c Call) bool { return c.ID == m.ID })
		}
	}
}

func (a *answerWatch) event(_ *decode.SSEEvent, msgs []decode.Message) error {
	a.messages(msgs)
	return nil
}

// unread settles the calls a message the guard could not read may answer:
// whether it did is unknown, and a refusal needs proof. A tools/list
// answer among them teaches nothing: the endpoint's listing is partial.
func (a *answerWatch) unread(id string) {
	for _, c := range a.pending {
		if (id == "" || c.ID == id) && c.Method == "tools/list" {
			a.t.unlisted(a.ep)
			break
		}
	}
	a.pending = slices.DeleteFunc(a.pending, func(c Call) bool { return id == "" || c.ID == id })
}

// end settles the body: what is still pending broke.
func (a *answerWatch) end(msgs []decode.Message) {
	a.messages(msgs)
	a.t.broke(a.ep, a.pending)
}

// mayAnswer reports whether an event's data can hold an answer (a result,
// a tools/list among them, or an error): only those are worth peeking at,
// and most events are notifications.
func mayAnswer(data []byte) bool {
	return bytes.Contains(data, []byte(`"result"`)) || bytes.Contains(data, []byte(`"error"`))
}

// answered removes the calls msgs answer from the session's in-flight set.
func (t *Transport) answered(sid string, msgs []decode.Message) {
	if len(msgs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.session(sid)
	for _, m := range msgs {
		if m.Type == decode.MsgResponse || m.Type == decode.MsgError {
			delete(s.inflight, m.ID)
		}
	}
}

// settle removes from the session's in-flight set the call with id, or,
// id "", all of calls: an answer the guard could not read whole reached
// the client, or the request was rejected by its status.
func (t *Transport) settle(sid, id string, calls []Call) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.session(sid)
	if id != "" {
		delete(s.inflight, id)
		return
	}
	for _, c := range calls {
		delete(s.inflight, c.ID)
	}
}

// unreadAnswer reads what it can of a JSON-RPC message the guard could not
// read whole, from prefix, its first bytes: maybe is false when it is
// surely no answer (it has a method), id is the id it answers when that
// came before the cut ("" when unknown: it may answer any call).
func unreadAnswer(prefix []byte) (id string, maybe bool) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", true // a batch, or no JSON the guard can read
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		if key == "method" {
			return "", false
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			break // cut here
		}
		if key == "id" {
			// The id as decode spells a message's (compact JSON text).
			var pk decode.Peeker
			msgs, _, _ := pk.PeekJSONRPC(slices.Concat([]byte(`{"jsonrpc":"2.0","id":`), value, []byte(`,"result":0}`)))
			if len(msgs) == 1 {
				id = msgs[0].ID
			}
		}
	}
	return id, true
}

// valueEnd follows a JSON text, byte by byte and without keeping it, to the
// end of its first object or array: done then.
type valueEnd struct {
	depth                         int
	started, str, esc, done, none bool
}

func (v *valueEnd) write(p []byte) {
	for _, c := range p {
		switch {
		case v.done || v.none:
			return
		case v.str:
			if v.esc {
				v.esc = false
			} else if c == '\\' {
				v.esc = true
			} else if c == '"' {
				v.str = false
			}
		case c == '"' && v.started:
			v.str = true
		case c == '{' || c == '[':
			v.depth++
			v.started = true
		case (c == '}' || c == ']') && v.started:
			v.depth--
			v.done = v.depth == 0
		case !v.started && c != ' ' && c != '\t' && c != '\n' && c != '\r':
			v.none = true // no object or array: no JSON-RPC message
		}
	}
}

// streamWatch reads an SSE body of a session as the client does, checking
// a resumed stream's first event and recording every event's id and
// answers.
type streamWatch struct {
	t      *Transport
	sid    string
	cursor string
	stream string // its key in the TokenStore
	first  bool   // the first event with an id is still to come
	calls  []Call // the calls of the POST it answers; nil for a GET
}

func (w *streamWatch) event(e *decode.SSEEvent, msgs []decode.Message) error {
	w.t.answered(w.sid, msgs)
	if !e.HasID || e.ID == "" {
		return nil
	}
	w.t.mu.Lock()
	s := w.t.session(w.sid)
	var replayed error
	if w.first {
		w.first = false
		if e.ID == w.cursor || s.delivered[e.ID] {
			replayed = &ReplayedEventError{Session: w.sid, LastEventID: w.cursor, EventID: e.ID}
			if !w.t.ObserveOnly {
				w.t.mu.Unlock()
				return replayed // never delivered: not a cursor either
			}
		}
	}
	if len(s.delivered) < MaxEventsPerSession {
		s.delivered[e.ID] = true
	}
	w.t.noteCursor(w.sid, e.ID, w.stream)
	// The event is complete (SSE dispatches at its blank line): it is the
	// stream's new cursor. A store that fails is told to OnRefuse, not to
	// the stream: the client still has its events.
	err := w.t.tokens().Save(w.stream, Token{Session: w.sid, LastEventID: e.ID})
	w.t.mu.Unlock()
	if err != nil && w.t.OnRefuse != nil {
		w.t.OnRefuse(fmt.Errorf("mcp guard: saving the resumption token: %w", err))
	}
	return replayed
}

func (w *streamWatch) unread(id string) { w.t.settle(w.sid, id, w.calls) }

func (w *streamWatch) end([]decode.Message) {}

// jsonWatch reads a JSON response of a session and clears the calls it
// answers.
type jsonWatch struct {
	t     *Transport
	sid   string
	calls []Call // the request's
}

func (j *jsonWatch) event(*decode.SSEEvent, []decode.Message) error { return nil }

func (j *jsonWatch) unread(id string) { j.t.settle(j.sid, id, j.calls) }

// end clears the calls msgs answer however the body ended: msgs are parsed
// from the bytes the client read, so a message parsed whole reached it
// (mcp-go's client decodes the JSON value and closes the body without
// reading it to EOF).
func (j *jsonWatch) end(msgs []decode.Message) {
	j.t.answered(j.sid, msgs)
}
