package main

import "context"

func init() {
	register(scenario{name: "ts-reissue-in-session", desc: "TS SDK, no event store: the proxy cuts a call's stream, the call times out, and the application sends it again in its session", run: runTSReissueInSession})
}

// runTSReissueInSession records the double execution of the session
// revisions: a call whose stream breaks with no event id to resume from
// (no event store) is lost to the client, which times it out and, never
// having heard back, sends it again in the same session.
func runTSReissueInSession(ctx context.Context, dir string) error {
	const name = "ts-reissue-in-session"
	cut := newSSECut(tsToolMarker, progressEvent(2))
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{NoEventStore: true}},
		func(r *tsRig) { r.hooks = append(r.hooks, cut.hooks) },
		tsClientConfig{Flow: "reissueAfterBreak", Call: tsCallArgs{Label: "reissue-me", Steps: 4, DelayMs: 150}, TimeoutMs: 1500},
		nil, func() error { return cut.waitFired(ctx) },
		`"tools":["slow_write"`, `"progress":2`, `"app":"call failed, sending it again"`, `"result":"wrote reissue-me"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (StreamableHTTPServerTransport, no event store)"),
		"# initialize, notifications/initialized (202), the standalone GET, tools/list (slow_write and the",
		"# others, none annotated), then tools/call slow_write (steps=4, 150 ms apart, progressToken) with a",
		"# 1.5 s request timeout. No event store: no priming event, no event id on any stream. The proxy",
		"# closes the call's connection with FIN right after progress 2's chunk: the client has no cursor and",
		"# cannot resume, and the call times out (the SDK POSTs notifications/cancelled, after the break).",
		"# The application, which never heard back, sends the identical call again in the same session: it",
		"# runs a second time and completes. reissued_call_after_break, high (slow_write is listed without",
		"# annotations); until 2026-12-05 only the first call's unknown_outcome record named the session it",
		"# was re-sent in. The stream that ended without its response and without an id, in a session that",
		"# outlived it, is also unresumable_close (the capture cannot tell the proxy's FIN from the server's).",
		"expect violation kind=reissued_call_after_break tool=slow_write severity=high count=1",
		"expect violation kind=unresumable_close count=1",
		"expect violation count=2",
		"expect unknown_outcome tool=slow_write reissued_in_session=* count=1",
		"expect unknown_outcome count=1",
	)
}
