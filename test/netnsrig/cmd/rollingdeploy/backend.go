package main

// The backend: a go-sdk MCP server over Streamable HTTP with an in-memory
// event store (so a cut stream can be resumed with Last-Event-ID), and one
// slow tool.
//
// What go-sdk v1.8.0 does with a session id it does not know: its
// StreamableHTTPHandler answers 404 "session not found" (lookupSession in
// mcp/streamable.go), and its client then fails the session
// (ErrSessionMissing). A rolling deploy onto plain go-sdk backends therefore
// ends in a clean 404, never in a swap. The swap comes from a permissive
// layer in front of the SDK, the way test/fixturegen produces the
// session_swap fixture (go_deploy.go, sessionAdopter in gobackend.go): for
// an unknown session it mints a new session on the spot, serves the request
// on it and answers 200 with the new Mcp-Session-Id, dropping the
// Last-Event-ID its fresh event store cannot serve. -unknown-session picks
// between the two: adopt (that layer, the default) or 404 (go-sdk alone).

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// eventPace spaces the progress notifications, so each leaves in its own
// write and a drain can fall between two of them.
const eventPace = 100 * time.Millisecond

// defaultRevision is the protocol revision restored sessions get when the
// request does not name one; the last revision with sessions.
const defaultRevision = "2025-11-25"

// writeArgs are slow_write's arguments.
type writeArgs struct {
	// Steps is how many progress notifications to send (with a progress
	// token) before the write.
	Steps int `json:"steps"`
	// Label names the write in notifications and the result.
	Label string `json:"label,omitempty"`
	// HoldMS is how long the write itself takes, after the notifications.
	HoldMS int `json:"hold_ms,omitempty"`
}

func runBackend(args []string) error {
	fs := flag.NewFlagSet("backend", flag.ExitOnError)
	addr := fs.String("listen", "", "address to serve MCP on (host:port); the endpoint is /mcp")
	name := fs.String("name", "", "name in results (default: the listen address)")
	unknown := fs.String("unknown-session", "adopt", "answer to a session id this backend never issued: adopt (mint a new session, 200) or 404 (go-sdk's own answer)")
	fs.Parse(args)
	if *addr == "" {
		return errors.New("-listen is required")
	}
	if *unknown != "adopt" && *unknown != "404" {
		return fmt.Errorf("-unknown-session %q: want adopt or 404", *unknown)
	}
	if *name == "" {
		*name = *addr
	}
	a := &adopter{own: map[string]bool{}, adopted: map[string]string{}, enabled: *unknown == "adopt"}
	srv := newMCPServer(*name, &mcp.ServerOptions{GetSessionID: a.mint, Logger: logger()})
	a.inner = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil), Logger: logger()})
	mux := http.NewServeMux()
	mux.Handle("/mcp", a)
	ln, err := listen(*addr)
	if err != nil {
		return err
	}
	return serve([]*http.Server{newServer(mux)}, []net.Listener{ln})
}

// newMCPServer is the go-sdk server with the scenario's tool:
// slow_write sends Steps progress notifications eventPace apart (when the
// call has a progress token), then takes HoldMS to "write" and returns
// "<label>: written by <name>", so a result says which backend ran it.
func newMCPServer(name string, opts *mcp.ServerOptions) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "netnsrig-backend", Version: "1.0.0"}, opts)
	mcp.AddTool(s, &mcp.Tool{Name: "slow_write", Description: "reports progress, then performs a slow write"},
		func(ctx context.Context, req *mcp.CallToolRequest, a writeArgs) (*mcp.CallToolResult, any, error) {
			tok := req.Params.GetProgressToken()
			for i := 1; i <= a.Steps; i++ {
				if tok != nil {
					err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: tok, Progress: float64(i), Total: float64(a.Steps),
						Message: fmt.Sprintf("%s step %d", a.Label, i)})
					if err != nil {
						return nil, nil, err
					}
				}
				time.Sleep(eventPace)
			}
			select {
			case <-time.After(time.Duration(a.HoldMS) * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Label + ": written by " + name}}}, nil, nil
		})
	return s
}

// adopter is the permissive layer in front of go-sdk's handler (see the
// file comment). Sessions the SDK minted here pass through; a session id it
// never minted is, when enabled, adopted: a new session is created by
// replaying an initialize handshake against the SDK, and this and every
// later request carrying the client's id is served on it. The first
// adopting response announces the new id (Mcp-Session-Id) under a 200.
type adopter struct {
	inner   http.Handler
	enabled bool

	ownMu sync.Mutex
	own   map[string]bool // ids the SDK minted here

	// mu serialises adoptions (one per client id).
	mu      sync.Mutex
	adopted map[string]string // client's id -> the session serving it
}

// mint is the SDK's GetSessionID: a fresh id (like go-sdk's own),
// remembered as issued here before any response carries it.
func (a *adopter) mint() string {
	id := rand.Text()
	a.ownMu.Lock()
	a.own[id] = true
	a.ownMu.Unlock()
	return id
}

func (a *adopter) issued(id string) bool {
	a.ownMu.Lock()
	defer a.ownMu.Unlock()
	return a.own[id]
}

func (a *adopter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	clientID := r.Header.Get("Mcp-Session-Id")
	if clientID == "" || !a.enabled || a.issued(clientID) {
		a.inner.ServeHTTP(w, r)
		return
	}
	a.mu.Lock()
	serving, known := a.adopted[clientID]
	if !known {
		var err error
		if serving, err = a.adopt(r.Header.Get("Mcp-Protocol-Version")); err != nil {
			a.mu.Unlock()
			http.Error(w, "adopting session: "+err.Error(), http.StatusInternalServerError)
			return
		}
		a.adopted[clientID] = serving
	}
	a.mu.Unlock()
	r = r.Clone(r.Context())
	r.Header.Set("Mcp-Session-Id", serving)
	if !known {
		// The new session's store has no event of the old one: serve
		// the resume as a fresh stream instead of failing it.
		r.Header.Del("Last-Event-ID")
		w.Header().Set("Mcp-Session-Id", serving)
	}
	a.inner.ServeHTTP(w, r)
}

// adopt creates a session by replaying initialize and initialized against
// the SDK and returns its id. a.mu is held.
func (a *adopter) adopt(revision string) (string, error) {
	if revision == "" {
		revision = defaultRevision
	}
	msgs := []string{
		`{"jsonrpc":"2.0","id":"adopt-1","method":"initialize","params":{"protocolVersion":"` + revision +
			`","capabilities":{},"clientInfo":{"name":"adopted-session","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`,
	}
	var sid string
	for i, msg := range msgs {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if i > 0 {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", revision)
		}
		rec := httptest.NewRecorder()
		a.inner.ServeHTTP(rec, req)
		if rec.Code >= 300 {
			return "", fmt.Errorf("adopt step %d: %d %s", i, rec.Code, strings.TrimSpace(rec.Body.String()))
		}
		if i == 0 {
			if sid = rec.Header().Get("Mcp-Session-Id"); sid == "" {
				return "", errors.New("adopt: initialize answered without a session id")
			}
		}
	}
	return sid, nil
}
