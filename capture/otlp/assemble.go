// The assembler: spans held by trace until they settle, joined to their MCP
// spans, turned into observations and released in time order.

package otlp

import (
	"container/heap"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/replaywatch/replaywatch/decode"
)

// ErrFull refuses an export that would outgrow MaxBufferedSpans: the
// receiver answers it with the OTLP retryable status.
var ErrFull = errors.New("otlp: span buffer full (MaxBufferedSpans); retry later")

// ErrClosed refuses an export that arrives once the assembler was stopped:
// its spans could no longer reach the detector, so the exporter is told to
// send them again (to this agent restarted, or another).
var ErrClosed = errors.New("otlp: receiver shutting down; retry later")

// Stats counts what the assembler did. Safe to read through Assembler.Stats.
type Stats struct {
	Spans        uint64 // spans received
	HTTPSpans    uint64 // HTTP spans turned into exchanges
	MCPSpans     uint64 // MCP spans joined to HTTP spans
	NestedSpans  uint64 // HTTP spans under another HTTP span of the same trace: another hop of an exchange already counted
	IgnoredSpans uint64 // spans neither HTTP nor MCP
	Duplicates   uint64 // spans received again (an exporter's retry), dropped
	Invalid      uint64 // spans without a trace or span id (OTLP requires both), rejected
	Refused      uint64 // spans of exports refused because the buffer was full
	Late         uint64 // observations that arrived after newer ones were released
	EarlyRelease uint64 // observations released before the reorder window (MaxBufferedObservations)
	// LateAfterEarlyRelease counts the late observations that arrived
	// older than one released early: what MaxBufferedObservations cost.
	// An early release alone costs nothing, so this, not EarlyRelease, is
	// the limit's hit count.
	LateAfterEarlyRelease uint64
	Observations          uint64 // observations released
	Buffered              int    // spans held now
	Pending               int    // observations waiting now
}

// recentSpans remembers something of the last RememberedSpans span ids
// added: that a span was received (to drop one sent twice), or what an
// HTTP span made into an exchange stands for (hopRole).
type recentSpans[V any] struct {
	set  map[spanKey]V
	ring []spanKey
	next int
}

// add records k with v and reports whether k was new (a known k keeps its
// value).
func (r *recentSpans[V]) add(k spanKey, v V) bool {
	if r.set == nil {
		r.set = make(map[spanKey]V, 1024)
	}
	if _, dup := r.set[k]; dup {
		return false
	}
	if len(r.ring) < RememberedSpans {
		r.ring = append(r.ring, k)
	} else {
		delete(r.set, r.ring[r.next])
		r.ring[r.next] = k
		r.next = (r.next + 1) % RememberedSpans
	}
	r.set[k] = v
	return true
}

// hopRole is what a remembered span id stands for once a trace settled.
type hopRole uint8

const (
	// hopCounted: an HTTP span made into an exchange.
	hopCounted hopRole = iota + 1
	// hopAbove: a span above a counted one that its trace's buffer did not
	// hold: an HTTP span with that id arriving later, carrying MCP, is an
	// outer hop of the counted exchange (a client's span exported after
	// its server's).
	hopAbove
)

// maxAncestors bounds the walk up a span's parents.
const maxAncestors = 64

// traceBuf is one trace's spans while it settles.
type traceBuf struct {
	id      pcommon.TraceID
	lastAt  time.Time // wall time of its last span's arrival
	http    []*httpSpan
	mcp     []*mcpSpan
	parents map[pcommon.SpanID]pcommon.SpanID // of the other spans
	spans   int
	settled bool
}

// joinCounts are the Stats counted while joining and releasing.
type joinCounts struct {
	http, mcp, nested, late, early, lateEarly, observations uint64
}

// arrival queues a trace for settling.
type arrival struct {
	tb *traceBuf
	at time.Time
}

// Assembler turns spans into observations. Consume may be called from any
// goroutine; out is called from Advance's and Flush's caller only.
type Assembler struct {
	cfg Config
	out func(*decode.Observation)

	mu       sync.Mutex
	rd       reader
	traces   map[pcommon.TraceID]*traceBuf
	arrivals []arrival // in order of arrival; an entry older than its trace's lastAt is stale
	// lastArrival is when the last span came (wall time): the input is
	// quiet since then, whatever settled.
	lastArrival time.Time
	forced      []*traceBuf // cut at MaxSpansPerTrace, to join at the next settle
	buffered    int
	seen        recentSpans[struct{}]
	stats       Stats
	stopped     bool // Stop: every later export is refused (ErrClosed)

	// Owned by the caller of Advance and Flush; counts reach stats at the
	// end of each (publish).
	counts joinCounts
	// hops: the HTTP spans already made into exchanges, and the spans
	// above them, so that another hop of one exchange settling later (the
	// two ends' exporters send apart) is not counted again.
	hops     recentSpans[hopRole]
	pending  obsHeap
	seq      uint64
	newest   time.Time // the newest observation time converted
	released time.Time // the newest observation time released
	// releasedEarly: released left early (MaxBufferedObservations), so an
	// older observation arriving now is late because of that limit.
	releasedEarly bool
	nextConn      uint64
}

// NewAssembler returns an assembler writing observations to out. key is
// the deployment's hash key (decode.Config.HashKey).
func NewAssembler(cfg Config, key []byte, out func(*decode.Observation)) *Assembler {
	return &Assembler{cfg: cfg, out: out, rd: reader{pk: &decode.Peeker{HashKey: key}}, traces: map[pcommon.TraceID]*traceBuf{}}
}

// Stop refuses every export from now on (ErrClosed, which receivers answer
// as retryable). An export consumed before Stop returns is in the buffer,
// for the caller's Flush; one after it was never acknowledged.
func (a *Assembler) Stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
}

// Consume buffers the spans of one export. It refuses the whole export
// (ErrFull) rather than part of it: the exporter retries it whole. Spans
// without a trace or span id, which OTLP requires, are rejected (counted,
// never buffered, and never taken for one another as duplicates): rejected
// says how many, for the export's partial success.
func (a *Assembler) Consume(td ptrace.Traces, now time.Time) (rejected int, err error) {
	n := td.SpanCount()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return 0, ErrClosed // not Refused: that counts the buffer's limit
	}
	if a.buffered > 0 && a.buffered+n > a.cfg.MaxBufferedSpans {
		a.stats.Refused += uint64(n)
		return 0, ErrFull
	}
	a.stats.Spans += uint64(n)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		res := rs.Resource().Attributes()
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				if sp := spans.At(k); sp.TraceID().IsEmpty() || sp.SpanID().IsEmpty() {
					a.stats.Invalid++
					rejected++
				} else {
					a.add(res, sp, now)
				}
			}
		}
	}
	return rejected, nil
}

func (a *Assembler) add(res pcommon.Map, sp ptrace.Span, now time.Time) {
	if !a.seen.add(spanKey{sp.TraceID(), sp.SpanID()}, struct{}{}) {
		// An exporter that retried an export the receiver had taken
		// sends its spans again: counting them twice would deliver every
		// event twice.
		a.stats.Duplicates++
		return
	}
	h, m := a.rd.read(res, sp)
	tb := a.traces[sp.TraceID()]
	if tb == nil {
		tb = &traceBuf{id: sp.TraceID()}
		a.traces[tb.id] = tb
	}
	if !now.Equal(tb.lastAt) {
		tb.lastAt = now
		a.arrivals = append(a.arrivals, arrival{tb, now})
	}
	if now.After(a.lastArrival) {
		a.lastArrival = now
	}
	switch {
	case h != nil:
		tb.http = append(tb.http, h)
	case m != nil:
		tb.mcp = append(tb.mcp, m)
	default:
		// Kept only as a link in the chain of parents (ancestorHop).
		a.stats.IgnoredSpans++
		if tb.parents == nil {
			tb.parents = map[pcommon.SpanID]pcommon.SpanID{}
		}
		tb.parents[sp.SpanID()] = sp.ParentSpanID()
	}
	tb.spans++
	a.buffered++
	if tb.spans >= MaxSpansPerTrace {
		// Joined at the next Advance; later spans start a new buffer.
		a.take(tb)
		a.forced = append(a.forced, tb)
	}
}

// Advance joins the traces that settled by now (wall time) and releases
// the observations older than the reorder window. When idle is set (no
// span arrived for a settle delay and a reorder window), everything
// pending goes out.
func (a *Assembler) Advance(now time.Time) {
	a.settle(now.Add(-a.cfg.SettleDelay))
	idle := a.quietSince(now.Add(-a.cfg.SettleDelay - a.cfg.ReorderWindow))
	a.release(idle)
	a.publish()
}

// HeldSince is the time of the oldest observation Advance holds back (ok
// false when it holds none): a consumer's clock must stay behind it, since
// it is still to come. Call it from Advance's caller.
func (a *Assembler) HeldSince() (t time.Time, ok bool) {
	if len(a.pending) == 0 {
		return time.Time{}, false
	}
	return a.pending[0].o.Time, true
}

// Flush joins and releases everything: the input ended.
func (a *Assembler) Flush() {
	a.settle(time.Unix(1<<62, 0))
	a.release(true)
	a.publish()
}

// publish copies what Advance and Flush counted into the stats Stats
// reads from any goroutine.
func (a *Assembler) publish() {
	c := a.counts
	a.mu.Lock()
	a.stats.HTTPSpans, a.stats.MCPSpans, a.stats.NestedSpans = c.http, c.mcp, c.nested
	a.stats.Late, a.stats.EarlyRelease, a.stats.Observations = c.late, c.early, c.observations
	a.stats.LateAfterEarlyRelease = c.lateEarly
	a.stats.Pending = len(a.pending)
	a.mu.Unlock()
}

// Stats returns the counters.
func (a *Assembler) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Buffered = a.buffered
	return s
}

// quietSince reports whether no span arrived after t. Settling empties
// the arrivals queue, so it cannot tell: a stream's span still to come
// (one that ends later than shorter exchanges that began after it) is
// what the reorder window waits for.
func (a *Assembler) quietSince(t time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastArrival.Before(t)
}

// settle takes the traces whose last span arrived before t (and those cut
// at MaxSpansPerTrace) and turns them into observations.
func (a *Assembler) settle(t time.Time) {
	a.mu.Lock()
	ready := a.forced
	a.forced = nil
	for len(a.arrivals) > 0 {
		e := a.arrivals[0]
		if e.tb.settled || !e.at.Equal(e.tb.lastAt) {
			a.arrivals = a.arrivals[1:] // a later arrival of its trace is queued
			continue
		}
		if !e.at.Before(t) {
			break
		}
		a.arrivals = a.arrivals[1:]
		a.take(e.tb)
		ready = append(ready, e.tb)
	}
	a.mu.Unlock()
	for _, tb := range ready {
		a.convert(tb)
	}
}

// take removes tb from the buffer; mu held.
func (a *Assembler) take(tb *traceBuf) {
	tb.settled = true
	delete(a.traces, tb.id)
	a.buffered -= tb.spans
}

// convert joins a settled trace's HTTP spans to their MCP spans and queues
// their observations.
func (a *Assembler) convert(tb *traceBuf) {
	byID := make(map[pcommon.SpanID]*httpSpan, len(tb.http))
	for _, h := range tb.http {
		byID[h.key.span] = h
	}
	mcpByID := make(map[pcommon.SpanID]*mcpSpan, len(tb.mcp))
	mcpLinks := map[spanKey]*mcpSpan{}
	for _, m := range tb.mcp {
		mcpByID[m.key.span] = m
		for _, l := range m.links {
			mcpLinks[l] = m
		}
	}
	// Each HTTP span under another of its exchange in this buffer is a hop
	// of that one's (outer), never counted itself.
	outer := map[*httpSpan]*httpSpan{}
	under := map[*httpSpan][]*httpSpan{} // outer's hops
	// An exchange a hop of which settled before, and was counted: one of
	// its hops here is the span above that one.
	counted := map[*httpSpan]bool{}
	for _, h := range tb.http {
		if o := outermostHop(h, tb, byID, mcpByID); o != nil {
			outer[h] = o
			under[o] = append(under[o], h)
			if a.hops.set[h.key] == hopAbove {
				counted[o] = true
			}
		}
	}
	for _, h := range tb.http {
		if outer[h] != nil {
			a.counts.nested++
			continue
		}
		// Only a POST carries a JSON-RPC request: a resume GET under the
		// same MCP span (the C# SDK's) sends none.
		joined := false
		if !h.rpc.known() && h.method == "POST" {
			if m := owner(h, mcpByID, mcpLinks); m != nil {
				h.rpc, joined = m.rpc, true
				if h.protocol == "" {
					h.protocol = m.rpc.protocol
				}
			}
		}
		_, above := ancestorHop(h, tb, byID, mcpByID)
		// Counted before: through a hop under this one (counted[h]),
		// the one above it, or one under which it is above.
		dup := counted[h] || a.hops.set[spanKey{tb.id, above}] == hopCounted || a.hops.set[h.key] == hopAbove && h.mcpLike()
		if dup || h.mcpLike() {
			// Only an MCP hop stands for the exchange: a web server's
			// span for its own request is no hop of the MCP calls it
			// makes while serving it. Its hops here, and the span above
			// them, are remembered, so that a hop of the exchange
			// settling later, below or above, is not counted.
			a.rememberHop(h.key, hopCounted)
			for _, n := range under[h] {
				a.rememberHop(n.key, hopCounted)
			}
			if !above.IsEmpty() {
				a.rememberHop(spanKey{tb.id, above}, hopAbove)
			}
		}
		if dup {
			a.counts.nested++
			continue
		}
		if joined {
			a.counts.mcp++
		}
		a.counts.http++
		a.queue(h)
	}
}

// rememberHop records what span k stands for; a counted hop stays counted
// (the span above one counted hop may be another counted one).
func (a *Assembler) rememberHop(k spanKey, role hopRole) {
	if !a.hops.add(k, role) && role == hopCounted {
		a.hops.set[k] = hopCounted
	}
}

// outermostHop is the outermost HTTP span of tb that h is a hop under
// (nestedUnder, repeated), or nil when h is no hop.
func outermostHop(h *httpSpan, tb *traceBuf, byID map[pcommon.SpanID]*httpSpan, mcpByID map[pcommon.SpanID]*mcpSpan) *httpSpan {
	var o *httpSpan
	for range maxAncestors {
		p := nestedUnder(h, tb, byID, mcpByID)
		if p == nil {
			return o
		}
		o, h = p, p
	}
	return o
}

// nestedUnder is the HTTP span of tb that h sits under as another hop of
// its exchange, directly or through other spans (a gateway's call to its
// backend; a server's span under its client's), or nil. The outermost HTTP
// span is the exchange as its client saw it; counting an inner one too
// would deliver every event twice. A web server's request under which it
// calls MCP is another exchange: a hop of the same one carries MCP too, or
// is the same request passed on.
func nestedUnder(h *httpSpan, tb *traceBuf, byID map[pcommon.SpanID]*httpSpan, mcpByID map[pcommon.SpanID]*mcpSpan) *httpSpan {
	o, _ := ancestorHop(h, tb, byID, mcpByID)
	if o != nil && (o.mcpLike() || o.method == h.method && o.path == h.path) {
		return o
	}
	return nil
}

// ancestorHop walks up h's parents in tb to the nearest HTTP span (o), or
// to where the chain leaves tb's spans (above; empty if it ends): a hop
// that settled earlier, or will later, may be there.
func ancestorHop(h *httpSpan, tb *traceBuf, byID map[pcommon.SpanID]*httpSpan, mcpByID map[pcommon.SpanID]*mcpSpan) (o *httpSpan, above pcommon.SpanID) {
	p := h.parent
	for range maxAncestors {
		if p.IsEmpty() {
			return nil, p
		}
		if o, ok := byID[p]; ok {
			return o, pcommon.SpanID{}
		}
		if m, ok := mcpByID[p]; ok {
			p = m.parent
		} else if q, ok := tb.parents[p]; ok {
			p = q
		} else {
			return nil, p // the chain leaves the spans this trace sent
		}
	}
	return nil, pcommon.SpanID{}
}

// owner is the MCP span of h: its parent, one that links to it, or one it
// links to.
func owner(h *httpSpan, mcpByID map[pcommon.SpanID]*mcpSpan, mcpLinks map[spanKey]*mcpSpan) *mcpSpan {
	if m := mcpByID[h.parent]; m != nil {
		return m
	}
	if m := mcpLinks[h.key]; m != nil {
		return m
	}
	for _, l := range h.links {
		if m := mcpByID[l.span]; m != nil && l.trace == h.key.trace {
			return m
		}
	}
	return nil
}

// pendingObs is one queued observation.
type pendingObs struct {
	o   *decode.Observation
	seq uint64
}

type obsHeap []pendingObs

func (h obsHeap) Len() int { return len(h) }
func (h obsHeap) Less(i, j int) bool {
	if !h[i].o.Time.Equal(h[j].o.Time) {
		return h[i].o.Time.Before(h[j].o.Time)
	}
	return h[i].seq < h[j].seq
}
func (h obsHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *obsHeap) Push(x any)   { *h = append(*h, x.(pendingObs)) }
func (h *obsHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = pendingObs{}
	*h = old[:len(old)-1]
	return x
}

// queue turns h into observations (one connection, one exchange) and
// queues them.
func (a *Assembler) queue(h *httpSpan) {
	a.nextConn++
	for _, o := range observe(h, a.nextConn) {
		if o.Time.Before(a.released) {
			// Newer observations already went to the detector.
			o.Late = decode.LateReorderWindow
			a.counts.late++
			if a.releasedEarly {
				o.Late = decode.LateMaxBufferedObservations
				a.counts.lateEarly++
			}
		}
		if o.Time.After(a.newest) {
			a.newest = o.Time
		}
		a.seq++
		heap.Push(&a.pending, pendingObs{o, a.seq})
	}
	for len(a.pending) > a.cfg.MaxBufferedObservations {
		a.counts.early++
		a.emit(heap.Pop(&a.pending).(pendingObs).o, true)
	}
}

// release sends the observations older than the newest by the reorder
// window (all when all is set) to out, in time order.
func (a *Assembler) release(all bool) {
	limit := a.newest.Add(-a.cfg.ReorderWindow)
	for len(a.pending) > 0 && (all || !a.pending[0].o.Time.After(limit)) {
		a.emit(heap.Pop(&a.pending).(pendingObs).o, false)
	}
}

// emit hands o to out; early says it left before the reorder window.
func (a *Assembler) emit(o *decode.Observation, early bool) {
	if o.Time.After(a.released) {
		a.released = o.Time
		a.releasedEarly = early
	}
	a.counts.observations++
	a.out(o)
}
