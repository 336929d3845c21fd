package main

// TypeScript SDK scenarios where the resume works as the SDK means it to (or
// fails in a way the transport reports): none may raise a violation.

import (
	"context"
)

func init() {
	register(
		scenario{name: "ts-correct-resume", desc: "TS SDK: proxy cuts a tool call's SSE stream at an event boundary; the TS client resumes with GET + last-event-id and gets the rest", run: runTSCorrectResume},
		scenario{name: "ts-priming-polling", desc: "TS SDK: server with retryInterval closes the tool call's stream itself (closeSSEStream, polling); the client resumes after retry ms", run: runTSPrimingPolling},
		scenario{name: "ts-cursor-dropped", desc: "TS SDK: the standalone GET is cut after an announcement, its resume is cut right after its headers; the client reconnects without last-event-id (typescript-sdk #2499)", run: runTSCursorDropped},
		scenario{name: "ts-get-stream-not-resumable", desc: "TS SDK: proxy cuts the standalone GET stream (_GET_stream); the example store cannot resume it and answers 200 with nothing", run: runTSGetStreamNotResumable},
	)
}

// tsToolMarker finds the tools/call request for slow_write on a connection.
const tsToolMarker = `"name":"slow_write"`

// tsProgress marks an SSE event carrying a progress notification.
const tsProgress = `"method":"notifications/progress"`

// recordTS runs one client flow through a fresh rig and checks the client's
// output holds wants in order; setup may add faults to the rig, and check
// (optional) runs after the client exits, before the capture is closed. It
// returns the client's output.
func recordTS(ctx context.Context, path string, servers []tsServerConfig, setup func(*tsRig),
	cfg tsClientConfig, onWait func(*tsRig, string) error, check func() error, wants ...string) (string, error) {
	r, err := newTSRig(ctx, path, servers...)
	if err != nil {
		return "", err
	}
	if setup != nil {
		setup(r)
	}
	var wait func(string) error
	if onWait != nil {
		wait = func(step string) error { return onWait(r, step) }
	}
	out, err := r.runTSClient(ctx, cfg, wait)
	if err == nil {
		err = expectLines(out, wants...)
	}
	if err == nil && check != nil {
		err = check()
	}
	if ferr := r.finish(); err == nil {
		err = ferr
	}
	return out, err
}

func runTSCorrectResume(ctx context.Context, dir string) error {
	const name = "ts-correct-resume"
	cut := newSSECut(tsToolMarker, progressEvent(2))
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}},
		func(r *tsRig) { r.hooks = append(r.hooks, cut.hooks) },
		tsClientConfig{Flow: "call", Call: tsCallArgs{Label: "resume-me", Steps: 8, DelayMs: 200}},
		nil, func() error { return cut.waitFired(ctx) },
		`"progress":2`, `"progress":8`, `"result":"wrote resume-me"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (StreamableHTTPServerTransport, example InMemoryEventStore, no retryInterval)"),
		"# initialize (SSE: priming event + result), notifications/initialized (202), the standalone GET",
		"# (200, stays open, carries nothing), then tools/call slow_write (steps=8, 200 ms apart, progressToken).",
		"# Priming: yes. Under 2025-11-25 the TS server opens every POST stream with `id: <uuid>_<ms>_<rand>`",
		"# and `data: ` (empty), without `retry:` (no retryInterval configured). Event ids are",
		"# <stream uuid>_<epoch ms>_<8 base36>.",
		"# The tools/call stream carries the priming event and progress 1 and 2; the proxy then closes the",
		"# connection with FIN right after progress 2's chunk (clean end at an event boundary).",
		"# The TS client waits 1 s (its backoff; no retry field) and resumes: GET, same mcp-session-id,",
		"# last-event-id = progress 2's id. The server answers 200 (echoing the same session id), replays",
		"# the progress events stored meanwhile (3..6 or so), then sends the rest live (7, 8) and the result,",
		"# and ends the stream. Same session, first event strictly after the cursor: a correct resume.",
		"# The client then closes without DELETE (the TS client does not send one on close).",
		"expect violation count=0",
		"expect resume outcome=resumed last_event_id="+cut.cutID()+" count=1",
		"expect resume outcome=violated count=0",
		"expect unknown_outcome count=0",
		"expect session start_seen=true protocol_version=2025-11-25 count=1",
	)
}

func runTSPrimingPolling(ctx context.Context, dir string) error {
	const name = "ts-priming-polling"
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{RetryInterval: 300}}, nil,
		tsClientConfig{Flow: "call", Call: tsCallArgs{Label: "poll-me", Steps: 6, DelayMs: 150, PollAfter: 2}},
		nil, nil,
		`"progress":2`, `"progress":6`, `"result":"wrote poll-me"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore, retryInterval 300 ms)"),
		"# initialize, notifications/initialized (202), standalone GET (200, carries nothing), then",
		"# tools/call slow_write (steps=6, 150 ms apart, pollAfter=2, progressToken).",
		"# Priming: every POST stream starts with `id: X`, `retry: 300`, `data: ` (empty data).",
		"# After progress 2 the tool calls closeSSEStream() (SEP-1699 polling): the server ends the",
		"# tools/call stream itself, cleanly (chunked terminator), before the result.",
		"# The TS client honours retry and resumes 300 ms later: GET with last-event-id = progress 2's id,",
		"# answered 200 on the same session with the stored progress events after it, then the rest live and",
		"# the result. A server-closed polling stream and a priming event are legitimate: nothing is flagged",
		"# (in particular not unresumable_close: the stream carried event ids before it was closed).",
		"expect violation count=0",
		"expect resume outcome=resumed count=1",
		"expect resume outcome=violated count=0",
		"expect unknown_outcome count=0",
	)
}

func runTSGetStreamNotResumable(ctx context.Context, dir string) error {
	const name = "ts-get-stream-not-resumable"
	// The first GET on the rig is the standalone stream (the cut fires once).
	cut := newSSECut("GET /mcp ", eventWith(`"data":"announcement 1 of`))
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}},
		func(r *tsRig) { r.hooks = append(r.hooks, cut.hooks) },
		tsClientConfig{Flow: "announce", Announce: &tsAnnounceArgs{Count: 3, DelayMs: 250}, SettleMs: 1500},
		nil, func() error { return cut.waitFired(ctx) },
		`"result":"announced 3"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore)"),
		"# initialize, notifications/initialized (202), the standalone GET stream (200), then tools/call",
		"# announce (count=3, 250 ms apart): three notifications/message with no related request, sent on",
		"# the standalone stream, whose event ids are _GET_stream_<ms>_<rand> (no priming event on GET).",
		"# The proxy closes the GET's connection with FIN right after the first announcement (event boundary).",
		"# The TS client reconnects the GET after 1 s with last-event-id = that id. The example store splits",
		"# the id on the first '_' and finds stream '' for it, so it replays nothing: the server answers 200",
		"# (same session id) with an empty stream that stays open; announcements 2 and 3, sent while the",
		"# client was away, are stored under _GET_stream and never delivered. Observed: 200, not a 4xx.",
		"# The loss is invisible on the wire (those events never crossed it), so a client-side capture cannot",
		"# prove it: the resume looks like a correct one with nothing to replay. The tools/call result arrives",
		"# on its own POST stream. No violation is provable here, and the resume is not a success either:",
		"# the detector knows this store cannot resume `_GET_stream` and calls it unverifiable.",
		"expect violation count=0",
		"expect resume last_event_id="+cut.cutID()+" count=1",
		"expect resume outcome=violated count=0",
		"expect resume outcome=rejected_4xx count=0",
		"expect resume outcome=unverifiable count=1",
		"expect unverifiable check=resume count=1",
		"expect unknown_outcome count=0",
	)
}

func runTSCursorDropped(ctx context.Context, dir string) error {
	const name = "ts-cursor-dropped"
	cut := newSSECut("GET /mcp ", eventWith(`"data":"announcement 1 of`))
	again := newHeadCut("last-event-id:")
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{}},
		func(r *tsRig) { r.hooks = append(r.hooks, cut.hooks, again.hooks) },
		tsClientConfig{Flow: "announce", Announce: &tsAnnounceArgs{Count: 3, DelayMs: 260}, SettleMs: 3500},
		nil, func() error {
			if err := cut.waitFired(ctx); err != nil {
				return err
			}
			return again.waitFired(ctx)
		},
		`"result":"announced 3"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (example InMemoryEventStore)"),
		"# initialize, notifications/initialized, the standalone GET, tools/call announce (3 messages 260 ms",
		"# apart on the GET stream). The proxy FINs the GET after the first announcement; the client resumes",
		"# it after 1 s with last-event-id = that id, and the proxy FINs the resumed GET right after its",
		"# response head (200, no event). The TypeScript client 1.32.2 keeps a stream's cursor only from",
		"# events with an id, never from the token it resumed with (typescript-sdk #2499), so it reconnects",
		"# with no last-event-id at all: the cursor "+cut.cutID()+" is dropped.",
		"expect violation kind=cursor_dropped last_event_id="+cut.cutID()+" count=1",
		"expect violation count=1",
	)
}
