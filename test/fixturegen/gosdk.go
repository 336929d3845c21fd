package main

// The go-sdk rig: real github.com/modelcontextprotocol/go-sdk servers and
// clients on loopback TCP, every client byte passing through the recording
// proxy of test/pcaprec. Faults are injected by proxy hooks (this file's
// sseCut and rewrite helpers) or by deliberately broken backends written per
// scenario.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// Protocol revisions the go-sdk scenarios pin. Sessions and resumption exist
// up to revisionSessions; revisionSessionless removed them.
const (
	revisionSessions    = "2025-11-25"
	revisionSessionless = "2026-07-28"
)

// eventPace spaces the events a tool emits, so each arrives at the proxy in
// its own read and a cut lands between events, not inside a coalesced write.
const eventPace = 60 * time.Millisecond

// slowWriteHold bounds how long slow_write blocks when nobody releases it:
// long enough to be in flight when a session is lost, short enough that a
// scenario still finishes in a few seconds.
const slowWriteHold = 3 * time.Second

// streamArgs are the arguments of the "stream" and "slow_write" tools.
type streamArgs struct {
	// Steps is how many notifications to emit before returning.
	Steps int `json:"steps"`
	// Label is echoed in every notification and the result, so a hash of
	// the arguments differs between calls that should differ.
	Label string `json:"label,omitempty"`
	// CloseAfter, when > 0, makes "stream" close its SSE stream from the
	// server side after that step (go-sdk's CloseSSEStream, SEP-1699
	// polling), asking the client to come back after closeRetry.
	CloseAfter int `json:"close_after,omitempty"`
}

// closeRetry is the retry delay a server-closed polling stream asks for.
const closeRetry = 150 * time.Millisecond

// stepNotifier emits one notification per step on the request's stream:
// progress when the client sent a progress token, a log message otherwise
// (replay scenarios use logs so a replayed event is not also a repeated
// progress value, which would be a second, different finding).
type stepNotifier func(ctx context.Context, req *mcp.CallToolRequest, step, total int, label string) error

func notifyStep(ctx context.Context, req *mcp.CallToolRequest, step, total int, label string) error {
	if tok := req.Params.GetProgressToken(); tok != nil {
		return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: tok, Progress: float64(step), Total: float64(total),
			Message: fmt.Sprintf("%s step %d", label, step)})
	}
	//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; these are 2025-11-25 sessions
	return req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "fixture",
		Data: fmt.Sprintf("%s step %d of %d", label, step, total)})
}

// toolSet configures newGoServer.
type toolSet struct {
	// notify replaces notifyStep (progress-replay uses a broken one).
	notify stepNotifier
	// release, when non-nil, ends slow_write early once closed.
	release <-chan struct{}
}

// newGoServer builds a go-sdk server with the fixture tools:
//   - stream: emits Steps notifications eventPace apart, then returns;
//   - slow_write: emits Steps notifications, then blocks (up to
//     slowWriteHold) before reporting the write done, so it is in flight
//     when a session is lost;
//   - broadcast: emits Steps log messages on the standalone GET stream;
//   - echo: returns its label at once.
func newGoServer(ts toolSet) *mcp.Server { return newGoServerOpts(ts, nil) }

// newGoServerOpts is newGoServer with go-sdk server options.
func newGoServerOpts(ts toolSet, opts *mcp.ServerOptions) *mcp.Server {
	notify := ts.notify
	if notify == nil {
		notify = notifyStep
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "fixture-go-server", Version: "1.0.0"}, opts)
	emit := func(ctx context.Context, req *mcp.CallToolRequest, a streamArgs) error {
		for i := 1; i <= a.Steps; i++ {
			if err := notify(ctx, req, i, a.Steps, a.Label); err != nil {
				return err
			}
			time.Sleep(eventPace)
			if i == a.CloseAfter && req.Extra != nil && req.Extra.CloseSSEStream != nil {
				req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: closeRetry})
			}
		}
		return nil
	}
	mcp.AddTool(s, &mcp.Tool{Name: "stream", Description: "emits notifications, then returns"},
		func(ctx context.Context, req *mcp.CallToolRequest, a streamArgs) (*mcp.CallToolResult, any, error) {
			if err := emit(ctx, req, a); err != nil {
				return nil, nil, err
			}
			return textResult(fmt.Sprintf("%s: %d steps done", a.Label, a.Steps)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow_write", Description: "emits notifications, then performs a slow write"},
		func(ctx context.Context, req *mcp.CallToolRequest, a streamArgs) (*mcp.CallToolResult, any, error) {
			if err := emit(ctx, req, a); err != nil {
				return nil, nil, err
			}
			select {
			case <-ts.release:
			case <-ctx.Done():
			case <-time.After(slowWriteHold):
			}
			return textResult(a.Label + ": written"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "broadcast", Description: "emits log messages on the session's standalone stream"},
		func(ctx context.Context, req *mcp.CallToolRequest, a streamArgs) (*mcp.CallToolResult, any, error) {
			for i := 1; i <= a.Steps; i++ {
				// A context not tied to the request routes the message to
				// the standalone GET stream, not to this call's stream.
				//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; these are 2025-11-25 sessions
				err := req.Session.Log(context.Background(), &mcp.LoggingMessageParams{Level: "info", Logger: "fixture",
					Data: fmt.Sprintf("%s broadcast %d of %d", a.Label, i, a.Steps)})
				if err != nil {
					return nil, nil, err
				}
				time.Sleep(eventPace)
			}
			return textResult(a.Label + ": broadcast"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "returns its label"},
		func(ctx context.Context, req *mcp.CallToolRequest, a streamArgs) (*mcp.CallToolResult, any, error) {
			return textResult(a.Label), nil, nil
		})
	return s
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// goHandler serves srv over Streamable HTTP. A nil store disables
// resumption (no event ids at all).
func goHandler(srv *mcp.Server, opts mcp.StreamableHTTPOptions) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &opts)
}

// rig is one recording: a pcap, a proxy in front of one or more backends.
type rig struct {
	rec      *pcaprec.Recorder
	proxy    *pcaprec.Proxy
	backends []*httptest.Server
	// route picks the backend index for the n-th proxied connection;
	// nil sends everything to backend 0.
	route func(n int) int
	hooks []func(n int) pcaprec.Hooks
	// vars fill {name} placeholders in the spec once the run is over: ids
	// are random per run, and the spec names the exact ones in the pcap.
	vars map[string]string
}

// newRig starts backends for handlers and a recording proxy writing path.
// route and hooks may be set on the returned rig before the first request.
func newRig(path string, handlers ...http.Handler) (*rig, error) {
	rec, err := pcaprec.Create(path)
	if err != nil {
		return nil, err
	}
	r := &rig{rec: rec, vars: map[string]string{}}
	for _, h := range handlers {
		r.backends = append(r.backends, httptest.NewServer(h))
	}
	r.proxy, err = pcaprec.NewProxy(rec, func(n int) string {
		i := 0
		if r.route != nil {
			i = r.route(n)
		}
		return r.backends[i].Listener.Addr().String()
	}, func(n int) pcaprec.Hooks {
		return chainHooks(r.hooks, n)
	})
	if err != nil {
		r.closeBackends()
		rec.Close()
		return nil, err
	}
	return r, nil
}

// recordGo runs one scenario: it starts a rig for handlers, lets drive run
// real clients through it (drive may add proxy hooks and routes first),
// closes everything so the pcap is complete, and only then, if all went as
// the scenario intends, writes the spec.
func recordGo(dir, name string, handlers []http.Handler, drive func(r *rig) error, spec ...string) error {
	r, err := newRig(pcapPath(dir, name), handlers...)
	if err != nil {
		return err
	}
	err = drive(r)
	if ferr := r.finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	for i, line := range spec {
		for k, v := range r.vars {
			line = strings.ReplaceAll(line, "{"+k+"}", v)
		}
		if strings.Contains(line, "{") {
			return fmt.Errorf("spec line with an unfilled placeholder: %s", line)
		}
		spec[i] = line
	}
	return writeSpec(dir, name, spec...)
}

// noteCut records the ids around the event a cut was placed at, for the
// spec: {cut} is that event's id and {cut-1} the id before it on the same
// go-sdk stream (the cursor a client resumes with after a mid-event cut).
func (r *rig) noteCut(c *sseCut) {
	id := c.cutID()
	r.vars["cut"] = id
	if s, n, ok := splitEventID(id); ok && n > 0 {
		r.vars["cut-1"] = fmt.Sprintf("%s_%d", s, n-1)
	}
}

// url is the MCP endpoint as clients see it (through the proxy).
func (r *rig) url() string { return r.proxy.URL("/mcp") }

func (r *rig) closeBackends() {
	for _, b := range r.backends {
		// Hanging SSE responses would make Close wait; cut them first.
		b.CloseClientConnections()
		b.Close()
	}
}

// finish closes the proxy (recording every FIN), the backends and the file.
func (r *rig) finish() error {
	// Let in-flight bytes (a DELETE's answer, a last FIN) reach the pcap.
	time.Sleep(50 * time.Millisecond)
	perr := r.proxy.Close()
	r.closeBackends()
	if err := r.rec.Close(); err != nil {
		return err
	}
	if perr != nil && !errors.Is(perr, errClosedListener) {
		return perr
	}
	return nil
}

var errClosedListener = errors.New("use of closed network connection")

// chainHooks composes several hook sets for one connection: bytes pass
// through each in order; the first non-Forward action wins.
func chainHooks(hs []func(n int) pcaprec.Hooks, n int) pcaprec.Hooks {
	var fc, fs []func([]byte) ([]byte, pcaprec.Action)
	for _, h := range hs {
		x := h(n)
		if x.FromClient != nil {
			fc = append(fc, x.FromClient)
		}
		if x.FromServer != nil {
			fs = append(fs, x.FromServer)
		}
	}
	return pcaprec.Hooks{FromClient: chain(fc), FromServer: chain(fs)}
}

func chain(fns []func([]byte) ([]byte, pcaprec.Action)) func([]byte) ([]byte, pcaprec.Action) {
	if len(fns) == 0 {
		return nil
	}
	return func(p []byte) ([]byte, pcaprec.Action) {
		act := pcaprec.Forward
		for _, f := range fns {
			var a pcaprec.Action
			p, a = f(p)
			if act == pcaprec.Forward {
				act = a
			}
		}
		return p, act
	}
}

// sseCut is a proxy fault: on the first connection whose request contains
// reqMarker, forward the SSE response up to the first event for which match
// is true, then close both sides with FIN. With midEvent false the cut is
// at that event's boundary, after its chunk (a clean end, as a drained
// backend or an idle-timeout proxy produces); with midEvent true it is
// inside that event, after its id line and a few bytes of its data (a
// truncated event). It fires once per rig.
type sseCut struct {
	reqMarker string
	match     func(event string) bool
	midEvent  bool
	// headOnly: cut right after the response head, before any body byte
	// (match is unused; newHeadCut).
	headOnly bool
	// onFire, if set, runs in the proxy just before the cut is forwarded
	// (a drain switching routes and closing idle connections).
	onFire func()
	used   atomic.Bool
	// fired is closed when the cut happened; id is then the SSE id of the
	// event the cut was placed at ("" when it had none).
	fired chan struct{}
	id    string
}

func newSSECut(reqMarker string, match func(event string) bool) *sseCut {
	return &sseCut{reqMarker: reqMarker, match: match, fired: make(chan struct{})}
}

// newHeadCut is a cut on the first connection whose request contains
// reqMarker right after its response head: a stream broken before any event.
func newHeadCut(reqMarker string) *sseCut {
	return &sseCut{reqMarker: reqMarker, headOnly: true, fired: make(chan struct{})}
}

// dataKept is how much of a cut event's data line a mid-event cut forwards:
// enough to show the event had started, never the whole JSON message.
const dataKept = len("data: ") + 12

func (c *sseCut) hooks(int) pcaprec.Hooks {
	var mu sync.Mutex
	armed := false
	var st cutState
	return pcaprec.Hooks{
		FromClient: func(p []byte) ([]byte, pcaprec.Action) {
			mu.Lock()
			defer mu.Unlock()
			if !c.used.Load() && bytes.Contains(p, []byte(c.reqMarker)) {
				armed = true
			}
			return p, pcaprec.Forward
		},
		FromServer: func(p []byte) ([]byte, pcaprec.Action) {
			mu.Lock()
			defer mu.Unlock()
			if !armed {
				return p, pcaprec.Forward
			}
			feed := st.feed
			if c.headOnly {
				feed = st.feedHead
			}
			out, cutNow := feed(c, p)
			if !cutNow {
				return out, pcaprec.Forward
			}
			armed = false
			if c.used.CompareAndSwap(false, true) {
				c.id = st.cutEventID
				if c.onFire != nil {
					c.onFire()
				}
				close(c.fired)
			}
			return out, pcaprec.Close
		},
	}
}

// cutState follows one armed response. Bytes are forwarded as they come,
// except that once the target event may be in them nothing past the cut
// point is released, whatever the read sizes.
type cutState struct {
	seg        []byte // bytes since the last event boundary passed
	unsent     []byte // bytes received and not yet forwarded (a suffix of the stream)
	cutEventID string
}

// feed takes one read and returns the bytes to forward now and whether
// the connection is to be closed after them.
func (st *cutState) feed(c *sseCut, p []byte) ([]byte, bool) {
	st.seg = append(st.seg, p...)
	st.unsent = append(st.unsent, p...)
	for {
		i := bytes.Index(st.seg, []byte("\n\n"))
		if i < 0 {
			break
		}
		end := i + 2
		if !c.match(string(st.seg[:end])) {
			st.seg = st.seg[end:]
			continue
		}
		if c.midEvent {
			return st.release(c.midCut(st.seg[:end]), true)
		}
		// Include the chunk's trailing CRLF, so the client sees a complete
		// chunk then FIN; wait for it if it has not arrived yet.
		if len(st.seg) < end+2 {
			return st.release(end, false)
		}
		if bytes.HasPrefix(st.seg[end:], []byte("\r\n")) {
			end += 2
		}
		return st.release(end, true)
	}
	if c.midEvent && c.match(string(st.seg)) {
		// The target event's id line is here, its end is not.
		if d := bytes.Index(st.seg, []byte("\ndata: ")); d >= 0 && len(st.seg) >= d+1+dataKept {
			return st.release(d+1+dataKept, true)
		}
		// Hold everything after the id line until enough data arrives.
		idLine := bytes.Index(st.seg, []byte("\nid: ")) + 1
		if strings.HasPrefix(string(st.seg), "id: ") {
			idLine = 0
		}
		idEnd := idLine + bytes.IndexByte(st.seg[idLine:], '\n') + 1
		return st.release(idEnd, false)
	}
	return st.release(len(st.seg), false)
}

// feedHead takes one read of a headOnly cut's response: everything up to
// the end of the head is forwarded, then the connection is closed.
func (st *cutState) feedHead(_ *sseCut, p []byte) ([]byte, bool) {
	st.seg = append(st.seg, p...)
	st.unsent = append(st.unsent, p...)
	if i := bytes.Index(st.seg, []byte("\r\n\r\n")); i >= 0 {
		out, _ := st.release(i+4, false)
		return out, true
	}
	return st.release(len(st.seg), false)
}

// release forwards the unsent bytes up to offset upTo in seg (and all
// before seg); with cut it records the cut event.
func (st *cutState) release(upTo int, cut bool) ([]byte, bool) {
	n := len(st.unsent) - (len(st.seg) - upTo)
	out := append([]byte(nil), st.unsent[:n]...)
	st.unsent = st.unsent[n:]
	if cut {
		st.cutEventID = eventID(st.seg[:upTo])
	}
	return out, cut
}

// midCut is where a mid-event cut falls in the complete target event ev:
// dataKept bytes into its data line, never past the event's end.
func (c *sseCut) midCut(ev []byte) int {
	d := bytes.Index(ev, []byte("\ndata: "))
	if d < 0 {
		return len(ev) - 2
	}
	return min(d+1+dataKept, len(ev)-2)
}

// cutID is the id of the event the cut was placed at; valid once fired.
func (c *sseCut) cutID() string {
	<-c.fired
	return c.id
}

// waitFired waits for the cut or the context.
func (c *sseCut) waitFired(ctx context.Context) error {
	select {
	case <-c.fired:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("proxy cut never fired: %w", ctx.Err())
	}
}

// newGoClient returns an SDK client; logs and progress are accepted and
// discarded (the capture is what matters).
func newGoClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "fixture-go-client", Version: "1.0.0"}, &mcp.ClientOptions{
		//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; the fixtures pin 2025-11-25
		LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) {},
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {},
	})
}

// connectGo opens a client session to url pinned to revision (empty: the
// SDK default). The HTTP client is private, so its keep-alive pool is not
// shared between scenarios, and its connections are closed with the
// session.
func connectGo(ctx context.Context, url, revision string, standaloneGET bool) (*mcp.ClientSession, *http.Client, error) {
	return connectGoVia(ctx, url, revision, standaloneGET, nil)
}

// connectGoVia is connectGo with the client's HTTP transport wrapped by via
// (nil: none).
func connectGoVia(ctx context.Context, url, revision string, standaloneGET bool, via func(http.RoundTripper) http.RoundTripper) (*mcp.ClientSession, *http.Client, error) {
	var rt http.RoundTripper = &http.Transport{}
	if via != nil {
		rt = via(rt)
	}
	hc := &http.Client{Transport: rt}
	t := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: !standaloneGET, MaxRetries: 2}
	var opts *mcp.ClientSessionOptions
	if revision != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: revision}
	}
	cs, err := newGoClient().Connect(ctx, t, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	return cs, hc, nil
}

// callTool calls name with args and a progress token when withProgress.
func callTool(ctx context.Context, cs *mcp.ClientSession, name string, a streamArgs, progressToken any) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: name, Arguments: a}
	if progressToken != nil {
		p.SetProgressToken(progressToken)
	}
	return cs.CallTool(ctx, p)
}

// resultText is the first text content of a result, for checking that a
// call got the answer the scenario expects.
func resultText(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

// withGoSession connects a client session, runs use, and closes the session
// (DELETE when the session still exists) and the client's idle
// connections, so the capture ends with every exchange complete.
func withGoSession(ctx context.Context, url, revision string, standaloneGET bool, use func(cs *mcp.ClientSession) error) error {
	return withGoSessionVia(ctx, url, revision, standaloneGET, nil, use)
}

// withGoSessionVia is withGoSession over connectGoVia.
func withGoSessionVia(ctx context.Context, url, revision string, standaloneGET bool, via func(http.RoundTripper) http.RoundTripper, use func(cs *mcp.ClientSession) error) error {
	cs, hc, err := connectGoVia(ctx, url, revision, standaloneGET, via)
	if err != nil {
		return err
	}
	err = use(cs)
	cs.Close()
	hc.CloseIdleConnections()
	return err
}

// expectResult calls a tool and checks its result text, so a scenario
// fails loudly when the SDKs did not do what its spec claims.
func expectResult(ctx context.Context, cs *mcp.ClientSession, tool string, a streamArgs, progressToken any, want string) error {
	res, err := callTool(ctx, cs, tool, a, progressToken)
	if err != nil {
		return fmt.Errorf("%s call: %w", tool, err)
	}
	if got := resultText(res); got != want {
		return fmt.Errorf("%s result %q, want %q", tool, got, want)
	}
	return nil
}

// eventIndex matches an SSE event whose go-sdk id (<stream>_<index>) has
// this index; stream ids are random per run, indexes are not.
func eventIndex(i int) func(string) bool {
	suffix := fmt.Sprintf("_%d\n", i)
	return func(ev string) bool {
		for _, line := range strings.SplitAfter(ev, "\n") {
			if strings.HasPrefix(line, "id: ") && strings.HasSuffix(line, suffix) {
				return true
			}
		}
		return false
	}
}

// streamCallThroughCut is the shape most resume scenarios share: one
// session (logs on when logs is set), one "stream" call whose SSE stream
// the proxy cuts, which the SDK client must complete by resuming.
func streamCallThroughCut(ctx context.Context, r *rig, cut *sseCut, logs bool, a streamArgs, progressToken any) error {
	r.hooks = append(r.hooks, cut.hooks)
	return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
		if logs {
			if err := withLogs(ctx, cs); err != nil {
				return err
			}
		}
		want := fmt.Sprintf("%s: %d steps done", a.Label, a.Steps)
		if err := expectResult(ctx, cs, "stream", a, progressToken, want); err != nil {
			return err
		}
		if err := cut.waitFired(ctx); err != nil {
			return err
		}
		r.noteCut(cut)
		return nil
	})
}
