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
	"sync/atomic"
	"time"
)

func init() {
	register(scenario{name: "ts-chaos", probe: true, run: runTSChaos,
		desc: "probe: TypeScript SDK applications doing random correct things (overlapping, abandoned and polling calls, announcements, sessions forgotten) while the proxy cuts random streams"})
}

func runTSChaos(ctx context.Context, dir string) error {
	const name = "ts-chaos"
	var cuts, forgets atomic.Int64
	forgetCtx, stopForgetting := context.WithCancel(ctx)
	defer stopForgetting()
	out, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{RetryInterval: 100}},
		func(r *tsRig) {
			r.hooks = append(r.hooks, randomCuts(&cuts))
			go func() {
				rng := rand.New(rand.NewPCG(*chaosSeed, 1))
				for {
					select {
					case <-forgetCtx.Done():
						return
					case <-time.After(time.Duration(1500+rng.IntN(1500)) * time.Millisecond):
					}
					if r.servers[0].command(forgetCtx, "forget", `"forgot"`) == nil {
						forgets.Add(1)
					}
				}
			}()
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
