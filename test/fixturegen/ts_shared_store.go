package main

// A shared event store behind every session (the store an application
// writes for Redis), keyed by the stream id the TypeScript SDK hands it.
// Every session's standalone GET stream is "_GET_stream" (typescript-sdk
// #1004), so one tenant's resume replays the other tenants' messages.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const tsSharedStoreName = "ts-shared-store-get-stream"

func init() {
	register(scenario{name: tsSharedStoreName,
		desc: "TS SDK: three tenants, one event store keyed by stream id (_GET_stream:<n>); a resume of one tenant's GET stream replays the others' messages (server replay log = truth)",
		run:  runTSSharedStore})
}

// replayLogPath is where the shared-store scenario writes the server's log
// of what each resume replayed ({"resume":session,"after":id,"replayed":[...]}).
func replayLogPath(dir, name string) string { return filepath.Join(dir, name+".replays.jsonl") }

func runTSSharedStore(ctx context.Context, dir string) error {
	// The first GET on the wire is tenant-a's standalone stream (the client
	// connects the tenants 300 ms apart); cut it after its first announcement.
	cut := newSSECut("GET /mcp ", eventWith(`"data":"announcement 1 of 3 for `+tsTenants[0]+` (session `))
	var rig *tsRig
	out, err := recordTS(ctx, pcapPath(dir, tsSharedStoreName), []tsServerConfig{{SharedStore: true}},
		func(r *tsRig) { rig = r; r.hooks = append(r.hooks, cut.hooks) },
		tsClientConfig{Flow: "sharedStore", Tenants: tsTenants, Announce: &tsAnnounceArgs{Count: 3, DelayMs: 300}, SettleMs: 1500},
		nil, func() error { return cut.waitFired(ctx) },
		`"result":"announced 3"`)
	if err != nil {
		return err
	}
	// The client's own view: tenant-a received another tenant's message.
	if err := expectLines(out, `{"tenant":"`+tsTenants[0]+`","got":"announcement`, ` for tenant-`); err != nil {
		return err
	}
	var b strings.Builder
	for _, l := range strings.Split(rig.serverOutput(), "\n") {
		if i := strings.Index(l, `{"resume":`); i >= 0 {
			b.WriteString(l[i:] + "\n")
		}
	}
	if b.Len() == 0 {
		return fmt.Errorf("the server logged no resume")
	}
	if err := os.WriteFile(replayLogPath(dir, tsSharedStoreName), []byte(b.String()), 0o644); err != nil {
		return err
	}
	return writeSpec(dir, tsSharedStoreName,
		tsSpecHeader("server with one event store for every session (ids <streamId>:<n>)"),
		"# Three tenants (own session, Authorization, clientInfo) connect 300 ms apart; each opens its",
		"# standalone GET stream and calls announce (3 log messages 300 ms apart, no related request, so",
		"# they go out on the GET stream). The store keys every session's GET stream as _GET_stream, ids",
		"# _GET_stream:1, :2, ... in one sequence. The proxy FINs tenant-a's GET after its first",
		"# announcement; its client resumes after 1 s with last-event-id = that id, and the store replays",
		"# every _GET_stream event after it: tenant-a's own, and tenant-b's and tenant-c's, already sent",
		"# on their sessions. The server logs each replay in "+tsSharedStoreName+".replays.jsonl; the",
		"# client logs each message it got. Each foreign event is another client's: critical.",
		"expect violation kind=cross_stream_replay severity=critical count>=1",
		"expect violation kind=cross_stream_replay severity=high count=0",
		"expect resume last_event_id="+cut.cutID()+" count=1",
		"expect resume outcome=resumed count=0",
	)
}
