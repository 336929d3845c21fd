package main

// A server may answer a request on its head alone, before the body has
// arrived (RFC 9112 allows it): a session router that does not know the
// request's Mcp-Session-Id answers 404 at once, while a large tools/call
// body is still on its way. The answer must pair with its request, so the
// refused call is not taken for one in flight when its session was lost.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

const goEarly404Name = "go-early-404-large-call"

func init() {
	register(scenario{name: goEarly404Name,
		desc: "a session router that lost S1 answers a large tools/call 404 on its head, before the body has arrived; the application re-sends the call on a new session",
		run:  runGoEarly404LargeCall})
}

// uploadArgs are the arguments of the "upload" tool: a document large
// enough that its body spans several of the proxy's reads.
type uploadArgs struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// uploadSize is the size of the uploaded document: more than one read of
// the proxy (32 KiB), so part of the body is still to come when the head
// has been forwarded; small enough that the capture, which holds it twice,
// stays around a hundred KB.
const uploadSize = 48 << 10

// uploadDocument is a CSV export of uploadSize bytes, the same on every run.
func uploadDocument() string {
	var b strings.Builder
	for i := 0; b.Len() < uploadSize; i++ {
		fmt.Fprintf(&b, "%05d,widget-%03d,north,%d\n", i, i%997, 4200+i%50)
	}
	return b.String()[:uploadSize]
}

// sessionRouter stands in front of the go-sdk handler as a session-affinity
// router does: it knows the sessions the backend created (mint is the
// backend's GetSessionID) and answers a request carrying any other session
// id 404 on its head, without reading the body. restart makes it forget
// every session, as a router restarted without its table does, while the
// backend behind it still holds them.
type sessionRouter struct {
	next http.Handler

	mu      sync.Mutex
	known   map[string]bool
	refused int
}

func (g *sessionRouter) mint() string {
	id := rand.Text()
	g.mu.Lock()
	g.known[id] = true
	g.mu.Unlock()
	return id
}

func (g *sessionRouter) restart() {
	g.mu.Lock()
	clear(g.known)
	g.mu.Unlock()
}

func (g *sessionRouter) refusals() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused
}

func (g *sessionRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Mcp-Session-Id")
	g.mu.Lock()
	lost := id != "" && !g.known[id]
	if lost {
		g.refused++
	}
	g.mu.Unlock()
	if !lost {
		g.next.ServeHTTP(w, r)
		return
	}
	// Decided on the head: the answer goes out at once, and only then is
	// the body read, to be dropped (keeping the connection), as a router
	// answering on the head does. Without full duplex Go's server would
	// read up to 256 KiB of the body before it writes the head (or, for
	// more, answer with Connection: close).
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		panic(err) // HTTP/1.1 always supports it
	}
	const msg = "session not found\n"
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(msg)))
	w.WriteHeader(http.StatusNotFound)
	w.Write([]byte(msg))
	rc.Flush()
	// Dropped here, not by the server after the handler: Go's server
	// discarding an unread full-duplex body itself panics on the
	// connection's next read ("invalid concurrent Body.Read call").
	io.Copy(io.Discard, r.Body)
}

// slowUplink is a proxy hook in the place of a slow client uplink: on the
// connection of the first request containing marker, whatever the client
// sends after the read that carried the marker is held until the client
// has its answer (answered), so the answer is on the wire before the rest
// of the body, as when a router answers a multi-megabyte upload on its
// head; holding the rest makes that order certain with a body small enough
// to commit. A server that waits for the body gets it after holdLimit, and
// check then fails the scenario.
type slowUplink struct {
	marker string
	used   atomic.Bool
	done   chan struct{} // closed by answered
	once   sync.Once
	// early: the marker's read ended before its body did, so the rest of
	// the body reached the server only after the client had its answer.
	early, timedOut atomic.Bool
}

// holdLimit bounds how long slowUplink holds a body for its answer.
const holdLimit = 5 * time.Second

func newSlowUplink(marker string) *slowUplink {
	return &slowUplink{marker: marker, done: make(chan struct{})}
}

// answered releases the held body: the client has its answer.
func (s *slowUplink) answered() { s.once.Do(func() { close(s.done) }) }

func (s *slowUplink) hooks(int) pcaprec.Hooks {
	armed := false // each direction of a connection is read by one goroutine
	return pcaprec.Hooks{FromClient: func(p []byte) ([]byte, pcaprec.Action) {
		if armed {
			select {
			case <-s.done:
			case <-time.After(holdLimit):
				s.timedOut.Store(true)
			}
			return p, pcaprec.Forward
		}
		if bytes.Contains(p, []byte(s.marker)) && s.used.CompareAndSwap(false, true) {
			armed = true
			s.early.Store(bodyUnfinished(p))
		}
		return p, pcaprec.Forward
	}}
}

// bodyUnfinished reports whether p holds a request head and fewer body bytes
// than its Content-Length.
func bodyUnfinished(p []byte) bool {
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	for _, line := range strings.Split(string(p[:end]), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Length") {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return err == nil && len(p)-(end+4) < n
		}
	}
	return false
}

// check reports whether the hold did what the spec claims.
func (s *slowUplink) check() error {
	switch {
	case !s.used.Load():
		return fmt.Errorf("no request carried %s", s.marker)
	case !s.early.Load():
		return errors.New("the call's head and whole body came in one read: nothing was left to hold")
	case s.timedOut.Load():
		return errors.New("the server waited for the body: no answer came before it")
	}
	return nil
}

// onAnswer wraps a client transport: f sees every response it returns.
type onAnswer struct {
	rt http.RoundTripper
	f  func(*http.Response)
}

func (o onAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.rt.RoundTrip(req)
	if err == nil {
		o.f(resp)
	}
	return resp, err
}

func runGoEarly404LargeCall(ctx context.Context, dir string) error {
	var runs atomic.Int32 // upload executions on the backend
	router := &sessionRouter{known: map[string]bool{}}
	srv := newGoServerOpts(toolSet{}, &mcp.ServerOptions{GetSessionID: router.mint})
	mcp.AddTool(srv, &mcp.Tool{Name: "upload", Description: "stores a document"},
		func(ctx context.Context, req *mcp.CallToolRequest, a uploadArgs) (*mcp.CallToolResult, any, error) {
			runs.Add(1)
			return textResult(fmt.Sprintf("%s: %d bytes stored", a.Name, len(a.Content))), nil, nil
		})
	router.next = goHandler(srv, storeOpts())
	doc := uploadArgs{Name: "q3-export.csv", Content: uploadDocument()}
	stored := fmt.Sprintf("%s: %d bytes stored", doc.Name, len(doc.Content))
	uplink := newSlowUplink(`"name":"upload"`)
	via := func(rt http.RoundTripper) http.RoundTripper {
		return onAnswer{rt: rt, f: func(resp *http.Response) {
			if resp.StatusCode == http.StatusNotFound {
				uplink.answered()
			}
		}}
	}
	return recordGo(dir, goEarly404Name, []http.Handler{router}, func(r *rig) error {
		r.hooks = append(r.hooks, uplink.hooks)
		err := withGoSessionVia(ctx, r.url(), revisionSessions, false, via, func(cs *mcp.ClientSession) error {
			if err := expectResult(ctx, cs, "echo", streamArgs{Label: "hello"}, nil, "hello"); err != nil {
				return err
			}
			router.restart()
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upload", Arguments: doc})
			if err := sessionMissing("upload on the lost session", err); err != nil {
				return err
			}
			return uplink.check()
		})
		if err != nil {
			return err
		}
		// The application's recovery, as go-sdk applications do after a
		// 404: a new session, and the refused call once more.
		err = withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upload", Arguments: doc})
			if err != nil {
				return fmt.Errorf("upload on the new session: %w", err)
			}
			if got := resultText(res); got != stored {
				return fmt.Errorf("upload result %q, want %q", got, stored)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if n, refused := runs.Load(), router.refusals(); n != 1 || refused != 1 {
			return fmt.Errorf("backend ran upload %d times and the router refused %d requests, want 1 and 1", n, refused)
		}
		return nil
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET, behind",
		"# a session router (middleware in front of the StreamableHTTPHandler) that knows the sessions the",
		"# backend created and answers any other session id 404 on the request's head, reading no body",
		"# first (full duplex; it then drops the body and keeps the connection).",
		"# S1: initialize, notifications/initialized, tools/call echo(hello) answered. The router restarts",
		"# and forgets S1 (the backend still holds it). tools/call upload (q3-export.csv, a 48 KiB CSV: a",
		"# body of about 50 KB) with Mcp-Session-Id: S1: the router answers 404 `session not found` on the",
		"# head. The proxy plays a slow uplink: after its first read of the call (the head and the body's",
		"# first 32 KB) it holds the rest until the client has the 404, so the 404 is on the wire before the",
		"# body's last byte (a router answers a multi-megabyte upload so). go-sdk's client reports",
		"# ErrSessionMissing and sends no DELETE. The application opens S2 (initialize without session id)",
		"# and sends the identical upload, answered; then DELETE. The backend ran upload once: the 404",
		"# refused the first, so re-sending it is no replay, and no outcome is unknown. Before 2026-12-06",
		"# the decoder emitted the call when its body ended, after its answer: the 404 went unpaired, and",
		"# S1 was not seen to end with it.",
		"expect violation count=0",
		"expect session ended=404 count=1",
		"expect session ended=deleted count=1",
		"expect resume count=0",
		"expect unknown_outcome count=0",
		"expect unverifiable count=0",
	)
}
