package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func init() {
	register(
		scenario{name: "go-legacy-sse", desc: "nothing wrong: two clients on the 2024-11-05 HTTP+SSE transport (GET stream, POSTs answered 202, answers on the stream), beside nothing else", run: runGoLegacySSE},
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
