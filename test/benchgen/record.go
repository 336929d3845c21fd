package main

// Live recording of the template: real go-sdk v1.8.0 clients and a real
// go-sdk server on loopback, every byte passing through the recording proxy
// of test/pcaprec. Nothing here is synthesized; the only fault is the
// proxy cutting some standalone GET streams at an event boundary, which the
// go-sdk client then resumes with Last-Event-ID.

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

// revision is pinned because go-sdk defaults to 2026-07-28, which has no
// sessions and no resumption: the traffic this benchmark is about.
const revision = "2025-11-25"

// stepPace spaces progress notifications so each leaves the server in its
// own write, as a real long-running tool's would; short, so recording a few
// hundred sessions takes seconds.
const stepPace = 3 * time.Millisecond

// signalTimeout bounds each wait for something the proxy must see (the
// standalone GET opening, the resume after a cut). The go-sdk client waits
// 1-2 s before it resumes a cut stream, so this leaves ample room on a busy
// machine.
const signalTimeout = 15 * time.Second

// cutAfterEvents is how many id-carrying events a cut standalone GET stream
// delivers before the proxy closes it.
const cutAfterEvents = 2

// broadcastSteps is how many log messages the broadcast tool sends on the
// standalone GET stream: more than cutAfterEvents, so a cut stream has
// stored events the resume must replay.
const broadcastSteps = 4

// toolArgs are the arguments of every tool of the template server.
type toolArgs struct {
	Steps int    `json:"steps"`
	Label string `json:"label"`
}

// newServer builds a go-sdk server with three tools:
//   - stream: one progress notification per step on the call's own SSE
//     stream, then a result;
//   - broadcast: one log message per step sent with a detached context, so
//     go-sdk routes it to the session's standalone GET stream;
//   - echo: its label, at once.
func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "benchgen-server", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "stream", Description: "streams progress, then returns"},
		func(ctx context.Context, req *mcp.CallToolRequest, a toolArgs) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			err := eachStep(a.Steps, func(i int) error {
				if tok == nil {
					return nil
				}
				return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
					Progress: float64(i), Total: float64(a.Steps), Message: fmt.Sprintf("%s step %d", a.Label, i)})
			})
			return textResult(fmt.Sprintf("%s: %d steps", a.Label, a.Steps)), nil, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "broadcast", Description: "logs on the standalone stream"},
		func(ctx context.Context, req *mcp.CallToolRequest, a toolArgs) (*mcp.CallToolResult, any, error) {
			err := eachStep(a.Steps, func(i int) error {
				// A detached context: go-sdk sends it on the standalone GET
				// stream rather than on this call's response.
				//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; these are 2025-11-25 sessions
				return req.Session.Log(context.Background(), &mcp.LoggingMessageParams{Level: "info",
					Logger: "benchgen", Data: fmt.Sprintf("%s broadcast %d of %d", a.Label, i, a.Steps)})
			})
			return textResult(a.Label + ": broadcast"), nil, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "returns its label"},
		func(ctx context.Context, req *mcp.CallToolRequest, a toolArgs) (*mcp.CallToolResult, any, error) {
			return textResult(a.Label), nil, nil
		})
	return s
}

// eachStep runs send for steps 1..n, stepPace apart, and stops at the
// first error.
func eachStep(n int, send func(step int) error) error {
	for i := 1; i <= n; i++ {
		if err := send(i); err != nil {
			return err
		}
		time.Sleep(stepPace)
	}
	return nil
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// sessionSignals is what the proxy has seen of one session's standalone GET
// streams, so a client goroutine can wait for it.
type sessionSignals struct {
	getOpen, resumed      chan struct{}
	openOnce, resumedOnce sync.Once
	cutDone               atomic.Bool // the one cut of this session happened
	// cut: this session's standalone stream is to be cut, for every
	// other session in the order they were registered, so a recording of
	// any size has cuts (a choice by random session id made none in 8
	// sessions one time in 256).
	cut bool
}

// registry maps session ids to their signals. Either side (the proxy hook
// or the client goroutine) may create an entry first.
type registry struct {
	mu sync.Mutex
	m  map[string]*sessionSignals
}

func (r *registry) get(sid string) *sessionSignals {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.m[sid]
	if !ok {
		s = &sessionSignals{getOpen: make(chan struct{}), resumed: make(chan struct{}), cut: len(r.m)%2 == 0}
		r.m[sid] = s
	}
	return s
}

// requestHead is what the hook reads from a request head.
type requestHead struct {
	method, sessionID string
	hasLastEventID    bool
}

// parseRequestHead reads a request head at the start of p; ok is false when
// p does not start with one (a body continuing, or a head split across
// reads, which go's HTTP client does not do for these small heads).
func parseRequestHead(p []byte) (h requestHead, ok bool) {
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 {
		return h, false
	}
	lines := strings.Split(string(p[:end]), "\r\n")
	method, _, found := strings.Cut(lines[0], " ")
	if !found || !strings.HasSuffix(lines[0], " HTTP/1.1") {
		return h, false
	}
	h.method = method
	for _, l := range lines[1:] {
		name, value, _ := strings.Cut(l, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "mcp-session-id":
			h.sessionID = strings.TrimSpace(value)
		case "last-event-id":
			h.hasLastEventID = true
		}
	}
	return h, true
}

// getStreamHooks watches one proxied connection. When it carries a
// standalone GET (no Last-Event-ID) it signals that the stream opened and,
// for a session chosen to be cut (sessionSignals.cut), closes the
// connection with FIN right after the cutAfterEvents-th event carrying an
// id, at the event's chunk boundary. When it carries a resuming GET it signals the resume.
func (r *registry) getStreamHooks(int) pcaprec.Hooks {
	var mu sync.Mutex
	var cur *requestHead // the request whose response is flowing
	var cutting bool
	var pending []byte // server bytes after the last event boundary
	var idEvents int
	return pcaprec.Hooks{
		FromClient: func(p []byte) ([]byte, pcaprec.Action) {
			mu.Lock()
			defer mu.Unlock()
			if h, ok := parseRequestHead(p); ok {
				cur, cutting, pending, idEvents = &h, false, pending[:0], 0
				if h.method != http.MethodGet || h.sessionID == "" {
					cur = nil
				}
			}
			return p, pcaprec.Forward
		},
		FromServer: func(p []byte) ([]byte, pcaprec.Action) {
			mu.Lock()
			defer mu.Unlock()
			if cur == nil {
				return p, pcaprec.Forward
			}
			base := 0
			if bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
				sig := r.get(cur.sessionID)
				if !bytes.HasPrefix(p, []byte("HTTP/1.1 200")) {
					cur = nil
					return p, pcaprec.Forward
				}
				if cur.hasLastEventID {
					sig.resumedOnce.Do(func() { close(sig.resumed) })
					cur = nil
					return p, pcaprec.Forward
				}
				sig.openOnce.Do(func() { close(sig.getOpen) })
				cutting = sig.cut && sig.cutDone.CompareAndSwap(false, true)
				if !cutting {
					cur = nil
					return p, pcaprec.Forward
				}
				// pending holds only the body; index j of pending is
				// p[j+head] in this read.
				head := bytes.Index(p, []byte("\r\n\r\n")) + 4
				base = -head
				pending = append(pending[:0], p[head:]...)
			} else {
				// index j of pending is p[j-base] in this read.
				base = len(pending)
				pending = append(pending, p...)
			}
			start := 0
			for {
				end := bytes.Index(pending[start:], []byte("\n\n"))
				if end < 0 {
					break
				}
				end += start + 2
				if hasIDLine(pending[start:end]) {
					idEvents++
				}
				if idEvents == cutAfterEvents {
					if bytes.HasPrefix(pending[end:], []byte("\r\n")) {
						end += 2
					}
					cur = nil
					return p[:end-base], pcaprec.Close
				}
				start = end
			}
			pending = append(pending[:0], pending[start:]...)
			return p, pcaprec.Forward
		},
	}
}

// hasIDLine reports whether an SSE event (possibly preceded by a chunk-size
// line) has an id field.
func hasIDLine(ev []byte) bool {
	for _, line := range bytes.Split(ev, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("id:")) {
			return true
		}
	}
	return false
}

// templateStats says what recording the template did.
type templateStats struct {
	Sessions, Failed, Cut, Deleted int
	Duration                       time.Duration
}

// recordTemplate runs n sessions, at most concurrency at once, and writes
// their traffic to path.
func recordTemplate(ctx context.Context, path string, n, concurrency int) (templateStats, error) {
	var st templateStats
	rec, err := pcaprec.Create(path)
	if err != nil {
		return st, err
	}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv() },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	backend := httptest.NewServer(handler)
	reg := &registry{m: map[string]*sessionSignals{}}
	proxy, err := pcaprec.NewProxy(rec, func(int) string { return backend.Listener.Addr().String() }, reg.getStreamHooks)
	if err != nil {
		backend.Close()
		rec.Close()
		return st, err
	}
	began := time.Now()
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	var abandoned []func()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out, err := runSession(ctx, proxy.URL("/mcp"), reg, i)
			mu.Lock()
			defer mu.Unlock()
			st.Sessions++
			if err != nil {
				st.Failed++
				if firstErr == nil {
					firstErr = fmt.Errorf("session %d: %w", i, err)
				}
			}
			if out.cut {
				st.Cut++
			}
			if out.deleted {
				st.Deleted++
			}
			if out.abandon != nil {
				abandoned = append(abandoned, out.abandon)
			}
		}()
	}
	wg.Wait()
	// Let the last DELETE answers and FINs reach the recorder.
	time.Sleep(100 * time.Millisecond)
	st.Duration = time.Since(began)
	perr := proxy.Close()
	for _, f := range abandoned {
		f()
	}
	backend.CloseClientConnections()
	backend.Close()
	if err := rec.Close(); err != nil {
		return st, err
	}
	if perr != nil && !strings.Contains(perr.Error(), "use of closed network connection") {
		return st, perr
	}
	// A few sessions may lose a race with a loaded machine; a template that
	// is mostly failures is not the traffic this benchmark claims.
	if st.Failed*10 > st.Sessions {
		return st, fmt.Errorf("%d of %d sessions failed; first: %w", st.Failed, st.Sessions, firstErr)
	}
	return st, nil
}

// One server for all sessions, as one backend process serves many clients.
var (
	serverOnce sync.Once
	server     *mcp.Server
)

func srv() *mcp.Server {
	serverOnce.Do(func() { server = newServer() })
	return server
}

// sessionOutcome is what one session did.
type sessionOutcome struct {
	cut, deleted bool
	// abandon releases a session left open on purpose (no DELETE), after
	// the proxy has closed its connections.
	abandon func()
}

// runSession is one client's life: initialize (the SDK also sends
// notifications/initialized and opens the standalone GET), logging/setLevel,
// a tools/call with progress streamed over SSE, a broadcast on the GET
// stream (cut and resumed for half the sessions), an echo, and then DELETE
// for three sessions in four; the fourth is abandoned with its GET open,
// as a client that crashed would leave it.
func runSession(ctx context.Context, url string, reg *registry, i int) (out sessionOutcome, err error) {
	hc := &http.Client{Transport: &http.Transport{}}
	t := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: 2}
	client := mcp.NewClient(&mcp.Implementation{Name: "benchgen-client", Version: "1.0.0"}, &mcp.ClientOptions{
		//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; these are 2025-11-25 sessions
		LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) {},
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {},
	})
	cs, err := client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		return out, fmt.Errorf("connect: %w", err)
	}
	abandon := i%4 == 3
	defer func() {
		if abandon && err == nil {
			out.abandon = func() { cs.Close(); hc.CloseIdleConnections() }
			return
		}
		cs.Close()
		hc.CloseIdleConnections()
		out.deleted = err == nil
	}()
	sid := cs.ID()
	sig := reg.get(sid)
	// The server sends log messages only once the client has set a level.
	//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; these are 2025-11-25 sessions
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		return out, fmt.Errorf("setLevel: %w", err)
	}
	if err := wait(ctx, sig.getOpen, "standalone GET"); err != nil {
		return out, err
	}
	label := fmt.Sprintf("s%d", i)
	p := &mcp.CallToolParams{Name: "stream", Arguments: toolArgs{Steps: 3 + i%6, Label: label}}
	p.SetProgressToken(fmt.Sprintf("tok-%d", i))
	if _, err := cs.CallTool(ctx, p); err != nil {
		return out, fmt.Errorf("stream: %w", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "broadcast", Arguments: toolArgs{Steps: broadcastSteps, Label: label}}); err != nil {
		return out, fmt.Errorf("broadcast: %w", err)
	}
	if sig.cut {
		out.cut = true
		if err := wait(ctx, sig.resumed, "resume of the cut GET stream"); err != nil {
			return out, err
		}
		// Let the replayed events arrive before the session moves on.
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: toolArgs{Label: label}}); err != nil {
		return out, fmt.Errorf("echo: %w", err)
	}
	return out, nil
}

var errTimeout = errors.New("timed out")

func wait(ctx context.Context, c <-chan struct{}, what string) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	case <-time.After(signalTimeout):
		return fmt.Errorf("waiting for %s: %w", what, errTimeout)
	}
}
