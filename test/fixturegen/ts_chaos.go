package main

// ts-chaos is go-chaos for the TypeScript SDK (see go_chaos.go): the
// client.mjs chaos flow's applications against a correct server.mjs (an
// event store per session, polling), with random proxy cuts and, every
// 1.5 to 3 s, every session forgotten (a restart or expiry: 404s, after
// which the applications start afresh without re-issuing anything).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func init() {
	register(
		scenario{name: "ts-chaos", probe: true, run: runTSChaos,
			desc: "probe: TypeScript SDK applications doing random correct things (overlapping, abandoned and polling calls, announcements, sessions forgotten) while the proxy cuts random streams"},
		scenario{name: "go-ts-chaos", probe: true, run: runGoTSChaos,
			desc: "probe: go-chaos's go-sdk clients against the TypeScript SDK's server (sessions forgotten as in ts-chaos)"},
		scenario{name: "mcpgo-ts-chaos", probe: true, run: runMCPGoTSChaos,
			desc: "probe: go-chaos's clients with mcp-go's client in go-sdk's place against the TypeScript SDK's server (sessions forgotten as in ts-chaos)"},
		scenario{name: "ts-go-chaos", probe: true, run: runTSGoChaos,
			desc: "probe: ts-chaos's TypeScript applications against a go-sdk server with the same tools (idle expiry as in go-chaos)"},
	)
}

// tsChaosServer is the probes' server.mjs: an event store per session,
// polling streams asked back after 100 ms.
var tsChaosServer = tsServerConfig{RetryInterval: 100}

// tsChaosClient is client.mjs's chaos flow, drawn with -seed and -clients.
func tsChaosClient() tsClientConfig {
	return tsClientConfig{Flow: "chaos", Chaos: &tsChaosConfig{Seed: *chaosSeed, Clients: *chaosClients, DurationMs: int(chaosRun / time.Millisecond)}}
}

// randomCuts is the probes' proxy fault for this server.
func (c tsServerConfig) randomCuts(cuts *atomic.Int64) func(n int) pcaprec.Hooks {
	if c.NoEventIDs {
		return randomEventCuts(cuts, nthEvent)
	}
	return randomCuts(cuts)
}

// forgetEvery makes r's server forget every session every 1.5 to 3 s until
// ctx is done, counting the times in forgets.
func forgetEvery(ctx context.Context, r *tsRig, forgets *atomic.Int64) {
	rng := rand.New(rand.NewPCG(*chaosSeed, 1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1500+rng.IntN(1500)) * time.Millisecond):
		}
		if r.servers[0].command(ctx, "forget", `"forgot"`) == nil {
			forgets.Add(1)
		}
	}
}

func runTSChaos(ctx context.Context, dir string) error {
	return recordTSChaosAgainst(ctx, dir, "ts-chaos", tsChaosServer, tsChaosClient(),
		"# probe (test/fixturegen/ts_chaos.go): random correct TypeScript SDK traffic, random proxy cuts.")
}

// recordTSChaosAgainst records a chaos flow's applications (client) against
// one node server, which forgets every session now and then, while the
// proxy cuts at random.
func recordTSChaosAgainst(ctx context.Context, dir, name string, server tsServerConfig, client tsClientConfig, about string) error {
	var cuts, forgets atomic.Int64
	forgetCtx, stopForgetting := context.WithCancel(ctx)
	defer stopForgetting()
	out, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{server},
		func(r *tsRig) {
			r.hooks = append(r.hooks, server.randomCuts(&cuts))
			go forgetEvery(forgetCtx, r, &forgets)
		},
		client,
		nil, nil, `"chaos"`)
	stopForgetting()
	fmt.Fprintf(os.Stderr, "%s seed %d: %d cuts, sessions forgotten %d times\n", name, *chaosSeed, cuts.Load(), forgets.Load())
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s seed %d: %s\n", name, *chaosSeed, chaosCounts(out))
	return writeSpec(dir, name, about,
		"# Any violation is a false alarm or a fault of the SDKs; explain it before trusting the capture.")
}

// runGoTSChaos runs go-chaos's clients against server.mjs: two SDKs that
// must agree on the wire, as a go-sdk application calling a TypeScript
// server does.
func runGoTSChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "go-ts-chaos", tsChaosServer, chaosSetup{tsServer: true},
		"# probe (test/fixturegen/ts_chaos.go): go-sdk clients against the TypeScript SDK's server, random proxy cuts.")
}

// runMCPGoTSChaos is go-ts-chaos with mcp-go's client.
func runMCPGoTSChaos(ctx context.Context, dir string) error {
	return recordChaosAgainstTS(ctx, dir, "mcpgo-ts-chaos", tsChaosServer, chaosSetup{tsServer: true, mcpgoClient: true},
		"# probe (test/fixturegen/ts_chaos.go): mcp-go clients against the TypeScript SDK's server, random proxy cuts.")
}

// recordChaosAgainstTS records Go clients (setup) against a node server,
// which forgets every session now and then, while the proxy cuts at random.
func recordChaosAgainstTS(ctx context.Context, dir, name string, server tsServerConfig, setup chaosSetup, about string) error {
	r, err := newTSRig(ctx, pcapPath(dir, name), server)
	if err != nil {
		return err
	}
	var calls, failed, cuts, forgets atomic.Int64
	r.hooks = append(r.hooks, server.randomCuts(&cuts))
	forgetCtx, stopForgetting := context.WithCancel(ctx)
	go forgetEvery(forgetCtx, r, &forgets)
	runChaosClients(ctx, r.url(), setup, &calls, &failed)
	stopForgetting()
	if err := r.finish(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s seed %d: %d calls, %d failed, %d cuts, sessions forgotten %d times\n",
		name, *chaosSeed, calls.Load(), failed.Load(), cuts.Load(), forgets.Load())
	return writeSpec(dir, name, about,
		"# Any violation is a false alarm or a fault of the SDKs; explain it before trusting the capture.")
}

// runTSGoChaos runs ts-chaos's applications against a go-sdk server with
// server.mjs's tools (tsShapedGoServer): a TypeScript application calling
// a Go server. The server's idle timeout forgets sessions (as go-chaos's).
func runTSGoChaos(ctx context.Context, dir string) error {
	return recordTSChaos(ctx, dir, "ts-go-chaos", tsShapedGoHandler(), tsChaosClient(),
		"# probe (test/fixturegen/ts_chaos.go): TypeScript SDK applications against a go-sdk server, random proxy cuts.")
}

// tsShapedGoHandler serves tsShapedGoServer with go-chaos's idle timeout.
func tsShapedGoHandler() http.Handler {
	opts := storeOpts()
	opts.SessionTimeout = 700 * time.Millisecond
	return goHandler(tsShapedGoServer(), opts)
}

// recordTSChaos records a chaos flow's applications (client) against server
// h while the proxy cuts at random; about names the probe in the spec's
// first line.
func recordTSChaos(ctx context.Context, dir, name string, h http.Handler, client tsClientConfig, about string) error {
	r, err := newRig(pcapPath(dir, name), h)
	if err != nil {
		return err
	}
	var cuts atomic.Int64
	r.hooks = append(r.hooks, randomCuts(&cuts))
	tr := &tsRig{rig: r}
	out, err := tr.runTSClient(ctx, client, nil)
	if ferr := tr.finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s seed %d: %d cuts; %s\n", name, *chaosSeed, cuts.Load(), chaosCounts(out))
	return writeSpec(dir, name, about,
		"# Any violation is a false alarm or a fault of the SDKs; explain it before trusting the capture.")
}

// tsShapedGoServer is a go-sdk server with server.mjs's tools: slow_write
// (steps notifications delayMs apart, progress when the client sent a
// token, its stream closed for polling after pollAfter) and announce (log
// messages on the standalone stream).
func tsShapedGoServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "fixture-go-server", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "slow_write", Description: "writes slowly, reporting progress"},
		func(ctx context.Context, req *mcp.CallToolRequest, a tsCallArgs) (*mcp.CallToolResult, any, error) {
			delay := time.Duration(a.DelayMs) * time.Millisecond
			for i := 1; i <= a.Steps; i++ {
				time.Sleep(delay)
				if err := notifyStep(ctx, req, i, a.Steps, a.Label); err != nil {
					return nil, nil, err
				}
				if i == a.PollAfter && req.Extra != nil && req.Extra.CloseSSEStream != nil {
					req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 100 * time.Millisecond})
				}
			}
			time.Sleep(delay)
			return textResult("wrote " + a.Label), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "announce", Description: "sends log messages on the standalone stream"},
		func(ctx context.Context, req *mcp.CallToolRequest, a tsAnnounceArgs) (*mcp.CallToolResult, any, error) {
			for i := 1; i <= a.Count; i++ {
				time.Sleep(time.Duration(a.DelayMs) * time.Millisecond)
				// A context not tied to the request routes the message to
				// the standalone stream.
				//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; these are 2025-11-25 sessions
				err := req.Session.Log(context.Background(), &mcp.LoggingMessageParams{Level: "info", Logger: "announce",
					Data: fmt.Sprintf("announcement %d of %d for %s", i, a.Count, a.Label)})
				if err != nil {
					return nil, nil, err
				}
			}
			return textResult(fmt.Sprintf("announced %d", a.Count)), nil, nil
		})
	return s
}

// chaosCounts is the chaos flow's closing line in the client's output.
func chaosCounts(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"chaos"`) {
			return line
		}
	}
	return "no counts"
}
