package main

// The crowd scenario: fifty TypeScript SDK client applications on one
// address (loopback) against one TypeScript SDK server whose session store
// loses a random subset of sessions mid-run. Naive clients re-send their last
// charge_card after re-initialising, which charges the order again; the
// server's own charge log, written beside the capture, is the truth the
// detector's findings are checked against (pipeline/crowd_sdk_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

const (
	tsCrowdName        = "ts-crowd-double-charge"
	tsCrowdPooledName  = "ts-crowd-pooling-proxy"
	crowdProxyIdleConn = 4
)

func init() {
	register(scenario{name: tsCrowdName,
		desc: "TS SDK: 50 clients on one address, the server loses 70% of sessions; naive clients re-send charge_card (server charge log = truth)",
		run:  func(ctx context.Context, dir string) error { return runTSCrowd(ctx, dir, tsCrowdName, false) }})
	register(scenario{name: tsCrowdPooledName,
		desc: "TS SDK: the crowd behind a reverse proxy that pools upstream connections; recorded between proxy and server",
		run:  func(ctx context.Context, dir string) error { return runTSCrowd(ctx, dir, tsCrowdPooledName, true) }})
}

// tsCrowdConfig is crowd_client.mjs's configuration (see its header).
type tsCrowdConfig struct {
	URL        string   `json:"url"`
	Kinds      []string `json:"kinds"`
	Rounds     int      `json:"rounds"`
	GapMs      [2]int   `json:"gapMs"`
	SharedPool bool     `json:"sharedPool,omitempty"`
	// OrderPrefix makes the run's order ids its own: independent
	// recordings merged into one crowd never charge the same order.
	OrderPrefix string `json:"orderPrefix"`
}

// orderPrefix is a fresh prefix for a crowd run's order ids.
func orderPrefix() string { return fmt.Sprintf("%04x", rand.IntN(1<<16)) }

// chargeLogPath is where the crowd scenario writes the server's charge log
// beside the capture of scenario name.
func chargeLogPath(dir, name string) string { return filepath.Join(dir, name+".charges.jsonl") }

// reinitLogPath is where the crowd scenario writes the clients' own log of
// re-initialisations ({"lost": S1, "session": S2, ...} per line): the truth
// a stated link between two sessions is checked against.
func reinitLogPath(dir, name string) string { return filepath.Join(dir, name+".reinits.jsonl") }

// crowdKinds is 50 clients: 15 naive re-init wrappers, 15 that re-read
// (get_order, read-only) and 20 correct ones, interleaved.
func crowdKinds() []string {
	kinds := make([]string, 50)
	for i := range kinds {
		switch i % 10 {
		case 0, 3, 6:
			kinds[i] = "naive"
		case 1, 4, 7:
			kinds[i] = "readonly"
		default:
			kinds[i] = "correct"
		}
	}
	return kinds
}

// runTSCrowd records the crowd as scenario name; pooled puts a reverse
// proxy that pools its upstream connections (Go's httputil.ReverseProxy,
// as in many ingresses and gateways) between the clients and the recorder,
// so every recorded connection carries several clients' requests and the
// client address is the proxy's.
func runTSCrowd(ctx context.Context, dir, name string, pooled bool) error {
	logPath, err := filepath.Abs(chargeLogPath(dir, name))
	if err != nil {
		return err
	}
	os.Remove(logPath)
	p, err := startNode(ctx, "crowd_server.mjs", map[string]string{"chargeLog": logPath})
	if err != nil {
		return err
	}
	line, err := p.waitLine(ctx, `"port"`)
	if err != nil {
		p.stop()
		return err
	}
	var hello struct{ Port int }
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Port == 0 {
		p.stop()
		return fmt.Errorf("crowd_server.mjs: bad greeting %q", line)
	}
	srv := &tsServer{nodeProc: p, addr: fmt.Sprintf("127.0.0.1:%d", hello.Port)}
	r := &tsRig{rig: &rig{}, servers: []*tsServer{srv}}
	rec, err := pcaprec.Create(pcapPath(dir, name))
	if err != nil {
		r.stopServers()
		return err
	}
	r.rec = rec
	r.proxy, err = pcaprec.NewProxy(rec, func(int) string { return srv.addr },
		func(n int) pcaprec.Hooks { return chainHooks(r.hooks, n) })
	if err != nil {
		r.stopServers()
		rec.Close()
		return err
	}
	endpoint := r.url()
	if pooled {
		var stop func()
		endpoint, stop, err = startPoolingProxy(endpoint)
		if err != nil {
			r.stopServers()
			rec.Close()
			return err
		}
		defer stop()
	}
	out, err := runCrowdClients(ctx, endpoint, srv)
	if err == nil {
		err = writeReinits(reinitLogPath(dir, name), out)
	}
	if ferr := r.finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	where := "one address, one clientInfo shop-agent 1.0.0, each"
	if pooled {
		where = fmt.Sprintf("recorded behind a reverse proxy pooling %d idle upstream connections, one clientInfo", crowdProxyIdleConn)
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore, one store per session)"),
		"# 50 client applications in one node process ("+where+",",
		"# each with its own keep-alive connections) against one server endpoint. Each initialises, lists tools",
		"# (charge_card: destructive, not idempotent; get_order: readOnlyHint) and places orders:",
		"# charge_card then get_order, 150-350 ms apart. Mid-run the server closes a random 70% of its",
		"# sessions; their clients get 404 and re-initialise. 15 naive clients then re-send their last",
		"# charge_card (the server charges again), 15 re-send their last get_order (read-only: harmless),",
		"# 20 re-send nothing. The server logs every execution in "+name+".charges.jsonl: the",
		"# truth TestCrowdSDKDoubleCharges checks each finding against (S1, S2 and count, one by one).",
		"# Here only the shape: re-issued charges are found, no re-read is.",
		"expect violation kind=silent_reinit_after_404 tool=charge_card count>=1",
		"expect violation tool=get_order count=0",
		"expect session ended=404 count>=1",
	)
}

// crowdNaiveCharged is how many answered charges of naive clients the crowd
// waits for before the server forgets sessions.
const crowdNaiveCharged = 5

// runCrowdClients runs crowd_client.mjs through the rig and makes the server
// forget 70% of its sessions once every client is placing orders.
func runCrowdClients(ctx context.Context, endpoint string, srv *tsServer) (string, error) {
	c, err := startNode(ctx, "crowd_client.mjs", tsCrowdConfig{URL: endpoint, Kinds: crowdKinds(), Rounds: 3, GapMs: [2]int{120, 250}, OrderPrefix: orderPrefix()})
	if err != nil {
		return "", err
	}
	defer c.stop()
	if os.Getenv(tsVerboseEnv) != "" {
		defer func() { fmt.Fprintf(os.Stderr, "--- crowd_client.mjs\n%s--- server\n%s", c.output(), srv.output()) }()
	}
	if _, err := c.waitLine(ctx, `"ready"`); err != nil {
		return "", err
	}
	select {
	case <-time.After(350 * time.Millisecond):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	// A naive client re-sends only a charge that was answered: on a busy
	// machine the pause alone can end before any was, and then the scenario
	// has nothing to show. Wait for a few.
	for range crowdNaiveCharged {
		if _, err := c.waitLine(ctx, `"kind":"naive","charged"`); err != nil {
			return "", err
		}
	}
	if err := srv.command(ctx, "forget 0.7", `"forgot"`); err != nil {
		return "", err
	}
	if err := c.wait(ctx); err != nil {
		return "", err
	}
	return c.output(), expectLines(c.output(), `"resend":"charge_card"`)
}

// writeReinits keeps the client's re-initialisation lines of out in path.
func writeReinits(path, out string) error {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"lost":`) {
			b.WriteString(l + "\n")
		}
	}
	if b.Len() == 0 {
		return fmt.Errorf("crowd_client.mjs logged no re-initialisation")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// startPoolingProxy serves a reverse proxy to upstream on a loopback port
// and returns its URL for the same path. Its transport keeps a few idle
// upstream connections and hands each request to whichever is free.
func startPoolingProxy(upstream string) (string, func(), error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return "", nil, err
	}
	target := &url.URL{Scheme: u.Scheme, Host: u.Host}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: crowdProxyIdleConn, DisableCompression: true}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: rp}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + u.Path, func() { srv.Close() }, nil
}
