package main

// go-sdk scenarios where everything behaves: resumes that keep the contract,
// server-closed polling streams, sessions that end cleanly, sessionless
// traffic. None may be flagged.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func init() {
	register(
		scenario{name: "go-correct-resume", desc: "proxy cuts a tool call's SSE stream at an event boundary; the go-sdk client resumes with Last-Event-ID and gets the rest", run: runGoCorrectResume},
		scenario{name: "go-priming-polling", desc: "2025-11-25 priming events and a server-closed polling stream (event: close, retry) resumed by the client", run: runGoPrimingPolling},
		scenario{name: "go-unknown-id-rejected", desc: "proxy rewrites the resume's Last-Event-ID to one never issued; go-sdk answers 400", run: runGoUnknownIDRejected},
		scenario{name: "go-sessionless-2026", desc: "plain 2026-07-28 traffic from go-sdk defaults against a stateless go-sdk server", run: runGoSessionless2026},
		scenario{name: "go-non-mcp-mixed", desc: "a correct MCP session sharing the port with a JSON API, a static file and a non-MCP SSE feed resumed with Last-Event-ID", run: runGoNonMCPMixed},
		scenario{name: "go-404-clean-new-session", desc: "session expires on the server; the client gets 404 and the application opens a fresh session reusing nothing", run: runGo404CleanNewSession},
		scenario{name: "go-redirect-to-slash", desc: "the server behind a router answering /mcp with 307 to /mcp/ (Starlette's Mount): every request sent twice; a cut stream resumed through the redirect", run: runGoRedirectToSlash},
		scenario{name: "go-404-poller-new-session", desc: "a poller's session expires on the server; after the 404 the application opens a fresh session and polls on with the same call", run: runGo404PollerNewSession},
	)
}

// storeOpts is a stateful go-sdk handler with the SDK's own event store.
func storeOpts() mcp.StreamableHTTPOptions {
	return mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}
}

func runGoCorrectResume(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	return recordGo(dir, "go-correct-resume", []http.Handler{goHandler(srv, storeOpts())}, func(r *rig) error {
		return streamCallThroughCut(ctx, r, newSSECut(`"name":"stream"`, eventIndex(2)), false, streamArgs{Steps: 5, Label: "resume-me"}, "tok-1")
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# initialize (SSE: S0_0 priming `event: prime` with empty data, S0_1 result), notifications/initialized (202),",
		"# then tools/call stream (steps=5, progressToken tok-1) on stream S: S_0 (priming), S_1 and S_2",
		"# (progress 1 and 2); the proxy closes the connection with FIN right after S_2's chunk (clean end at",
		"# an event boundary, no chunked terminator). The client resumes: GET with Last-Event-Id: S_2 (header",
		"# spelled so by Go), answered 200 (no Mcp-Session-Id on it: go-sdk does not echo) with S_3..S_5",
		"# (progress 3..5) and S_6 (the tools/call result). Same session, first event strictly after the cursor:",
		"# a correct resume. Then DELETE (204).",
		"expect violation count=0",
		"expect resume outcome=resumed last_event_id={cut} count=1",
		"expect resume count=1",
		"expect session ended=deleted count=1",
		"expect session start_seen=true protocol_version=2025-11-25 count=1",
		"expect unknown_outcome count=0",
	)
}

func runGoPrimingPolling(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	return recordGo(dir, "go-priming-polling", []http.Handler{goHandler(srv, storeOpts())}, pollingSession(ctx, nil),
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, standalone GET enabled.",
		"# Every POST stream starts with a priming event (`event: prime`, id X_0, empty data). The standalone",
		"# GET (no Last-Event-ID) is answered 200 with an SSE comment `: ok` and stays open, without events, until",
		"# the session is deleted. tools/call stream (steps=4, close_after=2) on stream S: S_0 priming, S_1, S_2",
		"# (progress 1, 2), then the server itself closes the stream (go-sdk CloseSSEStream, SEP-1699):",
		"# `event: close` + `retry: 150` (no id, empty data) and the chunked terminator. The client polls back",
		"# after 150 ms with GET Last-Event-Id: S_2 and gets S_3, S_4 (progress 3, 4) and S_5 (the result).",
		"# Then tools/call echo (S'_0 priming, S'_1 result) and DELETE. Nothing here is a fault: priming events,",
		"# a server-closed polling stream and its resume must not be flagged.",
		"expect violation count=0",
		"expect resume outcome=resumed count=1",
		"expect resume count=1",
		"expect session ended=deleted count=1",
		"expect unknown_outcome count=0",
	)
}

// pollingSession is go-priming-polling's client: a session with the
// standalone GET, a tool call whose stream the server closes for polling
// after progress 2, then an echo. via wraps its HTTP transport (nil: none).
func pollingSession(ctx context.Context, via func(http.RoundTripper) http.RoundTripper) func(r *rig) error {
	return func(r *rig) error {
		return withGoSessionVia(ctx, r.url(), revisionSessions, true, via, func(cs *mcp.ClientSession) error {
			// Give the standalone GET time to open, so it is in the capture.
			time.Sleep(100 * time.Millisecond)
			if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 4, Label: "poll", CloseAfter: 2}, "tok-poll", "poll: 4 steps done"); err != nil {
				return err
			}
			return expectResult(ctx, cs, "echo", streamArgs{Label: "after-poll"}, nil, "after-poll")
		})
	}
}

// rewriteLastEventID is a proxy fault: it replaces the value of the first
// Last-Event-ID header the client sends with to (same length is not
// needed: the header block is rewritten before it is forwarded).
func rewriteLastEventID(to string) func(n int) pcaprec.Hooks {
	var done bool
	return func(int) pcaprec.Hooks {
		return pcaprec.Hooks{FromClient: func(p []byte) ([]byte, pcaprec.Action) {
			if done {
				return p, pcaprec.Forward
			}
			s := string(p)
			i := strings.Index(strings.ToLower(s), "\r\nlast-event-id: ")
			if i < 0 {
				return p, pcaprec.Forward
			}
			start := i + len("\r\nlast-event-id: ")
			end := strings.Index(s[start:], "\r\n")
			if end < 0 {
				return p, pcaprec.Forward
			}
			done = true
			return []byte(s[:start] + to + s[start+end:]), pcaprec.Forward
		}}
	}
}

func runGoUnknownIDRejected(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	return recordGo(dir, "go-unknown-id-rejected", []http.Handler{goHandler(srv, storeOpts())}, func(r *rig) error {
		cut := newSSECut(`"name":"stream"`, eventIndex(2))
		r.hooks = append(r.hooks, cut.hooks, rewriteLastEventID("NEVERISSUEDSTREAMXXXXXXXXX_7"))
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			_, err := callTool(ctx, cs, "stream", streamArgs{Steps: 4, Label: "lost"}, "tok-lost")
			if err == nil {
				return errors.New("stream call succeeded; the rewritten resume should have been rejected")
			}
			return cut.waitFired(ctx)
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# tools/call stream (steps=4) on stream S: S_0 priming, S_1, S_2; the proxy FINs after S_2's chunk.",
		"# The client resumes with Last-Event-Id: S_2, but the proxy rewrites that header (before it is",
		"# recorded) to NEVERISSUEDSTREAMXXXXXXXXX_7, an id this session never issued. go-sdk answers",
		"# 400 text/plain `failed to replay events` (its store does not know that stream). go-sdk's client",
		"# treats a 4xx on a resume as fatal for the connection: the call fails, no further resume, and",
		"# Close sends DELETE (204). The stream call never got its response: its outcome is unknown.",
		"# A 400 for an unknown Last-Event-ID is the correct answer: no violation.",
		"expect violation count=0",
		"expect resume outcome=rejected_4xx status=400 last_event_id=NEVERISSUEDSTREAMXXXXXXXXX_7 count=1",
		"expect resume outcome=violated count=0",
		"expect unknown_outcome tool=stream count=1",
	)
}

func runGoSessionless2026(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	h := goHandler(srv, mcp.StreamableHTTPOptions{Stateless: true})
	return recordGo(dir, "go-sessionless-2026", []http.Handler{h}, func(r *rig) error {
		return withGoSession(ctx, r.url(), "", false, func(cs *mcp.ClientSession) error {
			if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 3, Label: "plain"}, "tok-plain", "plain: 3 steps done"); err != nil {
				return err
			}
			if err := expectResult(ctx, cs, "echo", streamArgs{Label: "one"}, nil, "one"); err != nil {
				return err
			}
			return expectResult(ctx, cs, "echo", streamArgs{Label: "two"}, nil, "two")
		})
	},
		"# go-sdk v1.8.0 client with its defaults (revision 2026-07-28) against a stateless go-sdk server.",
		"# No initialize, no Mcp-Session-Id, no GET stream, no event ids: POST server/discover, then three",
		"# tools/call (stream with 3 progress notifications on an SSE response without ids, echo, echo), each",
		"# carrying MCP-Protocol-Version: 2026-07-28. Nothing to resume and nothing wrong: no violation.",
		"expect violation count=0",
		"expect resume count=0",
		"expect unknown_outcome count=0",
	)
}

// sessionTimeout is how long the 404 scenario's server keeps an idle
// session; the client waits longer than this before its next call.
const sessionTimeout = 300 * time.Millisecond

func runGo404CleanNewSession(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	opts := storeOpts()
	opts.SessionTimeout = sessionTimeout
	return recordGo(dir, "go-404-clean-new-session", []http.Handler{goHandler(srv, opts)}, func(r *rig) error {
		err := withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			if err := expectResult(ctx, cs, "echo", streamArgs{Label: "before-expiry"}, nil, "before-expiry"); err != nil {
				return err
			}
			time.Sleep(3 * sessionTimeout)
			_, err := callTool(ctx, cs, "echo", streamArgs{Label: "after-expiry"}, nil)
			return sessionMissing("call after expiry", err)
		})
		if err != nil {
			return err
		}
		// The application's recovery: a brand-new session, and a different
		// call, after reconciling (nothing reused from the lost session).
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			return expectResult(ctx, cs, "echo", streamArgs{Label: "fresh-start"}, nil, "fresh-start")
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, SessionTimeout 300ms.",
		"# Session S1: initialize, initialized, tools/call echo(before-expiry) answered; the client idles 900ms",
		"# and the server expires S1. The next tools/call echo(after-expiry) with Mcp-Session-Id: S1 gets",
		"# 404 `session not found`; go-sdk's client treats that as terminal (ErrSessionMissing) and sends no",
		"# DELETE. The application then opens session S2 (new initialize, no Mcp-Session-Id, no",
		"# Last-Event-ID) and calls echo(fresh-start), different arguments, then DELETEs S2.",
		"# A 404 followed by a fresh session that reuses nothing must not be flagged.",
		"expect violation count=0",
		"expect session ended=404 count=1",
		"expect session ended=deleted count=1",
		"expect resume count=0",
		"expect unknown_outcome count=0",
	)
}

// runGo404PollerNewSession is a client that polls: the same call with the
// same arguments, each answered before the next. Its session expires, and
// after the 404 the application opens a new session and polls on. The poll
// it makes on the new session is the next one of its schedule, not a replay
// of the lost session's log.
func runGo404PollerNewSession(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	opts := storeOpts()
	opts.SessionTimeout = sessionTimeout
	poll := streamArgs{Label: "queue-depth"}
	return recordGo(dir, "go-404-poller-new-session", []http.Handler{goHandler(srv, opts)}, func(r *rig) error {
		err := withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			for range 2 {
				if err := expectResult(ctx, cs, "echo", poll, nil, poll.Label); err != nil {
					return err
				}
				time.Sleep(sessionTimeout / 3)
			}
			// The loss shows on a ping (a keep-alive's), not on a poll:
			// a poll refused with 404 did not run and is no call of
			// the session's to compare with.
			time.Sleep(3 * sessionTimeout)
			return sessionMissing("ping after expiry", cs.Ping(ctx, nil))
		})
		if err != nil {
			return err
		}
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			return expectResult(ctx, cs, "echo", poll, nil, poll.Label)
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, SessionTimeout 300ms.",
		"# Session S1: initialize, initialized, then tools/call echo(queue-depth) twice, each answered before",
		"# the next, 100ms apart: a poller. The client idles 900ms and the server expires S1; a ping (as a",
		"# keep-alive sends) with Mcp-Session-Id: S1 gets 404 (ErrSessionMissing). The application opens",
		"# session S2 and polls once more, the identical call, answered, then DELETEs S2.",
		"# A call the lost session made over and over, each time answered, is the client's habit: making it",
		"# on the new session replays nothing (before 2026-12-04 this was a high silent_reinit_after_404).",
		"expect violation count=0",
		"expect session ended=404 count=1",
		"expect session ended=deleted count=1",
		"expect resume count=0",
		"expect unknown_outcome count=0",
	)
}

// tickFeed is a non-MCP SSE endpoint (a dashboard's live feed): ticks with
// decimal ids, resumable with Last-Event-ID like any SSE stream, carrying
// plain text, not JSON-RPC.
func tickFeed(w http.ResponseWriter, r *http.Request) {
	next := 1
	if last, err := strconv.Atoi(r.Header.Get("Last-Event-ID")); err == nil {
		next = last + 1
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	for i := next; i < next+3; i++ {
		fmt.Fprintf(w, "id: %d\ndata: tick %d\n\n", i, i)
		http.NewResponseController(w).Flush()
		time.Sleep(eventPace / 2)
	}
}

// nonMCPMux serves MCP on /mcp and ordinary web traffic beside it.
func nonMCPMux(mcpHandler http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpHandler)
	mux.HandleFunc("GET /api/items", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"items":[{"id":1,"name":"alpha"},{"id":2,"name":"beta"}]}`)
	})
	mux.HandleFunc("POST /api/items", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":3,"name":"gamma"}`)
	})
	mux.HandleFunc("GET /static/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		io.WriteString(w, "const feed = new EventSource('/feed');\nfeed.onmessage = (e) => console.log(e.data);\n")
	})
	mux.HandleFunc("GET /feed", tickFeed)
	return mux
}

// plainRequest sends one non-MCP request through the proxy and reads the
// whole answer, checking its status.
func plainRequest(ctx context.Context, hc *http.Client, method, url, lastEventID, body string, want int) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if lastEventID != "" {
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d", method, url, resp.StatusCode, want)
	}
	return nil
}

func runGoNonMCPMixed(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	h := nonMCPMux(goHandler(srv, storeOpts()))
	return recordGo(dir, "go-non-mcp-mixed", []http.Handler{h}, func(r *rig) error {
		web := &http.Client{Transport: &http.Transport{}}
		defer web.CloseIdleConnections()
		base := "http://" + r.proxy.Addr()
		if err := plainRequest(ctx, web, http.MethodGet, base+"/api/items", "", "", http.StatusOK); err != nil {
			return err
		}
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 3, Label: "mixed"}, "tok-mixed", "mixed: 3 steps done"); err != nil {
				return err
			}
			steps := []struct {
				method, path, lastEventID, body string
				want                            int
			}{
				{http.MethodGet, "/feed", "", "", http.StatusOK},
				{http.MethodGet, "/feed", "3", "", http.StatusOK},
				{http.MethodGet, "/static/app.js", "", "", http.StatusOK},
				{http.MethodPost, "/api/items", "", `{"name":"gamma"}`, http.StatusCreated},
			}
			for _, s := range steps {
				if err := plainRequest(ctx, web, s.method, base+s.path, s.lastEventID, s.body, s.want); err != nil {
					return err
				}
			}
			return expectResult(ctx, cs, "echo", streamArgs{Label: "mixed-done"}, nil, "mixed-done")
		})
	},
		"# One port, one proxy: a go-sdk v1.8.0 server on /mcp beside ordinary web traffic, in this order:",
		"# GET /api/items (200 application/json), then a correct MCP session (go-sdk client, 2025-11-25,",
		"# MemoryEventStore): initialize, initialized, tools/call stream (3 progress notifications with go-sdk",
		"# ids, priming first), then non-MCP: GET /feed (200 text/event-stream: `id: 1` `data: tick 1` .. id 3,",
		"# then the response ends), GET /feed with Last-Event-ID: 3 (an SSE resume, but not MCP: answered",
		"# ticks 4..6), GET /static/app.js (text/javascript), POST /api/items (201 JSON, no jsonrpc), then",
		"# tools/call echo and DELETE. The web client uses its own keep-alive connections. Nothing MCP is",
		"# wrong, and the /feed streams and their Last-Event-ID must be ignored: no resume, no violation.",
		"expect violation count=0",
		"expect resume count=0",
		"expect session ended=deleted count=1",
		"expect unknown_outcome count=0",
	)
}

// slashRedirect serves MCP under /mcp/ and redirects /mcp there with 307,
// as Starlette's Mount does (python-sdk before 1.12, FastMCP apps mounted
// in FastAPI): a client configured with /mcp sends every request twice.
func slashRedirect(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			http.Redirect(w, r, "/mcp/", http.StatusTemporaryRedirect)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func runGoRedirectToSlash(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	return recordGo(dir, "go-redirect-to-slash", []http.Handler{slashRedirect(goHandler(srv, storeOpts()))}, func(r *rig) error {
		return streamCallThroughCut(ctx, r, newSSECut(`"name":"stream"`, eventIndex(2)), false, streamArgs{Steps: 5, Label: "resume-me"}, "tok-1")
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET, the server",
		"# behind a router that answers /mcp with 307 Temporary Redirect to /mcp/ (as Starlette's Mount does).",
		"# The client, configured with /mcp, sends every request there first and again to /mcp/ (Go's",
		"# http.Client follows 307 with the same method, body and headers): initialize, notifications/initialized,",
		"# tools/call stream (steps=5, progressToken tok-1), whose stream on /mcp/ the proxy cuts after S_2; the",
		"# resume (GET, Last-Event-Id: S_2), redirected too, is answered 200 on /mcp/ with S_3.. and the result;",
		"# then DELETE. The redirected requests reached no MCP handler: one session, one resume, nothing",
		"# flagged (before 2026-12-04: a second session under /mcp, never started, an unverifiable resume",
		"# answered 307 and an unknown outcome for the redirected call).",
		"expect violation count=0",
		"expect resume outcome=resumed last_event_id={cut} count=1",
		"expect resume count=1",
		"expect session ended=deleted count=1",
		"expect session count=1",
		"expect unknown_outcome count=0",
	)
}

// sessionMissing checks that what the scenario did got go-sdk's answer to a
// 404 for the session.
func sessionMissing(what string, err error) error {
	if errors.Is(err, mcp.ErrSessionMissing) {
		return nil
	}
	return fmt.Errorf("%s: got %v, want ErrSessionMissing", what, err)
}
