package telemetry

import (
	"context"
	"errors"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
)

// KernelStats are a live capture socket's counters, cumulative since the
// source opened. The kernel's PACKET_STATISTICS resets on every read, so
// the source adds each read to its totals.
type KernelStats struct {
	Packets uint64 // packets the kernel passed to the socket (tp_packets)
	Drops   uint64 // packets the kernel dropped because the ring or buffer was full (tp_drops)
	// Duplicates are packets the live source discarded as a second copy
	// of one it already had (the same frame seen on two interfaces).
	Duplicates uint64
}

// CaptureLevels are what a live capture holds right now (gauges, not
// totals). Reassembly pages in use are not among them: gopacket's
// reassembly does not expose its page count; the page limits' hits are
// counted in replaywatch_limit_hits_total instead.
type CaptureLevels struct {
	Connections int64 // connections open in the workers' tables
}

// PipelineSources are snapshot functions, each called once per scrape from
// the scrape's goroutine: they must be safe to call while the pipeline runs
// (decode.Pipeline.Stats is; for the detector, whose Stats must be called
// from its own goroutine, publish copies through a Latest). A nil source
// exports nothing: its metric families are absent, not zero.
type PipelineSources struct {
	Capture  func() capture.Stats
	Kernel   func() KernelStats
	Levels   func() CaptureLevels
	Decode   func() decode.Stats
	Detector func() detector.Stats
	// Spans is the OTLP input's assembler (otlp.Assembler.Stats is safe
	// to call at any time).
	Spans func() otlp.Stats
}

// Latest holds the most recent copy of a value another goroutine published:
// the loop calls Store, a scrape calls Load (the zero value before the first
// Store). Load fits PipelineSources, e.g. Detector: latest.Load.
type Latest[T any] struct{ p atomic.Pointer[T] }

// Store publishes v.
func (l *Latest[T]) Store(v T) { l.p.Store(&v) }

// Load returns the last value stored.
func (l *Latest[T]) Load() T {
	if p := l.p.Load(); p != nil {
		return *p
	}
	var zero T
	return zero
}

// violationKinds and resumeOutcomes are exported as 0 until they first
// happen, so increase() sees the first one; any other key a Stats map holds
// is exported too.
var violationKinds = detector.Kinds()

// currentRevisions are the protocol revisions exported as 0 until seen, so
// the dashboard's revision mix has its series from the start.
var currentRevisions = []string{"2025-11-25", "2026-07-28"}

var resumeOutcomes = []detector.ResumeOutcome{
	detector.ResumeResumed, detector.ResumeRejected404, detector.ResumeRejected4xx,
	detector.ResumeViolated, detector.ResumeUnverifiable,
}

// detectorLimits are the detector.Config fields that bound something: the
// keys of detector.Stats.LimitsHit.
var detectorLimits = func() []string {
	var names []string
	for f := range reflect.TypeFor[detector.Config]().Fields() {
		if strings.HasPrefix(f.Name, "Max") {
			names = append(names, f.Name)
		}
	}
	return names
}()

// instruments creates observable instruments and remembers them for
// RegisterCallback; the first error wins.
type instruments struct {
	m   metric.Meter
	err error
	all []metric.Observable
}

func (b *instruments) counter(name, unit, desc string) metric.Int64ObservableCounter {
	c, err := b.m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.add(c, err)
	return c
}

func (b *instruments) gauge(name, unit, desc string) metric.Int64ObservableGauge {
	g, err := b.m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.add(g, err)
	return g
}

func (b *instruments) add(o metric.Observable, err error) {
	if err != nil {
		b.err = errors.Join(b.err, err)
		return
	}
	b.all = append(b.all, o)
}

// u64 converts a uint64 counter for an Int64 instrument.
func u64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

func attrs(kv ...attribute.KeyValue) metric.ObserveOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// counterRow is one unlabelled counter taken from a Stats field.
type counterRow[S any] struct {
	name, unit, desc string
	get              func(*S) int64
}

var captureCounters = []counterRow[capture.Stats]{
	{"replaywatch.capture.packets", "{packet}", "Packet records read", func(s *capture.Stats) int64 { return u64(s.Packets) }},
	{"replaywatch.capture.bytes", "By", "Captured bytes of those packets", func(s *capture.Stats) int64 { return u64(s.Bytes) }},
	{"replaywatch.capture.payload_bytes", "By", "TCP payload bytes delivered to the decoder", func(s *capture.Stats) int64 { return u64(s.PayloadBytes) }},
	{"replaywatch.capture.connections.opened", "{connection}", "TCP connections handed to the decoder", func(s *capture.Stats) int64 { return u64(s.Connections) }},
	{"replaywatch.capture.connections.without_syn", "{connection}", "Of those, connections whose handshake was not captured", func(s *capture.Stats) int64 { return u64(s.ConnectionsWithoutSYN) }},
	{"replaywatch.capture.gaps", "{gap}", "Holes in a TCP byte stream handed on as gaps (lost or never captured segments)", func(s *capture.Stats) int64 { return u64(s.Gaps) }},
	{"replaywatch.capture.gap_bytes", "By", "Bytes those gaps reported lost", func(s *capture.Stats) int64 { return u64(s.GapBytes) }},
	{"replaywatch.capture.fins", "{fin}", "FINs delivered (one per direction)", func(s *capture.Stats) int64 { return u64(s.Fins) }},
	{"replaywatch.capture.resets", "{connection}", "Connections closed by an RST", func(s *capture.Stats) int64 { return u64(s.Resets) }},
	{"replaywatch.capture.idle_flushes", "{connection}", "Connections closed after the capture's IdleTimeout without packets", func(s *capture.Stats) int64 { return u64(s.IdleFlushes) }},
}

var decodeCounters = []counterRow[decode.Stats]{
	{"replaywatch.decode.non_http_connections", "{connection}", "Connections given up as not HTTP/1.x (HTTP/2 apart)", func(s *decode.Stats) int64 { return s.NonHTTPConnections }},
	{"replaywatch.decode.tls_connections", "{connection}", "Of those, connections whose captured start was a TLS ClientHello: encrypted, not readable from packets", func(s *decode.Stats) int64 { return s.TLSConnections }},
	{"replaywatch.decode.proxy_protocol_headers", "{header}", "PROXY protocol headers (v1 or v2) skipped at the start of connections", func(s *decode.Stats) int64 { return s.ProxyHeaders }},
	{"replaywatch.decode.http2_connections", "{connection}", "Connections that switched to HTTP/2 (h2c): not decoded, their pair's checks unverifiable while they are open", func(s *decode.Stats) int64 { return s.HTTP2Connections }},
	{"replaywatch.decode.http2_bytes", "By", "Payload bytes of those connections from the switch on", func(s *decode.Stats) int64 { return s.HTTP2Bytes }},
	{"replaywatch.decode.http_exchanges", "{exchange}", "HTTP requests seen, plus responses whose request was not", func(s *decode.Stats) int64 { return s.HTTPExchanges }},
	{"replaywatch.decode.mcp_exchanges", "{exchange}", "Requests that were MCP", func(s *decode.Stats) int64 { return s.MCPExchanges }},
	{"replaywatch.decode.non_mcp_exchanges", "{exchange}", "Requests that were not MCP", func(s *decode.Stats) int64 { return s.NonMCPExchanges }},
	{"replaywatch.decode.sse_streams", "{stream}", "text/event-stream responses", func(s *decode.Stats) int64 { return s.SSEStreams }},
	{"replaywatch.decode.non_mcp_sse_streams", "{stream}", "SSE responses to requests that were not MCP", func(s *decode.Stats) int64 { return s.NonMCPSSEStreams }},
	{"replaywatch.decode.sse_events", "{event}", "SSE events dispatched", func(s *decode.Stats) int64 { return s.SSEEvents }},
	{"replaywatch.decode.jsonrpc_messages", "{message}", "JSON-RPC messages in requests, bodies and events", func(s *decode.Stats) int64 { return s.JSONRPCMessages }},
	{"replaywatch.decode.inflated_bodies", "{body}", "Request and response bodies under Content-Encoding gzip or deflate, inflated and read", func(s *decode.Stats) int64 { return s.InflatedBodies }},
	{"replaywatch.decode.encoded_unread_bodies", "{body}", "Request and response bodies under a Content-Encoding not read (another coding, MaxInflatingBodies reached, or data that would not inflate): delimited and counted only", func(s *decode.Stats) int64 { return s.EncodedUnread }},
	{"replaywatch.decode.resyncs", "{resync}", "Times a direction found its footing again after skipping or losing bytes", func(s *decode.Stats) int64 { return s.Resyncs }},
	{"replaywatch.decode.resync_skipped_bytes", "By", "Bytes skipped while looking for a request or status line", func(s *decode.Stats) int64 { return s.ResyncSkippedBytes }},
	{"replaywatch.decode.gaps", "{gap}", "Gaps the decoder was handed", func(s *decode.Stats) int64 { return s.Gaps }},
	{"replaywatch.decode.observations", "{observation}", "Observations delivered to the detector", func(s *decode.Stats) int64 { return s.Observations }},
	{"replaywatch.decode.late_observations", "{observation}", "Observations delivered after a newer one (older than the reorder window)", func(s *decode.Stats) int64 { return s.LateObservations }},
	{"replaywatch.decode.early_releases", "{observation}", "Observations released before the reorder window passed because the merger's fixed window (MaxBufferedObservations) was full; they cost nothing unless an older one arrives after them", func(s *decode.Stats) int64 { return s.EarlyReleases }},
}

var detectorCounters = []counterRow[detector.Stats]{
	{"replaywatch.detector.observations", "{observation}", "Observations the detector took", func(s *detector.Stats) int64 { return s.Observations }},
	{"replaywatch.detector.malformed_observations", "{observation}", "Observations missing the part their kind promises", func(s *detector.Stats) int64 { return s.Malformed }},
	{"replaywatch.detector.sessionless_exchanges", "{exchange}", "MCP exchanges without any session id (stateless servers)", func(s *detector.Stats) int64 { return s.Sessionless }},
	{"replaywatch.detector.sessions.seen", "{session}", "Sessions the detector started tracking", func(s *detector.Stats) int64 { return s.SessionsSeen }},
	{"replaywatch.detector.unknown_outcomes", "{request}", "Requests whose outcome could not be seen", func(s *detector.Stats) int64 { return s.UnknownOutcomes }},
	{"replaywatch.detector.header_mismatches", "{request}", "Requests whose Mcp-Method/Mcp-Name headers disagree with the body", func(s *detector.Stats) int64 { return s.HeaderMismatches }},
	{"replaywatch.detector.proxy_hops", "{request}", "Requests set aside as a proxy's second hop, or a NAT copy, of a request already seen", func(s *detector.Stats) int64 { return s.ProxyHops }},
	{"replaywatch.detector.repeatable_reissues", "{request}", "Calls re-issued after their stream broke to tools annotated read-only or idempotent (no finding)", func(s *detector.Stats) int64 { return s.RepeatableReissues }},
}

// stageCounters are the created instruments of one table.
type stageCounters[S any] struct {
	rows []counterRow[S]
	inst []metric.Int64ObservableCounter
}

func newStageCounters[S any](b *instruments, rows []counterRow[S]) *stageCounters[S] {
	sc := &stageCounters[S]{rows: rows}
	for _, r := range rows {
		sc.inst = append(sc.inst, b.counter(r.name, r.unit, r.desc))
	}
	return sc
}

func (sc *stageCounters[S]) observe(o metric.Observer, s *S) {
	for i, r := range sc.rows {
		o.ObserveInt64(sc.inst[i], r.get(s))
	}
}

// RegisterPipeline exports the counters of the given sources (see
// README.md for the names). Register one pipeline at a time: Unregister the
// returned registration before registering a new one, or both are summed
// into the same series.
func (t *Telemetry) RegisterPipeline(src PipelineSources) (metric.Registration, error) {
	b := &instruments{m: t.meter}
	var (
		capC                       *stageCounters[capture.Stats]
		decC                       *stageCounters[decode.Stats]
		detC                       *stageCounters[detector.Stats]
		skipped, kPackets, kDrops  metric.Int64ObservableCounter
		dups, limits, parseErrs    metric.Int64ObservableCounter
		ended, resumes, violations metric.Int64ObservableCounter
		unverifiable, revisions    metric.Int64ObservableCounter
		openConns, sessions        metric.Int64ObservableGauge
		stateBytes, mergerPeak     metric.Int64ObservableGauge
		shedBytes                  metric.Int64ObservableCounter
		spans, spanObs             metric.Int64ObservableCounter
		spansHeld                  metric.Int64ObservableGauge
	)
	if src.Capture != nil || src.Decode != nil || src.Detector != nil || src.Spans != nil {
		limits = b.counter("replaywatch.limit_hits", "{hit}", "Times a named limit was reached (limit = package.ConfigField); see the packages' READMEs for what each does")
	}
	if src.Capture != nil {
		capC = newStageCounters(b, captureCounters)
		skipped = b.counter("replaywatch.capture.skipped_packets", "{packet}", "Packets that carried no usable TCP, by reason: non_tcp, fragment (IP fragments are not reassembled), undecodable")
	}
	if src.Kernel != nil {
		kPackets = b.counter("replaywatch.capture.kernel_packets", "{packet}", "Packets the capture socket's filter accepted, those the kernel then dropped included")
		kDrops = b.counter("replaywatch.capture.kernel_drops", "{packet}", "Packets the kernel dropped because the capture ring or buffer was full")
		dups = b.counter("replaywatch.capture.duplicates", "{packet}", "Packets discarded as a second copy of one already captured")
	}
	if src.Levels != nil {
		openConns = b.gauge("replaywatch.capture.connections", "{connection}", "TCP connections open in the capture's tables")
	}
	if src.Decode != nil {
		decC = newStageCounters(b, decodeCounters)
		parseErrs = b.counter("replaywatch.decode.parse_errors", "{error}", "Malformed HTTP input survived, by kind")
		mergerPeak = b.gauge("replaywatch.decode.merger_peak", "{observation}", "The most observations the merger between the workers and the detector held at once (bounded by MaxBufferedObservations plus the queue to the detector)")
	}
	if src.Detector != nil {
		detC = newStageCounters(b, detectorCounters)
		sessions = b.gauge("replaywatch.detector.sessions", "{session}", "Sessions tracked now")
		stateBytes = b.gauge("replaywatch.detector.state", "By", "Session state the detector holds, as counted toward MaxStateBytes (its share of the memory limit)")
		shedBytes = b.counter("replaywatch.detector.shed", "By", "Session state let go at MaxStateBytes: the least recently active sessions, evicted (replaywatch_limit_hits_total{limit=\"detector.MaxStateBytes\"} counts them)")
		ended = b.counter("replaywatch.detector.sessions.ended", "{session}", "Sessions that ended, by reason: deleted, 404, expired, capture_end, evicted")
		resumes = b.counter("replaywatch.detector.resumes", "{resume}", "Resume attempts (requests with Last-Event-ID), by outcome")
		violations = b.counter("replaywatch.detector.violations", "{violation}", "Violations of the resume contract, by kind and severity")
		unverifiable = b.counter("replaywatch.detector.unverifiable", "{check}", "Checks that could not be made, by reason")
		revisions = b.counter("replaywatch.detector.requests", "{request}", "MCP requests by the protocol revision they spoke (the mix of 2025-11-25 and 2026-07-28 clients)")
	}
	if src.Spans != nil {
		spans = b.counter("replaywatch.otlp.spans", "{span}", "Spans received over OTLP, by what became of them: http (an exchange), mcp (joined to its HTTP spans), nested (another hop of an exchange counted), ignored (neither), duplicate (received again: an exporter's retry; dropped), refused (the buffer was full: the exporter was told to retry)")
		spanObs = b.counter("replaywatch.otlp.observations", "{observation}", "Observations made from spans, by delivery: in_order, late (after newer ones: order not trusted), early (released before the reorder window at MaxBufferedObservations)")
		spansHeld = b.gauge("replaywatch.otlp.buffered_spans", "{span}", "Spans held while their traces settle (bounded by MaxBufferedSpans)")
	}
	if b.err != nil {
		return nil, b.err
	}
	if len(b.all) == 0 {
		return nil, errors.New("telemetry: RegisterPipeline: no sources")
	}
	limit := func(o metric.Observer, name string, v int64) {
		o.ObserveInt64(limits, v, attrs(attribute.String("limit", name)))
	}
	return t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if src.Capture != nil {
			s := src.Capture()
			capC.observe(o, &s)
			o.ObserveInt64(skipped, u64(s.NonTCP), attrs(attribute.String("reason", "non_tcp")))
			o.ObserveInt64(skipped, u64(s.Fragments), attrs(attribute.String("reason", "fragment")))
			o.ObserveInt64(skipped, u64(s.Undecodable), attrs(attribute.String("reason", "undecodable")))
			o.ObserveInt64(skipped, u64(s.StaleResets), attrs(attribute.String("reason", "stale_reset")))
			limit(o, "capture.MaxBufferedPages", u64(s.PageLimitHits))
			limit(o, "capture.MaxConnections", u64(s.Evictions))
		}
		if src.Kernel != nil {
			k := src.Kernel()
			o.ObserveInt64(kPackets, u64(k.Packets))
			o.ObserveInt64(kDrops, u64(k.Drops))
			o.ObserveInt64(dups, u64(k.Duplicates))
		}
		if src.Levels != nil {
			l := src.Levels()
			o.ObserveInt64(openConns, l.Connections)
		}
		if src.Decode != nil {
			s := src.Decode()
			decC.observe(o, &s)
			for _, kind := range slices.Sorted(maps.Keys(s.ParseErrors)) {
				o.ObserveInt64(parseErrs, s.ParseErrors[kind], attrs(attribute.String("kind", kind)))
			}
			limit(o, "decode.MaxHeaderBytes", s.HeaderLimitHits)
			limit(o, "decode.MaxBodyBytes", s.BodyLimitHits)
			limit(o, "decode.MaxInflatingBodies", s.InflateLimitHits)
			limit(o, "decode.MaxSSELineBytes", s.LineLimitHits)
			limit(o, "decode.MaxEventBytes", s.EventLimitHits)
			limit(o, "decode.MaxPipelinedRequests", s.PipelineOverflows)
			limit(o, "decode.MaxBufferedObservations", s.LateAfterEarlyRelease)
			limit(o, "decode.MaxBufferedBytes", s.BufferLimitHits)
			o.ObserveInt64(mergerPeak, s.MergerPeak)
		}
		if src.Spans != nil {
			s := src.Spans()
			for _, r := range []struct {
				result string
				n      uint64
			}{{"http", s.HTTPSpans}, {"mcp", s.MCPSpans}, {"nested", s.NestedSpans}, {"ignored", s.IgnoredSpans}, {"duplicate", s.Duplicates}, {"invalid", s.Invalid}, {"refused", s.Refused}} {
				o.ObserveInt64(spans, u64(r.n), attrs(attribute.String("result", r.result)))
			}
			o.ObserveInt64(spanObs, u64(s.Observations-s.Late-s.EarlyRelease), attrs(attribute.String("delivery", "in_order")))
			o.ObserveInt64(spanObs, u64(s.Late), attrs(attribute.String("delivery", "late")))
			o.ObserveInt64(spanObs, u64(s.EarlyRelease), attrs(attribute.String("delivery", "early")))
			o.ObserveInt64(spansHeld, int64(s.Buffered))
			limit(o, "otlp.MaxBufferedSpans", u64(s.Refused))
			limit(o, "otlp.MaxBufferedObservations", u64(s.LateAfterEarlyRelease))
		}
		if src.Detector != nil {
			s := src.Detector()
			detC.observe(o, &s)
			o.ObserveInt64(sessions, int64(s.SessionsActive))
			o.ObserveInt64(stateBytes, s.StateBytes)
			o.ObserveInt64(shedBytes, s.ShedBytes)
			for _, why := range slices.Sorted(maps.Keys(s.SessionsEnded)) {
				o.ObserveInt64(ended, s.SessionsEnded[why], attrs(attribute.String("reason", why)))
			}
			for _, oc := range withKnown(s.Resumes, resumeOutcomes) {
				o.ObserveInt64(resumes, s.Resumes[oc], attrs(attribute.String("outcome", string(oc))))
			}
			for _, k := range withKnown(s.Violations, violationKinds) {
				o.ObserveInt64(violations, s.Violations[k], attrs(
					attribute.String("kind", string(k)), attribute.String("severity", string(detector.SeverityOf(k)))))
			}
			for _, why := range slices.Sorted(maps.Keys(s.Unverifiable)) {
				o.ObserveInt64(unverifiable, s.Unverifiable[why], attrs(attribute.String("reason", why)))
			}
			for _, rev := range withKnown(s.Revisions, currentRevisions) {
				o.ObserveInt64(revisions, s.Revisions[rev], attrs(attribute.String("revision", rev)))
			}
			for _, f := range withKnown(s.LimitsHit, detectorLimits) {
				limit(o, "detector."+f, s.LimitsHit[f])
			}
		}
		return nil
	}, b.all...)
}

// withKnown returns known followed by the other keys of m, sorted.
func withKnown[K ~string, V any](m map[K]V, known []K) []K {
	out := slices.Clone(known)
	var extra []K
	for k := range m {
		if !slices.Contains(known, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}
