package main

// go-sdk scenarios with one injected fault each: a broken event store or
// server (middleware in front of the real SDK handler) or a misbehaving
// tool. Each spec names the violation the fault must produce.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func init() {
	register(
		scenario{name: "go-replayed-event", desc: "off-by-one replay: a resume after cursor X starts AT X (the cursor event is delivered again)", run: runGoReplayedEvent},
		scenario{name: "go-cross-stream-replay", desc: "a resume of one tool call's stream replays another stream's events", run: runGoCrossStreamReplay},
		scenario{name: "go-incomplete-replay", desc: "stream truncated mid-event; the resume skips that event (partial replay)", run: runGoIncompleteReplay},
		scenario{name: "go-duplicate-delivery", desc: "a backend writes the same event (the tools/call result) twice on one stream, no resume", run: runGoDuplicateDelivery},
		scenario{name: "go-progress-replay", desc: "a tool sends notifications/progress 1, 2, 2, 3 for one token", run: runGoProgressReplay},
		scenario{name: "go-resume-on-sessionless", desc: "2026-07-28 traffic where a broken gateway mints an Mcp-Session-Id", run: runGoResumeOnSessionless},
		scenario{name: "go-unresumable-close", desc: "2025-11-25 server without event store; its POST stream ends before the response, with no event id", run: runGoUnresumableClose},
		scenario{name: "go-cursor-dropped", desc: "the resumed standalone GET is cut right after its head; go-sdk's client reconnects without Last-Event-ID", run: runGoCursorDropped},
	)
}

// splitEventID splits a go-sdk event id <stream>_<index>.
func splitEventID(id string) (stream string, idx int, ok bool) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	return id[:i], n, err == nil
}

// withLogs turns on the session's log notifications: the replay scenarios'
// tools then report steps as notifications/message instead of progress, so
// a replayed event is not also a repeated progress value (a second, separate
// finding).
func withLogs(ctx context.Context, cs *mcp.ClientSession) error {
	//lint:ignore SA1019 logging is deprecated from 2026-07-28 only; these are 2025-11-25 sessions
	return cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"})
}

func runGoReplayedEvent(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	// The fault: the backend asks its store for events after X-1, so the
	// replay starts at the cursor event itself (go-sdk numbers replayed
	// events from the cursor it is given, so the ids on the wire are X, X+1…).
	h := rewriteCursor(goHandler(srv, storeOpts()), func(id string) string {
		if s, n, ok := splitEventID(id); ok && n > 0 {
			return fmt.Sprintf("%s_%d", s, n-1)
		}
		return id
	})
	return recordGo(dir, "go-replayed-event", []http.Handler{h}, func(r *rig) error {
		return streamCallThroughCut(ctx, r, newSSECut(`"name":"stream"`, eventIndex(2)), true, streamArgs{Steps: 5, Label: "replayed"}, nil)
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# logging/setLevel info, then tools/call stream (steps=5, no progress token: steps are",
		"# notifications/message logs) on stream S: S_0 priming, S_1, S_2 (log steps 1, 2); the proxy FINs",
		"# after S_2's chunk (clean end at an event boundary). The client resumes with GET Last-Event-Id: S_2.",
		"# The broken backend asks the store for events after S_1 instead, so the 200 response starts AT the",
		"# cursor: S_2 again (the same log step 2, already delivered), then S_3..S_5 and S_6 (the result).",
		"# One resume whose first event id equals its Last-Event-ID: one replayed_event.",
		"expect violation kind=replayed_event last_event_id={cut} first_event_id={cut} count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id={cut} first_event_id={cut} count=1",
		"expect resume outcome=resumed count=0",
		"expect session ended=deleted count=1",
	)
}

func runGoCrossStreamReplay(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	// The fault: a store keyed by position only. The backend remembers the
	// stream of the first stream call ("first") and serves the first resume
	// of any other stream from it, at the same index.
	var mu sync.Mutex
	var firstStream string
	var rewritten bool
	record := editSSE(goHandler(srv, storeOpts()), func(r *http.Request) sseEdit {
		if r.Method != http.MethodPost || !bytes.Contains(peekBody(r), []byte(`"label":"first"`)) {
			return nil
		}
		return func(ev []byte) [][]byte {
			if s, n, ok := splitEventID(eventID(ev)); ok && n == 0 {
				mu.Lock()
				firstStream = s
				mu.Unlock()
			}
			return [][]byte{ev}
		}
	})
	h := rewriteCursor(record, func(id string) string {
		mu.Lock()
		defer mu.Unlock()
		s, n, ok := splitEventID(id)
		if !ok || rewritten || firstStream == "" || s == firstStream {
			return id
		}
		rewritten = true
		return fmt.Sprintf("%s_%d", firstStream, n)
	})
	return recordGo(dir, "go-cross-stream-replay", []http.Handler{h}, func(r *rig) error {
		cut := newSSECut(`"label":"second"`, eventIndex(2))
		r.hooks = append(r.hooks, cut.hooks)
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			if err := withLogs(ctx, cs); err != nil {
				return err
			}
			if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 4, Label: "first"}, nil, "first: 4 steps done"); err != nil {
				return err
			}
			if _, err := callTool(ctx, cs, "stream", streamArgs{Steps: 4, Label: "second"}, nil); err == nil {
				return errors.New("second call succeeded; its resume should have been served from the first stream")
			}
			if err := cut.waitFired(ctx); err != nil {
				return err
			}
			r.noteCut(cut)
			return nil
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# logging/setLevel info; tools/call stream(label=first, steps=4) completes on stream A: A_0 priming,",
		"# A_1..A_4 (log steps), A_5 (result of JSON-RPC id 3). Then tools/call stream(label=second, steps=4)",
		"# on stream B: B_0 priming, B_1, B_2; the proxy FINs after B_2's chunk. The client resumes with GET",
		"# Last-Event-Id: B_2; the broken backend serves it from stream A at the same index: 200 with A_3,",
		"# A_4 (first's log steps 3, 4) and A_5 (first's result), then the response ends. These events were",
		"# first sent on stream A: one cross_stream_replay. (They were also already delivered in this session;",
		"# the more specific cross_stream_replay is the one finding expected for that resume.)",
		"# The client, its cursor now A_5, resumes again: GET Last-Event-Id: A_5 is passed through unchanged",
		"# and answered 200 with nothing (stream A is complete), so the call fails with go-sdk's",
		"# `request terminated without response` (the second call's outcome is unknown to the client; that",
		"# second resume is itself correct: resumed). Then DELETE.",
		"expect violation kind=cross_stream_replay last_event_id={cut} count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id={cut} count=1",
		"expect resume outcome=resumed count=1",
		"expect unknown_outcome tool=stream count=1",
		"expect session ended=deleted count=1",
	)
}

func runGoIncompleteReplay(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	// The fault: a store that lost the first event after the cursor and
	// returns the rest anyway (go-sdk's EventStore contract: "must not
	// return partial results"), under a server that labels events with
	// the ids they were stored with.
	var once sync.Once
	h := editSSE(goHandler(srv, storeOpts()), func(r *http.Request) sseEdit {
		cursor := r.Header.Get("Last-Event-ID")
		s, n, ok := splitEventID(cursor)
		if r.Method != http.MethodGet || !ok {
			return nil
		}
		lost := fmt.Sprintf("%s_%d", s, n+1)
		return func(ev []byte) [][]byte {
			drop := false
			if eventID(ev) == lost {
				once.Do(func() { drop = true })
			}
			if drop {
				return nil
			}
			return [][]byte{ev}
		}
	})
	return recordGo(dir, "go-incomplete-replay", []http.Handler{h}, func(r *rig) error {
		cut := newSSECut(`"name":"stream"`, eventIndex(3))
		cut.midEvent = true
		return streamCallThroughCut(ctx, r, cut, true, streamArgs{Steps: 5, Label: "partial"}, nil)
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# logging/setLevel info, then tools/call stream (steps=5, log steps) on stream S: S_0 priming, S_1,",
		"# S_2 complete, then S_3's chunk is cut by the proxy mid-event: its `event:` and `id: S_3` lines and",
		"# the first bytes of its data line arrive, then FIN (truncated). go-sdk's client drops the partial",
		"# event and resumes with the last complete id: GET Last-Event-Id: S_2. The broken backend answers",
		"# 200 but leaves out S_3: S_4, S_5 (log steps 4, 5) and S_6 (the result). S_3 was seen on the wire",
		"# before the break and is never delivered: one incomplete_replay. Not truncated_resume: the client",
		"# resumed with S_2, not with the truncated event's id. Then DELETE.",
		"expect violation kind=incomplete_replay last_event_id={cut-1} count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id={cut-1} count=1",
		"expect session ended=deleted count=1",
	)
}

func runGoDuplicateDelivery(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	// The fault: a backend that writes the event carrying the tools/call
	// result twice (a retrying write path that does not know the first
	// write went out).
	h := editSSE(goHandler(srv, storeOpts()), func(r *http.Request) sseEdit {
		if r.Method != http.MethodPost || !bytes.Contains(peekBody(r), []byte(`"label":"twice"`)) {
			return nil
		}
		return func(ev []byte) [][]byte {
			if bytes.Contains(ev, []byte(`"result":{"content"`)) {
				return [][]byte{ev, ev}
			}
			return [][]byte{ev}
		}
	})
	return recordGo(dir, "go-duplicate-delivery", []http.Handler{h}, func(r *rig) error {
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			if err := withLogs(ctx, cs); err != nil {
				return err
			}
			if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 3, Label: "twice"}, nil, "twice: 3 steps done"); err != nil {
				return err
			}
			return expectResult(ctx, cs, "echo", streamArgs{Label: "after"}, nil, "after")
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# logging/setLevel info, then tools/call stream(label=twice, steps=3) on stream S: S_0 priming,",
		"# S_1..S_3 (log steps), then S_4 (the result, JSON-RPC id 3) written twice back to back by the broken",
		"# backend: same event id, same JSON-RPC response, on one stream, with no resume anywhere. The client",
		"# takes the first and discards the rest. Then tools/call echo and DELETE.",
		"expect violation kind=duplicate_delivery count=1",
		"expect violation count=1",
		"expect resume count=0",
		"expect session ended=deleted count=1",
	)
}

// repeatingProgress is a broken tool's progress reporting: steps 1..4 are
// reported as 1, 2, 2, 3 (step 3 repeats step 2's value).
func repeatingProgress(ctx context.Context, req *mcp.CallToolRequest, step, total int, label string) error {
	v := step
	if step >= 3 {
		v--
	}
	return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: req.Params.GetProgressToken(), Progress: float64(v), Total: float64(total),
		Message: fmt.Sprintf("%s step %d", label, step)})
}

func runGoProgressReplay(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{notify: repeatingProgress})
	return recordGo(dir, "go-progress-replay", []http.Handler{goHandler(srv, storeOpts())}, func(r *rig) error {
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			return expectResult(ctx, cs, "stream", streamArgs{Steps: 4, Label: "stutter"}, "tok-stutter", "stutter: 4 steps done")
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, no standalone GET.",
		"# tools/call stream (steps=4, progressToken tok-stutter) on stream S: S_0 priming, then",
		"# notifications/progress for tok-stutter with progress 1, 2, 2, 3 (S_1..S_4, distinct event ids,",
		"# the tool's own bug: its third report repeats the second's value), then S_5 the result. No resume,",
		"# no duplicate event id. One progress_replay (progress 2 repeated at S_3). Then DELETE.",
		"expect violation kind=progress_replay count=1",
		"expect violation count=1",
		"expect resume count=0",
		"expect session ended=deleted count=1",
	)
}

func runGoUnresumableClose(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	// No EventStore: go-sdk then writes no event ids and no priming event,
	// and cannot resume anything.
	return recordGo(dir, "go-unresumable-close", []http.Handler{goHandler(srv, mcp.StreamableHTTPOptions{})}, func(r *rig) error {
		cut := newSSECut(`"name":"stream"`, func(ev string) bool { return strings.Contains(ev, `"progress":2`) })
		r.hooks = append(r.hooks, cut.hooks)
		return withGoSession(ctx, r.url(), revisionSessions, false, func(cs *mcp.ClientSession) error {
			_, err := callTool(ctx, cs, "stream", streamArgs{Steps: 4, Label: "doomed"}, "tok-doomed")
			if err == nil || !strings.Contains(err.Error(), "terminated without response") {
				return fmt.Errorf("stream call: got %v, want go-sdk's `request terminated without response`", err)
			}
			if err := cut.waitFired(ctx); err != nil {
				return err
			}
			return expectResult(ctx, cs, "echo", streamArgs{Label: "still-here"}, nil, "still-here")
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, NO event store: no event ids, no priming.",
		"# tools/call stream (steps=4, progressToken tok-doomed): the SSE response carries two",
		"# notifications/progress (progress 1, 2) without `id:` lines, then the connection is closed with FIN",
		"# at that event boundary, before the JSON-RPC response. With no event id the client cannot resume:",
		"# go-sdk reports `request terminated without response` and sends no GET. One unresumable_close",
		"# (tool stream). The session itself lives on: tools/call echo(still-here) succeeds, then DELETE.",
		"# The stream call's response never reached the client: its outcome is unknown.",
		"expect violation kind=unresumable_close count=1",
		"expect violation count=1",
		"expect resume count=0",
		"expect unknown_outcome tool=stream count=1",
		"expect session ended=deleted count=1",
	)
}

func runGoResumeOnSessionless(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	// The fault: a gateway in front of a stateless 2026-07-28 server that
	// still mints a session id on the first response it serves, as it did
	// for the older revisions.
	minted := rand.Text()
	var once sync.Once
	stateless := goHandler(srv, mcp.StreamableHTTPOptions{Stateless: true})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { w.Header().Set("Mcp-Session-Id", minted) })
		stateless.ServeHTTP(w, r)
	})
	return recordGo(dir, "go-resume-on-sessionless", []http.Handler{h}, func(r *rig) error {
		r.vars["minted"] = minted
		return withGoSession(ctx, r.url(), "", false, func(cs *mcp.ClientSession) error {
			if err := expectResult(ctx, cs, "stream", streamArgs{Steps: 2, Label: "new-rev"}, "tok-new", "new-rev: 2 steps done"); err != nil {
				return err
			}
			return expectResult(ctx, cs, "echo", streamArgs{Label: "still-new"}, nil, "still-new")
		})
	},
		"# go-sdk v1.8.0 client with its defaults (revision 2026-07-28) against a stateless go-sdk server",
		"# behind a broken gateway. The first exchange, POST server/discover (MCP-Protocol-Version:",
		"# 2026-07-28), is answered 200 with `Mcp-Session-Id: {minted}`, which the gateway minted: 2026-07-28",
		"# has no sessions. go-sdk's client adopts it and sends it on its later requests (tools/call stream",
		"# with 2 progress notifications, tools/call echo, and a DELETE on close, which the stateless server",
		"# answers 405); the server never sends it again. One resume_on_sessionless_revision: the one",
		"# response that minted it. No event ids, no Last-Event-ID, nothing else wrong.",
		"expect violation kind=resume_on_sessionless_revision protocol_version=2026-07-28 count=1",
		"expect violation count=1",
		"expect resume count=0",
	)
}

// runGoCursorDropped needs no broken server or client: go-sdk's client
// (v1.8.0) keeps a stream's cursor only from the events of its last
// response, so a resumed standalone GET that ends before any event leaves
// it with none, and it reconnects without Last-Event-ID (the shape of
// typescript-sdk #2499); its server then sends the standalone stream again
// from the start. An idle timeout on a proxy ends a stream that way.
func runGoCursorDropped(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	return recordGo(dir, "go-cursor-dropped", []http.Handler{goHandler(srv, storeOpts())}, func(r *rig) error {
		first := newSSECut("GET /mcp", func(ev string) bool { return strings.Contains(ev, "broadcast 1 of") })
		resumed := newHeadCut("Last-Event-Id")
		// Closed when the first broadcast reaches the client a second time,
		// on a GET without a cursor that follows the cut resume. Waiting
		// only for that GET let the echo and the DELETE end the session
		// before a busy server sent the stream again (a CI run recorded
		// the cursor dropped and no duplicate).
		replayed := make(chan struct{})
		var once sync.Once
		watch := func(int) pcaprec.Hooks {
			var cursorless atomic.Bool
			return pcaprec.Hooks{
				FromClient: func(p []byte) ([]byte, pcaprec.Action) {
					if resumed.used.Load() && bytes.HasPrefix(p, []byte("GET /mcp")) && !bytes.Contains(p, []byte("Last-Event-Id")) {
						cursorless.Store(true)
					}
					return p, pcaprec.Forward
				},
				FromServer: func(p []byte) ([]byte, pcaprec.Action) {
					if cursorless.Load() && bytes.Contains(p, []byte("broadcast 1 of")) {
						once.Do(func() { close(replayed) })
					}
					return p, pcaprec.Forward
				},
			}
		}
		r.hooks = append(r.hooks, first.hooks, resumed.hooks, watch)
		return withGoSession(ctx, r.url(), revisionSessions, true, func(cs *mcp.ClientSession) error {
			if err := withLogs(ctx, cs); err != nil {
				return err
			}
			// Let the standalone GET open before anything is sent on it.
			time.Sleep(100 * time.Millisecond)
			if err := expectResult(ctx, cs, "broadcast", streamArgs{Steps: 3, Label: "news"}, nil, "news: broadcast"); err != nil {
				return err
			}
			for _, c := range []*sseCut{first, resumed} {
				if err := c.waitFired(ctx); err != nil {
					return err
				}
			}
			r.noteCut(first)
			select {
			case <-replayed:
			case <-ctx.Done():
				return fmt.Errorf("the stream was not sent again on a GET without a cursor after the cut resume: %w", ctx.Err())
			}
			return expectResult(ctx, cs, "echo", streamArgs{Label: "after"}, nil, "after")
		})
	},
		"# go-sdk v1.8.0 client and server, revision 2025-11-25, MemoryEventStore, standalone GET enabled.",
		"# tools/call broadcast (steps=3) sends three log messages on the standalone GET stream. The proxy",
		"# FINs the GET right after the first ({cut}); the client resumes it with Last-Event-Id: {cut}, and",
		"# the proxy FINs the resumed GET right after its response head (200, no event). go-sdk's client",
		"# takes a stream's cursor from the events of the response it reads, so it reconnects with no",
		"# Last-Event-ID at all: the cursor {cut} is dropped. go-sdk's server answers a GET without a cursor",
		"# with the standalone stream from its start (acquireStream after index -1), so {cut} and the",
		"# events after it reach the client a second time, outside any resume: duplicate_delivery. Both",
		"# SDKs are unmodified; the proxy's cuts are all the fault. The session lives on (echo, then DELETE).",
		"expect violation kind=cursor_dropped last_event_id={cut} count=1",
		"expect violation kind=duplicate_delivery first_event_id={cut} count=1",
		"expect violation count=2",
		"expect session ended=deleted count=1",
	)
}
