package main

// TypeScript SDK scenarios with a broken resume: a drained backend behind a
// permissive one, a forged cursor, a cursor pointing into a truncated event.
// Each must raise exactly the violation its spec names.

import (
	"context"
	"fmt"
)

func init() {
	register(
		scenario{name: "ts-session-swap", desc: "TS SDK: backend A drained mid-stream; the resume lands on permissive backend B, which mints a new session and answers 200", run: runTSSessionSwap},
		scenario{name: "ts-unknown-id-accepted", desc: "TS SDK: proxy rewrites the resume's last-event-id to one never issued; the example store answers 200 with nothing", run: runTSUnknownIDAccepted},
		scenario{name: "ts-truncated-resume", desc: "TS SDK: stream cut mid-event after its id line; a buggy client resumes from that partial event's id", run: runTSTruncatedResume},
	)
}

// tsForeignEventID is an event id in the TS example store's shape
// (<stream uuid>_<epoch ms>_<8 base36>) on a stream no scenario ever opens.
const tsForeignEventID = "00000000-0000-4000-8000-000000000000_1700000000000_forged00"

// tsBrokenCallTimeoutMs bounds the client's wait for a call whose resume
// went wrong (nothing will ever answer it).
const tsBrokenCallTimeoutMs = 3500

func runTSSessionSwap(ctx context.Context, dir string) error {
	const name = "ts-session-swap"
	cut := newSSECut(tsToolMarker, progressEvent(2))
	var drained func() error
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}, {Permissive: true}},
		func(r *tsRig) {
			r.hooks = append(r.hooks, cut.hooks)
			// The drain, in the proxy as the cut is forwarded: new connections
			// go to B, and A closes its idle keep-alive connections (the
			// client's resume would otherwise reuse one and reach A again).
			cut.onFire = func() {
				r.backend.Store(1)
				r.servers[0].send("drain")
			}
			drained = func() error {
				_, err := r.servers[0].waitLine(ctx, `"drained"`)
				return err
			}
		},
		tsClientConfig{Flow: "call", Call: tsCallArgs{Label: "swap-me", Steps: 8, DelayMs: 200},
			TimeoutMs: tsBrokenCallTimeoutMs, CallMayFail: true},
		nil, func() error { return drained() },
		`"progress":2`, `"call":"failed"`)
	if err != nil {
		return err
	}
	cursor := cut.cutID()
	return writeSpec(dir, name,
		tsSpecHeader("two servers A and B (example InMemoryEventStore each)"),
		"# B is deliberately permissive: for a session id it never issued it initialises a new session",
		"# itself (synthetic initialize, not on the wire), rewrites the request's mcp-session-id and serves it,",
		"# remembering old id -> new id.",
		"# On A: initialize, notifications/initialized (202), standalone GET (200, open, carries nothing),",
		"# tools/call slow_write (steps=8, 200 ms apart): priming event, progress 1, progress 2; the proxy",
		"# closes that connection with FIN right after progress 2 (event boundary) and A is drained: it closes",
		"# its idle keep-alive connections and every new connection goes to B.",
		"# The TS client resumes 1 s later on a new connection: GET, mcp-session-id S1, last-event-id =",
		"# progress 2's id (issued by S1). B answers 200 text/event-stream with mcp-session-id S2 != S1 and an",
		"# empty stream (S2's store does not know the id): session_swap. The TS client ignores session ids on",
		"# GET responses and keeps S1. Its call times out (3.5 s); it POSTs notifications/cancelled with S1,",
		"# which B maps to S2 and answers 202 without mcp-session-id (not a swap: no header).",
		"# The cursor was issued by S1, the session the request carried, so this is not",
		"# unknown_last_event_id_accepted; the swap is the finding.",
		"# The call in flight on S1 never got its result (the swap lost S1's stream): its outcome is unknown.",
		"# S2 was never initialised on the wire, so its start is not seen.",
		"expect violation kind=session_swap last_event_id="+cursor+" count=1",
		"expect resume outcome=violated last_event_id="+cursor+" count=1",
		"expect resume outcome=resumed count=0",
		"expect unknown_outcome tool=slow_write count=1",
		"expect session start_seen=false count=1",
	)
}

func runTSUnknownIDAccepted(ctx context.Context, dir string) error {
	const name = "ts-unknown-id-accepted"
	cut := newSSECut(tsToolMarker, progressEvent(2))
	forge := newHeaderRewrite("last-event-id", func(string) string { return tsForeignEventID })
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}},
		func(r *tsRig) { r.hooks = append(r.hooks, cut.hooks, forge.hooks) },
		tsClientConfig{Flow: "call", Call: tsCallArgs{Label: "forge-me", Steps: 6, DelayMs: 150},
			TimeoutMs: tsBrokenCallTimeoutMs, CallMayFail: true},
		nil, func() error {
			_, _, err := forge.wait(ctx)
			return err
		},
		`"progress":2`, `"call":"failed"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore)"),
		"# initialize, notifications/initialized (202), standalone GET (200, open, carries nothing), then",
		"# tools/call slow_write (steps=6, 150 ms apart): priming event, progress 1, progress 2; the proxy closes",
		"# the connection with FIN right after progress 2 (event boundary).",
		"# The TS client resumes 1 s later with GET + last-event-id = progress 2's id; the proxy (playing a",
		"# client with a corrupted cursor) rewrites it to "+tsForeignEventID+",",
		"# an id this session never issued (its stream uuid never appears anywhere).",
		"# The example store does not know it and replays nothing, and the server answers 200",
		"# text/event-stream (same session id) with an empty stream that stays open: the rest of the call's",
		"# events and its result are lost. The call times out (3.5 s); notifications/cancelled (202).",
		"expect violation kind=unknown_last_event_id_accepted last_event_id="+tsForeignEventID+" count=1",
		"expect resume outcome=violated count=1",
		"expect resume outcome=resumed count=0",
	)
}

func runTSTruncatedResume(ctx context.Context, dir string) error {
	const name = "ts-truncated-resume"
	cut := newMidEventCut(tsToolMarker, tsProgress, 2)
	// The buggy client's cursor: the id of the event it never completed.
	skip := newHeaderRewrite("last-event-id", func(old string) string {
		id, err := cut.wait(ctx)
		if err != nil || id == "" {
			return old
		}
		return id
	})
	var partial, original, sent string
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}},
		func(r *tsRig) { r.hooks = append(r.hooks, cut.hooks, skip.hooks) },
		tsClientConfig{Flow: "call", Call: tsCallArgs{Label: "truncate-me", Steps: 6, DelayMs: 150}},
		nil, func() error {
			var err error
			if partial, err = cut.wait(ctx); err != nil {
				return err
			}
			if original, sent, err = skip.wait(ctx); err != nil {
				return err
			}
			if sent != partial || original == partial {
				return fmt.Errorf("resume cursor %q (client had %q), want the partial event %q", sent, original, partial)
			}
			return nil
		},
		// Progress 3 is the event cut in half: the client never sees it.
		`"progress":2`, `"progress":4`, `"result":"wrote truncate-me"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore)"),
		"# initialize, notifications/initialized (202), standalone GET (200, open, carries nothing), then",
		"# tools/call slow_write (steps=6, 150 ms apart): priming event, progress 1, progress 2, then the first",
		"# bytes of progress 3's chunk up to and including its `id: X` line; the proxy closes the connection",
		"# with FIN there (mid-event, mid-chunk: truncated).",
		"# The TS client reconnects 1 s later with last-event-id = progress 2's id (its last complete event);",
		"# the proxy, playing a buggy client that kept the partial event's id, rewrites it to X. The server",
		"# answers 200 on the same session and replays from after X: progress 4, 5, 6 and the result.",
		"# Progress 3 was never delivered: truncated_resume (cursor = the truncated event's id).",
		"expect violation kind=truncated_resume last_event_id="+partial+" count=1",
		"expect resume outcome=violated count=1",
		"expect resume outcome=resumed count=0",
		"expect unknown_outcome count=0",
	)
}
