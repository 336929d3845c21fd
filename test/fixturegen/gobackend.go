package main

// Deliberately broken backends: HTTP middleware in front of a real go-sdk
// StreamableHTTPHandler that edits what the SDK writes, the way a buggy
// event store, gateway or server framework would. The SDK underneath stays
// real; only the named fault is ours.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxPeekBody bounds how much of a request body a broken backend reads to
// decide what to do with it; fixture requests are a few hundred bytes.
const maxPeekBody = 64 << 10

// peekBody returns the request body and puts it back for the next handler.
func peekBody(r *http.Request) []byte {
	if r.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, maxPeekBody))
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// sseEdit rewrites one SSE event (its raw text, ending in a blank line)
// into zero or more events to send instead.
type sseEdit func(event []byte) [][]byte

// sseEditWriter applies an sseEdit to a text/event-stream response, event
// by event; other responses pass through untouched.
type sseEditWriter struct {
	http.ResponseWriter
	edit sseEdit
	buf  []byte
}

func (w *sseEditWriter) isSSE() bool {
	return strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream")
}

func (w *sseEditWriter) Write(p []byte) (int, error) {
	if !w.isSSE() {
		return w.ResponseWriter.Write(p)
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.Index(w.buf, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		ev := w.buf[:i+2]
		for _, out := range w.edit(ev) {
			if _, err := w.ResponseWriter.Write(out); err != nil {
				return 0, err
			}
		}
		w.buf = w.buf[i+2:]
	}
}

// Flush lets the SDK's per-event flushes through the wrapper.
func (w *sseEditWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap serves http.ResponseController.
func (w *sseEditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// editSSE wraps h: when pick returns an edit for a request, that request's
// SSE response goes through it.
func editSSE(h http.Handler, pick func(r *http.Request) sseEdit) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		edit := pick(r)
		if edit == nil {
			h.ServeHTTP(w, r)
			return
		}
		ew := &sseEditWriter{ResponseWriter: w, edit: edit}
		h.ServeHTTP(ew, r)
		if len(ew.buf) > 0 {
			w.Write(ew.buf)
		}
	})
}

// eventID is the value of an SSE event's id field, "" when it has none.
func eventID(ev []byte) string {
	for _, line := range strings.Split(string(ev), "\n") {
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			return v
		}
	}
	return ""
}

// rewriteCursor wraps h: a GET carrying Last-Event-ID has it replaced by
// to(id) before the SDK sees it (the capture, taken in front of the
// backend, still shows what the client sent).
func rewriteCursor(h http.Handler, to func(id string) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Last-Event-ID"); r.Method == http.MethodGet && id != "" {
			r = r.Clone(r.Context())
			r.Header.Set("Last-Event-ID", to(id))
		}
		h.ServeHTTP(w, r)
	})
}

// sessionAdopter is the broken backend behind a drain or a restart: a real
// go-sdk handler (with its own server and event store) in front of which a
// request carrying a session id this backend never issued is not answered
// 404 (the correct answer) but adopted: a session is created on the spot by
// replaying the persisted handshake (restore) against the handler, and the
// request is served on it.
type sessionAdopter struct {
	inner http.Handler
	// nextID feeds the go-sdk server's ServerOptions.GetSessionID, so a
	// keepID adoption re-creates the session under the client's id.
	nextID *idSource
	// keepID re-creates the session under the client's id (a restarted
	// backend that persisted its sessions but not its events); otherwise a
	// new id is minted (a permissive backend).
	keepID bool
	// announce puts the adopted session's id on the adopting response.
	announce bool
	// dropCursor serves an adopting resume as a fresh stream: the fresh
	// store knows no event, and instead of failing the backend ignores the
	// Last-Event-ID.
	dropCursor bool
	// restore are the JSON-RPC messages replayed to rebuild session state;
	// the first must be initialize.
	restore []string

	mu  sync.Mutex
	ids map[string]string // client's session id -> this backend's
	// adopted counts adoptions, so a scenario can check its fault fired.
	adopted int
}

// idSource hands the go-sdk server the id for its next session: a pinned
// one when set, otherwise a fresh random one like go-sdk's own.
type idSource struct {
	mu     sync.Mutex
	pinned string
}

func (s *idSource) pin(id string) {
	s.mu.Lock()
	s.pinned = id
	s.mu.Unlock()
}

func (s *idSource) next() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := s.pinned; id != "" {
		s.pinned = ""
		return id
	}
	return rand.Text()
}

// newSessionAdopter builds a fresh backend: a new go-sdk server for ts and
// a new MemoryEventStore (nothing survives from any earlier backend).
func newSessionAdopter(ts toolSet, keepID, announce, dropCursor bool, restore ...string) *sessionAdopter {
	ids := &idSource{}
	srv := newGoServerOpts(ts, &mcp.ServerOptions{GetSessionID: ids.next})
	return &sessionAdopter{
		inner:  goHandler(srv, storeOpts()),
		nextID: ids, keepID: keepID, announce: announce, dropCursor: dropCursor,
		restore: restore, ids: map[string]string{},
	}
}

func (a *sessionAdopter) adoptions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.adopted
}

func (a *sessionAdopter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	clientID := r.Header.Get("Mcp-Session-Id")
	if clientID == "" {
		a.inner.ServeHTTP(w, r)
		return
	}
	a.mu.Lock()
	backendID, known := a.ids[clientID]
	if !known {
		var err error
		backendID, err = a.adopt(clientID, r.Header.Get("Mcp-Protocol-Version"))
		if err != nil {
			a.mu.Unlock()
			http.Error(w, "adopting session: "+err.Error(), http.StatusInternalServerError)
			return
		}
		a.ids[clientID] = backendID
		a.adopted++
	}
	a.mu.Unlock()
	r = r.Clone(r.Context())
	r.Header.Set("Mcp-Session-Id", backendID)
	if !known {
		if a.dropCursor {
			r.Header.Del("Last-Event-ID")
		}
		if a.announce {
			w.Header().Set("Mcp-Session-Id", backendID)
		}
	}
	a.inner.ServeHTTP(w, r)
}

// adopt replays the restore handshake against the inner handler and
// returns the id of the session it created. a.mu is held.
func (a *sessionAdopter) adopt(clientID, version string) (string, error) {
	if a.keepID {
		a.nextID.pin(clientID)
	}
	var sid string
	for i, msg := range a.restore {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if i > 0 {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", version)
		}
		rec := httptest.NewRecorder()
		a.inner.ServeHTTP(rec, req)
		if rec.Code >= 300 {
			return "", fmt.Errorf("restore step %d: %d %s", i, rec.Code, strings.TrimSpace(rec.Body.String()))
		}
		if i == 0 {
			sid = rec.Header().Get("Mcp-Session-Id")
			if sid == "" {
				return "", errors.New("restore: initialize answered without a session id")
			}
		}
	}
	return sid, nil
}

// restoreHandshake is the session state a backend re-creates on adoption:
// initialize and initialized at the given revision, and the client's log
// level when logLevel is set.
func restoreHandshake(revision, logLevel string) []string {
	msgs := []string{
		`{"jsonrpc":"2.0","id":"restore-1","method":"initialize","params":{"protocolVersion":"` + revision +
			`","capabilities":{},"clientInfo":{"name":"restored-session","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`,
	}
	if logLevel != "" {
		msgs = append(msgs, `{"jsonrpc":"2.0","id":"restore-2","method":"logging/setLevel","params":{"level":"`+logLevel+`"}}`)
	}
	return msgs
}
