package main

// The load balancer: a reverse proxy (net/http/httputil) sticky by
// Mcp-Session-Id to the backend whose response first carried the id, with
// an admin endpoint to watch streams and to drain a backend:
//
//	GET  /state                 netnsrig.LBState
//	POST /drain?backend=ADDR    stop routing to ADDR and cut its open requests
//
// A drain is a rolling deploy's first step: the backend is taken out of the
// pool and every request still open on it (an SSE stream in progress) is
// aborted, so the client sees its stream end without the chunked body's
// terminator and the connection close, as when a draining balancer closes
// the old instance's connections. Requests for its sessions then go to a
// live backend (round robin), which is pinned for them from then on.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"github.com/replaywatch/replaywatch/test/netnsrig"
)

func runLB(args []string) error {
	fs := flag.NewFlagSet("lb", flag.ExitOnError)
	addr := fs.String("listen", "", "address to serve on (host:port)")
	backends := fs.String("backends", "", "comma-separated backend addresses (host:port)")
	admin := fs.String("admin", "", "admin address: host:port or unix:PATH")
	fs.Parse(args)
	if *addr == "" || *backends == "" || *admin == "" {
		return errors.New("-listen, -backends and -admin are required")
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("lb: ")
	lb := &balancer{sessions: map[string]*backend{}}
	for _, a := range strings.Split(*backends, ",") {
		u, err := url.Parse("http://" + a)
		if err != nil || u.Host == "" {
			return errors.New("bad backend address " + a)
		}
		lb.backends = append(lb.backends, &backend{addr: a, url: u, live: true})
	}
	lb.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(trackedKey{}).(*tracked)
			pr.SetURL(t.b.url)
			pr.SetXForwarded()
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), &httptrace.ClientTrace{
				GotConn: func(ci httptrace.GotConnInfo) {
					log.Printf("request %d %s session %q -> %s via %s (reused %v)", t.ID, t.Method, t.Session,
						t.Backend, ci.Conn.LocalAddr(), ci.Reused)
				},
			}))
		},
		ModifyResponse: lb.response,
		ErrorLog:       log.Default(),
	}
	adminMux := http.NewServeMux()
	adminMux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) { lb.writeState(w) })
	adminMux.HandleFunc("POST /drain", func(w http.ResponseWriter, r *http.Request) {
		if !lb.drain(r.URL.Query().Get("backend")) {
			http.Error(w, "no such backend", http.StatusNotFound)
			return
		}
		lb.writeState(w)
	})
	ln, err := listen(*addr)
	if err != nil {
		return err
	}
	aln, err := listen(*admin)
	if err != nil {
		ln.Close()
		return err
	}
	return serve([]*http.Server{newServer(lb), newServer(adminMux)}, []net.Listener{ln, aln})
}

type balancer struct {
	proxy    *httputil.ReverseProxy
	backends []*backend

	mu       sync.Mutex
	next     int                 // round robin over live backends
	sessions map[string]*backend // pinned sessions
	requests []*tracked
}

type backend struct {
	addr string
	url  *url.URL
	live bool // guarded by balancer.mu
}

// tracked is one proxied request; its state is guarded by balancer.mu.
type tracked struct {
	netnsrig.RequestState
	b       *backend
	cancel  context.CancelFunc
	pending sseCount // counted, not yet known to be forwarded
}

type trackedKey struct{}

func (lb *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The upstream request reads the body while the response may already
	// be streaming back. Without full duplex, net/http's server consumes
	// and closes an unfinished request body when the response headers are
	// written: when the backend answered before the proxy's transport had
	// read the body's EOF, the transport's next read failed, it closed the
	// upstream connection, and the SSE stream just started was cut (seen
	// in about 1 request in 40 under load: "use of closed network
	// connection" from the transport's writeLoop).
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		http.Error(w, "full duplex: "+err.Error(), http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	t := lb.track(r, cancel)
	if t == nil {
		http.Error(w, "no live backend", http.StatusServiceUnavailable)
		return
	}
	// Runs also when the proxy aborts the response (panic ErrAbortHandler).
	defer lb.finish(t)
	lb.proxy.ServeHTTP(w, r.WithContext(context.WithValue(ctx, trackedKey{}, t)))
}

// track picks the backend for r and records the request; nil when no
// backend is live. A session goes to the backend it is pinned to while
// that one is live; a new or orphaned one to the next live backend, which
// an orphaned session is pinned to from then on.
func (lb *balancer) track(r *http.Request, cancel context.CancelFunc) *tracked {
	sid := r.Header.Get("Mcp-Session-Id")
	lb.mu.Lock()
	defer lb.mu.Unlock()
	b := lb.sessions[sid]
	if sid == "" || b == nil || !b.live {
		var live []*backend
		for _, x := range lb.backends {
			if x.live {
				live = append(live, x)
			}
		}
		if len(live) == 0 {
			return nil
		}
		b = live[lb.next%len(live)]
		lb.next++
		if sid != "" {
			lb.sessions[sid] = b
		}
	}
	t := &tracked{b: b, cancel: cancel, RequestState: netnsrig.RequestState{
		ID: len(lb.requests) + 1, Backend: b.addr, Method: r.Method, Session: sid,
		LastEventID: r.Header.Get("Last-Event-ID"), Open: true,
	}}
	lb.requests = append(lb.requests, t)
	return t
}

func (lb *balancer) finish(t *tracked) {
	lb.mu.Lock()
	t.commit()
	t.Open = false
	log.Printf("request %d done: status %d, %d events, drained %v", t.ID, t.Status, t.Events, t.Drained)
	lb.mu.Unlock()
}

// response learns session ids from response headers (pinning each to the
// backend that sent it) and taps SSE bodies to count their events.
func (lb *balancer) response(res *http.Response) error {
	t := res.Request.Context().Value(trackedKey{}).(*tracked)
	lb.mu.Lock()
	defer lb.mu.Unlock()
	t.Status = res.StatusCode
	if sid := res.Header.Get("Mcp-Session-Id"); sid != "" {
		t.ResponseSession = sid
		lb.sessions[sid] = t.b
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.SSE = true
		res.Body = &sseTap{ReadCloser: res.Body, lb: lb, t: t}
	}
	return nil
}

// drain takes the backend at addr out of the pool and aborts its open
// requests; false when there is no such backend.
func (lb *balancer) drain(addr string) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, b := range lb.backends {
		if b.addr != addr {
			continue
		}
		b.live = false
		for _, t := range lb.requests {
			if t.b == b && t.Open {
				t.Drained = true
				t.cancel()
			}
		}
		return true
	}
	return false
}

func (lb *balancer) writeState(w http.ResponseWriter) {
	lb.mu.Lock()
	st := netnsrig.LBState{Sessions: map[string]string{}}
	for _, b := range lb.backends {
		st.Backends = append(st.Backends, netnsrig.BackendState{Addr: b.addr, Live: b.live})
	}
	for _, t := range lb.requests {
		st.Requests = append(st.Requests, t.RequestState)
	}
	for sid, b := range lb.sessions {
		st.Sessions[sid] = b.addr
	}
	lb.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

// sseCount is what a tap has counted in the bytes of one read.
type sseCount struct {
	events, progress int
	lastID           string
}

// commit makes the pending counts visible. lb.mu is held.
func (t *tracked) commit() {
	t.Events += t.pending.events
	t.Progress += t.pending.progress
	if t.pending.lastID != "" {
		t.LastEvent = t.pending.lastID
	}
	t.pending = sseCount{}
}

// sseTap counts the SSE events of a response body as the proxy reads it.
// What one read returned is counted when the proxy comes back for the next
// read: by then it has written and flushed those bytes to the client, so
// the admin state never shows an event the client may not have been sent.
type sseTap struct {
	io.ReadCloser
	lb *balancer
	t  *tracked
	sseParser
}

func (s *sseTap) Read(p []byte) (int, error) {
	s.lb.mu.Lock()
	s.t.commit()
	s.lb.mu.Unlock()
	n, err := s.ReadCloser.Read(p)
	var c sseCount
	for _, ev := range s.feed(p[:n]) {
		c.events++
		if strings.Contains(ev.data, `"method":"notifications/progress"`) {
			c.progress++
		}
		if ev.id != "" {
			c.lastID = ev.id
		}
	}
	s.lb.mu.Lock()
	s.t.pending = c
	s.lb.mu.Unlock()
	return n, err
}
