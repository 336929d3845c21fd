package main

// Revision 2026-07-28 (go-sdk's default): no sessions, no resumption. A
// tools/call whose response stream breaks is lost to the client, which
// re-issues it as a new request; the go-sdk server finishes the first
// attempt anyway, so a side-effecting tool runs twice.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const goReissueName = "go-reissue-after-break-2026"

func init() {
	register(scenario{name: goReissueName,
		desc: "go-sdk 2026-07-28 (stateless): the proxy breaks charge_card's and get_order's streams after progress; the application re-issues both (server charge log = truth)",
		run:  runGoReissueAfterBreak})
}

func runGoReissueAfterBreak(ctx context.Context, dir string) error {
	logPath := chargeLogPath(dir, goReissueName)
	charges, err := createLog(logPath)
	if err != nil {
		return err
	}
	defer charges.Close()
	ids := &rpcIDs{ids: map[[2]string]json.RawMessage{}}
	srv := newShopServer(charges, ids)
	h := ids.wrap(goHandler(srv, mcp.StreamableHTTPOptions{Stateless: true}))
	cutCharge, cutRead := progressCut(`"name":"charge_card"`), progressCut(`"name":"get_order"`)
	err = recordGo(dir, goReissueName, []http.Handler{h}, func(r *rig) error {
		r.hooks = append(r.hooks, cutCharge.hooks, cutRead.hooks)
		return withGoSession(ctx, r.url(), "", false, func(cs *mcp.ClientSession) error {
			if _, err := cs.ListTools(ctx, nil); err != nil {
				return err
			}
			for _, c := range []struct {
				tool string
				cut  *sseCut
			}{{"charge_card", cutCharge}, {"get_order", cutRead}} {
				args := orderArgs{Order: "ord-2026-1", AmountCents: 4200, Steps: 3}
				// The application's retry: the first stream breaks, the
				// call is sent again as a new request (new id, new token).
				if err := reissueOnce(ctx, cs, c.tool, args, c.cut); err != nil {
					return err
				}
			}
			return nil
		})
	},
		"# go-sdk v1.8.0 client with its defaults (revision 2026-07-28) against a stateless go-sdk server (no",
		"# sessions, no event ids). server/discover, then tools/list: charge_card destructiveHint, get_order",
		"# readOnlyHint.",
		"# tools/call charge_card(ord-2026-1, 3 progress steps): the proxy FINs its SSE stream right after",
		"# progress 1; go-sdk's client returns an error, the application waits 200 ms and sends the identical",
		"# call again (new JSON-RPC id, new progress token). The server had finished the first call anyway:",
		"# "+goReissueName+".charges.jsonl shows the order charged twice. The same for get_order (read-only):",
		"# harmless, no finding.",
		"expect violation kind=reissued_call_after_break tool=charge_card severity=critical count=1",
		"expect violation kind=reissued_call_after_break tool=get_order count=0",
		"expect violation count=1",
	)
	if err != nil {
		return err
	}
	return chargedTwice(logPath, "ord-2026-1")
}

// reissueOnce calls tool through a stream cut: the call must fail, and its
// re-issue succeed.
func reissueOnce(ctx context.Context, cs *mcp.ClientSession, tool string, args orderArgs, cut *sseCut) error {
	return reissueOnceWith(ctx, cs, tool, args, cut, "first-"+tool, "again-"+tool)
}

// reissueOnceWith is reissueOnce with the two attempts' progress tokens.
func reissueOnceWith(ctx context.Context, cs *mcp.ClientSession, tool string, args orderArgs, cut *sseCut, first, again string) error {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	p.SetProgressToken(first)
	if _, err := cs.CallTool(ctx, p); err == nil {
		return fmt.Errorf("%s: the broken call succeeded", tool)
	}
	if err := cut.waitFired(ctx); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	p = &mcp.CallToolParams{Name: tool, Arguments: args}
	p.SetProgressToken(again)
	if _, err := cs.CallTool(ctx, p); err != nil {
		return fmt.Errorf("%s: re-issue: %w", tool, err)
	}
	return nil
}

// progressCut cuts the stream of the first request containing reqMarker
// right after its first progress notification.
func progressCut(reqMarker string) *sseCut {
	return newSSECut(reqMarker, eventWith(`"method":"notifications/progress"`, `"progress":1,`))
}

// chargedTwice checks a charge log: the server ran charge_card for order
// twice, the duplicate its scenario makes.
func chargedTwice(path, order string) error {
	if n, err := countCharges(path, order); err != nil || n != 2 {
		return fmt.Errorf("the server charged %s %d times, want 2 (%v)", order, n, err)
	}
	return nil
}

// countCharges counts the executions of charge_card for order in a charge log.
func countCharges(path, order string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c struct{ Charge string }
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Charge == order {
			n++
		}
	}
	return n, sc.Err()
}

const goPollerBreakName = "go-poller-break-2026"

func init() {
	register(scenario{name: goPollerBreakName,
		desc: "go-sdk 2026-07-28 (stateless): a poller makes the same call every tick; the proxy breaks one poll's stream and the next tick polls again",
		run:  runGoPollerBreak})
}

func runGoPollerBreak(ctx context.Context, dir string) error {
	h := goHandler(newGoServer(toolSet{}), mcp.StreamableHTTPOptions{Stateless: true})
	cut := progressCut(pollerCutMarker)
	poll := streamArgs{Steps: 2, Label: "queue-depth"}
	want := poll.Label + ": 2 steps done"
	return recordGo(dir, goPollerBreakName, []http.Handler{h}, func(r *rig) error {
		r.hooks = append(r.hooks, cut.hooks)
		return withGoSession(ctx, r.url(), "", false, func(cs *mcp.ClientSession) error {
			if _, err := cs.ListTools(ctx, nil); err != nil {
				return err
			}
			for tick := 1; tick <= 4; tick++ {
				token := fmt.Sprintf("poll-%d", tick)
				if tick == pollerCutTick {
					if _, err := callTool(ctx, cs, "stream", poll, token); err == nil {
						return fmt.Errorf("the broken poll succeeded")
					}
					if err := cut.waitFired(ctx); err != nil {
						return err
					}
				} else if err := expectResult(ctx, cs, "stream", poll, token, want); err != nil {
					return err
				}
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		})
	},
		"# go-sdk v1.8.0 client with its defaults (revision 2026-07-28) against a stateless go-sdk server (no",
		"# sessions, no event ids). tools/list: stream has no annotations. A poller: every 200 ms the identical",
		"# tools/call stream(queue-depth, 2 progress steps), a new progress token each tick. Polls 1 and 2 are",
		"# answered; the proxy FINs poll 3's stream right after progress 1, and go-sdk's client returns an error;",
		"# the next tick sends poll 4, the identical call, answered.",
		"# Poll 4 may be a retry of poll 3 or just the next poll, which the wire cannot tell apart: unverifiable,",
		"# not reissued_call_after_break (before 2026-12-04 this was a high finding).",
		pollerExpect[0], pollerExpect[1], pollerExpect[2],
	)
}

// The poller scenarios' shared fault and verdict: the third of four
// identical polls is cut after its first progress notification (told by its
// progress token, in _meta: no part of the call's identity), and its
// re-issue is a habit's, not a finding.
const (
	pollerCutTick   = 3
	pollerCutMarker = `"progressToken":"poll-3"`
)

var pollerExpect = [...]string{
	"expect violation count=0",
	"expect unverifiable check=reissued_call_after_break reason=\"call the client made over and over\" count=1",
	"expect unknown_outcome count=0",
}

const goRetryToolErrorName = "go-retry-after-tool-error-2026"

func init() {
	register(scenario{name: goRetryToolErrorName,
		desc: "go-sdk 2026-07-28 (stateless): charge_card reports a failure (isError); the application tries again, the proxy breaks that attempt's stream, and it is re-issued (server charge log = truth)",
		run:  runGoRetryAfterToolError})
}

func runGoRetryAfterToolError(ctx context.Context, dir string) error {
	logPath := chargeLogPath(dir, goRetryToolErrorName)
	charges, err := createLog(logPath)
	if err != nil {
		return err
	}
	defer charges.Close()
	s := mcp.NewServer(&mcp.Implementation{Name: "fixture-go-shop", Version: "1.0.0"}, nil)
	yes := true
	var attempts atomic.Int64
	mcp.AddTool(s, &mcp.Tool{Name: "charge_card", Description: "charges an order", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		func(ctx context.Context, req *mcp.CallToolRequest, a orderArgs) (*mcp.CallToolResult, any, error) {
			if attempts.Add(1) == 1 {
				// The payment provider declined at once: nothing charged.
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "card declined, try again"}}}, nil, nil
			}
			reportSteps(ctx, req, a.Steps)
			charges.add(map[string]any{"charge": a.Order})
			return textResult("charged " + a.Order), nil, nil
		})
	h := goHandler(s, mcp.StreamableHTTPOptions{Stateless: true})
	cut := progressCut(`"progressToken":"retry-1"`)
	err = recordGo(dir, goRetryToolErrorName, []http.Handler{h}, func(r *rig) error {
		r.hooks = append(r.hooks, cut.hooks)
		return withGoSession(ctx, r.url(), "", false, func(cs *mcp.ClientSession) error {
			if _, err := cs.ListTools(ctx, nil); err != nil {
				return err
			}
			args := orderArgs{Order: "ord-7", AmountCents: 1500, Steps: 3}
			p := &mcp.CallToolParams{Name: "charge_card", Arguments: args}
			p.SetProgressToken("first")
			res, err := cs.CallTool(ctx, p)
			if err != nil || !res.IsError {
				return fmt.Errorf("the first attempt: %v, isError %v; want a tool error", err, res != nil && res.IsError)
			}
			// An agent's retry after the tool's failure, then the
			// application's re-issue after the broken stream.
			return reissueOnceWith(ctx, cs, "charge_card", args, cut, "retry-1", "retry-2")
		})
	},
		"# go-sdk v1.8.0 client with its defaults (revision 2026-07-28) against a stateless go-sdk server. tools/list:",
		"# charge_card destructiveHint. tools/call charge_card(ord-7) is answered at once with a result whose isError",
		"# says the card was declined (nothing charged); the application tries the identical call again (a retry after a",
		"# tool's failure, as agents do). The proxy FINs that attempt's SSE stream right after progress 1; go-sdk's client",
		"# returns an error, and the application sends the identical call a third time. The server finished the second",
		"# attempt anyway: "+goRetryToolErrorName+".charges.jsonl shows ord-7 charged twice. A tool's failure is no",
		"# habit: taken for one (1a2b72b), the re-issue was unverifiable and went unreported.",
		"expect violation kind=reissued_call_after_break tool=charge_card severity=critical count=1",
		"expect violation count=1",
		"expect unverifiable count=0",
	)
	if err != nil {
		return err
	}
	return chargedTwice(logPath, "ord-7")
}
