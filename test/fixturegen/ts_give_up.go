package main

import "context"

func init() {
	register(scenario{name: "ts-calls-given-up", desc: "TS SDK, no event store: the client gives calls up by AbortSignal, by timeout (notifications/cancelled) and by DELETE while one runs", run: runTSCallsGivenUp})
}

// runTSCallsGivenUp records a client abandoning calls the three ways the
// TypeScript SDK offers, against a server without an event store, whose
// streams have no ids: each call's stream then ends without its answer and
// cannot be resumed, which is no fault of the server's.
func runTSCallsGivenUp(ctx context.Context, dir string) error {
	const name = "ts-calls-given-up"
	_, err := recordTS(ctx, pcapPath(dir, name), []tsServerConfig{{NoEventStore: true}}, nil,
		tsClientConfig{Flow: "giveUp", Call: tsCallArgs{Label: "given-up", Steps: 10, DelayMs: 100}, GiveUpAfter: 350},
		nil, nil,
		`"gaveUp":"abort"`, `"gaveUp":"timeout"`, `"app":"session deleted"`, `"gaveUp":"delete"`)
	if err != nil {
		return err
	}
	return writeSpec(dir, name,
		tsSpecHeader("server (StreamableHTTPServerTransport, no event store)"),
		"# initialize, notifications/initialized (202), the standalone GET, then three tools/call slow_write",
		"# (steps=10, 100 ms apart, progressToken). No event store: no priming event, no event id on any",
		"# stream, so none can be resumed. The client gives each call up 350 ms in: the first by an",
		"# AbortSignal, the second by its request timeout; for both the SDK POSTs notifications/cancelled",
		"# (reason \"user gave up\", \"Request timed out\"), answered 202, and the server stops the tool and, as",
		"# the specification asks, sends no response; the call's stream stays open, empty. The third is",
		"# running when the application ends the session (DELETE): the server ends every stream of the",
		"# session, the third call's and the two cancelled ones, before answering the DELETE 200. Every",
		"# stream ended without its response and without an id, and none of it is the server's fault:",
		"# no unresumable_close. The three calls' outcomes are unknown to the client that gave them up.",
		"# The three calls are identical, each sent while the one before was unanswered: the first two name",
		"# their session as the one they were re-issued in.",
		"expect violation count=0",
		"expect unknown_outcome tool=slow_write count=3",
		"expect unknown_outcome count=3",
		"expect unknown_outcome reissued_in_session=* count=2",
		"expect session ended=deleted count=1",
	)
}
