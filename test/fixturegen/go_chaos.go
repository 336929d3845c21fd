package main

// go-chaos is a probe, not a fixture: many go-sdk clients doing random
// things a correct application may do, against a correct go-sdk server, with
// a proxy cutting random streams the way idle timeouts and drains do. Nothing
// is injected into either SDK, so a violation found in its capture is either
// a false alarm of the detector or a fault of the SDKs themselves, and must
// be explained. Its runs found a capture bug (a FIN after a proven hole
// counted as one more lost byte), progress tokens shared by overlapping
// calls taken for replays, and cursor_dropped raised on call streams,
// beside which go-sdk's real dropped cursor turned up (the fixture
// go-cursor-dropped). Run it with several seeds and put the captures
// through the damage tests (README.md, "Probes"; docs/damage.md).

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

var (
	chaosSeed    = flag.Uint64("seed", 1, "probes (go-chaos, ts-chaos): the random seed (the same seed draws the same choices; timing still varies)")
	chaosClients = flag.Int("clients", 8, "probes (go-chaos, ts-chaos): concurrent clients")
)

// chaosRun is how long the probes' clients start new sessions.
const chaosRun = 8 * time.Second

func init() {
	register(scenario{name: "go-chaos", probe: true, run: runGoChaos,
		desc: "probe: go-sdk clients doing random correct things (both revisions, overlapping calls, timeouts, polling, idle expiry) while the proxy cuts random streams"})
}

func runGoChaos(ctx context.Context, dir string) error {
	opts := storeOpts()
	// Short, so that the clients' pauses expire some sessions (404s).
	opts.SessionTimeout = 700 * time.Millisecond
	return recordGoChaos(ctx, dir, "go-chaos", revisionRouter(goHandler(newGoServer(toolSet{}), opts)), chaosSetup{},
		"# probe (test/fixturegen/go_chaos.go): random correct go-sdk traffic, random proxy cuts.")
}

// recordGoChaos records go-chaos's clients (set up by setup) against
// server h while the proxy cuts at random; about names the probe in the
// spec's first line.
func recordGoChaos(ctx context.Context, dir, name string, h http.Handler, setup chaosSetup, about string) error {
	var calls, failed, cuts atomic.Int64
	err := recordGo(dir, name, []http.Handler{h}, func(r *rig) error {
		r.hooks = append(r.hooks, randomCuts(&cuts))
		runChaosClients(ctx, r.url(), setup, &calls, &failed)
		return nil
	},
		about,
		"# Any violation is a false alarm or a fault of the SDKs; explain it before trusting the capture.",
	)
	fmt.Fprintf(os.Stderr, "%s seed %d: %d calls, %d failed, %d cuts\n", name, *chaosSeed, calls.Load(), failed.Load(), cuts.Load())
	return err
}

// randomCuts is the probes' proxy fault: 30% of connections, drawn with
// -seed, are cut after their k-th event with an id (k from 1 to 5), at its
// boundary or inside it; cuts counts the cuts made.
func randomCuts(cuts *atomic.Int64) func(n int) pcaprec.Hooks {
	return randomEventCuts(cuts, nthEventWithID)
}

// randomEventCuts is randomCuts with the k-th event chosen by nth: servers
// that send no ids are cut after any event (nthEvent).
func randomEventCuts(cuts *atomic.Int64, nth func(k int) func(string) bool) func(n int) pcaprec.Hooks {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(*chaosSeed, 0))
	return func(n int) pcaprec.Hooks {
		mu.Lock()
		cut, k, mid := rng.IntN(10) < 3, 1+rng.IntN(5), rng.IntN(2) == 0
		mu.Unlock()
		if !cut {
			return pcaprec.Hooks{}
		}
		c := newSSECut("", nth(k))
		c.midEvent = mid
		c.onFire = func() { cuts.Add(1) }
		return c.hooks(n)
	}
}

// nthEventWithID matches the k-th SSE event with an id of a response.
func nthEventWithID(k int) func(string) bool {
	seen := 0
	return func(ev string) bool {
		if eventID([]byte(ev)) == "" {
			return false
		}
		seen++
		return seen == k
	}
}

// nthEvent matches the k-th SSE event with data of a response.
func nthEvent(k int) func(string) bool {
	seen := 0
	return func(ev string) bool {
		if !strings.HasPrefix(ev, "data:") && !strings.Contains(ev, "\ndata:") {
			return false
		}
		seen++
		return seen == k
	}
}

// chaosSetup says who meets in a Go-client probe.
type chaosSetup struct {
	// tsServer: the server has server.mjs's tools (go-ts-chaos) and, unless
	// bothRevisions, speaks 2025-11-25 only.
	tsServer bool
	// bothRevisions: a tsServer that speaks 2026-07-28 too (tmcp_server.mjs).
	bothRevisions bool
	// mcpgoClient: the clients are mcp-go's (mcpgo-go-chaos), not go-sdk's.
	mcpgoClient bool
}

// runChaosClients runs -clients chaosClients against url for chaosRun and
// waits for them.
func runChaosClients(ctx context.Context, url string, setup chaosSetup, calls, failed *atomic.Int64) {
	var wg sync.WaitGroup
	deadline := time.Now().Add(chaosRun)
	for i := range *chaosClients {
		wg.Go(func() {
			c := chaosClient{url: url, rng: rand.New(rand.NewPCG(*chaosSeed, uint64(i+1))), name: fmt.Sprintf("c%d", i),
				calls: calls, failed: failed, chaosSetup: setup}
			c.run(ctx, deadline)
		})
	}
	wg.Wait()
}

// chaosClient makes one session after another until the deadline.
type chaosClient struct {
	url           string
	rng           *rand.Rand
	name          string
	calls, failed *atomic.Int64
	chaosSetup
}

func (c *chaosClient) run(ctx context.Context, deadline time.Time) {
	// Half the sessions share the client's keep-alive connections.
	shared := &http.Client{Transport: &http.Transport{}}
	defer shared.CloseIdleConnections()
	for s := 0; time.Now().Before(deadline); s++ {
		hc := shared
		if c.rng.IntN(2) == 0 {
			hc = &http.Client{Transport: &http.Transport{}}
		}
		if c.mcpgoClient {
			c.mcpgoSession(ctx, hc, fmt.Sprintf("%s-s%d", c.name, s))
		} else {
			c.session(ctx, hc, fmt.Sprintf("%s-s%d", c.name, s))
		}
		if hc != shared {
			hc.CloseIdleConnections()
		}
	}
}

// session connects (a third of the sessions with the SDK's default
// revision, 2026-07-28, the rest pinned to 2025-11-25), makes one to six
// calls, some overlapping, and ends with DELETE or, one time in four,
// abandons the session.
func (c *chaosClient) session(ctx context.Context, hc *http.Client, label string) {
	var copts *mcp.ClientSessionOptions
	if c.rng.IntN(3) != 0 || (c.tsServer && !c.bothRevisions) {
		copts = &mcp.ClientSessionOptions{ProtocolVersion: revisionSessions}
	}
	t := &mcp.StreamableClientTransport{Endpoint: c.url, HTTPClient: hc, DisableStandaloneSSE: c.rng.IntN(2) == 0, MaxRetries: 2}
	cs, err := newGoClient().Connect(ctx, t, copts)
	if err != nil {
		c.failed.Add(1)
		return
	}
	var overlapping sync.WaitGroup
	for o := range 1 + c.rng.IntN(6) {
		call := c.randomCall(fmt.Sprintf("%s-o%d", label, o))
		if c.rng.IntN(3) == 0 {
			overlapping.Go(func() { call(ctx, cs) })
		} else {
			call(ctx, cs)
		}
		if c.rng.IntN(8) == 0 {
			// Long enough, at times, for the server to expire the session.
			time.Sleep(time.Duration(500+c.rng.IntN(700)) * time.Millisecond)
		}
	}
	overlapping.Wait()
	if c.rng.IntN(4) != 0 {
		cs.Close()
	}
}

// randomCall draws one call: a tool, its steps, a server-closed stream
// (polling) one time in four, a progress token from a small set (so
// overlapping calls at times share one, as an application with a constant
// token does), and one time in six a timeout short enough to cancel it.
// Labels are unique: no call is ever re-issued.
func (c *chaosClient) randomCall(label string) func(context.Context, *mcp.ClientSession) {
	tool, args := c.randomTool(label)
	token, timeout := c.randomTokenTimeout()
	return func(ctx context.Context, cs *mcp.ClientSession) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c.calls.Add(1)
		p := &mcp.CallToolParams{Name: tool, Arguments: args}
		if token != nil {
			p.SetProgressToken(token)
		}
		if _, err := cs.CallTool(ctx, p); err != nil {
			c.failed.Add(1)
		}
	}
}

// randomTokenTimeout draws a call's progress token (none half the time)
// and timeout.
func (c *chaosClient) randomTokenTimeout() (token any, timeout time.Duration) {
	if c.rng.IntN(2) == 0 {
		token = fmt.Sprintf("tok-%d", c.rng.IntN(3))
	}
	timeout = 6 * time.Second
	if c.rng.IntN(6) == 0 {
		timeout = time.Duration(50+c.rng.IntN(300)) * time.Millisecond
	}
	return token, timeout
}

// randomTool draws a tool of the server and its arguments.
func (c *chaosClient) randomTool(label string) (string, any) {
	steps := c.rng.IntN(5)
	if c.tsServer {
		// server.mjs: slow_write (1 to 20 steps, polling with pollAfter)
		// three times in four, else announce on the standalone stream.
		delay := 20 + c.rng.IntN(60)
		if c.rng.IntN(4) == 0 {
			return "announce", tsAnnounceArgs{Count: 1 + c.rng.IntN(3), DelayMs: delay, Label: label}
		}
		a := tsCallArgs{Label: label, Steps: max(steps, 1), DelayMs: delay}
		if c.rng.IntN(4) == 0 {
			a.PollAfter = 1 + c.rng.IntN(a.Steps)
		}
		return "slow_write", a
	}
	tool := []string{"stream", "stream", "echo", "broadcast", "slow_write"}[c.rng.IntN(5)]
	a := streamArgs{Steps: steps, Label: label}
	if tool == "slow_write" {
		a.Steps = min(a.Steps, 2)
	}
	if c.rng.IntN(4) == 0 {
		a.CloseAfter = 1 + c.rng.IntN(max(a.Steps, 1))
	}
	return tool, a
}
