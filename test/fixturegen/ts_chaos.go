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
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func init() {
	register(
		scenario{name: "ts-chaos", probe: true, run: runTSChaos,
			desc: "probe: TypeScript SDK applications doing random correct things (overlapping, abandoned and polling calls, announcements, sessions forgotten) while the proxy cuts random streams"},
		scenario{name: "go-ts-chaos", probe: true, run: runGoTSChaos,
			desc: "probe: go-chaos's go-sdk clients against the TypeScript SDK's server (sessions forgotten as in ts-chaos)"},
	)
}

// tsChaosServer is the probes' server.mjs: an event store per session,
// polling streams asked back after 100 ms.
var tsChaosServer = []tsServerConfig{{RetryInterval: 100}}

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
	const name = "ts-chaos"
	var cuts, forgets atomic.Int64
	forgetCtx, stopForgetting := context.WithCancel(ctx)
	defer stopForgetting()
	out, err := recordTS(ctx, pcapPath(dir, name), tsChaosServer,
		func(r *tsRig) {
			r.hooks = append(r.hooks, randomCuts(&cuts))
			go forgetEvery(forgetCtx, r, &forgets)
		},
		tsClientConfig{Flow: "chaos", Chaos: &tsChaosConfig{Seed: *chaosSeed, Clients: *chaosClients, DurationMs: int(chaosRun / time.Millisecond)}},
		nil, nil, `"chaos"`)
	stopForgetting()
	fmt.Fprintf(os.Stderr, "ts-chaos seed %d: %d cuts, sessions forgotten %d times\n", *chaosSeed, cuts.Load(), forgets.Load())
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"chaos"`) {
			fmt.Fprintf(os.Stderr, "ts-chaos seed %d: %s\n", *chaosSeed, line)
		}
	}
	return writeSpec(dir, name,
		"# probe (test/fixturegen/ts_chaos.go): random correct TypeScript SDK traffic, random proxy cuts.",
		"# Any violation is a false alarm or a fault of the SDK; explain it before trusting the capture.")
}

// runGoTSChaos runs go-chaos's clients against server.mjs: two SDKs that
// must agree on the wire, as a go-sdk application calling a TypeScript
// server does.
func runGoTSChaos(ctx context.Context, dir string) error {
	const name = "go-ts-chaos"
	r, err := newTSRig(ctx, pcapPath(dir, name), tsChaosServer...)
	if err != nil {
		return err
	}
	var calls, failed, cuts, forgets atomic.Int64
	r.hooks = append(r.hooks, randomCuts(&cuts))
	forgetCtx, stopForgetting := context.WithCancel(ctx)
	go forgetEvery(forgetCtx, r, &forgets)
	var wg sync.WaitGroup
	deadline := time.Now().Add(chaosRun)
	for i := range *chaosClients {
		wg.Go(func() {
			c := chaosClient{url: r.url(), rng: rand.New(rand.NewPCG(*chaosSeed, uint64(i+1))), name: fmt.Sprintf("c%d", i),
				calls: &calls, failed: &failed, tsServer: true}
			c.run(ctx, deadline)
		})
	}
	wg.Wait()
	stopForgetting()
	if err := r.finish(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "go-ts-chaos seed %d: %d calls, %d failed, %d cuts, sessions forgotten %d times\n",
		*chaosSeed, calls.Load(), failed.Load(), cuts.Load(), forgets.Load())
	return writeSpec(dir, name,
		"# probe (test/fixturegen/ts_chaos.go): go-sdk clients against the TypeScript SDK's server, random proxy cuts.",
		"# Any violation is a false alarm or a fault of the SDKs; explain it before trusting the capture.")
}
