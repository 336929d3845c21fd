package main

// The crowd scenario with go-sdk on both sides: fifty Go client
// applications (each with its own http.Client, so its own keep-alive pool)
// on one address against one stateful go-sdk server that closes a random
// 70% of its sessions mid-run. The server's charge log and the clients'
// re-initialisation log are the truth (pipeline/crowd_sdk_test.go),
// in the same format as the TypeScript crowd's.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const goCrowdName = "go-crowd-double-charge"

func init() {
	register(scenario{name: goCrowdName,
		desc: "go-sdk: 50 clients on one address, the server closes 70% of sessions; naive clients re-send charge_card (server charge log = truth)",
		run:  runGoCrowd})
}

// orderArgs are charge_card's and get_order's arguments. Steps, when the
// caller sent a progress token, makes the tool report that much progress
// eventPace apart before it does its work.
type orderArgs struct {
	Order       string `json:"order"`
	AmountCents int    `json:"amount_cents,omitempty"`
	Steps       int    `json:"steps,omitempty"`
}

// crowdLog appends JSON lines to a file, safely from many goroutines.
type crowdLog struct {
	mu sync.Mutex
	f  *os.File
}

// createLog creates the file at path for a crowdLog.
func createLog(path string) (*crowdLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &crowdLog{f: f}, nil
}

func (l *crowdLog) Close() error { return l.f.Close() }

func (l *crowdLog) add(v any) {
	b, _ := json.Marshal(v)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(append(b, '\n'))
}

// rpcIDs remembers the JSON-RPC id of each tools/call by session and order,
// read from the request body before go-sdk handles it (a tool handler does
// not see its request's id), so the charge log can name it.
type rpcIDs struct {
	mu       sync.Mutex
	ids      map[[2]string]json.RawMessage
	received *crowdLog // charge_card requests taken, before they run
}

func (r *rpcIDs) get(session, order string) json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.ids[[2]string{session, order}]; ok {
		return id
	}
	return json.RawMessage("null")
}

// wrap notes each tools/call's id, then serves it with h.
func (r *rpcIDs) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Name      string    `json:"name"`
					Arguments orderArgs `json:"arguments"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &m) == nil && m.Method == "tools/call" {
				session := req.Header.Get("Mcp-Session-Id")
				r.mu.Lock()
				r.ids[[2]string{session, m.Params.Arguments.Order}] = m.ID
				r.mu.Unlock()
				if m.Params.Name == "charge_card" && r.received != nil {
					// A call taken here may never run: the session can be
					// closed before the SDK dispatches it.
					r.received.add(map[string]any{"received": m.Params.Arguments.Order, "session": session, "rpcId": m.ID})
				}
			}
		}
		h.ServeHTTP(w, req)
	})
}

// newShopServer is the crowd's go-sdk server: charge_card (destructive, not
// idempotent: every call charges) and get_order (readOnlyHint), each
// logging its execution as the TypeScript crowd server does.
func newShopServer(charges *crowdLog, ids *rpcIDs) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "fixture-go-shop", Version: "1.0.0"}, nil)
	yes := true
	mcp.AddTool(s, &mcp.Tool{Name: "charge_card", Description: "charges an order", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(ctx context.Context, req *mcp.CallToolRequest, a orderArgs) (*mcp.CallToolResult, any, error) {
			id := req.Session.ID()
			rpcID := ids.get(id, a.Order)
			reportSteps(ctx, req, a.Steps)
			charges.add(map[string]any{"charge": a.Order, "session": id, "rpcId": rpcID})
			return textResult(fmt.Sprintf("charged %s %d", a.Order, a.AmountCents)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "get_order", Description: "reads an order", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, a orderArgs) (*mcp.CallToolResult, any, error) {
			id := req.Session.ID()
			rpcID := ids.get(id, a.Order)
			reportSteps(ctx, req, a.Steps)
			charges.add(map[string]any{"read": a.Order, "session": id, "rpcId": rpcID})
			return textResult("order " + a.Order), nil, nil
		})
	return s
}

// reportSteps sends steps progress notifications eventPace apart on the
// call's stream when the caller asked for progress. A broken stream does not
// stop the tool: the notifications fail, the work that follows is done.
func reportSteps(ctx context.Context, req *mcp.CallToolRequest, steps int) {
	tok := req.Params.GetProgressToken()
	for i := 1; tok != nil && i <= steps; i++ {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: float64(steps)})
		time.Sleep(eventPace)
	}
}

func runGoCrowd(ctx context.Context, dir string) error {
	charges, err := createLog(chargeLogPath(dir, goCrowdName))
	if err != nil {
		return err
	}
	defer charges.Close()
	reinits, err := createLog(reinitLogPath(dir, goCrowdName))
	if err != nil {
		return err
	}
	defer reinits.Close()
	ids := &rpcIDs{ids: map[[2]string]json.RawMessage{}, received: charges}
	srv := newShopServer(charges, ids)
	var resent int
	err = recordGo(dir, goCrowdName, []http.Handler{ids.wrap(goHandler(srv, storeOpts()))}, func(r *rig) error {
		apps := make([]*goShopApp, 0, 50)
		prefix := orderPrefix()
		charged := make(chan struct{}, crowdNaiveCharged)
		for i, kind := range crowdKinds() {
			apps = append(apps, &goShopApp{index: i, kind: kind, url: r.url(), reinits: reinits, orderPrefix: prefix, charged: charged})
		}
		var wg, ready sync.WaitGroup
		errs := make([]error, len(apps))
		for i, a := range apps {
			ready.Add(1)
			wg.Go(func() { errs[i] = a.run(ctx, ready.Done) })
		}
		// Sessions are lost once every client is placing orders (a
		// session closed during its initialize would fail its client).
		ready.Wait()
		time.Sleep(350 * time.Millisecond)
		// A naive client re-sends only a charge that was answered: on a
		// busy machine the pause alone can end before any was. Wait for a
		// few, as the TypeScript crowd does.
		for range crowdNaiveCharged {
			select {
			case <-charged:
			case <-ctx.Done():
				return fmt.Errorf("waiting for naive clients' charges: %w", ctx.Err())
			}
		}
		forgetSessions(srv, 0.7)
		wg.Wait()
		for _, a := range apps {
			resent += a.resentCharges
		}
		return errors.Join(errs...)
	},
		"# go-sdk v1.8.0 clients and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# 50 client applications in one process (one address, one clientInfo shop-agent-go 1.0.0, each with",
		"# its own http.Client and keep-alive connections) against one stateful server. Each initialises, lists",
		"# tools (charge_card: destructive; get_order: readOnlyHint) and places orders: charge_card, then",
		"# get_order for the re-reading ones, 120-250 ms apart. 350 ms after all connected, once five naive clients'",
		"# charges were answered, the server closes 70% of its sessions; their clients get 404 (ErrSessionMissing)",
		"# and re-initialise. 15 naive clients then re-send their last answered charge_card (the server charges",
		"# again), 15 re-send their last get_order (read-only: harmless), 20 re-send only a call answered 404.",
		"# The server logs every",
		"# execution in "+goCrowdName+".charges.jsonl, the clients every re-initialisation in",
		"# "+goCrowdName+".reinits.jsonl: the truth TestCrowdSDKDoubleCharges checks.",
		"expect violation kind=silent_reinit_after_404 tool=charge_card count>=1",
		"expect violation tool=get_order count=0",
		"expect session ended=404 count>=1",
	)
	if err == nil && resent == 0 {
		err = fmt.Errorf("no naive client re-sent a charge: the scenario did not run as designed")
	}
	return err
}

// forgetSessions closes a random fraction of srv's sessions, as a partial
// restart or a lost session store would: their ids then get 404.
func forgetSessions(srv *mcp.Server, fraction float64) {
	for ss := range srv.Sessions() {
		if rand.Float64() < fraction {
			ss.Close()
		}
	}
}

// goShopApp is one client application of the crowd; kind is as in
// crowd_client.mjs (naive, readonly, correct).
type goShopApp struct {
	index         int
	kind, url     string
	reinits       *crowdLog
	orderPrefix   string
	cs            *mcp.ClientSession
	hc            *http.Client
	lastCharge    *orderArgs
	lastRead      *orderArgs
	resentCharges int
	// charged hears of a naive client's answered charge, when it has room.
	charged chan<- struct{}
}

func (a *goShopApp) connect(ctx context.Context) error {
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 4}}
	t := &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: 2}
	c := mcp.NewClient(&mcp.Implementation{Name: "shop-agent-go", Version: "1.0.0"}, nil)
	cs, err := c.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: revisionSessions})
	if err != nil {
		return fmt.Errorf("client %d: connect: %w", a.index, err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		return fmt.Errorf("client %d: tools/list: %w", a.index, err)
	}
	a.cs, a.hc = cs, hc
	return nil
}

func (a *goShopApp) close() {
	if a.cs != nil {
		a.cs.Close()
		a.hc.CloseIdleConnections()
	}
}

// call reports whether the session was lost (the call answered 404, so it
// did not run).
func (a *goShopApp) call(ctx context.Context, tool string, args orderArgs) (lost bool, err error) {
	_, err = a.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if errors.Is(err, mcp.ErrSessionMissing) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("client %d: %s: %w", a.index, tool, err)
	}
	return false, nil
}

// recover re-initialises after a 404 on tool(args) and re-sends what the
// client's kind re-sends.
func (a *goShopApp) recover(ctx context.Context, tool string, args orderArgs) error {
	old := a.cs.ID()
	a.close()
	if err := a.connect(ctx); err != nil {
		return err
	}
	a.reinits.add(map[string]any{"client": a.index, "kind": a.kind, "lost": old, "session": a.cs.ID(), "during": tool})
	var again *orderArgs
	switch a.kind {
	case "naive":
		tool, again = "charge_card", a.lastCharge // it runs again
	case "readonly":
		tool, again = "get_order", a.lastRead
	default:
		again = &args // answered 404: it did not run, sending it again is right
	}
	if again == nil {
		return nil
	}
	if tool == "charge_card" && a.kind == "naive" {
		a.resentCharges++
	}
	if lost, err := a.call(ctx, tool, *again); err != nil || lost {
		return fmt.Errorf("client %d: re-sent %s: lost=%v %v", a.index, tool, lost, err)
	}
	return nil
}

func (a *goShopApp) step(ctx context.Context, tool string, args orderArgs) (ok bool, err error) {
	lost, err := a.call(ctx, tool, args)
	if err != nil || !lost {
		return err == nil, err
	}
	return false, a.recover(ctx, tool, args)
}

// run connects, calls ready (also when connecting failed), and places the
// client's orders.
func (a *goShopApp) run(ctx context.Context, ready func()) error {
	err := a.connect(ctx)
	ready()
	if err != nil {
		return err
	}
	defer a.close()
	for round := range 3 {
		time.Sleep(time.Duration(120+rand.IntN(130)) * time.Millisecond)
		charge := orderArgs{Order: fmt.Sprintf("ord-%s-%02d-%d", a.orderPrefix, a.index, round), AmountCents: 1000 + a.index*10 + round}
		ok, err := a.step(ctx, "charge_card", charge)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		a.lastCharge = &charge
		if a.kind == "naive" {
			select {
			case a.charged <- struct{}{}:
			default:
			}
		}
		if a.kind != "readonly" {
			continue
		}
		read := orderArgs{Order: charge.Order}
		if ok, err = a.step(ctx, "get_order", read); err != nil {
			return err
		} else if ok {
			a.lastRead = &read
		}
	}
	return nil
}
