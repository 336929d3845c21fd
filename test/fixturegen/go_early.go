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
	// dropped, if set, sees each refused request once its body is read.
	dropped func(r *http.Request)

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
	if g.dropped != nil {
		g.dropped(r)
	}
}

// earlyOrder is the proxy's part: it stands in for a slow client uplink
// and fixes the order of two requests that race in the application. On the
// connection of the first request containing callMarker (the large call),
// what the client sends after the read that carried the marker is held
// until the client has a 404 (answered): the answer is on the wire before
// the rest of the body, as when a router answers a multi-megabyte upload on
// its head; holding the rest makes that order certain with a body small
// enough to commit. A keep-alive ping the application sends meanwhile is
// held at the proxy until the router has dropped the whole body (drained),
// and the call's 404 until the ping has reached the proxy, so the ping was
// sent before go-sdk saw any 404 and is answered after the call's body
// ended. Every hold gives up after holdLimit (a server that waits for the
// body), and check then fails the scenario.
type earlyOrder struct {
	callMarker, pingMarker string
	callUsed, pingUsed     atomic.Bool

	callIn, pingIn, answeredC, drainedC chan struct{}
	answerOnce, drainOnce               sync.Once
	// early: the marker's read ended before its body did, so the rest of
	// the body reached the server only after the client had its answer.
	early, timedOut atomic.Bool
}

// holdLimit bounds how long earlyOrder holds anything.
const holdLimit = 5 * time.Second

func newEarlyOrder(callMarker, pingMarker string) *earlyOrder {
	return &earlyOrder{callMarker: callMarker, pingMarker: pingMarker,
		callIn: make(chan struct{}), pingIn: make(chan struct{}),
		answeredC: make(chan struct{}), drainedC: make(chan struct{})}
}

// answered says the client has a 404; drained that the router has read
// the call's whole body.
func (o *earlyOrder) answered() { o.answerOnce.Do(func() { close(o.answeredC) }) }
func (o *earlyOrder) drained()  { o.drainOnce.Do(func() { close(o.drainedC) }) }

func (o *earlyOrder) wait(c <-chan struct{}) {
	select {
	case <-c:
	case <-time.After(holdLimit):
		o.timedOut.Store(true)
	}
}

func (o *earlyOrder) hooks(int) pcaprec.Hooks {
	// Each direction of a connection is read by one goroutine.
	var call atomic.Bool
	return pcaprec.Hooks{
		FromClient: func(p []byte) ([]byte, pcaprec.Action) {
			switch {
			case call.Load():
				o.wait(o.answeredC)
			case bytes.Contains(p, []byte(o.callMarker)) && o.callUsed.CompareAndSwap(false, true):
				call.Store(true)
				o.early.Store(bodyUnfinished(p))
				close(o.callIn)
			case bytes.Contains(p, []byte(o.pingMarker)) && o.pingUsed.CompareAndSwap(false, true):
				close(o.pingIn)
				o.wait(o.drainedC)
			}
			return p, pcaprec.Forward
		},
		FromServer: func(p []byte) ([]byte, pcaprec.Action) {
			if call.Load() && bytes.HasPrefix(p, []byte("HTTP/1.1 404 ")) {
				o.wait(o.pingIn)
			}
			return p, pcaprec.Forward
		},
	}
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

// check reports whether the order is the one the spec claims.
func (o *earlyOrder) check() error {
	switch {
	case !o.callUsed.Load() || !o.pingUsed.Load():
		return errors.New("the call or the ping never reached the proxy")
	case !o.early.Load():
		return errors.New("the call's head and whole body came in one read: nothing was left to hold")
	case o.timedOut.Load():
		return errors.New("a hold timed out: the server waited for the body, or the ping came too late")
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
	order := newEarlyOrder(`"name":"upload"`, `"method":"ping"`)
	router.dropped = func(r *http.Request) {
		if r.ContentLength > uploadSize {
			order.drained()
		}
	}
	via := func(rt http.RoundTripper) http.RoundTripper {
		return onAnswer{rt: rt, f: func(resp *http.Response) {
			if resp.StatusCode == http.StatusNotFound {
				order.answered()
			}
		}}
	}
	return recordGo(dir, goEarly404Name, []http.Handler{router}, func(r *rig) error {
		r.hooks = append(r.hooks, order.hooks)
		err := withGoSessionVia(ctx, r.url(), revisionSessions, false, via, func(cs *mcp.ClientSession) error {
			if err := expectResult(ctx, cs, "echo", streamArgs{Label: "hello"}, nil, "hello"); err != nil {
				return err
			}
			router.restart()
			// A keep-alive ping while the upload is on its way.
			pinged := make(chan error, 1)
			go func() {
				select {
				case <-order.callIn:
					pinged <- cs.Ping(ctx, nil)
				case <-ctx.Done():
					pinged <- ctx.Err()
				}
			}()
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upload", Arguments: doc})
			if err := sessionMissing("upload on the lost session", err); err != nil {
				return err
			}
			if err := sessionMissing("ping on the lost session", <-pinged); err != nil {
				return err
			}
			return order.check()
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
		if n, refused := runs.Load(), router.refusals(); n != 1 || refused != 2 {
			return fmt.Errorf("backend ran upload %d times and the router refused %d requests, want 1 and 2", n, refused)
		}
		return nil
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET, behind",
		"# a session router (middleware in front of the StreamableHTTPHandler) that knows the sessions the",
		"# backend created and answers any other session id 404 on the request's head, reading no body",
		"# first (full duplex; it then drops the body and keeps the connection).",
		"# S1: initialize, notifications/initialized, tools/call echo(hello) answered. The router restarts",
		"# and forgets S1 (the backend still holds it). tools/call upload (q3-export.csv, a 48 KiB CSV: a",
		"# body of about 50 KB) with Mcp-Session-Id: S1, and while it is on its way a keep-alive ping on a",
		"# second connection. The proxy plays a slow uplink: after its first read of the call (head and the",
		"# body's first 32 KB) it holds the rest until the client has the 404 the router answered on the",
		"# head, so the 404 is on the wire before the body's last byte (a router answers a multi-megabyte",
		"# upload so); it holds the ping until the router has dropped the body, so the ping, sent before",
		"# go-sdk saw any 404, is answered 404 after the call's body ended. go-sdk's client reports",
		"# ErrSessionMissing for both and sends no DELETE. The application opens S2 (initialize without",
		"# session id) and sends the identical upload, answered; then DELETE. The backend ran upload once:",
		"# the 404 refused the first, so re-sending it is no replay, and no outcome is unknown. Before",
		"# 2026-12-06 the decoder emitted the call when its body ended, after its answer: that 404 went",
		"# unpaired, the call looked in flight when the ping's 404 lost S1, and its re-send on S2 was a",
		"# critical silent_reinit_after_404.",
		"expect violation count=0",
		"expect session ended=404 count=1",
		"expect session ended=deleted count=1",
		"expect resume count=0",
		"expect unknown_outcome count=0",
		"expect unverifiable count=0",
	)
}
