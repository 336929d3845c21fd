package main

// Probes against tmcp (ts/tmcp_server.mjs), an MCP server implementation
// independent of the official SDKs, with its own Streamable HTTP transport:
// no event ids, no session ever refused, broadcasts on every standalone
// stream, and the per-request revision beside the session ones. The
// clients are the other probes' (ts-chaos's applications, go-chaos's
// go-sdk and mcp-go clients); the proxy cuts at random and the server
// restarts now and then (forget), as in ts-chaos.

import "context"

func init() {
	register(
		scenario{name: "ts-tmcp-chaos", probe: true, run: runTSTmcpChaos,
			desc: "probe: ts-chaos's TypeScript applications against a tmcp server (no event ids, every session id accepted), restarted now and then"},
		scenario{name: "go-tmcp-chaos", probe: true, run: runGoTmcpChaos,
			desc: "probe: go-chaos's go-sdk clients (both revisions) against a tmcp server, restarted now and then"},
		scenario{name: "mcpgo-tmcp-chaos", probe: true, run: runMCPGoTmcpChaos,
			desc: "probe: go-chaos's clients with mcp-go's client against a tmcp server, restarted now and then"},
	)
}

// tmcpServer is tmcp_server.mjs: server.mjs's tools on tmcp.
var tmcpServer = tsServerConfig{Script: "tmcp_server.mjs", NoEventIDs: true}

func runTSTmcpChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "ts-tmcp-chaos", tmcpServer,
		"# probe (test/fixturegen/tmcp_chaos.go): TypeScript SDK applications against a tmcp server, random proxy cuts.")
}

func runGoTmcpChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "go-tmcp-chaos", tmcpServer, chaosSetup{tsServer: true, bothRevisions: true},
		"# probe (test/fixturegen/tmcp_chaos.go): go-sdk clients against a tmcp server, random proxy cuts.")
}

func runMCPGoTmcpChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "mcpgo-tmcp-chaos", tmcpServer, chaosSetup{tsServer: true, bothRevisions: true, mcpgoClient: true},
		"# probe (test/fixturegen/tmcp_chaos.go): mcp-go clients against a tmcp server, random proxy cuts.")
}
