package detector

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

// feedSessions initialises n sessions (numbered from first), each with a
// tool call whose stream delivers events events, ids of idBytes bytes.
func feedSessions(f *feeder, first, n, events, idBytes int) {
	for i := first; i < first+n; i++ {
		id := fmt.Sprintf("%0*d", idBytes, i)
		conn := uint64(i + 1)
		initialize(f, conn, id)
		evs := make([]*decode.Event, events)
		for j := range evs {
			evs[j] = msgEvent(fmt.Sprintf("%s_%d", id, j))
		}
		f.exchange(conn, &decode.Request{Method: "POST", MCP: true, SessionID: id, HasSessionID: true, ProtocolVersion: "2025-11-25",
			Messages: []decode.Message{{Type: decode.MsgRequest, ID: "2", Method: "tools/call", Tool: "t", ParamsHash: "h"}}},
			&decode.Response{Status: 200, SSE: true}, evs, decode.EndClean)
	}
}

// TestStateBytesAreBounded: however many sessions come, the state the
// detector counts stays within MaxStateBytes (plus the one session being
// handled), the sessions let go are counted and unverifiable, never a
// finding, and what is counted goes back to zero once every session is
// gone.
func TestStateBytesAreBounded(t *testing.T) {
	const limit = 256 << 10
	rec := &recorder{}
	f := newFeeder(Config{MaxStateBytes: limit}, rec)
	peak := int64(0)
	for i := range 2000 {
		feedSessions(f, i, 1, 8, decode.BoundedIDBytes)
		peak = max(peak, f.d.Stats().StateBytes)
	}
	st := f.d.Stats()
	if peak > limit+64<<10 {
		t.Errorf("state peaked at %d bytes, over the limit %d", peak, limit)
	}
	if st.LimitsHit["MaxStateBytes"] == 0 || st.ShedBytes == 0 {
		t.Errorf("no eviction counted: %v, shed %d", st.LimitsHit, st.ShedBytes)
	}
	if len(rec.violations) != 0 {
		t.Errorf("an eviction produced a violation: %s", describe([]any{rec.violations[0]}))
	}
	evicted := 0
	for _, u := range rec.unverifiable {
		if u.Reason == ReasonStateEvicted {
			evicted++
		}
	}
	if evicted == 0 {
		t.Errorf("no unverifiable record says %q", ReasonStateEvicted)
	}
	f.d.Close(f.now)
	if got := f.d.Stats().StateBytes; got != 0 {
		t.Errorf("%d bytes still counted after Close", got)
	}
}

// TestStateBytesMatchHeap keeps the sizes budget.go counts honest: the
// heap a detector grows by, for sessions with events and long ids, is
// within a factor of what it counts, so a budget in bytes means bytes.
func TestStateBytesMatchHeap(t *testing.T) {
	for _, c := range []struct {
		name            string
		events, idBytes int
	}{
		{"idle sessions, UUID ids", 0, 36},
		{"sessions with events", 50, 36},
		{"long ids", 10, decode.BoundedIDBytes},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 3000
			f := newFeeder(Config{}, discard{})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			feedSessions(f, 0, n, c.events, c.idBytes)
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			counted := f.d.Stats().StateBytes
			t.Logf("%d sessions: heap grew %d B (%d per session), counted %d B (%d per session)", n, heap, heap/n, counted, counted/n)
			if counted < heap/3 || counted > heap*2 {
				t.Errorf("counted %d bytes for a heap of %d: the sizes in budget.go are off", counted, heap)
			}
			runtime.KeepAlive(f)
		})
	}
}

// TestGapStateIsBounded: a capture losing requests on many connections of
// many client addresses (each pair's lost requests await their answers)
// holds at most its share of MaxStateBytes in capture gaps; past it they
// are forgotten and counted, never a finding.
func TestGapStateIsBounded(t *testing.T) {
	const limit = 1 << 20
	rec := &recorder{}
	d := New(Config{MaxStateBytes: limit}, rec)
	now := t0
	// One pair at its most: every lost request and lost session counted.
	pairMax := pairGapsBytes + maxLinkCandidates*(lostRequestBytes+mayBeLostBytes)
	peak := int64(0)
	for pair := range 200 {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(pair >> 8), byte(pair)}), 0)
		for c := range maxLinkCandidates {
			now = now.Add(time.Millisecond)
			conn := decode.Conn{ID: uint64(pair*1000 + c + 1), Client: netip.AddrPortFrom(client.Addr(), uint16(10000+c)), Server: srv}
			d.Observe(&decode.Observation{Kind: decode.KindGap, Time: now, Conn: conn, Gap: &decode.Gap{FromClient: true, Lost: -1}})
			peak = max(peak, d.Stats().StateBytes)
		}
	}
	if peak > limit/gapShare+pairMax {
		t.Errorf("gap state peaked at %d bytes, over its share %d and one pair's %d", peak, limit/gapShare, pairMax)
	}
	if d.Stats().LimitsHit["MaxStateBytes"] == 0 {
		t.Errorf("no limit hit counted: %v", d.Stats().LimitsHit)
	}
	d.Close(now)
	if len(rec.violations) != 0 {
		t.Errorf("forgetting gaps produced a violation: %s", describe([]any{rec.violations[0]}))
	}
	if got := d.Stats().StateBytes; got != 0 {
		t.Errorf("%d bytes still counted after Close", got)
	}
}

// TestServerEndpointBounds: the endpoints known per server are bounded by
// MaxSessions; past it they start again, and the hit is counted.
func TestServerEndpointBounds(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions = 2
	d := New(cfg, &recorder{})
	server := netip.MustParseAddrPort("10.0.0.2:8080")
	for i := range 3 {
		d.noteServerEndpoint(netip.AddrPortFrom(server.Addr(), uint16(9000+i)), "x.test/mcp")
	}
	if got := len(d.serverEndpoints); got != 1 {
		t.Errorf("servers known after a third: %d, want 1", got)
	}
	if got := d.Stats().LimitsHit["MaxSessions"]; got != 1 {
		t.Errorf("MaxSessions hits counted: %d, want 1", got)
	}
}
