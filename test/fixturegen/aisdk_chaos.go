package main

// Probes with the Vercel AI SDK's MCP client (@ai-sdk/mcp,
// ts/aisdk_client.mjs), a client of its own beside the SDKs': it names
// 2025-11-25 on its initialize, never resumes a request's stream, resumes
// the standalone stream only after an error, never re-initialises on 404,
// and DELETEs on every close. Its applications draw as ts-chaos's do,
// against each server the other probes meet.

import "context"

func init() {
	register(
		scenario{name: "aisdk-ts-chaos", probe: true, run: runAISDKTSChaos,
			desc: "probe: @ai-sdk/mcp client applications against server.mjs (sessions forgotten as in ts-chaos)"},
		scenario{name: "aisdk-go-chaos", probe: true, run: runAISDKGoChaos,
			desc: "probe: @ai-sdk/mcp client applications against a go-sdk server (idle expiry as in go-chaos)"},
		scenario{name: "aisdk-mcpgo-chaos", probe: true, run: runAISDKMCPGoChaos,
			desc: "probe: @ai-sdk/mcp client applications against mcp-go's server with its event store"},
		scenario{name: "aisdk-hono-chaos", probe: true, run: runAISDKHonoChaos,
			desc: "probe: @ai-sdk/mcp client applications against @hono/mcp's transport"},
		scenario{name: "aisdk-tmcp-chaos", probe: true, run: runAISDKTmcpChaos,
			desc: "probe: @ai-sdk/mcp client applications against a tmcp server"},
		scenario{name: "aisdk-fastmcp-chaos", probe: true, run: runAISDKFastMCPChaos,
			desc: "probe: @ai-sdk/mcp client applications against a FastMCP server"},
	)
}

// aisdkChaosClient is aisdk_client.mjs's chaos flow, drawn with -seed and
// -clients.
func aisdkChaosClient() tsClientConfig {
	c := tsChaosClient()
	c.Script = "aisdk_client.mjs"
	return c
}

func runAISDKTSChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "aisdk-ts-chaos", tsChaosServer, aisdkChaosClient(),
		"# probe (test/fixturegen/aisdk_chaos.go): @ai-sdk/mcp clients against the TypeScript SDK's server, random proxy cuts.")
}

func runAISDKGoChaos(ctx context.Context, dir string) error {
	return recordTSChaos(ctx, dir, "aisdk-go-chaos", tsShapedGoHandler(), aisdkChaosClient(),
		"# probe (test/fixturegen/aisdk_chaos.go): @ai-sdk/mcp clients against a go-sdk server, random proxy cuts.")
}

func runAISDKMCPGoChaos(ctx context.Context, dir string) error {
	return recordTSChaos(ctx, dir, "aisdk-mcpgo-chaos", tsShapedMCPGoHandler(), aisdkChaosClient(),
		"# probe (test/fixturegen/aisdk_chaos.go): @ai-sdk/mcp clients against mcp-go's server, random proxy cuts.")
}

func runAISDKHonoChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "aisdk-hono-chaos", honoServer, aisdkChaosClient(),
		"# probe (test/fixturegen/aisdk_chaos.go): @ai-sdk/mcp clients against @hono/mcp's transport, random proxy cuts.")
}

func runAISDKTmcpChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "aisdk-tmcp-chaos", tmcpServer, aisdkChaosClient(),
		"# probe (test/fixturegen/aisdk_chaos.go): @ai-sdk/mcp clients against a tmcp server, random proxy cuts.")
}

func runAISDKFastMCPChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "aisdk-fastmcp-chaos", fastmcpServer, aisdkChaosClient(),
		"# probe (test/fixturegen/aisdk_chaos.go): @ai-sdk/mcp clients against a FastMCP server, random proxy cuts.")
}
