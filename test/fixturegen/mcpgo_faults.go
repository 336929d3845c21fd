package main

// mcp-go v1.2.1's own fault, found by the ts-mcpgo-chaos probe: its GET
// with Last-Event-ID goes to the event store before the session is checked,
// so a resume of an ended session gets 400 "Unknown Last-Event-ID" where
// every other request of that session gets 404.

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

const mcpgoExpiredResumeName = "mcpgo-expired-resume-400"

func init() {
	register(scenario{name: mcpgoExpiredResumeName,
		desc: "mcp-go (stateful, event store): the session idles out, ending its standalone stream; the TS client's resume of that stream is held while its tools/list gets 404, then gets 400",
		run:  runMCPGoExpiredResume})
}

// resumeHold holds the first request carrying Last-Event-ID at the proxy
// until release is closed, as a slow network path would.
type resumeHold struct {
	held    chan struct{} // closed when the request reached the proxy
	release chan struct{}
	once    sync.Once
}

func newResumeHold() *resumeHold {
	return &resumeHold{held: make(chan struct{}), release: make(chan struct{})}
}

func (h *resumeHold) hooks(int) pcaprec.Hooks {
	return pcaprec.Hooks{FromClient: func(p []byte) ([]byte, pcaprec.Action) {
		if bytes.HasPrefix(p, []byte("GET ")) && bytes.Contains(bytes.ToLower(p), []byte("\r\nlast-event-id:")) {
			first := false
			h.once.Do(func() { first = true; close(h.held) })
			if first {
				<-h.release
			}
		}
		return p, pcaprec.Forward
	}}
}

func runMCPGoExpiredResume(ctx context.Context, dir string) error {
	r, err := newRig(pcapPath(dir, mcpgoExpiredResumeName), mcpgoHandler(mcpgoTSShapedTools(), 100*time.Millisecond, true))
	if err != nil {
		return err
	}
	hold := newResumeHold()
	r.hooks = append(r.hooks, hold.hooks)
	tr := &tsRig{rig: r}
	out, err := tr.runTSClient(ctx, tsClientConfig{Flow: "expiredResume", CallMayFail: true, TimeoutMs: 4000,
		Call: tsCallArgs{Label: "expire-me", Steps: 4, DelayMs: 100}},
		func(step string) error {
			switch step {
			case "expired":
				select {
				case <-hold.held:
				case <-ctx.Done():
					return ctx.Err()
				}
				// The sweeper ended the session (and with it the
				// standalone stream the client is resuming).
				time.Sleep(200 * time.Millisecond)
			case "resumed":
				close(hold.release)
				time.Sleep(500 * time.Millisecond)
			default:
				return fmt.Errorf("unexpected wait %q", step)
			}
			return nil
		})
	if err == nil {
		err = expectLines(out, `"progress":1`, `"app":"got 404 for the expired session"`, `Failed to open SSE stream: Bad Request`)
	}
	if ferr := tr.finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	return writeSpec(dir, mcpgoExpiredResumeName,
		tsSpecHeader("mcp-go v1.2.1's server (WithStateful, its InMemoryEventStore, WithSessionIdleTTL 100 ms)"),
		"# initialize, notifications/initialized, the standalone GET, then tools/call slow_write (steps=4,",
		"# 100 ms apart, progressToken), which completes: mcp-go sends the progress on the standalone stream",
		"# or the call's, whichever reads its notification queue first, so the standalone stream carries",
		"# event ids. mcp-go's sweeper (every second) then ends the session, idle for 100 ms, and with it the",
		"# standalone stream. The TS client reconnects that stream 1 s later: GET with last-event-id; the",
		"# proxy holds that request. The application's tools/list gets 404 (session terminated). The proxy",
		"# then lets the held GET through: mcp-go answers it 400 \"Unknown Last-Event-ID\" (its resume path",
		"# asks the event store, which purged the session, before checking the session): a session the",
		"# server answered 404 for now gets 400. A client that re-initialises only on 404 keeps retrying.",
		"expect violation kind=unknown_session_not_404 severity=high count=1",
		"expect violation count=1",
		"expect session ended=404 count=1",
		"expect resume outcome=violated count=1",
	)
}
