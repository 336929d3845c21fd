package telemetry

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/metric"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/internal/membudget"
	"github.com/replaywatch/replaywatch/sink/clickhouse"
)

// serve starts tel's server on a free loopback port and returns its base
// URL; the server stops (and must stop cleanly) when the test ends.
func serve(t *testing.T, tel *Telemetry) string {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tel.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape fetches /metrics and parses it with the Prometheus text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// series returns the value of family name's series with exactly the given
// labels besides node; it fails the test if there is none.
func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{NodeLabel: "node-1"}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	f := fams[name]
	if f == nil {
		t.Errorf("no family %s", name)
		return -1
	}
	for _, m := range f.GetMetric() {
		if maps.Equal(labelsOf(m), want) {
			return valueOf(m)
		}
	}
	t.Errorf("%s: no series %v", name, want)
	return -1
}

func check(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	if got := series(t, fams, name, labels...); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// sinkInstrument is one instrument sink/clickhouse/metrics.go creates.
type sinkInstrument struct{ method, name, unit string }

// sinkInstruments reads the instruments out of the sink's source, so that
// the test records exactly the names, kinds and units the sink uses.
func sinkInstruments(t *testing.T) []sinkInstrument {
	t.Helper()
	path := filepath.Join("..", "..", "sink", "clickhouse", "metrics.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []sinkInstrument
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, _ := strconv.Unquote(lit.Value)
		if !strings.HasPrefix(name, "replaywatch.") {
			return true
		}
		in := sinkInstrument{method: sel.Sel.Name, name: name}
		for _, a := range call.Args[1:] {
			if c, ok := a.(*ast.CallExpr); ok {
				if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "WithUnit" {
					in.unit, _ = strconv.Unquote(c.Args[0].(*ast.BasicLit).Value)
				}
			}
		}
		out = append(out, in)
		return true
	})
	if len(out) < 5 {
		t.Fatalf("found only %d instruments in %s: %v", len(out), path, out)
	}
	return out
}

// recordSinkInstruments creates the sink's instruments on mp, as the sink
// does, and records one value on each.
func recordSinkInstruments(t *testing.T, mp metric.MeterProvider) {
	t.Helper()
	m := mp.Meter("github.com/replaywatch/replaywatch/sink/clickhouse")
	ctx := context.Background()
	var gauges []metric.Observable
	var observe []func(metric.Observer)
	for _, in := range sinkInstruments(t) {
		var err error
		switch in.method {
		case "Int64Counter":
			var c metric.Int64Counter
			if c, err = m.Int64Counter(in.name, metric.WithUnit(in.unit)); err == nil {
				c.Add(ctx, 1)
			}
		case "Float64Histogram":
			var h metric.Float64Histogram
			if h, err = m.Float64Histogram(in.name, metric.WithUnit(in.unit)); err == nil {
				h.Record(ctx, 0.5)
			}
		case "Int64ObservableGauge":
			var g metric.Int64ObservableGauge
			if g, err = m.Int64ObservableGauge(in.name, metric.WithUnit(in.unit)); err == nil {
				gauges = append(gauges, g)
				observe = append(observe, func(o metric.Observer) { o.ObserveInt64(g, 1) })
			}
		case "Float64ObservableGauge":
			var g metric.Float64ObservableGauge
			if g, err = m.Float64ObservableGauge(in.name, metric.WithUnit(in.unit)); err == nil {
				gauges = append(gauges, g)
				observe = append(observe, func(o metric.Observer) { o.ObserveFloat64(g, 1) })
			}
		default:
			t.Fatalf("the sink creates %s with %s: teach this test that kind of instrument", in.name, in.method)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, f := range observe {
			f(o)
		}
		return nil
	}, gauges...); err != nil {
		t.Fatal(err)
	}
}

func fakeSources() PipelineSources {
	var det Latest[detector.Stats]
	det.Store(detector.Stats{
		Observations:   900,
		Malformed:      1,
		Sessionless:    4,
		SessionsSeen:   30,
		SessionsActive: 12,
		SessionsEnded:  map[string]int64{"404": 3, "deleted": 2},
		Resumes: map[detector.ResumeOutcome]int64{
			detector.ResumeResumed: 7, detector.ResumeViolated: 2,
		},
		Violations: map[detector.Kind]int64{
			detector.KindReplayedEvent: 2, detector.KindUnresumableClose: 1,
		},
		Unverifiable:    map[string]int64{detector.ReasonCaptureGap: 5},
		UnknownOutcomes: 6,
		LimitsHit:       map[string]int64{"MaxSessions": 9, "MaxStateBytes": 4},
		StateBytes:      1 << 20, ShedBytes: 5000,
		Revisions: map[string]int64{"2025-11-25": 40, "2026-07-28": 11},
	})
	return PipelineSources{
		Capture: func() capture.Stats {
			return capture.Stats{
				Packets: 1000, Bytes: 1_500_000, TCP: 990, NonTCP: 7, Fragments: 2, Undecodable: 1,
				Connections: 40, ConnectionsWithoutSYN: 3, PayloadBytes: 1_200_000,
				Gaps: 5, GapBytes: 4000, Fins: 60, Resets: 4, IdleFlushes: 6, Evictions: 8, PageLimitHits: 11,
			}
		},
		Kernel: func() KernelStats { return KernelStats{Packets: 1010, Drops: 10, Duplicates: 13} },
		Levels: func() CaptureLevels { return CaptureLevels{Connections: 17} },
		Decode: func() decode.Stats {
			return decode.Stats{
				NonHTTPConnections: 2, HTTPExchanges: 100, MCPExchanges: 90, NonMCPExchanges: 10,
				SSEStreams: 20, NonMCPSSEStreams: 1, SSEEvents: 500, JSONRPCMessages: 700,
				ParseErrors: map[string]int64{"bad_chunk": 3},
				Resyncs:     2, ResyncSkippedBytes: 77, Gaps: 5,
				HeaderLimitHits: 1, BodyLimitHits: 2, LineLimitHits: 3, EventLimitHits: 4, PipelineOverflows: 5,
				Observations: 800, LateObservations: 3, EarlyReleases: 6, LateAfterEarlyRelease: 2, MergerPeak: 77,
			}
		},
		Detector: det.Load,
		Spans: func() otlp.Stats {
			return otlp.Stats{Spans: 30, HTTPSpans: 20, MCPSpans: 5, NestedSpans: 2, IgnoredSpans: 3, Refused: 4,
				Observations: 90, Late: 2, EarlyRelease: 3, LateAfterEarlyRelease: 1, Buffered: 7}
		},
	}
}

func TestMetrics(t *testing.T) {
	tel, err := New(Options{Node: "node-1", ServiceVersion: "1.2.3", PodName: "replaywatch-abc", Namespace: "mcp", ReadyConditions: []string{"capture"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close(context.Background())
	if _, err := tel.RegisterPipeline(fakeSources()); err != nil {
		t.Fatal(err)
	}
	plan, err := membudget.NewPlan(768<<20, 128<<20, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.RegisterMemoryPlan(plan); err != nil {
		t.Fatal(err)
	}
	tel.Heartbeat("capture", time.Hour)
	recordSinkInstruments(t, tel.MeterProvider())
	fams := scrape(t, serve(t, tel))

	// Every source reported once: exactly the documented families.
	got := slices.Sorted(maps.Keys(fams))
	if want := MetricNames(); !slices.Equal(got, want) {
		t.Errorf("scraped families differ from MetricNames()\nonly scraped: %v\nonly listed:  %v", minus(got, want), minus(want, got))
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			if labelsOf(m)[NodeLabel] != "node-1" {
				t.Errorf("%s%v: no node label", name, labelsOf(m))
			}
		}
	}

	check(t, fams, 1000, "replaywatch_capture_packets_total")
	check(t, fams, 1_500_000, "replaywatch_capture_bytes_total")
	check(t, fams, 1_200_000, "replaywatch_capture_payload_bytes_total")
	check(t, fams, 7, "replaywatch_capture_skipped_packets_total", "reason", "non_tcp")
	check(t, fams, 2, "replaywatch_capture_skipped_packets_total", "reason", "fragment")
	check(t, fams, 1, "replaywatch_capture_skipped_packets_total", "reason", "undecodable")
	check(t, fams, 40, "replaywatch_capture_connections_opened_total")
	check(t, fams, 3, "replaywatch_capture_connections_without_syn_total")
	check(t, fams, 5, "replaywatch_capture_gaps_total")
	check(t, fams, 4000, "replaywatch_capture_gap_bytes_total")
	check(t, fams, 60, "replaywatch_capture_fins_total")
	check(t, fams, 4, "replaywatch_capture_resets_total")
	check(t, fams, 6, "replaywatch_capture_idle_flushes_total")
	check(t, fams, 1010, "replaywatch_capture_kernel_packets_total")
	check(t, fams, 10, "replaywatch_capture_kernel_drops_total")
	check(t, fams, 13, "replaywatch_capture_duplicates_total")
	check(t, fams, 17, "replaywatch_capture_connections")

	check(t, fams, 8, "replaywatch_limit_hits_total", "limit", "capture.MaxConnections")
	check(t, fams, 11, "replaywatch_limit_hits_total", "limit", "capture.MaxBufferedPages")
	check(t, fams, 1, "replaywatch_limit_hits_total", "limit", "decode.MaxHeaderBytes")
	check(t, fams, 2, "replaywatch_limit_hits_total", "limit", "decode.MaxBodyBytes")
	check(t, fams, 3, "replaywatch_limit_hits_total", "limit", "decode.MaxSSELineBytes")
	check(t, fams, 4, "replaywatch_limit_hits_total", "limit", "decode.MaxEventBytes")
	check(t, fams, 5, "replaywatch_limit_hits_total", "limit", "decode.MaxPipelinedRequests")
	check(t, fams, 2, "replaywatch_limit_hits_total", "limit", "decode.MaxBufferedObservations")
	check(t, fams, 6, "replaywatch_decode_early_releases_total")
	check(t, fams, 9, "replaywatch_limit_hits_total", "limit", "detector.MaxSessions")
	check(t, fams, 4, "replaywatch_limit_hits_total", "limit", "detector.MaxStateBytes")
	check(t, fams, 1<<20, "replaywatch_detector_state_bytes")
	check(t, fams, 5000, "replaywatch_detector_shed_bytes_total")
	check(t, fams, 77, "replaywatch_decode_merger_peak")
	check(t, fams, 768<<20, "replaywatch_memory_limit_bytes")
	check(t, fams, float64(plan.Detector), "replaywatch_memory_share_bytes", "part", "detector")
	check(t, fams, float64(plan.HeapLimit), "replaywatch_memory_share_bytes", "part", "heap")
	check(t, fams, 0, "replaywatch_limit_hits_total", "limit", "detector.MaxLostSessions")
	check(t, fams, 85, "replaywatch_otlp_observations_total", "delivery", "in_order")
	check(t, fams, 3, "replaywatch_otlp_observations_total", "delivery", "early")
	check(t, fams, 4, "replaywatch_limit_hits_total", "limit", "otlp.MaxBufferedSpans")
	// Early releases cost nothing; the late ones after them are the hits.
	check(t, fams, 1, "replaywatch_limit_hits_total", "limit", "otlp.MaxBufferedObservations")

	check(t, fams, 2, "replaywatch_decode_non_http_connections_total")
	check(t, fams, 100, "replaywatch_decode_http_exchanges_total")
	check(t, fams, 90, "replaywatch_decode_mcp_exchanges_total")
	check(t, fams, 10, "replaywatch_decode_non_mcp_exchanges_total")
	check(t, fams, 20, "replaywatch_decode_sse_streams_total")
	check(t, fams, 1, "replaywatch_decode_non_mcp_sse_streams_total")
	check(t, fams, 500, "replaywatch_decode_sse_events_total")
	check(t, fams, 700, "replaywatch_decode_jsonrpc_messages_total")
	check(t, fams, 3, "replaywatch_decode_parse_errors_total", "kind", "bad_chunk")
	check(t, fams, 2, "replaywatch_decode_resyncs_total")
	check(t, fams, 77, "replaywatch_decode_resync_skipped_bytes_total")
	check(t, fams, 5, "replaywatch_decode_gaps_total")
	check(t, fams, 800, "replaywatch_decode_observations_total")
	check(t, fams, 3, "replaywatch_decode_late_observations_total")

	check(t, fams, 900, "replaywatch_detector_observations_total")
	check(t, fams, 1, "replaywatch_detector_malformed_observations_total")
	check(t, fams, 4, "replaywatch_detector_sessionless_exchanges_total")
	check(t, fams, 12, "replaywatch_detector_sessions")
	check(t, fams, 30, "replaywatch_detector_sessions_seen_total")
	check(t, fams, 3, "replaywatch_detector_sessions_ended_total", "reason", "404")
	check(t, fams, 11, "replaywatch_detector_requests_total", "revision", "2026-07-28")
	check(t, fams, 2, "replaywatch_detector_sessions_ended_total", "reason", "deleted")
	check(t, fams, 7, "replaywatch_detector_resumes_total", "outcome", "resumed")
	check(t, fams, 2, "replaywatch_detector_resumes_total", "outcome", "violated")
	check(t, fams, 0, "replaywatch_detector_resumes_total", "outcome", "rejected_404")
	check(t, fams, 2, "replaywatch_detector_violations_total", "kind", "replayed_event", "severity", "critical")
	check(t, fams, 1, "replaywatch_detector_violations_total", "kind", "unresumable_close", "severity", "medium")
	check(t, fams, 0, "replaywatch_detector_violations_total", "kind", "session_swap", "severity", "critical")
	if n := len(fams["replaywatch_detector_violations_total"].GetMetric()); n != len(violationKinds) {
		t.Errorf("%d violation series, want one per kind (%d)", n, len(violationKinds))
	}
	check(t, fams, 5, "replaywatch_detector_unverifiable_total", "reason", detector.ReasonCaptureGap)
	check(t, fams, 6, "replaywatch_detector_unknown_outcomes_total")

	check(t, fams, 1, "replaywatch_sink_rows_total")
	check(t, fams, 1, "replaywatch_sink_insert_duration_seconds")
	check(t, fams, 1, "replaywatch_sink_spool_oldest_age_seconds")
	check(t, fams, 0, "replaywatch_ready", "condition", "capture")
	if age := series(t, fams, "replaywatch_heartbeat_age_seconds", "loop", "capture"); age < 0 || age > 60 {
		t.Errorf("heartbeat age %v", age)
	}
	for _, f := range []string{"replaywatch_capture_connections", "replaywatch_detector_sessions", "replaywatch_sink_spool_bytes", "replaywatch_ready"} {
		if ty := fams[f].GetType(); ty != dto.MetricType_GAUGE {
			t.Errorf("%s is a %v, want a gauge", f, ty)
		}
	}
	if ty := fams["replaywatch_sink_insert_duration_seconds"].GetType(); ty != dto.MetricType_HISTOGRAM {
		t.Errorf("insert duration is a %v", ty)
	}
	check(t, fams, 1, "target_info",
		"service_name", "replaywatch", "service_version", "1.2.3", "host_name", "node-1",
		"k8s_pod_name", "replaywatch-abc", "k8s_namespace_name", "mcp")
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// TestRealSink hands the MeterProvider to a real ClickHouse sink whose
// server is down (a closed loopback port) and with an unreadable file in its
// spool: the families it shows are in MetricNames.
func TestRealSink(t *testing.T) {
	tel, err := New(Options{Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close(context.Background())
	base := serve(t, tel)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	spool := t.TempDir()
	if err := os.WriteFile(filepath.Join(spool, "1.batch"), []byte("not a batch"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := clickhouse.NewDeferred(clickhouse.ConnectOptions{DSN: "clickhouse://" + closed + "/replaywatch", DialTimeout: time.Second},
		clickhouse.Config{
			Node: "node-1", SpoolDir: spool, MeterProvider: tel.MeterProvider(),
			MaxRetries: 1, RetryBackoff: time.Millisecond, MaxRetryBackoff: 10 * time.Millisecond,
			CloseTimeout: 100 * time.Millisecond, FlushInterval: time.Hour,
		})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	s.Violation(&detector.Violation{ID: "v1", Kind: detector.KindReplayedEvent, Severity: detector.SeverityCritical, Time: time.Now()})
	s.Flush()

	want := []string{
		"replaywatch_sink_rows_total", "replaywatch_sink_batches_total", "replaywatch_sink_retries_total",
		"replaywatch_sink_spool_corrupt_total", "replaywatch_sink_spool_bytes", "replaywatch_sink_spool_rows",
		"replaywatch_sink_spool_batches", "replaywatch_sink_spool_oldest_age_seconds",
	}
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fams = scrape(t, base)
		if len(minus(want, slices.Collect(maps.Keys(fams)))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("families %v, want at least %v", slices.Sorted(maps.Keys(fams)), want)
		}
	}
	for name := range fams {
		if !slices.Contains(MetricNames(), name) {
			t.Errorf("the sink shows %s, which MetricNames does not list", name)
		}
	}
	check(t, fams, 1, "replaywatch_sink_rows_total", "table", "violations", "result", "spooled")
	// The sender keeps retrying the spool's head, so these only grow.
	if n := series(t, fams, "replaywatch_sink_batches_total", "table", "violations", "result", "failed"); n < 2 {
		t.Errorf("failed batches %v, want at least 2 (an insert and its retry)", n)
	}
	if n := series(t, fams, "replaywatch_sink_retries_total", "table", "violations"); n < 1 {
		t.Errorf("retries %v, want at least 1", n)
	}
	check(t, fams, 1, "replaywatch_sink_spool_corrupt_total")
	check(t, fams, 1, "replaywatch_sink_spool_batches")
}

// TestKnownLabelValues: the kinds and outcomes exported as 0 before they
// happen are all those detector/records.go declares.
func TestKnownLabelValues(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "detector", "records.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string][]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			typ, ok := vs.Type.(*ast.Ident)
			if !ok {
				continue
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					declared[typ.Name] = append(declared[typ.Name], s)
				}
			}
		}
	}
	strs := func(v any) []string {
		var out []string
		switch v := v.(type) {
		case []detector.Kind:
			for _, k := range v {
				out = append(out, string(k))
			}
		case []detector.ResumeOutcome:
			for _, k := range v {
				out = append(out, string(k))
			}
		}
		slices.Sort(out)
		return out
	}
	for typ, known := range map[string][]string{"Kind": strs(violationKinds), "ResumeOutcome": strs(resumeOutcomes)} {
		d := slices.Sorted(slices.Values(declared[typ]))
		if !slices.Equal(d, known) {
			t.Errorf("detector declares %s %v; telemetry knows %v", typ, d, known)
		}
	}
	for _, k := range violationKinds {
		if detector.SeverityOf(k) == "" {
			t.Errorf("%s has no severity", k)
		}
	}
	if !slices.Contains(detectorLimits, "MaxSessions") || !slices.Contains(detectorLimits, "MaxLostSessions") {
		t.Errorf("detector limits %v", detectorLimits)
	}
}

// fakeClock is a settable clock for heartbeat tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newWithClock(t *testing.T, o Options) (*Telemetry, *fakeClock) {
	t.Helper()
	tel, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Close(context.Background()) })
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	tel.now = c.now
	return tel, c
}

func TestHealthz(t *testing.T) {
	tel, clock := newWithClock(t, Options{Node: "node-1", HeartbeatTimeout: 10 * time.Second})
	base := serve(t, tel)
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("no heartbeats yet: %d %q", code, body)
	}
	capture := tel.Heartbeat("capture", 0)
	detect := tel.Heartbeat("detector", time.Minute)
	clock.advance(5 * time.Second)
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("fresh heartbeats: %d %q", code, body)
	}
	clock.advance(6 * time.Second) // capture is 11 s old, over its 10 s
	code, body := get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || body != "unhealthy\nloop capture: no heartbeat for 11s (timeout 10s)\n" {
		t.Fatalf("stale capture loop: %d %q", code, body)
	}
	check(t, scrape(t, base), 11, "replaywatch_heartbeat_age_seconds", "loop", "capture")
	capture.Beat()
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("after a beat: %d %q", code, body)
	}
	clock.advance(2 * time.Minute)
	code, body = get(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "loop capture:") || !strings.Contains(body, "loop detector: no heartbeat for 2m11s (timeout 1m0s)") {
		t.Fatalf("both stale: %d %q", code, body)
	}
	capture.Stop()
	detect.Stop()
	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("loops stopped on purpose: %d %q", code, body)
	}
	if fams := scrape(t, base); fams["replaywatch_heartbeat_age_seconds"] != nil {
		t.Errorf("stopped heartbeats still exported")
	}
	// A real clock: a loop that stops beating turns /healthz to 503.
	tel.now = time.Now
	h := tel.Heartbeat("sink", 50*time.Millisecond)
	h.Beat()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, body := get(t, base+"/healthz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "loop sink: no heartbeat") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never unhealthy: %d %q", code, body)
		}
	}
}

func TestReadyz(t *testing.T) {
	tel, _ := newWithClock(t, Options{Node: "node-1"})
	base := serve(t, tel)
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || body != "not ready\nno readiness reported yet\n" {
		t.Fatalf("nothing declared: %d %q", code, body)
	}

	tel, clock := newWithClock(t, Options{Node: "node-1", ReadyConditions: []string{"sink", "capture"}})
	base = serve(t, tel)
	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready\ncapture: not reported yet\nsink: not reported yet\n" {
		t.Fatalf("declared: %d %q", code, body)
	}
	tel.Ready("capture")
	tel.NotReady("sink", "clickhouse 127.0.0.1:9000 unreachable and no spool")
	code, body = get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready\nsink: clickhouse 127.0.0.1:9000 unreachable and no spool\n" {
		t.Fatalf("sink down: %d %q", code, body)
	}
	fams := scrape(t, base)
	check(t, fams, 1, "replaywatch_ready", "condition", "capture")
	check(t, fams, 0, "replaywatch_ready", "condition", "sink")

	tel.Ready("sink")
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ok\n" {
		t.Fatalf("ready: %d %q", code, body)
	}
	check(t, scrape(t, base), 1, "replaywatch_ready", "condition", "sink")

	// A stuck loop makes the process unready too.
	tel.Heartbeat("capture", time.Second)
	clock.advance(2 * time.Second)
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "loop capture: no heartbeat") {
		t.Fatalf("stuck: %d %q", code, body)
	}
	resp, err := http.Post(base+"/readyz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz: %d", resp.StatusCode)
	}
}

func TestServe(t *testing.T) {
	tel, err := New(Options{Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close(context.Background())

	// A port already taken is a clear error at once.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	err = tel.Serve(context.Background(), taken.Addr().String())
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("Serve on a taken port: %v", err)
	}

	// Serve answers until ctx is cancelled, then returns nil.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tel.Serve(ctx, addr) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("/healthz: %d", resp.StatusCode)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Serve returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never came up: %v", err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}
}

func TestRegisterPipeline(t *testing.T) {
	tel, err := New(Options{Node: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close(context.Background())
	if _, err := tel.RegisterPipeline(PipelineSources{}); err == nil {
		t.Error("no sources: no error")
	}
	base := serve(t, tel)
	var packets atomic.Uint64
	packets.Store(5)
	reg, err := tel.RegisterPipeline(PipelineSources{Capture: func() capture.Stats { return capture.Stats{Packets: packets.Load()} }})
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, base)
	check(t, fams, 5, "replaywatch_capture_packets_total")
	for _, absent := range []string{"replaywatch_decode_http_exchanges_total", "replaywatch_capture_kernel_drops_total", "replaywatch_detector_sessions"} {
		if fams[absent] != nil {
			t.Errorf("%s exported without its source", absent)
		}
	}
	packets.Store(9)
	check(t, scrape(t, base), 9, "replaywatch_capture_packets_total")

	// A new pipeline replaces the old one after Unregister.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := tel.RegisterPipeline(PipelineSources{Capture: func() capture.Stats { return capture.Stats{Packets: 2} }}); err != nil {
		t.Fatal(err)
	}
	check(t, scrape(t, base), 2, "replaywatch_capture_packets_total")
}

func TestLatest(t *testing.T) {
	var l Latest[decode.Stats]
	if l.Load().HTTPExchanges != 0 {
		t.Error("zero value")
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 1000 {
			l.Store(decode.Stats{HTTPExchanges: int64(i)})
		}
	})
	for range 1000 {
		_ = l.Load()
	}
	wg.Wait()
	if got := l.Load().HTTPExchanges; got != 999 {
		t.Errorf("Load = %d", got)
	}
}

func ExampleMetricNames() {
	for _, n := range MetricNames()[:3] {
		fmt.Println(n)
	}
	// Output:
	// replaywatch_capture_bytes_total
	// replaywatch_capture_connections
	// replaywatch_capture_connections_opened_total
}
