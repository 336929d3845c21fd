package main

// Probes against MCP servers that are neither SDK's transport, in node:
// tmcp (ts/tmcp_server.mjs), an implementation of its own with no event
// ids, no session ever refused, broadcasts on every standalone stream and
// the per-request revision beside the session ones; and @hono/mcp
// (ts/hono_server.mjs), a transport of its own under the SDK's McpServer,
// with random UUID event ids and no priming; and FastMCP
// (ts/fastmcp_server.mjs), mcp-proxy's HTTP server around the SDK's
// transport with its own event ids, its own per-request (2026-07-28)
// handler (a 400 from FastMCP 4). The clients are the other
// probes' (ts-chaos's applications, go-chaos's go-sdk and mcp-go clients);
// the proxy cuts at random and the server restarts now and then (forget),
// as in ts-chaos.

import "context"

func init() {
	register(
		scenario{name: "ts-tmcp-chaos", probe: true, run: runTSTmcpChaos,
			desc: "probe: ts-chaos's TypeScript applications against a tmcp server (no event ids, every session id accepted), restarted now and then"},
		scenario{name: "go-tmcp-chaos", probe: true, run: runGoTmcpChaos,
			desc: "probe: go-chaos's go-sdk clients (both revisions) against a tmcp server, restarted now and then"},
		scenario{name: "mcpgo-tmcp-chaos", probe: true, run: runMCPGoTmcpChaos,
			desc: "probe: go-chaos's clients with mcp-go's client against a tmcp server, restarted now and then"},
		scenario{name: "ts-hono-chaos", probe: true, run: runTSHonoChaos,
			desc: "probe: ts-chaos's TypeScript applications against @hono/mcp's transport (random event ids, no priming), sessions forgotten now and then"},
		scenario{name: "go-hono-chaos", probe: true, run: runGoHonoChaos,
			desc: "probe: go-chaos's go-sdk clients (both revisions) against @hono/mcp's transport, sessions forgotten now and then"},
		scenario{name: "mcpgo-hono-chaos", probe: true, run: runMCPGoHonoChaos,
			desc: "probe: go-chaos's clients with mcp-go's client against @hono/mcp's transport, sessions forgotten now and then"},
		scenario{name: "ts-fastmcp-chaos", probe: true, run: runTSFastMCPChaos,
			desc: "probe: ts-chaos's TypeScript applications against a FastMCP server, restarted now and then"},
		scenario{name: "go-fastmcp-chaos", probe: true, run: runGoFastMCPChaos,
			desc: "probe: go-chaos's go-sdk clients (both revisions) against a FastMCP server, restarted now and then"},
		scenario{name: "mcpgo-fastmcp-chaos", probe: true, run: runMCPGoFastMCPChaos,
			desc: "probe: go-chaos's clients with mcp-go's client against a FastMCP server, restarted now and then"},
	)
}

var (
	// tmcpServer is tmcp_server.mjs: server.mjs's tools on tmcp.
	tmcpServer = tsServerConfig{Script: "tmcp_server.mjs", NoEventIDs: true}
	// honoServer is hono_server.mjs: server.mjs's tools on @hono/mcp.
	honoServer = tsServerConfig{Script: "hono_server.mjs"}
	// fastmcpServer is fastmcp_server.mjs: server.mjs's tools on FastMCP.
	fastmcpServer = tsServerConfig{Script: "fastmcp_server.mjs"}
)

func runTSTmcpChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "ts-tmcp-chaos", tmcpServer, tsChaosClient(),
		"# probe (test/fixturegen/servers_chaos.go): TypeScript SDK applications against a tmcp server, random proxy cuts.")
}

func runGoTmcpChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "go-tmcp-chaos", tmcpServer, chaosSetup{tsServer: true, bothRevisions: true},
		"# probe (test/fixturegen/servers_chaos.go): go-sdk clients against a tmcp server, random proxy cuts.")
}

func runMCPGoTmcpChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "mcpgo-tmcp-chaos", tmcpServer, chaosSetup{tsServer: true, bothRevisions: true, mcpgoClient: true},
		"# probe (test/fixturegen/servers_chaos.go): mcp-go clients against a tmcp server, random proxy cuts.")
}

func runTSHonoChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "ts-hono-chaos", honoServer, tsChaosClient(),
		"# probe (test/fixturegen/servers_chaos.go): TypeScript SDK applications against @hono/mcp's transport, random proxy cuts.")
}

func runGoHonoChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "go-hono-chaos", honoServer, chaosSetup{tsServer: true, bothRevisions: true},
		"# probe (test/fixturegen/servers_chaos.go): go-sdk clients against @hono/mcp's transport, random proxy cuts.")
}

func runMCPGoHonoChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "mcpgo-hono-chaos", honoServer, chaosSetup{tsServer: true, bothRevisions: true, mcpgoClient: true},
		"# probe (test/fixturegen/servers_chaos.go): mcp-go clients against @hono/mcp's transport, random proxy cuts.")
}

func runTSFastMCPChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "ts-fastmcp-chaos", fastmcpServer, tsChaosClient(),
		"# probe (test/fixturegen/servers_chaos.go): TypeScript SDK applications against a FastMCP server, random proxy cuts.")
}

func runGoFastMCPChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "go-fastmcp-chaos", fastmcpServer, chaosSetup{tsServer: true, bothRevisions: true},
		"# probe (test/fixturegen/servers_chaos.go): go-sdk clients against a FastMCP server, random proxy cuts.")
}

func runMCPGoFastMCPChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "mcpgo-fastmcp-chaos", fastmcpServer, chaosSetup{tsServer: true, bothRevisions: true, mcpgoClient: true},
		"# probe (test/fixturegen/servers_chaos.go): mcp-go clients against a FastMCP server, random proxy cuts.")
}
