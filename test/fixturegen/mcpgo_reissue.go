package main

// mcp-go v1.2.1 at revision 2026-07-28 (its client's default; its server
// serves both revisions on one endpoint): the same broken-stream re-issue as
// go-reissue-after-break-2026, with the other Go SDK on both sides.

import (
	"context"
	"fmt"
	"net/http"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

const mcpgoReissueName = "mcpgo-reissue-after-break-2026"

func init() {
	register(scenario{name: mcpgoReissueName,
		desc: "mcp-go 2026-07-28: the proxy breaks charge_card's and get_order's streams after progress; the application re-issues both (server charge log = truth)",
		run:  runMCPGoReissueAfterBreak})
}

// newMCPGoShop is the shop server in mcp-go: charge_card (destructiveHint)
// and get_order (readOnlyHint), each reporting steps of progress before its
// work and logging every execution.
func newMCPGoShop(charges *crowdLog) http.Handler {
	s := mcpserver.NewMCPServer("fixture-mcpgo-shop", "1.0.0", mcpserver.WithToolCapabilities(false))
	work := func(what string) mcpserver.ToolHandlerFunc {
		return func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			order, steps := req.GetString("order", ""), req.GetInt("steps", 0)
			if meta := req.Params.Meta; meta != nil && meta.ProgressToken != nil {
				for i := 1; i <= steps; i++ {
					// A broken stream does not stop the tool.
					_ = mcpserver.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
						map[string]any{"progressToken": meta.ProgressToken, "progress": i, "total": steps})
					time.Sleep(eventPace)
				}
			}
			charges.add(map[string]any{what: order})
			return mcpgo.NewToolResultText(what + " " + order), nil
		}
	}
	s.AddTool(mcpgo.NewTool("charge_card", mcpgo.WithDescription("charges an order"), mcpgo.WithDestructiveHintAnnotation(true),
		mcpgo.WithString("order", mcpgo.Required()), mcpgo.WithNumber("amount_cents"), mcpgo.WithNumber("steps")), work("charge"))
	s.AddTool(mcpgo.NewTool("get_order", mcpgo.WithDescription("reads an order"), mcpgo.WithReadOnlyHintAnnotation(true),
		mcpgo.WithString("order", mcpgo.Required()), mcpgo.WithNumber("steps")), work("read"))
	return mcpserver.NewStreamableHTTPServer(s)
}

func runMCPGoReissueAfterBreak(ctx context.Context, dir string) error {
	charges, err := createLog(chargeLogPath(dir, mcpgoReissueName))
	if err != nil {
		return err
	}
	defer charges.Close()
	cutCharge, cutRead := progressCut(`"name":"charge_card"`), progressCut(`"name":"get_order"`)
	err = recordGo(dir, mcpgoReissueName, []http.Handler{newMCPGoShop(charges)}, func(r *rig) error {
		r.hooks = append(r.hooks, cutCharge.hooks, cutRead.hooks)
		c, err := mcpclient.NewStreamableHttpClient(r.url())
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.Start(ctx); err != nil {
			return err
		}
		init := mcpgo.InitializeRequest{}
		init.Params.ClientInfo = mcpgo.Implementation{Name: "fixture-mcpgo-client", Version: "1.0.0"}
		res, err := c.Initialize(ctx, init)
		if err != nil {
			return fmt.Errorf("initialize: %w", err)
		}
		if res.ProtocolVersion != revisionSessionless {
			return fmt.Errorf("mcp-go negotiated %s, want %s", res.ProtocolVersion, revisionSessionless)
		}
		if _, err := c.ListTools(ctx, mcpgo.ListToolsRequest{}); err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		for _, t := range []struct {
			tool string
			cut  *sseCut
		}{{"charge_card", cutCharge}, {"get_order", cutRead}} {
			call := func(token string) error {
				req := mcpgo.CallToolRequest{}
				req.Params.Name = t.tool
				req.Params.Arguments = map[string]any{"order": "ord-mcpgo-1", "amount_cents": 4200, "steps": 3}
				req.Params.Meta = &mcpgo.Meta{ProgressToken: token}
				_, err := c.CallTool(ctx, req)
				return err
			}
			if err := call("first-" + t.tool); err == nil {
				return fmt.Errorf("%s: the broken call succeeded", t.tool)
			}
			if err := t.cut.waitFired(ctx); err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
			if err := call("again-" + t.tool); err != nil {
				return fmt.Errorf("%s: re-issue: %w", t.tool, err)
			}
		}
		return nil
	},
		"# mcp-go v1.2.1 client and server, the client's default revision (2026-07-28: server/discover, no",
		"# sessions). tools/list: charge_card destructiveHint, get_order readOnlyHint. tools/call",
		"# charge_card(ord-mcpgo-1, 3 progress steps): the proxy FINs its stream right after progress 1; mcp-go's",
		"# client returns an error, the application waits 200 ms and sends the identical call again (new id, new",
		"# progress token). The same for get_order (read-only: harmless, no finding). "+mcpgoReissueName+".charges.jsonl",
		"# is the server's log of what ran.",
		"expect violation kind=reissued_call_after_break tool=charge_card severity=critical count=1",
		"expect violation kind=reissued_call_after_break tool=get_order count=0",
		"expect violation count=1",
	)
	return err
}

func init() {
	register(scenario{name: "mcpgo-both-revisions",
		desc: "mcp-go: one endpoint, a 2026-07-28 client and a 2025-11-25 client (session, initialize) side by side, nothing wrong",
		run:  runMCPGoBothRevisions})
}

// mcpgoClient connects an mcp-go client to url; revision "" takes its
// default (2026-07-28, server/discover), else the handshake pinned to it.
func mcpgoClient(ctx context.Context, url, name, revision string) (*mcpclient.Client, error) {
	c, err := mcpclient.NewStreamableHttpClient(url)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: name, Version: "1.0.0"}
	init.Params.ProtocolVersion = revision
	res, err := c.Initialize(ctx, init)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: initialize: %w", name, err)
	}
	want := revision
	if want == "" {
		want = revisionSessionless
	}
	if res.ProtocolVersion != want {
		c.Close()
		return nil, fmt.Errorf("%s negotiated %s, want %s", name, res.ProtocolVersion, want)
	}
	return c, nil
}

func runMCPGoBothRevisions(ctx context.Context, dir string) error {
	const name = "mcpgo-both-revisions"
	charges, err := createLog(chargeLogPath(dir, name))
	if err != nil {
		return err
	}
	defer charges.Close()
	return recordGo(dir, name, []http.Handler{newMCPGoShop(charges)}, func(r *rig) error {
		for i, rev := range []string{"", revisionSessions} {
			c, err := mcpgoClient(ctx, r.url(), fmt.Sprintf("fixture-mcpgo-client-%d", i), rev)
			if err != nil {
				return err
			}
			err = func() error {
				defer c.Close()
				if _, err := c.ListTools(ctx, mcpgo.ListToolsRequest{}); err != nil {
					return fmt.Errorf("tools/list: %w", err)
				}
				for _, tool := range []string{"charge_card", "get_order"} {
					req := mcpgo.CallToolRequest{}
					req.Params.Name = tool
					req.Params.Arguments = map[string]any{"order": fmt.Sprintf("ord-both-%d", i), "amount_cents": 1500, "steps": 2}
					req.Params.Meta = &mcpgo.Meta{ProgressToken: fmt.Sprintf("tok-%d-%s", i, tool)}
					if _, err := c.CallTool(ctx, req); err != nil {
						return fmt.Errorf("%s: %w", tool, err)
					}
				}
				return nil
			}()
			if err != nil {
				return err
			}
		}
		return nil
	},
		"# mcp-go v1.2.1 server: one endpoint for both revisions. First an mcp-go client with its default",
		"# (2026-07-28: server/discover, no session), then one pinned to 2025-11-25 (initialize, Mcp-Session-Id,",
		"# notifications/initialized); each lists tools and calls charge_card and get_order once (2 progress steps",
		"# each), every call answered. Nothing wrong on either revision.",
		"expect violation count=0",
		"expect unknown_outcome count=0",
		"expect resume count=0",
	)
}

const mcpgoPollerBreakName = "mcpgo-poller-break-2026"

func init() {
	register(scenario{name: mcpgoPollerBreakName,
		desc: "mcp-go 2026-07-28: a poller makes the same call every tick; the proxy breaks one poll's stream and the next tick polls again",
		run:  runMCPGoPollerBreak})
}

func runMCPGoPollerBreak(ctx context.Context, dir string) error {
	s := mcpserver.NewMCPServer("fixture-mcpgo-queue", "1.0.0", mcpserver.WithToolCapabilities(false))
	s.AddTool(mcpgo.NewTool("queue_depth", mcpgo.WithDescription("reports a queue's depth"), mcpgo.WithString("queue", mcpgo.Required())),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			if meta := req.Params.Meta; meta != nil && meta.ProgressToken != nil {
				for i := 1; i <= 2; i++ {
					_ = mcpserver.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
						map[string]any{"progressToken": meta.ProgressToken, "progress": i, "total": 2})
					time.Sleep(eventPace)
				}
			}
			return mcpgo.NewToolResultText("depth 3"), nil
		})
	cut := progressCut(pollerCutMarker)
	return recordGo(dir, mcpgoPollerBreakName, []http.Handler{mcpserver.NewStreamableHTTPServer(s)}, func(r *rig) error {
		r.hooks = append(r.hooks, cut.hooks)
		c, err := mcpgoClient(ctx, r.url(), "fixture-mcpgo-poller", "")
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.ListTools(ctx, mcpgo.ListToolsRequest{}); err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		for tick := 1; tick <= 4; tick++ {
			req := mcpgo.CallToolRequest{}
			req.Params.Name = "queue_depth"
			req.Params.Arguments = map[string]any{"queue": "orders"}
			req.Params.Meta = &mcpgo.Meta{ProgressToken: fmt.Sprintf("poll-%d", tick)}
			_, err := c.CallTool(ctx, req)
			switch {
			case tick == pollerCutTick && err == nil:
				return fmt.Errorf("the broken poll succeeded")
			case tick == pollerCutTick:
				if err := cut.waitFired(ctx); err != nil {
					return err
				}
			case err != nil:
				return fmt.Errorf("poll %d: %w", tick, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	},
		"# mcp-go v1.2.1 client and server, the client's default revision (2026-07-28: server/discover, no",
		"# sessions). tools/list: queue_depth with mcp-go's default annotations, the spec's defaults spelled out",
		"# (destructiveHint true, readOnlyHint false). A poller: every 200 ms the identical tools/call",
		"# queue_depth(orders), a new progress token each tick. Polls 1 and 2 are answered; the proxy FINs poll 3's",
		"# stream right after progress 1, and mcp-go's client returns an error; the next tick sends poll 4, answered.",
		"# Poll 4 may be a retry of poll 3 or just the next poll, which the wire cannot tell apart: unverifiable, not",
		"# reissued_call_after_break (as go-poller-break-2026 with go-sdk; critical before 2026-12-04).",
		pollerExpect[0], pollerExpect[1], pollerExpect[2],
	)
}
