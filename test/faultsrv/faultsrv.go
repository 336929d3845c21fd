// Package faultsrv is a real go-sdk MCP server (revision 2025-11-25
// sessions, an event store) behind a deliberately faulty front: the first
// tools/call stream is cut after a few events, and the client's resume is
// answered as the fault says. Tests drive real clients against it.
package faultsrv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Faults: how the resume of the cut stream is answered.
const (
	Correct        = "correct"         // the server's own resume: nothing wrong
	Swap           = "swap"            // answered 200 under another session id
	Replay         = "replay"          // the stream restarts at the cursor's event
	ReplayEarlier  = "replay-earlier"  // ... at the event before the cursor's
	ResetDelivered = "reset-delivered" // events renumbered from the stream's _0 (a store that lost its count)
	ResetUnknown   = "reset-unknown"   // events renumbered under ids never seen (a new store)
	NotFound       = "404"             // the session is gone
)

// All is every fault.
var All = []string{Correct, Swap, Replay, ReplayEarlier, ResetDelivered, ResetUnknown, NotFound}

// Tool is the server's one tool: Steps progress notifications EventPace
// apart, then "done".
const (
	Tool      = "steps"
	Steps     = 4
	EventPace = 20 * time.Millisecond
	// CutAfter is how many SSE events the first tools/call stream carries
	// before its connection is dropped.
	CutAfter = 3
	// ResumeRetry is the SSE retry (milliseconds) the cut stream asks
	// for, so that a client resumes at once rather than after its backoff.
	ResumeRetry = 10
)

// Start serves a go-sdk server with the Tool behind fault (Front); Close
// it when done.
func Start(fault string) *httptest.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "steps", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: Tool}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		for i := 1; i <= Steps; i++ {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: Steps})
			time.Sleep(EventPace)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	return Serve(Front(handler, fault))
}

// Serve serves h (started; Close it when done) with each request's
// connection in its context, so that Cut can drop it.
func Serve(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	srv.Start()
	return srv
}

// Front wraps a go-sdk server's handler (served by Serve): the first
// tools/call stream is cut after CutAfter events (the connection dropped,
// as a drained backend does), and the client's resume is answered as
// fault says.
func Front(next http.Handler, fault string) http.Handler { return &front{next: next, fault: fault} }

// Cut is w dropping r's connection (served by Serve) once the response
// carried events complete SSE events; retry, when not 0, is sent first
// (milliseconds). The stream breaks mid-call: the SDK writes events from
// its session's goroutine, not the handler's, so aborting the handler
// would not do.
func Cut(w http.ResponseWriter, r *http.Request, events, retry int) http.ResponseWriter {
	c := &cutAfter{ResponseWriter: w, events: events, conn: r.Context().Value(connKey{}).(net.Conn)}
	if retry > 0 {
		c.retry = fmt.Sprintf("retry: %d\n", retry)
	}
	return c
}

// front applies the fault.
type front struct {
	next  http.Handler
	fault string
	cut   atomic.Bool
}

type connKey struct{}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && !f.cut.Load():
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if strings.Contains(string(body), `"tools/call"`) {
			f.cut.Store(true)
			f.next.ServeHTTP(Cut(w, r, CutAfter, ResumeRetry), r)
			return
		}
	case r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "":
		// go-sdk's event ids are <stream>_<index>: the fault knows its
		// server (a detector must not).
		id := r.Header.Get("Last-Event-ID")
		stream, n := id, 0
		if i := strings.LastIndexByte(id, '_'); i >= 0 {
			stream = id[:i]
			fmt.Sscan(id[i+1:], &n)
		}
		switch f.fault {
		case NotFound:
			http.NotFound(w, r)
			return
		case Swap:
			w = &swapSession{ResponseWriter: w}
		case Replay:
			r.Header.Set("Last-Event-ID", fmt.Sprintf("%s_%d", stream, n-1))
		case ReplayEarlier:
			r.Header.Set("Last-Event-ID", fmt.Sprintf("%s_%d", stream, n-2))
		case ResetDelivered:
			w = &renumber{ResponseWriter: w, prefix: stream + "_"}
		case ResetUnknown:
			w = &renumber{ResponseWriter: w, prefix: "NEWSTORE_"}
		}
	}
	f.next.ServeHTTP(w, r)
}

// cutAfter is Cut's writer.
type cutAfter struct {
	http.ResponseWriter
	events int
	retry  string
	conn   net.Conn
}

func (c *cutAfter) Write(p []byte) (int, error) {
	if c.events <= 0 {
		return 0, net.ErrClosed
	}
	if c.retry != "" {
		if _, err := io.WriteString(c.ResponseWriter, c.retry); err != nil {
			return 0, err
		}
		c.retry = ""
	}
	n, err := c.ResponseWriter.Write(p)
	if c.events -= strings.Count(string(p), "\n\n"); c.events <= 0 {
		c.ResponseWriter.(http.Flusher).Flush()
		c.conn.Close()
	}
	return n, err
}

func (c *cutAfter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

// swapSession answers under another session id.
type swapSession struct {
	http.ResponseWriter
	wrote bool
}

func (s *swapSession) WriteHeader(code int) {
	if !s.wrote {
		s.wrote = true
		s.Header().Set("Mcp-Session-Id", "MINTED-BY-ANOTHER-BACKEND")
		s.ResponseWriter.WriteHeader(code)
	}
}

func (s *swapSession) Write(p []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return s.ResponseWriter.Write(p)
}

func (s *swapSession) Flush() {
	s.WriteHeader(http.StatusOK)
	s.ResponseWriter.(http.Flusher).Flush()
}

// renumber gives the events of a response ids prefix0, prefix1, ...
// (go-sdk writes one event per Write).
type renumber struct {
	http.ResponseWriter
	prefix string
	n      int
}

var idLine = regexp.MustCompile(`(?m)^id: .*$`)

func (r *renumber) Write(p []byte) (int, error) {
	out := idLine.ReplaceAllStringFunc(string(p), func(string) string {
		r.n++
		return fmt.Sprintf("id: %s%d", r.prefix, r.n-1)
	})
	if _, err := r.ResponseWriter.Write([]byte(out)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (r *renumber) Flush() { r.ResponseWriter.(http.Flusher).Flush() }

// Client is a go-sdk client that accepts progress notifications.
func Client() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "faultsrv-client", Version: "1"},
		&mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {}})
}

// Revision2025 pins a go-sdk client to revision 2025-11-25, the last with
// sessions and resumption (go-sdk v1.8 would otherwise try 2026-07-28's
// server/discover first).
var Revision2025 = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// Call makes the tool call from a go-sdk client (revision 2025-11-25, one
// resume attempt) whose HTTP goes through hc, against url, and returns the
// result's text.
func Call(ctx context.Context, url string, hc *http.Client) (string, error) {
	cs, err := Client().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: 1}, Revision2025)
	if err != nil {
		return "", err
	}
	defer cs.Close()
	p := &mcp.CallToolParams{Name: Tool, Arguments: map[string]any{}}
	p.SetProgressToken("tok")
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		return "", err
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}
