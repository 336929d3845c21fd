// Package soakgen makes MCP Streamable HTTP traffic fast enough to soak the
// live agent: a Server that speaks the 2025-11-25 revision correctly (the
// wire format of the go-sdk v1.8.0 server with an event store: session ids
// minted on initialize, SSE streams of event ids <stream>_<n> with a priming
// event, progress notifications, server-closed polling streams resumed with
// Last-Event-ID, DELETE) and a Flood of concurrent clients making many short
// sessions. Nothing is corrupted: every resume is answered exactly as the
// contract wants, so an agent watching must report no violation.
//
// A plain net/http handler rather than the go-sdk: the SDK's client waits a
// second or more before every resume and its server validates schemas on
// every call, which caps two cores at a few hundred sessions a second; this
// one makes about a thousand, with the same bytes on the wire where it
// matters (headers, event ids, priming and close events, JSON-RPC).
package soakgen

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ProtocolVersion is the revision the server and clients speak.
const ProtocolVersion = "2025-11-25"

// Path is where the server answers.
const Path = "/mcp"

// RetryMillis is the retry the server announces when it closes a stream
// early (go-sdk announces its reconnect delay the same way).
const RetryMillis = 5

// Server is a correct MCP Streamable HTTP server with one tool, "stream",
// which sends arguments.steps progress notifications before its result and,
// with arguments.close_after = k > 0, closes the stream after the k-th
// (`event: close`, as go-sdk's CloseSSEStream) announcing a reconnect delay
// of arguments.retry_ms (RetryMillis by default) for the client to resume;
// arguments.replay_delay_ms makes the answer to that resume wait, as a
// server fetching the events from a slow store.
type Server struct {
	mu       sync.Mutex
	sessions map[string]bool          // live session ids
	streams  map[string]*closedStream // streams closed early, by stream id
	minted   []string                 // every session id ever minted, in order
	resumed  []string                 // every Last-Event-ID answered 200, in order

	calls, deletes, rejected atomic.Int64
}

// closedStream is what the server needs to finish a stream on resume: the
// events are a function of these and the event index, so nothing else is
// stored.
type closedStream struct {
	session string
	req     json.RawMessage
	token   string
	steps   int
	delay   time.Duration // before answering the resume
}

// ServerStats counts what the server answered.
type ServerStats struct {
	Initialized int64 // sessions minted
	ToolCalls   int64 // tools/call streams started
	Resumes     int64 // GETs with Last-Event-ID answered 200
	Deletes     int64 // sessions deleted (204)
	Rejected    int64 // requests answered 4xx (none in a clean run)
	Pending     int   // streams closed early and not resumed yet
	Live        int   // sessions neither deleted nor expired
}

// NewServer returns an empty server.
func NewServer() *Server {
	return &Server{sessions: map[string]bool{}, streams: map[string]*closedStream{}}
}

// Serve answers on ln until Close of the returned server. Idle keep-alive
// connections are closed after idle: make it longer than any client stays
// idle, since a close racing with a client reusing the connection fails
// the client's request.
func (s *Server) Serve(ln net.Listener, idle time.Duration) *http.Server {
	mux := http.NewServeMux()
	mux.Handle(Path, s)
	hs := &http.Server{Handler: mux, IdleTimeout: idle, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return hs
}

// Stats returns the counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServerStats{
		Initialized: int64(len(s.minted)), ToolCalls: s.calls.Load(), Resumes: int64(len(s.resumed)),
		Deletes: s.deletes.Load(), Rejected: s.rejected.Load(), Pending: len(s.streams), Live: len(s.sessions),
	}
}

// Minted returns every session id the server minted.
func (s *Server) Minted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.minted...)
}

// Resumed returns the Last-Event-ID of every resume the server answered
// with the rest of its stream (each is unique: a stream is resumed once).
func (s *Server) Resumed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.resumed...)
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newID is 26 characters of base32, as go-sdk's session and stream ids.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  struct {
		Meta struct {
			ProgressToken string `json:"progressToken"`
		} `json:"_meta"`
		Name      string `json:"name"`
		Arguments struct {
			Steps         int `json:"steps"`
			CloseAfter    int `json:"close_after"`
			RetryMillis   int `json:"retry_ms"`
			ReplayDelayMs int `json:"replay_delay_ms"`
		} `json:"arguments"`
	} `json:"params"`
}

func (s *Server) reject(w http.ResponseWriter, code int, msg string) {
	s.rejected.Add(1)
	http.Error(w, msg, code)
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		s.post(w, r)
	case http.MethodGet:
		s.resume(w, r)
	case http.MethodDelete:
		id := r.Header.Get("Mcp-Session-Id")
		s.mu.Lock()
		ok := s.sessions[id]
		delete(s.sessions, id)
		s.mu.Unlock()
		if !ok {
			s.reject(w, http.StatusNotFound, "session not found")
			return
		}
		s.deletes.Add(1)
		w.WriteHeader(http.StatusNoContent)
	default:
		s.reject(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		s.reject(w, http.StatusBadRequest, "bad JSON-RPC")
		return
	}
	if req.Method == "initialize" {
		id := newID()
		s.mu.Lock()
		s.sessions[id] = true
		s.minted = append(s.minted, id)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", id)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"capabilities":{"logging":{},"tools":{"listChanged":true}},"protocolVersion":%q,"serverInfo":{"name":"soakgen","version":"1.0.0"}}}`,
			req.ID, ProtocolVersion)
		return
	}
	session := r.Header.Get("Mcp-Session-Id")
	s.mu.Lock()
	ok := s.sessions[session]
	s.mu.Unlock()
	if !ok {
		s.reject(w, http.StatusNotFound, "session not found")
		return
	}
	switch {
	case req.ID == nil: // a notification
		w.WriteHeader(http.StatusAccepted)
	case req.Method == "tools/call" && req.Params.Name == "stream":
		s.calls.Add(1)
		args := req.Params.Arguments
		st := &closedStream{session: session, req: req.ID, token: req.Params.Meta.ProgressToken, steps: args.Steps,
			delay: time.Duration(args.ReplayDelayMs) * time.Millisecond}
		stream := newID()
		k := args.CloseAfter
		if k <= 0 || k > st.steps {
			k = st.steps + 1 // the whole stream
		}
		sw := startSSE(w)
		sw.event("prime", stream, 0, nil)
		for n := 1; n <= k; n++ {
			sw.event("message", stream, n, st.data(n))
		}
		if k <= st.steps {
			s.mu.Lock()
			s.streams[stream] = st
			s.mu.Unlock()
			retry := args.RetryMillis
			if retry <= 0 {
				retry = RetryMillis
			}
			fmt.Fprintf(sw.w, "event: close\nretry: %d\ndata: \n\n", retry)
			sw.flush()
		}
	default:
		s.reject(w, http.StatusBadRequest, "unknown method")
	}
}

// resume answers GET with Last-Event-ID <stream>_<n>: the events after n,
// then the result.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	last := r.Header.Get("Last-Event-ID")
	stream, num, _ := strings.Cut(last, "_")
	n, err := strconv.Atoi(num)
	session := r.Header.Get("Mcp-Session-Id")
	s.mu.Lock()
	st := s.streams[stream]
	live := s.sessions[session]
	if st != nil && st.session == session && live && err == nil && n >= 0 && n <= st.steps {
		delete(s.streams, stream)
		s.resumed = append(s.resumed, last)
	} else {
		st = nil
	}
	s.mu.Unlock()
	switch {
	case !live:
		s.reject(w, http.StatusNotFound, "session not found")
		return
	case st == nil:
		s.reject(w, http.StatusBadRequest, "unknown Last-Event-ID")
		return
	}
	time.Sleep(st.delay)
	sw := startSSE(w)
	for i := n + 1; i <= st.steps+1; i++ {
		sw.event("message", stream, i, st.data(i))
	}
}

// data is event n's JSON-RPC message: progress n for n <= steps, then the
// result.
func (st *closedStream) data(n int) []byte {
	if n <= st.steps {
		return fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%q,"message":"step %d","progress":%d,"total":%d}}`,
			st.token, n, n, st.steps)
	}
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%d steps done"}]}}`, st.req, st.steps)
}

type sseWriter struct {
	w   http.ResponseWriter
	buf bytes.Buffer
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", "keep-alive")
	h.Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w}
}

// event writes and flushes one event (one chunk, as go-sdk does).
func (sw *sseWriter) event(typ, stream string, n int, data []byte) {
	sw.buf.Reset()
	fmt.Fprintf(&sw.buf, "event: %s\nid: %s_%d\ndata: ", typ, stream, n)
	sw.buf.Write(data)
	sw.buf.WriteString("\n\n")
	sw.w.Write(sw.buf.Bytes())
	sw.flush()
}

func (sw *sseWriter) flush() {
	if f, ok := sw.w.(http.Flusher); ok {
		f.Flush()
	}
}
