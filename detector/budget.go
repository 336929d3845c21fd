package detector

import (
	"time"
	"unsafe"
)

// What the detector's per-session state costs, in bytes: the Go structures
// plus the strings they hold (the ids, at most decode.BoundedIDBytes each).
// The sizes are measured (TestStateBytesMatchHeap keeps them honest): a
// map entry costs its key and value and about as much again in buckets and
// spare capacity.
var (
	sessionBytes = int64(unsafe.Sizeof(session{})) + 64 // + the table entry
	eventBytes   = 2 * int64(unsafe.Sizeof(uint64(0))+unsafe.Sizeof(eventRef{}))
	callBytes    = int64(unsafe.Sizeof(call{})) + 2*int64(unsafe.Sizeof("")+unsafe.Sizeof(uintptr(0)))
	streamBytes  = int64(unsafe.Sizeof(stream{})) + int64(unsafe.Sizeof(uintptr(0)))
	entryBytes   = 2 * int64(unsafe.Sizeof("")+unsafe.Sizeof(float64(0)))
	// callBreakBytes: how a session's tools/call broke (call.broke), its
	// strings aside.
	callBreakBytes = int64(unsafe.Sizeof(callBreak{}))
)

// charge adds n bytes to what s holds and to the detector's total.
func (d *Detector) charge(s *session, n int64) {
	s.bytes += n
	d.stateBytes += n
}

// uncharge takes all s held off the total: its state was dropped.
func (d *Detector) uncharge(s *session) {
	d.stateBytes -= s.bytes
	s.bytes = 0
}

// chargeCall counts a call's entry and the strings only it holds.
func (d *Detector) chargeCall(s *session, c *call) {
	d.charge(s, callBytes+int64(len(c.id)+len(c.method)+len(c.tool)+len(c.paramsHash)+len(c.token)+len(c.args)))
}

// shed evicts the least recently active sessions while the state the
// detector holds is over MaxStateBytes. The session being handled (the most
// recent) is kept: its own growth is bounded by the per-session limits.
// Each eviction is counted (Stats.LimitsHit["MaxStateBytes"]) and its
// checks become unverifiable, as at MaxSessions.
func (d *Detector) shed(t time.Time) {
	for d.stateBytes > d.cfg.MaxStateBytes && d.lruTail != nil && d.lruTail != d.lruHead {
		d.stats.ShedBytes += d.lruTail.bytes
		d.evict(d.lruTail, t, "MaxStateBytes", ReasonStateEvicted)
	}
}

// gapShare: the pairs' gaps may hold up to 1/gapShare of MaxStateBytes
// before they are forgotten. Only lossy captures hold any.
const gapShare = 8

// What an entry of gaps holds: the entry, its lost requests, and each
// session it may have lost, counted whole, since a removed one is kept
// alive by that pointer alone (its ids are bounded, decode.BoundedIDBytes).
var (
	pairGapsBytes    = int64(unsafe.Sizeof(pairGaps{})+unsafe.Sizeof(addrKey{})) + 64
	lostRequestBytes = int64(unsafe.Sizeof(lostRequest{}))
	mayBeLostBytes   = int64(unsafe.Sizeof(uintptr(0))) + sessionBytes
)

// chargeGaps counts what g holds now toward gapBytes and stateBytes.
func (d *Detector) chargeGaps(g *pairGaps) {
	n := pairGapsBytes + int64(cap(g.awaiting))*lostRequestBytes + int64(cap(g.mayBeLost))*mayBeLostBytes
	d.gapBytes += n - g.bytes
	d.stateBytes += n - g.bytes
	g.bytes = n
}

// forgetGaps drops every pair's gaps at t, because of limit.
func (d *Detector) forgetGaps(t time.Time, limit string) {
	d.dropGaps()
	d.gapFloor = t
	d.stats.LimitsHit[limit]++
}

func (d *Detector) dropGaps() {
	clear(d.gaps)
	d.stateBytes -= d.gapBytes
	d.gapBytes = 0
}
