package main

// Revision 2026-07-28 traffic that must raise nothing: a go-sdk client that
// opens subscriptions/listen (it asked for tools/list_changed), gets a list
// change on it, moves to another backend when the first is drained, and
// closes its listen stream when it is done.

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func init() {
	register(scenario{name: "go-listen-moving-2026",
		desc: "go-sdk 2026-07-28: subscriptions/listen with a tools/list_changed, the client moved to a second stateless backend mid-run, the listen stream closed by the client",
		run:  runGoListenMoving2026})
}

func runGoListenMoving2026(ctx context.Context, dir string) error {
	first, second := newGoServer(toolSet{}), newGoServer(toolSet{})
	stateless := mcp.StreamableHTTPOptions{Stateless: true}
	return recordGo(dir, "go-listen-moving-2026", []http.Handler{goHandler(first, stateless), goHandler(second, stateless)}, func(r *rig) error {
		var moved atomic.Bool
		r.route = func(int) int {
			if moved.Load() {
				return 1
			}
			return 0
		}
		changed := make(chan struct{}, 1)
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		client := mcp.NewClient(&mcp.Implementation{Name: "fixture-go-client", Version: "1.0.0"}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				select {
				case changed <- struct{}{}:
				default:
				}
			},
		})
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.url(), HTTPClient: hc, DisableStandaloneSSE: true}, nil)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer cs.Close()
		if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 2, Label: "on-first"}, "tok-1", "on-first: 2 steps done"); err != nil {
			return err
		}
		// A tool appears on the first backend: tools/list_changed on the
		// listen stream.
		mcp.AddTool(first, &mcp.Tool{Name: "late_tool", Description: "added while the client listens"},
			func(context.Context, *mcp.CallToolRequest, streamArgs) (*mcp.CallToolResult, any, error) {
				return textResult("late"), nil, nil
			})
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no tools/list_changed on the listen stream: %w", ctx.Err())
		}
		// The first backend is drained: idle connections close, new ones
		// go to the second (the listen stream stays where it is).
		moved.Store(true)
		hc.CloseIdleConnections()
		for i := range 2 {
			label := fmt.Sprintf("on-second-%d", i)
			if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 2, Label: label}, fmt.Sprintf("tok-2-%d", i), label+": 2 steps done"); err != nil {
				return err
			}
		}
		return nil
	},
		"# go-sdk v1.8.0 client with its defaults (2026-07-28) and a ToolListChangedHandler, two stateless go-sdk",
		"# backends. server/discover, then the client opens subscriptions/listen (a long-lived POST whose first",
		"# message is notifications/subscriptions/acknowledged) and calls stream (2 progress steps) on backend A.",
		"# A tool is added on A: notifications/tools/list_changed arrives on the listen stream. A is drained:",
		"# idle connections close and later ones go to backend B, where the client calls stream twice more. At",
		"# the end the client closes, cancelling its listen stream (notifications/cancelled, the stream ends",
		"# without a response). Clean traffic of the new revision: nothing to flag.",
		"expect violation count=0",
		"expect resume count=0",
		"expect unknown_outcome count=0",
	)
}
