package main

//lint:file-ignore SA1019 sampling and roots are deprecated from 2026-07-28 only; go-server-requests pins 2025-11-25

// Server modes and message flows of go-sdk that the other scenarios leave
// out, all without a fault: a capture of correct traffic in any of them
// must stay clean, damaged or not. Server-initiated requests (elicitation,
// sampling, roots) put a second JSON-RPC id space on the same streams;
// JSON responses move a call's progress to the standalone GET stream; a
// stateless 2025-11-25 server issues no session ids at all; the 2024-11-05
// HTTP+SSE transport carries neither session ids nor event ids.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func init() {
	register(
		scenario{name: "go-server-requests", desc: "a tool asks the client (elicitation, sampling, roots) mid-call; the proxy cuts the stream after the sampling request and the client resumes", run: runGoServerRequests},
		scenario{name: "go-json-response", desc: "a JSONResponse go-sdk server: answers in JSON, progress on the standalone GET stream, one progress token re-used by every call", run: runGoJSONResponse},
		scenario{name: "go-calls-timed-out", desc: "a go-sdk client's calls time out (context deadline: notifications/cancelled, stream closed) on a server without event store; the next call re-uses their progress token", run: runGoCallsTimedOut},
		scenario{name: "go-stateless-2025", desc: "two 2025-11-25 clients against a stateless go-sdk server: initialize, no Mcp-Session-Id, no event ids", run: runGoStateless2025},
		scenario{name: "go-legacy-sse", desc: "nothing wrong: two clients on the 2024-11-05 HTTP+SSE transport (GET stream, POSTs answered 202, answers on the stream), beside nothing else", run: runGoLegacySSE},
	)
}

// askServer is newGoServer with one more tool, ask: per step, a progress
// notification, then an elicitation, a sampling and a roots request to the
// client, each awaited.
func askServer() *mcp.Server {
	s := newGoServer(toolSet{})
	mcp.AddTool(s, &mcp.Tool{Name: "ask", Description: "asks the client for input, a completion and its roots"},
		func(ctx context.Context, req *mcp.CallToolRequest, a streamArgs) (*mcp.CallToolResult, any, error) {
			for i := 1; i <= a.Steps; i++ {
				if err := notifyStep(ctx, req, i, a.Steps, a.Label); err != nil {
					return nil, nil, err
				}
				time.Sleep(eventPace)
				if _, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: fmt.Sprintf("%s confirm %d", a.Label, i),
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}); err != nil {
					return nil, nil, fmt.Errorf("elicitation: %w", err)
				}
				time.Sleep(eventPace)
				if _, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Label}}}}); err != nil {
					return nil, nil, fmt.Errorf("sampling: %w", err)
				}
				time.Sleep(eventPace)
				if _, err := req.Session.ListRoots(ctx, nil); err != nil {
					return nil, nil, fmt.Errorf("roots: %w", err)
				}
			}
			return textResult(a.Label + ": asked"), nil, nil
		})
	return s
}

// askClient answers the server's requests: it accepts every elicitation,
// samples a fixed text and has one root.
func askClient() *mcp.Client {
	c := mcp.NewClient(&mcp.Implementation{Name: "fixture-go-client", Version: "1.0.0"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "fixture", Role: "assistant", Content: &mcp.TextContent{Text: "sampled"}}, nil
		},
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {},
	})
	c.AddRoots(&mcp.Root{URI: "file:///srv/fixture", Name: "fixture"})
	return c
}

func runGoServerRequests(ctx context.Context, dir string) error {
	return recordGo(dir, "go-server-requests", []http.Handler{goHandler(askServer(), storeOpts())}, func(r *rig) error {
		cut := newSSECut(`"name":"ask"`, eventIndex(3))
		r.hooks = append(r.hooks, cut.hooks)
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		t := &mcp.StreamableClientTransport{Endpoint: r.url(), HTTPClient: hc, MaxRetries: 2}
		cs, err := askClient().Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: revisionSessions})
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer cs.Close()
		// Give the standalone GET time to open, so it is in the capture.
		time.Sleep(100 * time.Millisecond)
		for i, label := range []string{"first", "second"} {
			if err := expectResult(ctx, cs, "ask", streamArgs{Steps: 2, Label: label}, fmt.Sprintf("tok-%d", i), label+": asked"); err != nil {
				return err
			}
			if err := expectResult(ctx, cs, "echo", streamArgs{Label: label}, nil, label); err != nil {
				return err
			}
		}
		if err := cut.waitFired(ctx); err != nil {
			return err
		}
		r.noteCut(cut)
		return nil
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, standalone GET enabled.",
		"# Two tools/call ask (steps=2), each followed by an echo. Per step the tool sends a progress",
		"# notification, then elicitation/create, sampling/createMessage and roots/list requests to the client",
		"# on the call's SSE stream; the client answers each with a POST of a JSON-RPC response (202). The",
		"# server numbers its requests from 1 in its own id space, so its ids collide with the client's (the",
		"# client's echo is id 3, so is the server's first roots/list). The proxy closes the first ask stream",
		"# with FIN right after event S_3 (the sampling request); the client resumes with Last-Event-Id: S_3",
		"# and gets the roots request, the second step and the result. Nothing is wrong: no violation.",
		"expect violation count=0",
		"expect resume outcome=resumed last_event_id={cut} count=1",
		"expect resume count=1",
		"expect session ended=deleted count=1",
		"expect session start_seen=true protocol_version=2025-11-25 count=1",
		"expect unknown_outcome count=0",
	)
}

func runGoJSONResponse(ctx context.Context, dir string) error {
	h := goHandler(newGoServer(toolSet{}), mcp.StreamableHTTPOptions{JSONResponse: true})
	return recordGo(dir, "go-json-response", []http.Handler{h}, func(r *rig) error {
		return withGoSession(ctx, r.url(), revisionSessions, true, func(cs *mcp.ClientSession) error {
			time.Sleep(100 * time.Millisecond) // the standalone GET must be open before the first progress
			return streamsSharingToken(ctx, cs, 3, "")
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, server option JSONResponse, no event store.",
		"# Every POST is answered with application/json; the progress of a call cannot go beside its answer,",
		"# so it goes on the standalone GET stream (no event ids). Three tools/call stream (steps=2), each with",
		"# the same progressToken \"tok\" (a client may re-use a token once its request is answered), each",
		"# followed by an echo: the GET stream carries progress 1, 2, 1, 2, 1, 2 for \"tok\". Then DELETE (204).",
		"# Nothing is wrong: no violation, and no progress_replay when the capture loses the request that",
		"# restarted the token.",
		"expect violation count=0",
		"expect resume count=0",
		"expect session ended=deleted count=1",
		"expect unknown_outcome count=0",
	)
}

func runGoStateless2025(ctx context.Context, dir string) error {
	h := goHandler(newGoServer(toolSet{}), mcp.StreamableHTTPOptions{Stateless: true})
	return recordGo(dir, "go-stateless-2025", []http.Handler{h}, func(r *rig) error {
		for c := 0; c < 2; c++ {
			err := withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
				return streamsSharingToken(ctx, cs, 2, fmt.Sprintf("client-%d-", c))
			})
			if err != nil {
				return err
			}
		}
		return nil
	},
		"# go-sdk v1.8.0 clients and a stateless go-sdk server (option Stateless), revision 2025-11-25. Two",
		"# clients one after the other, each: initialize, notifications/initialized, then two tools/call",
		"# stream (steps=2, progressToken \"tok\") and echo. The server never sends Mcp-Session-Id and its",
		"# SSE events carry no ids, so there is no session to follow and nothing to resume: no violation.",
		"expect violation count=0",
		"expect resume count=0",
		"expect session count=0",
		"expect unknown_outcome count=0",
	)
}

// streamsSharingToken makes n tools/call stream (steps=2), all with the
// progress token "tok", each followed by an echo; labels start with prefix.
func streamsSharingToken(ctx context.Context, cs *mcp.ClientSession, n int, prefix string) error {
	for i := 0; i < n; i++ {
		label := fmt.Sprintf("%scall-%d", prefix, i)
		if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 2, Label: label}, "tok", label+": 2 steps done"); err != nil {
			return err
		}
		if err := expectResult(ctx, cs, "echo", streamArgs{Label: label}, nil, label); err != nil {
			return err
		}
	}
	return nil
}

// callTimeout is how long go-calls-timed-out's client waits for a call
// that takes 10 steps (600 ms).
const callTimeout = 350 * time.Millisecond

func runGoCallsTimedOut(ctx context.Context, dir string) error {
	h := goHandler(newGoServer(toolSet{}), mcp.StreamableHTTPOptions{})
	return recordGo(dir, "go-calls-timed-out", []http.Handler{h}, func(r *rig) error {
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			for i := 0; i < 2; i++ {
				c, cancel := context.WithTimeout(ctx, callTimeout)
				_, err := callTool(c, cs, "stream", streamArgs{Steps: 10, Label: fmt.Sprintf("slow-%d", i)}, "tok")
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("call %d: %v, want a timeout", i, err)
				}
			}
			return expectResult(ctx, cs, "stream", streamArgs{Steps: 2, Label: "quick"}, "tok", "quick: 2 steps done")
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, no event store (no event ids). Two tools/call",
		"# stream (steps=10, 60 ms apart, progressToken \"tok\") time out after 350 ms (the caller's context",
		"# deadline): the client POSTs notifications/cancelled for each (reason \"context deadline exceeded\")",
		"# and closes the call's stream first, so no response comes. A third call, stream (steps=2) with the",
		"# same token, completes: its progress starts again at 1, below the timed-out calls' last values (a",
		"# client may re-use a token once no active request holds it). Then DELETE. Nothing is wrong: no progress_replay, no",
		"# unresumable_close; the two timed-out calls' outcomes are unknown to the client.",
		"expect violation count=0",
		"expect resume count=0",
		"expect unknown_outcome tool=stream count=2",
		"expect unknown_outcome count=2",
		"expect session ended=deleted count=1",
	)
}

// runGoLegacySSE records the transport Streamable HTTP replaced, which
// servers still offer and clients fall back to: a GET opens an SSE stream
// whose first event names the endpoint to POST to (with the session in its
// query), every POST is answered 202, and every answer comes on the GET
// stream, as events without ids. No Mcp-Session-Id, nothing to resume.
func runGoLegacySSE(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	h := mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	return recordGo(dir, "go-legacy-sse", []http.Handler{h}, func(r *rig) error {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = legacySession(ctx, r.url(), fmt.Sprintf("client-%d", i))
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	},
		"# go-sdk v1.8.0 client and server on the HTTP+SSE transport of revision 2024-11-05 (SSEHandler,",
		"# SSEClientTransport). Two clients at once: each GETs /mcp (an SSE stream whose `endpoint` event names",
		"# /mcp?sessionid=...), POSTs initialize, notifications/initialized, tools/call stream (3 progress",
		"# notifications) and echo there, each answered 202, the answers and notifications arriving on its GET",
		"# stream as events without ids, then closes. No Mcp-Session-Id, no event ids: nothing to judge.",
		"expect violation count=0",
		"expect resume count=0",
		"expect session count=0",
		"expect unknown_outcome count=0",
	)
}

func legacySession(ctx context.Context, url, label string) error {
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	cs, err := newGoClient().Connect(ctx, &mcp.SSEClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	if err := expectResult(ctx, cs, "stream", streamArgs{Label: label, Steps: 3}, label, label+": 3 steps done"); err != nil {
		return err
	}
	return expectResult(ctx, cs, "echo", streamArgs{Label: label}, nil, label)
}
