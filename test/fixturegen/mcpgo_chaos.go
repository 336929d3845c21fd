package main

// go-mcpgo-chaos is go-chaos against the other Go SDK's server: mcp-go v1.2.1
// with its in-memory event store (one store-wide decimal counter for event
// ids, resumable by GET with Last-Event-ID) and a short idle TTL (even seeds
// with WithStateful, so expired sessions get 404s): the shape of a
// production mcp-go server. ts-mcpgo-chaos puts TypeScript applications in
// front of it. They are probes: random correct traffic, random proxy cuts;
// a violation in their captures is a false alarm or an SDK's fault.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	mcptransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

func init() {
	register(scenario{name: "go-mcpgo-chaos", probe: true, run: runGoMCPGoChaos,
		desc: "probe: go-chaos's go-sdk clients against an mcp-go server with its event store and a short idle TTL, while the proxy cuts random streams"})
	register(scenario{name: "mcpgo-go-chaos", probe: true, run: runMCPGoGoChaos,
		desc: "probe: mcp-go clients doing go-chaos's random things against go-chaos's go-sdk server, while the proxy cuts random streams"})
	register(scenario{name: "ts-mcpgo-chaos", probe: true, run: runTSMCPGoChaos,
		desc: "probe: ts-chaos's TypeScript applications against an mcp-go server with server.mjs's tools, its event store and a short idle TTL, while the proxy cuts random streams"})
}

func runGoMCPGoChaos(ctx context.Context, dir string) error {
	return recordGoChaos(ctx, dir, "go-mcpgo-chaos", mcpgoHandler(mcpgoChaosTools(), mcpgoChaosTTL, *chaosSeed%2 == 0), chaosSetup{},
		"# probe (test/fixturegen/mcpgo_chaos.go): go-sdk clients, an mcp-go server with its event store; random proxy cuts.")
}

// runMCPGoGoChaos puts mcp-go's client in go-chaos's place: it resumes a
// stream the server (or a proxy's FIN) ended after an event id, fails a
// call whose stream broke off, and listens on the standalone stream only
// when asked (WithContinuousListening, half the 2025-11-25 sessions).
func runMCPGoGoChaos(ctx context.Context, dir string) error {
	opts := storeOpts()
	opts.SessionTimeout = mcpgoChaosTTL
	return recordGoChaos(ctx, dir, "mcpgo-go-chaos", revisionRouter(goHandler(newGoServer(toolSet{}), opts)), chaosSetup{mcpgoClient: true},
		"# probe (test/fixturegen/mcpgo_chaos.go): mcp-go clients against a go-sdk server; random proxy cuts.")
}

// mcpgoSession is session with mcp-go's client: a third of the sessions
// with its default revision (2026-07-28), the rest pinned to 2025-11-25;
// one to six calls, some overlapping; then Close.
func (c *chaosClient) mcpgoSession(ctx context.Context, hc *http.Client, label string) {
	rev := revisionSessions
	if c.rng.IntN(3) == 0 {
		rev = ""
	}
	topts := []mcptransport.StreamableHTTPCOption{mcptransport.WithHTTPBasicClient(hc)}
	if c.rng.IntN(2) == 0 && rev == revisionSessions {
		//lint:ignore SA1019 the standalone GET stream is 2025-11-25's, the revision these sessions pin
		topts = append(topts, mcptransport.WithContinuousListening())
	}
	cl, err := mcpclient.NewStreamableHttpClient(c.url, topts...)
	if err != nil {
		c.failed.Add(1)
		return
	}
	defer cl.Close()
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "fixture-mcpgo-client", Version: "1.0.0"}
	init.Params.ProtocolVersion = rev
	if err := cl.Start(ctx); err != nil {
		c.failed.Add(1)
		return
	}
	if _, err := cl.Initialize(ctx, init); err != nil {
		c.failed.Add(1)
		return
	}
	var overlapping sync.WaitGroup
	for o := range 1 + c.rng.IntN(6) {
		tool, args := c.randomTool(fmt.Sprintf("%s-o%d", label, o))
		token, timeout := c.randomTokenTimeout()
		call := func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			c.calls.Add(1)
			req := mcpgo.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = tool, args
			if token != nil {
				req.Params.Meta = &mcpgo.Meta{ProgressToken: token}
			}
			if _, err := cl.CallTool(ctx, req); err != nil {
				c.failed.Add(1)
			}
		}
		if c.rng.IntN(3) == 0 {
			overlapping.Go(call)
		} else {
			call()
		}
		if c.rng.IntN(8) == 0 {
			time.Sleep(time.Duration(500+c.rng.IntN(700)) * time.Millisecond)
		}
	}
	overlapping.Wait()
}

func runTSMCPGoChaos(ctx context.Context, dir string) error {
	return recordTSChaos(ctx, dir, "ts-mcpgo-chaos", tsShapedMCPGoHandler(), tsChaosClient(),
		"# probe (test/fixturegen/mcpgo_chaos.go): TypeScript SDK applications, an mcp-go server with its event store; random proxy cuts.")
}

// tsShapedMCPGoHandler is mcp-go's server with server.mjs's tools, its event
// store and idle TTL; even seeds answer 404 for ended sessions.
func tsShapedMCPGoHandler() http.Handler {
	return mcpgoHandler(mcpgoTSShapedTools(), mcpgoChaosTTL, *chaosSeed%2 == 0)
}

// mcpgoHandler serves s with mcp-go's event store, ending sessions idle for
// ttl. mcp-go's
// default session manager checks an id's form only, so an ended session's
// id is still served (its events purged: a resume gets 400); stateful
// answers 404 for it.
func mcpgoHandler(s *mcpserver.MCPServer, ttl time.Duration, stateful bool) http.Handler {
	return mcpserver.NewStreamableHTTPServer(s, mcpserver.WithEventStore(mcpserver.NewInMemoryEventStore()),
		mcpserver.WithSessionIdleTTL(ttl), mcpserver.WithStateful(stateful))
}

// mcpgoChaosTTL is the probes' idle TTL: the clients' pauses expire some
// sessions.
const mcpgoChaosTTL = 700 * time.Millisecond

// newMCPGoServer is an mcp-go server without tools yet, which may log.
func newMCPGoServer() *mcpserver.MCPServer {
	return mcpserver.NewMCPServer("fixture-mcpgo-server", "1.0.0", mcpserver.WithToolCapabilities(false), mcpserver.WithLogging())
}

// mcpgoNotifyStep is notifyStep in mcp-go: progress when the client sent a
// token, else a log message, on whichever stream mcp-go picks.
func mcpgoNotifyStep(ctx context.Context, req mcpgo.CallToolRequest, step, total int, label string) error {
	srv := mcpserver.ServerFromContext(ctx)
	if meta := req.Params.Meta; meta != nil && meta.ProgressToken != nil {
		return srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": meta.ProgressToken, "progress": step, "total": total,
			"message": fmt.Sprintf("%s step %d", label, step)})
	}
	return srv.SendNotificationToClient(ctx, "notifications/message", map[string]any{
		"level": "info", "logger": "fixture", "data": fmt.Sprintf("%s step %d of %d", label, step, total)})
}

// mcpgoStandaloneLog sends a log message not tied to the request: mcp-go
// puts it on the session's standalone GET stream.
func mcpgoStandaloneLog(ctx context.Context, logger, data string) error {
	srv, session := mcpserver.ServerFromContext(ctx), mcpserver.ClientSessionFromContext(ctx)
	return srv.SendNotificationToSpecificClient(session.SessionID(), "notifications/message", map[string]any{
		"level": "info", "logger": logger, "data": data})
}

// mcpgoChaosTools is newGoServer's tool set in mcp-go (close_after is
// ignored: mcp-go has no server-side stream close for polling).
func mcpgoChaosTools() *mcpserver.MCPServer {
	s := newMCPGoServer()
	emit := func(ctx context.Context, req mcpgo.CallToolRequest) (string, error) {
		label, steps := req.GetString("label", ""), req.GetInt("steps", 0)
		for i := 1; i <= steps; i++ {
			if err := mcpgoNotifyStep(ctx, req, i, steps, label); err != nil {
				return "", err
			}
			time.Sleep(eventPace)
		}
		return label, nil
	}
	args := []mcpgo.ToolOption{mcpgo.WithString("label"), mcpgo.WithNumber("steps"), mcpgo.WithNumber("close_after")}
	s.AddTool(mcpgo.NewTool("stream", append(args, mcpgo.WithDescription("emits notifications, then returns"))...),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			label, err := emit(ctx, req)
			if err != nil {
				return nil, err
			}
			return mcpgo.NewToolResultText(fmt.Sprintf("%s: %d steps done", label, req.GetInt("steps", 0))), nil
		})
	s.AddTool(mcpgo.NewTool("slow_write", append(args, mcpgo.WithDescription("emits notifications, then performs a slow write"))...),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			label, err := emit(ctx, req)
			if err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
			case <-time.After(slowWriteHold):
			}
			return mcpgo.NewToolResultText(label + ": written"), nil
		})
	s.AddTool(mcpgo.NewTool("broadcast", append(args, mcpgo.WithDescription("emits log messages on the session's standalone stream"))...),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			label, steps := req.GetString("label", ""), req.GetInt("steps", 0)
			for i := 1; i <= steps; i++ {
				if err := mcpgoStandaloneLog(ctx, "fixture", fmt.Sprintf("%s broadcast %d of %d", label, i, steps)); err != nil {
					return nil, err
				}
				time.Sleep(eventPace)
			}
			return mcpgo.NewToolResultText(label + ": broadcast"), nil
		})
	s.AddTool(mcpgo.NewTool("echo", append(args, mcpgo.WithDescription("returns its label"))...),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(req.GetString("label", "")), nil
		})
	return s
}

// mcpgoTSShapedTools is tsShapedGoServer in mcp-go: slow_write (steps
// notifications delayMs apart; pollAfter is ignored, as close_after above)
// and announce (log messages on the standalone stream).
func mcpgoTSShapedTools() *mcpserver.MCPServer {
	s := newMCPGoServer()
	s.AddTool(mcpgo.NewTool("slow_write", mcpgo.WithDescription("writes slowly, reporting progress"), mcpgo.WithString("label"),
		mcpgo.WithNumber("steps"), mcpgo.WithNumber("delayMs"), mcpgo.WithNumber("pollAfter")),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			label, steps := req.GetString("label", ""), req.GetInt("steps", 0)
			delay := time.Duration(req.GetInt("delayMs", 0)) * time.Millisecond
			for i := 1; i <= steps; i++ {
				time.Sleep(delay)
				if err := mcpgoNotifyStep(ctx, req, i, steps, label); err != nil {
					return nil, err
				}
			}
			time.Sleep(delay)
			return mcpgo.NewToolResultText("wrote " + label), nil
		})
	s.AddTool(mcpgo.NewTool("announce", mcpgo.WithDescription("sends log messages on the standalone stream"), mcpgo.WithString("label"),
		mcpgo.WithNumber("count"), mcpgo.WithNumber("delayMs")),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			label, count := req.GetString("label", ""), req.GetInt("count", 0)
			for i := 1; i <= count; i++ {
				time.Sleep(time.Duration(req.GetInt("delayMs", 0)) * time.Millisecond)
				if err := mcpgoStandaloneLog(ctx, "announce", fmt.Sprintf("announcement %d of %d for %s", i, count, label)); err != nil {
					return nil, err
				}
			}
			return mcpgo.NewToolResultText(fmt.Sprintf("announced %d", count)), nil
		})
	return s
}
