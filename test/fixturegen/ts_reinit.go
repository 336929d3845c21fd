package main

// TypeScript SDK scenarios around a lost session (the server forgets it, as
// a restart or expiry would, and answers 404): applications that re-initialise
// and then reuse the old session's state, and one that starts over cleanly.

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func init() {
	register(
		scenario{name: "ts-reinit-after-404-retool", desc: "TS SDK: session lost mid-call (404 on resume); the app re-initialises and re-issues the identical tools/call", run: runTSReinitRetool},
		scenario{name: "ts-reinit-after-404-lasteventid", desc: "TS SDK: session lost mid-call; the app re-initialises and resumes the new session with the old session's last-event-id", run: runTSReinitLastEventID},
		scenario{name: "ts-404-clean-new-session", desc: "TS SDK: idle session lost, 404, then a fresh session that reuses nothing", run: runTSCleanNewSession},
		scenario{name: "ts-404-poller-new-session", desc: "TS SDK: a periodic job's session lost, 404 on another request, then a fresh session that runs the job again", run: runTSPollerNewSession},
		scenario{name: "ts-unknown-session-400", desc: "TS SDK: idle session lost behind the README's legacy routing, which answers 400 instead of 404; the client never re-initialises", run: runTSUnknownSession400},
	)
}

// eventWatch signals once n occurrences of marker have come from servers
// through the proxy (on any connection): the moment to inject a server-side
// fault, such as forgetting the session while a call is in flight.
type eventWatch struct {
	marker []byte
	n      int64
	seen   atomic.Int64
	once   sync.Once
	fired  chan struct{}
}

func newEventWatch(marker string, n int) *eventWatch {
	return &eventWatch{marker: []byte(marker), n: int64(n), fired: make(chan struct{})}
}

func (w *eventWatch) hooks(int) pcaprec.Hooks {
	return pcaprec.Hooks{FromServer: func(p []byte) ([]byte, pcaprec.Action) {
		if w.seen.Add(int64(bytes.Count(p, w.marker))) >= w.n {
			w.once.Do(func() { close(w.fired) })
		}
		return p, pcaprec.Forward
	}}
}

// forgetAfter makes the rig's server forget every session once watch fires;
// the returned channel reports how that went.
func forgetAfter(ctx context.Context, r *tsRig, watch *eventWatch) <-chan error {
	done := make(chan error, 1)
	go func() {
		select {
		case <-watch.fired:
			done <- r.servers[0].command(ctx, "forget", `"forgot"`)
		case <-ctx.Done():
			done <- fmt.Errorf("never saw %d× %s: %w", watch.n, watch.marker, ctx.Err())
		}
	}()
	return done
}

// recordLostMidCall runs flow with a server that forgets the session right
// after the call's second progress notification reached the client.
func recordLostMidCall(ctx context.Context, path, flow string, call tsCallArgs, wants ...string) (string, error) {
	watch := newEventWatch(tsProgress, 2)
	var forgot <-chan error
	return recordTS(ctx, path, []tsServerConfig{{}},
		func(r *tsRig) {
			r.hooks = append(r.hooks, watch.hooks)
			forgot = forgetAfter(ctx, r, watch)
		},
		tsClientConfig{Flow: flow, Call: call},
		nil, func() error { return <-forgot }, wants...)
}

// tsLostSessionStory is the spec text shared by the two lost-mid-call
// scenarios: what happens up to the application's re-initialisation.
var tsLostSessionStory = []string{
	"# S1: initialize, notifications/initialized (202), standalone GET (200), then tools/call slow_write",
	"# (id 1, progressToken 1) with a priming event, progress 1 and 2. Then the server forgets S1 (as a",
	"# restart would): it closes S1's streams cleanly (chunked terminator) before the call's result.",
	"# The TS client resumes the call's stream 1 s later (GET, mcp-session-id S1, last-event-id = progress",
	"# 2's id) and reconnects the standalone GET (no last-event-id): both 404 -32001 Session not found",
	"# (the transport may retry once more; all carry S1 and get 404). The call's outcome is unknown.",
	"# The application sees the 404, closes the old client and initialises S2 on a new client",
	"# (new initialize, 200 with a new mcp-session-id, notifications/initialized, standalone GET).",
}

func runTSReinitRetool(ctx context.Context, dir string) error {
	const name = "ts-reinit-after-404-retool"
	call := tsCallArgs{Label: "pay-invoice-42", Steps: 4, DelayMs: 150}
	_, err := recordLostMidCall(ctx, pcapPath(dir, name), "reinitRetool", call,
		`"progress":2`, `"app":"session lost`, `"result":"wrote pay-invoice-42"`)
	if err != nil {
		return err
	}
	lines := append([]string{tsSpecHeader("server (example InMemoryEventStore)")}, tsLostSessionStory...)
	return writeSpec(dir, name, append(lines,
		"# On S2 the application re-issues the identical tools/call (slow_write, same arguments, same",
		"# progressToken 1, same JSON-RPC id 1) without asking whether the first one ran; it completes.",
		"# That is silent_reinit_after_404 (re-issued tool call), and the S1 call in flight when S1 was",
		"# lost is an unknown_outcome, re-issued in S2. S1's failed resumes are rejected_404, not violations.",
		"expect violation kind=silent_reinit_after_404 tool=slow_write count=1",
		"expect unknown_outcome tool=slow_write reissued_in_session=* count=1",
		"expect resume outcome=rejected_404 count>=1",
		"expect resume outcome=violated count=0",
		"expect session ended=404 count=1",
	)...)
}

func runTSReinitLastEventID(ctx context.Context, dir string) error {
	const name = "ts-reinit-after-404-lasteventid"
	call := tsCallArgs{Label: "sync-ledger", Steps: 4, DelayMs: 150}
	out, err := recordLostMidCall(ctx, pcapPath(dir, name), "reinitLastEventId", call,
		`"progress":2`, `"app":"session lost`, `"resumed":`)
	if err != nil {
		return err
	}
	cursor, err := clientValue(out, "resumed")
	if err != nil {
		return err
	}
	lines := append([]string{tsSpecHeader("server (example InMemoryEventStore, one store per session)")}, tsLostSessionStory...)
	return writeSpec(dir, name, append(lines,
		"# The application kept the old cursor: on S2 it calls transport.resumeStream() with S1's last",
		"# event id (progress 2's id): GET, mcp-session-id S2, last-event-id = an id S1 issued. It does not",
		"# re-issue the call. S2's store does not know the id and the server answers 200 with an empty",
		"# stream: the old session's state reused on the new one, silent_reinit_after_404.",
		"# The same exchange is also a resume whose last-event-id S2 never issued answered 200 with a stream",
		"# (the TS example store's behaviour): unknown_last_event_id_accepted, a separate server-side fault.",
		"expect violation kind=silent_reinit_after_404 last_event_id="+cursor+" count=1",
		"expect violation kind=unknown_last_event_id_accepted last_event_id="+cursor+" count=1",
		"# The lost call was not re-issued.",
		"expect unknown_outcome tool=slow_write reissued_in_session=null count=1",
		"expect resume outcome=rejected_404 count>=1",
		"expect session ended=404 count=1",
	)...)
}

// forgetOnWait makes the server forget its sessions when the client waits
// for "forget".
func forgetOnWait(ctx context.Context) func(r *tsRig, step string) error {
	return func(r *tsRig, step string) error {
		if step != "forget" {
			return fmt.Errorf("client waits for %q, want forget", step)
		}
		return r.servers[0].command(ctx, "forget", `"forgot"`)
	}
}

func runTSUnknownSession400(ctx context.Context, dir string) error {
	const name = "ts-unknown-session-400"
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{LegacyRouting: true}}, nil,
		tsClientConfig{Flow: "stuckAfterForget", Call: tsCallArgs{Label: "before-the-400", Steps: 2, DelayMs: 100}},
		forgetOnWait(ctx), nil,
		`"result":"wrote before-the-400"`, `"app":"got 400 on attempt 1`, `"app":"got 400 on attempt 2`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore) behind the stateful routing of the SDK's README up to 1.23"),
		"# S1: initialize, notifications/initialized, standalone GET, tools/call slow_write (completes). The",
		"# server then forgets S1; its routing answers the unknown id with 400 \"Bad Request: No valid session",
		"# ID provided\" instead of 404. The client's tools/list gets 400 twice (and its standalone GET's",
		"# reconnect, if any, too); the TypeScript client re-initialises only on 404, so it never does: stuck.",
		"expect violation kind=unknown_session_not_404 severity=high count=1",
		"expect violation count=1",
	)
}

func runTSCleanNewSession(ctx context.Context, dir string) error {
	const name = "ts-404-clean-new-session"
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}}, nil,
		tsClientConfig{Flow: "cleanNewSession",
			Call:       tsCallArgs{Label: "first", Steps: 2, DelayMs: 100},
			SecondCall: &tsCallArgs{Label: "second", Steps: 2, DelayMs: 100}},
		forgetOnWait(ctx), nil,
		`"result":"wrote first"`, `"app":"got 404`, `"result":"wrote second"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore)"),
		"# S1: initialize, notifications/initialized (202), standalone GET (200), tools/call slow_write",
		"# (label first, steps=2) that completes. Then, with nothing in flight, the server forgets S1: the",
		"# standalone GET ends cleanly. The application's next request, tools/list with S1, gets 404 -32001.",
		"# It closes that client and starts over: initialize (S2), notifications/initialized, standalone GET,",
		"# tools/call slow_write with other arguments (label second), which completes. S2 carries no S1",
		"# session id, no S1 event id and no re-issued call: a clean new session, nothing to flag. The",
		"# tools/list got its answer (404), so no call's outcome is unknown.",
		"expect violation count=0",
		"expect unknown_outcome count=0",
		"expect session ended=404 count=1",
		"expect session start_seen=true count=2",
	)
}

func runTSPollerNewSession(ctx context.Context, dir string) error {
	const name = "ts-404-poller-new-session"
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}}, nil,
		tsClientConfig{Flow: "pollerNewSession", Call: tsCallArgs{Label: "flush-queue", Steps: 2, DelayMs: 100}},
		forgetOnWait(ctx), nil,
		`"result":"wrote flush-queue"`, `"app":"got 404`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore)"),
		"# A periodic job. S1: initialize, notifications/initialized (202), standalone GET (200), then",
		"# tools/call slow_write (label flush-queue, steps=2) twice, the second sent after the first",
		"# completed. With nothing in flight, the server forgets S1: the standalone GET ends cleanly (its",
		"# reconnect, if any, gets 404). The application's tools/list with S1 gets 404 -32001; it closes that",
		"# client, initialises S2 and runs the job once more: slow_write(flush-queue), identical, completes.",
		"# A completed call the lost session made over and over is the client's habit, not a replay of its",
		"# log (before 2026-12-04 this was a high silent_reinit_after_404).",
		"expect violation count=0",
		"expect unknown_outcome count=0",
		"expect session ended=404 count=1",
		"expect session start_seen=true count=2",
	)
}
