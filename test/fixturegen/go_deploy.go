package main

// go-sdk scenarios across two backends behind the proxy, the way a rolling
// deploy or a restart moves a client: backend 0 is a plain go-sdk handler,
// backend 1 a sessionAdopter (see gobackend.go) that takes over sessions it
// never issued. The proxy drains backend 0 by cutting one SSE stream at an
// event boundary and sending every later connection to backend 1. One
// scenario instead puts an HTTP gateway in front of two backends and kills
// the first mid-call (runGoGateway502Reinit).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func init() {
	register(
		scenario{name: "go-event-id-reset", desc: "backend restarted with sessions kept but a fresh event store: the standalone stream's ids restart at _0", run: runGoEventIDReset},
		scenario{name: "go-rolling-deploy-swap", desc: "README sample: backend drained mid-stream; the resume lands on a backend that mints a new session and answers 200", run: runGoRollingDeploySwap},
		scenario{name: "go-mixed-revisions-swap", desc: "both revisions through one endpoint: the README sample's 2025-11-25 swap beside a 2026-07-28 client calling tools throughout", run: runGoMixedRevisionsSwap},
		scenario{name: "go-gateway-502-reinit", desc: "rolling deploy behind an HTTP gateway: the backend dies mid-call (JSON responses), the gateway answers 502; the retry gets 404 from the new backend, and the application re-runs the call on a new session", run: runGoGateway502Reinit},
	)
}

// drain is the proxy's half of a backend switch: once cut fires, every new
// connection goes to backend 1 and the client's idle keep-alive connections
// to backend 0 are closed (as a draining load balancer closes them), so no
// later request reaches the old backend.
func drain(r *rig, cut *sseCut, hc *atomic.Pointer[http.Client]) {
	var drained atomic.Bool
	r.route = func(int) int {
		if drained.Load() {
			return 1
		}
		return 0
	}
	cut.onFire = func() {
		drained.Store(true)
		if c := hc.Load(); c != nil {
			// Asynchronously: the cut itself is still being forwarded.
			go c.CloseIdleConnections()
		}
	}
	r.hooks = append(r.hooks, cut.hooks)
}

// waitAdopted waits until backend b has adopted a session (the client's
// resume reached it), then a little longer for the adopted stream to be
// registered by the SDK.
func waitAdopted(ctx context.Context, b *sessionAdopter) error {
	for b.adoptions() == 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no request reached the new backend: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	time.Sleep(100 * time.Millisecond)
	return nil
}

func runGoEventIDReset(ctx context.Context, dir string) error {
	before := goHandler(newGoServer(toolSet{}), storeOpts())
	after := newSessionAdopter(toolSet{}, true, false, true, restoreHandshake(revisionSessions, "info")...)
	return recordGo(dir, "go-event-id-reset", []http.Handler{before, after}, func(r *rig) error {
		var hc atomic.Pointer[http.Client]
		cut := newSSECut("GET /mcp ", eventIndex(2))
		drain(r, cut, &hc)
		cs, client, err := connectGo(ctx, r.url(), revisionSessions, true)
		if err != nil {
			return err
		}
		hc.Store(client)
		defer client.CloseIdleConnections()
		defer cs.Close()
		if err := withLogs(ctx, cs); err != nil {
			return err
		}
		if err := expectResult(ctx, cs, "broadcast", streamArgs{Steps: 3, Label: "before"}, nil, "before: broadcast"); err != nil {
			return err
		}
		if err := cut.waitFired(ctx); err != nil {
			return err
		}
		if err := waitAdopted(ctx, after); err != nil {
			return err
		}
		return expectResult(ctx, cs, "broadcast", streamArgs{Steps: 2, Label: "after"}, nil, "after: broadcast")
	},
		"# go-sdk v1.8.0 client (standalone GET on) and servers, revision 2025-11-25, MemoryEventStore.",
		"# Backend 0: initialize (session S1), initialized, standalone GET (`: ok`), logging/setLevel, then",
		"# tools/call broadcast(before, 3): three notifications/message on the standalone GET stream with ids",
		"# _0, _1, _2 (go-sdk's standalone stream has the empty stream id). The proxy FINs the GET right after",
		"# _2 (the backend 'restarts'); later connections go to backend 1, a fresh go-sdk server with a fresh",
		"# event store that restores sessions it does not know under the SAME id (persisted handshake) and,",
		"# its store knowing no events, ignores the Last-Event-ID. The client reconnects: GET Mcp-Session-Id:",
		"# S1, Last-Event-Id: _2, answered 200 with `: ok` and no Mcp-Session-Id header; then tools/call",
		"# broadcast(after, 2) puts two new messages on that stream with ids _0 and _1 again: ids in one",
		"# session restart (the reset, reported once), while the session id never changes (no session_swap).",
		"# Then DELETE (204).",
		"expect violation kind=event_id_reset last_event_id=_2 first_event_id=_0 count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id=_2 count=1",
		"expect violation kind=session_swap count=0",
	)
}

// swapHold is how long the application waits for the in-flight write
// before giving up on it and retrying.
const swapHold = 3 * time.Second

// runGoRollingDeploySwap records the swap and copies it to the README's
// sample path.
func runGoRollingDeploySwap(ctx context.Context, dir string) error {
	if err := recordRollingDeploySwap(ctx, dir); err != nil {
		return err
	}
	if sampleDir == "" {
		return nil
	}
	return copyFile(pcapPath(dir, "go-rolling-deploy-swap"), filepath.Join(sampleDir, "rolling-deploy.pcap"))
}

// swapBackends are the rolling deploy's two backends: the old one (its
// slow_write held until release closes) and the permissive one that mints
// sessions for ids it never issued.
func swapBackends(release chan struct{}) (old http.Handler, permissive *sessionAdopter) {
	done := make(chan struct{})
	close(done) // on the new backend the write completes at once
	return goHandler(newGoServer(toolSet{release: release}), storeOpts()),
		newSessionAdopter(toolSet{release: done}, false, true, true, restoreHandshake(revisionSessions, "")...)
}

// swapClient is the README sample's application: slow_write across the
// drain, a timeout, and the identical retry on the swapped session. via
// wraps its HTTP transport (nil: none).
func swapClient(ctx context.Context, r *rig, permissive *sessionAdopter, via func(http.RoundTripper) http.RoundTripper) error {
	var hc atomic.Pointer[http.Client]
	cut := newSSECut(`"name":"slow_write"`, eventIndex(2))
	drain(r, cut, &hc)
	cs, client, err := connectGoVia(ctx, r.url(), revisionSessions, false, via)
	if err != nil {
		return err
	}
	hc.Store(client)
	defer client.CloseIdleConnections()
	defer cs.Close()
	args := streamArgs{Steps: 2, Label: "invoice-42"}
	// The application gives up on the write swapHold after it began, but
	// never before the SDK's resume (sent 1-2 s after the cut, by its
	// backoff) has reached the new backend: under load the cut can come
	// late enough that a plain timeout would cancel the call first, and
	// the capture would hold no resume at all.
	giveUp := time.Now().Add(swapHold)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	called := make(chan error, 1)
	go func() {
		_, err := callTool(callCtx, cs, "slow_write", args, "tok-write")
		called <- err
	}()
	if err := cut.waitFired(ctx); err != nil {
		return err
	}
	if err := waitAdopted(ctx, permissive); err != nil {
		return err
	}
	time.Sleep(time.Until(giveUp))
	cancel()
	if err := <-called; !errors.Is(err, context.Canceled) {
		return fmt.Errorf("slow_write across the swap: got %v, want the application's cancellation", err)
	}
	r.noteCut(cut)
	if permissive.adoptions() != 1 {
		return fmt.Errorf("the resume did not land on the permissive backend (%d adoptions)", permissive.adoptions())
	}
	// The application retries the write it never heard back about: on
	// the swapped session it runs a second time, with no error anywhere.
	return expectResult(ctx, cs, "slow_write", args, nil, "invoice-42: written")
}

func recordRollingDeploySwap(ctx context.Context, dir string) error {
	release := make(chan struct{})
	defer close(release)
	old, permissive := swapBackends(release)
	return recordGo(dir, "go-rolling-deploy-swap", []http.Handler{old, permissive}, func(r *rig) error {
		return swapClient(ctx, r, permissive, nil)
	},
		"# THE README SAMPLE. go-sdk v1.8.0 client and servers, revision 2025-11-25, two backends behind one",
		"# proxy (a load balancer). Backend A (go-sdk, MemoryEventStore): initialize (session S1), initialized,",
		"# tools/call slow_write(label=invoice-42, steps=2, progressToken tok-write) on stream W: W_0 priming,",
		"# W_1, W_2 (progress 1, 2); the write is still running when A is drained: the proxy FINs the stream",
		"# right after W_2's chunk (clean, at an event boundary) and routes every later connection to B.",
		"# B is permissive: for a session id it never issued it mints a new session (go-sdk underneath) and",
		"# serves the request on it. The client resumes: GET Mcp-Session-Id: S1, Last-Event-Id: W_2, answered",
		"# 200 text/event-stream with Mcp-Session-Id: S2 (S2 != S1) and a fresh, empty stream (`: ok`, nothing",
		"# replayed). go-sdk's client ignores session ids on GET responses, keeps S1 and waits. That resume is",
		"# the session_swap (the only response carrying S2). The application times out after 3s and retries",
		"# the identical tools/call slow_write(invoice-42, steps=2; no progress token this time) with",
		"# Mcp-Session-Id: S1; B runs the write a second time on S2 and answers 200 (X_0 priming, X_1 the",
		"# result `invoice-42: written`), with no session id header: the duplicated write of the seed story,",
		"# with no error anywhere. go-sdk also sends notifications/cancelled for request 2 (to B, 202;",
		"# asynchronously, it may follow the retry). The first slow_write was in flight when S1 was lost: its",
		"# outcome is unknown. Then DELETE with S1 (B closes S2, 204).",
		"expect violation kind=session_swap last_event_id={cut} count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id={cut} count=1",
		"expect resume count=1",
		"expect unknown_outcome tool=slow_write count=1",
	)
}

// revisionRouter serves one endpoint for both revisions, as servers will
// for a long time: 2026-07-28 requests go to a stateless go-sdk handler
// (the only one that serves that revision), the rest to sessions.
func revisionRouter(sessions http.Handler) http.Handler {
	stateless := goHandler(newGoServer(toolSet{}), mcp.StreamableHTTPOptions{Stateless: true})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Mcp-Protocol-Version") == revisionSessionless {
			stateless.ServeHTTP(w, req)
			return
		}
		sessions.ServeHTTP(w, req)
	})
}

func runGoMixedRevisionsSwap(ctx context.Context, dir string) error {
	release := make(chan struct{})
	defer close(release)
	old, permissive := swapBackends(release)
	return recordGo(dir, "go-mixed-revisions-swap", []http.Handler{revisionRouter(old), revisionRouter(permissive)}, func(r *rig) error {
		// The 2026-07-28 client calls tools all along, across the drain,
		// on connections of its own.
		stop := make(chan struct{})
		sessionless := make(chan error, 1)
		go func() {
			sessionless <- withGoSession(ctx, r.url(), "", false, func(cs *mcp.ClientSession) error {
				for i := 0; ; i++ {
					label := fmt.Sprintf("modern-%d", i)
					if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 2, Label: label}, fmt.Sprintf("tok-%d", i), label+": 2 steps done"); err != nil {
						return err
					}
					select {
					case <-stop:
						return nil
					case <-time.After(150 * time.Millisecond):
					}
				}
			})
		}()
		err := swapClient(ctx, r, permissive, nil)
		close(stop)
		return errors.Join(err, <-sessionless)
	},
		"# Both revisions through one endpoint (127.0.0.1:port/mcp): each backend routes requests carrying",
		"# MCP-Protocol-Version: 2026-07-28 to a stateless go-sdk handler and the rest to its sessions. The",
		"# README sample (go-rolling-deploy-swap) runs on the 2025-11-25 side: backend A drained during",
		"# slow_write, the resume swapped to S2 by the permissive backend, the identical write retried. Beside",
		"# it a go-sdk client with its defaults (2026-07-28: server/discover, no sessions) calls stream(2",
		"# progress steps) every 150 ms on its own connections, before, during and after the drain, every",
		"# call answered. Exactly the 2025 findings; nothing for the sessionless client.",
		"expect violation kind=session_swap last_event_id={cut} count=1",
		"expect violation count=1",
		"expect resume count=1",
		"expect unknown_outcome tool=slow_write count=1",
	)
}

// runGoGateway502Reinit is a rolling deploy as a client behind an HTTP
// gateway sees it when the server answers in JSON (no SSE stream, so no
// status line until the call is done): the backend that holds S1 dies while
// slow_write runs, and the gateway (Go's httputil.ReverseProxy) answers the
// call 502. The call may have run. The application retries it on S1; the
// gateway now reaches the new backend, which does not know S1 and answers
// 404; the application opens S2 and makes the call a third time.
func runGoGateway502Reinit(ctx context.Context, dir string) error {
	started := make(chan struct{}, 1)
	jsonOpts := mcp.StreamableHTTPOptions{JSONResponse: true}
	oldSrv := newGoServer(toolSet{})
	old := httptest.NewServer(noteSlowWrite(goHandler(oldSrv, jsonOpts), started))
	defer old.Close()
	released := make(chan struct{}) // the new backend's slow_write returns at once
	close(released)
	fresh := httptest.NewServer(goHandler(newGoServer(toolSet{release: released}), jsonOpts))
	defer fresh.Close()
	var upstream atomic.Pointer[url.URL]
	oldURL, _ := url.Parse(old.URL)
	upstream.Store(oldURL)
	gateway := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream.Load())
			pr.Out.Host = pr.In.Host
		},
		ErrorLog: log.New(io.Discard, "", 0), // the 502 is the scenario
	}
	return recordGo(dir, "go-gateway-502-reinit", []http.Handler{gateway}, func(r *rig) error {
		call := streamArgs{Label: "order-77", Steps: 0}
		err := withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			done := make(chan error, 1)
			go func() {
				_, err := callTool(ctx, cs, "slow_write", call, nil)
				done <- err
			}()
			select {
			case <-started:
			case <-ctx.Done():
				return ctx.Err()
			}
			// The deploy: the old backend goes away mid-call, and the
			// gateway sends everything after it to the new one.
			time.Sleep(100 * time.Millisecond)
			freshURL, _ := url.Parse(fresh.URL)
			upstream.Store(freshURL)
			old.CloseClientConnections()
			if err := <-done; err == nil || errors.Is(err, mcp.ErrSessionMissing) {
				return fmt.Errorf("call during the deploy: got %v, want the gateway's 502", err)
			}
			_, err := callTool(ctx, cs, "slow_write", call, nil)
			return sessionMissing("retry on the old session", err)
		})
		if err != nil {
			return err
		}
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			return expectResult(ctx, cs, "slow_write", call, nil, call.Label+": written")
		})
	},
		"# go-sdk v1.8.0 client and servers, revision 2025-11-25, JSONResponse (every answer a JSON body),",
		"# behind an HTTP gateway (Go's httputil.ReverseProxy). S1: initialize, notifications/initialized, then",
		"# tools/call slow_write (order-77), which starts on the old backend. The old backend dies mid-call",
		"# and the gateway answers the call 502 Bad Gateway: the call may have run, but a gateway answers 502",
		"# too when no backend took the request (connection refused), and the wire cannot tell which. The",
		"# application retries it on S1 (a new id); the gateway now reaches the new backend, which does not know",
		"# S1: 404. The application opens S2 and makes the identical call a third time; it completes. The first",
		"# attempt's outcome is unknown, re-issued on S2; whether the re-issue is a duplicate rests on the first",
		"# having reached a server: silent_reinit_after_404 unverifiable, not critical (a 504, a gateway that",
		"# forwarded the call and gave up waiting, is critical: silent_reinit_after_404_after_gateway_timeout.test).",
		"# Before 2026-12-04 a 5xx counted as a refusal, its call forgotten: no record at all.",
		"expect violation count=0",
		"expect unverifiable check=silent_reinit_after_404 count=1",
		"expect unknown_outcome tool=slow_write reissued_in_session=* count=1",
		"expect session ended=404 count=1",
	)
}

// noteSlowWrite signals started once a slow_write call reaches h.
func noteSlowWrite(h http.Handler, started chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bytes.Contains(peekBody(r), []byte(`"name":"slow_write"`)) {
			select {
			case started <- struct{}{}:
			default:
			}
		}
		h.ServeHTTP(w, r)
	})
}
