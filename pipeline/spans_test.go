package pipeline

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/sink"
	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/test/spanproj"
)

// spansJSON runs the offline spans pipeline over OTLP JSON files and
// returns its records.
func spansJSON(t *testing.T, files ...string) []map[string]any {
	t.Helper()
	cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
	return recordsOf(t, files, func(w *jsonl.Writer) (*sink.Summary, error) {
		return SpanFiles(context.Background(), files, cfg, w)
	})
}

// findingKeys are a run's violations as "kind session", sorted, with
// duplicates (one per occurrence).
func findingKeys(recs []map[string]any) []string {
	var keys []string
	for _, r := range recs {
		if r["type"] == "violation" {
			keys = append(keys, fmt.Sprintf("%v %v", r["kind"], r["session_id"]))
		}
	}
	slices.Sort(keys)
	return keys
}

// missing is what of want is not in got (as multisets).
func missing(want, got []string) []string {
	left := map[string]int{}
	for _, k := range got {
		left[k]++
	}
	var out []string
	for _, k := range want {
		if left[k] > 0 {
			left[k]--
			continue
		}
		out = append(out, k)
	}
	return out
}

// restsOnAbsence are the kinds whose proof includes something never having
// been seen: an event id the session never issued; for a re-initialisation
// that re-runs a call, a tools/list answer that would have annotated the
// tool read-only; for a stream ended before its answer, the client's
// cancellation of the call or DELETE of the session; for a resume from an
// id cut mid-event, a replay that delivered it whole; for progress that
// went back, a second request re-using the token. Spans can be lost
// without a trace (an exporter's queue overflows), so the spans path
// reports these unverifiable (detector.Config.PartialHistory).
var restsOnAbsence = map[string]bool{"unknown_last_event_id_accepted": true, "silent_reinit_after_404": true, "unresumable_close": true, "truncated_resume": true, "progress_replay": true}

// TestSpansNeverSeeMoreThanPackets projects every fixture capture onto the
// spans an instrumented client would have exported for the same traffic
// and analyses them through the OTLP path: spans shaped as the guard
// records them (headers, requests, SSE events) and as an HTTP client or
// server instrumentation with header capture (headers only: a server span
// carries the peer's address). Spans may see less
// than packets (a span shows no connection, and headers alone show no
// events), never more: no finding the packets do not prove. With every
// event recorded, the findings a span can show are those of the packets.
func TestSpansNeverSeeMoreThanPackets(t *testing.T) {
	pcaps, err := filepath.Glob(filepath.Join("testdata", "fixtures", "*.pcap"))
	if err != nil || len(pcaps) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	recall := map[spanproj.Shape][2]int{}
	for _, pcap := range pcaps {
		name := strings.TrimSuffix(filepath.Base(pcap), ".pcap")
		want := findingKeys(analyzeJSON(t, pcap))
		for _, shape := range []spanproj.Shape{spanproj.Guard, spanproj.Headers, spanproj.ServerHeaders} {
			td, err := spanproj.FromPcap(context.Background(), []string{pcap}, shape)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), name+".json")
			if err := spanproj.WriteJSONLines(file, td, 7); err != nil {
				t.Fatal(err)
			}
			got := findingKeys(spansJSON(t, file))
			if extra := missing(got, want); len(extra) > 0 {
				t.Errorf("%s as %s spans: findings the packets do not show: %v", name, shape, extra)
			}
			lost := missing(want, got)
			r := recall[shape]
			r[0] += len(want) - len(lost)
			r[1] += len(want)
			recall[shape] = r
			if len(lost) > 0 {
				t.Logf("%s as %s spans: not seen: %v", name, shape, lost)
			}
			if shape != spanproj.Guard {
				continue
			}
			for _, f := range lost {
				if kind, _, _ := strings.Cut(f, " "); !restsOnAbsence[kind] {
					t.Errorf("%s as %s spans: %s not seen, though the spans record every event", name, shape, f)
				}
			}
		}
	}
	for shape, r := range recall {
		t.Logf("%s spans find %d of the %d findings packets find", shape, r[0], r[1])
	}
}

// spanFindings writes td as an OTLP JSON file and returns the spans
// pipeline's violations.
func spanFindings(t *testing.T, name string, td ptrace.Traces) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".json")
	if err := spanproj.WriteJSONLines(file, td, 7); err != nil {
		t.Fatal(err)
	}
	return findingKeys(spansJSON(t, file))
}

// TestDamagedSpansNeverGainFindings sends every fixture's guard-shaped
// spans through what goes wrong between an emitter and a receiver: spans
// lost, sent twice (a retried export), delayed past the reorder window,
// and cut by an SDK's event limit. The findings may shrink, never grow.
func TestDamagedSpansNeverGainFindings(t *testing.T) {
	pcaps, _ := filepath.Glob(filepath.Join("testdata", "fixtures", "*.pcap"))
	damages := []struct {
		name string
		f    func(ptrace.Traces) ptrace.Traces
	}{
		{"drop-every-5th", func(td ptrace.Traces) ptrace.Traces { return spanproj.Drop(td, 5) }},
		{"drop-every-2nd", func(td ptrace.Traces) ptrace.Traces { return spanproj.Drop(td, 2) }},
		{"duplicate-every-3rd", func(td ptrace.Traces) ptrace.Traces { return spanproj.Duplicate(td, 3) }},
		{"duplicate-all", func(td ptrace.Traces) ptrace.Traces { return spanproj.Duplicate(td, 1) }},
		{"delay-every-4th", func(td ptrace.Traces) ptrace.Traces { return spanproj.Delay(td, 4, 25) }},
		{"events-capped-at-3", func(td ptrace.Traces) ptrace.Traces { return spanproj.CapEvents(td, 3) }},
	}
	lost := map[string][2]int{}
	for _, pcap := range pcaps {
		name := strings.TrimSuffix(filepath.Base(pcap), ".pcap")
		td, err := spanproj.FromPcap(context.Background(), []string{pcap}, spanproj.Guard)
		if err != nil {
			t.Fatal(err)
		}
		clean := spanFindings(t, name, td)
		for _, d := range damages {
			got := spanFindings(t, name+"-"+d.name, d.f(td))
			if extra := missing(got, clean); len(extra) > 0 {
				t.Errorf("%s, %s: findings the undamaged spans do not show: %v", name, d.name, extra)
			}
			n := lost[d.name]
			n[0] += len(clean) - len(missing(clean, got))
			n[1] += len(clean)
			lost[d.name] = n
		}
	}
	for _, d := range damages {
		t.Logf("%s: %d of %d findings kept", d.name, lost[d.name][0], lost[d.name][1])
	}
}

// TestCrowdedSpansGainNothing merges every fixture's guard-shaped spans
// into one client process reaching one endpoint, started together or
// staggered: the findings of the crowd are at most those of each fixture
// alone (a span carries no connection, so linking a client across
// sessions has less to go on than in packets: it may give up, never
// accuse another client).
func TestCrowdedSpansGainNothing(t *testing.T) {
	pcaps, _ := filepath.Glob(filepath.Join("testdata", "fixtures", "*.pcap"))
	var alone []string
	var tds []ptrace.Traces
	for _, pcap := range pcaps {
		td, err := spanproj.FromPcap(context.Background(), []string{pcap}, spanproj.Guard)
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, spanFindings(t, filepath.Base(pcap), td)...)
		tds = append(tds, td)
	}
	slices.Sort(alone)
	base := spanproj.Start(tds[0])
	for _, stagger := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond} {
		var shifted []ptrace.Traces
		for i, td := range tds {
			shifted = append(shifted, spanproj.Shift(td, base.Add(time.Duration(i)*stagger).Sub(spanproj.Start(td))))
		}
		got := spanFindings(t, "crowd", spanproj.OneEndpoint(spanproj.Merge(shifted...)))
		if extra := missing(got, alone); len(extra) > 0 {
			t.Errorf("stagger %v: findings the fixtures alone do not show: %v", stagger, extra)
		}
		t.Logf("stagger %v: %d of %d findings kept", stagger, len(alone)-len(missing(alone, got)), len(alone))
	}
}

// TestSpansPipelineLive runs the agent's spans pipeline: a fixture's
// traffic as the guard's spans, exported by the OTel Go SDK's gRPC exporter
// while metrics are read as a scrape would, then Close releases every span
// to the detector. (Under -race in scripts/test.sh: the assembler's
// counters are read from another goroutine than the one that joins.)
func TestSpansPipelineLive(t *testing.T) {
	td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join("testdata", "fixtures", "ts-session-swap.pcap")}, spanproj.Guard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := jsonl.New(&out)
	cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
	cfg.OTLP.GRPCAddr = "127.0.0.1:0"
	s, err := NewSpans(cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	scraped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				scraped <- n
				return
			default:
				_ = s.AssemblerStats()
				_ = s.DetectorStats()
				n++
				time.Sleep(time.Millisecond)
			}
		}
	}()
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(s.GRPCAddr()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range spanproj.Split(td, 3) {
		if err := exp.ExportSpans(ctx, spanproj.SDKSpans(part)); err != nil {
			t.Fatal(err)
		}
	}
	exp.Shutdown(ctx)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-scraped
	w.Flush()
	st := s.AssemblerStats()
	if st.Spans != uint64(td.SpanCount()) || st.HTTPSpans != uint64(td.SpanCount()) || st.Buffered != 0 || st.Pending != 0 {
		t.Errorf("assembler stats %+v, want all %d spans received, joined and released", st, td.SpanCount())
	}
	if d := s.DetectorStats(); d.Violations["session_swap"] != 1 || !strings.Contains(out.String(), `"source":"otlp"`) {
		t.Errorf("detector: %v violations; output:\n%s", d.Violations, out.String())
	}
}

// TestSpansPipelineExpiresSessions: on quiet input the agent's spans
// detector still moves its clock, so idle sessions are summarised as
// expired while the agent runs, not only when it stops.
func TestSpansPipelineExpiresSessions(t *testing.T) {
	cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
	cfg.OTLP.GRPCAddr = "127.0.0.1:0"
	cfg.OTLP.SettleDelay, cfg.OTLP.ReorderWindow = 0, 0
	cfg.Detect.SessionIdleTimeout = time.Second
	s, err := NewSpans(cfg, discard{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join("testdata", "fixtures", "ts-session-swap.pcap")}, spanproj.Guard)
	if err != nil {
		t.Fatal(err)
	}
	// The capture's traffic (its sessions are never deleted) as if it happened a moment ago.
	td = spanproj.Shift(td, time.Since(spanproj.Start(td)))
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(s.GRPCAddr()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(ctx, spanproj.SDKSpans(td)); err != nil {
		t.Fatal(err)
	}
	exp.Shutdown(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := s.DetectorStats()
		if d.SessionsSeen > 0 && d.SessionsActive == 0 && d.SessionsEnded["expired"] == d.SessionsSeen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions still open 10 s after the last span (idle timeout 1 s): %+v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSpanFileReportsWhatEarlyReleasesCost: a span file whose second
// client's spans are an hour older than the first's. Behind the default
// reorder window they are late, which is no limit's doing; with a window
// of one observation the first client's observations leave early, and
// the older ones late behind them are that limit's hits, in the summary.
// Either way nothing is found that the two clients alone do not show.
func TestSpanFileReportsWhatEarlyReleasesCost(t *testing.T) {
	var alone []string
	var tds []ptrace.Traces
	for _, name := range []string{"ts-session-swap", "go-replayed-event"} {
		td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join("testdata", "fixtures", name+".pcap")}, spanproj.Guard)
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, spanFindings(t, name, td)...)
		tds = append(tds, td)
	}
	slices.Sort(alone)
	both := ptrace.NewTraces()
	tds[0].ResourceSpans().MoveAndAppendTo(both.ResourceSpans())
	spanproj.Shift(tds[1], spanproj.Start(tds[0]).Add(-time.Hour).Sub(spanproj.Start(tds[1]))).ResourceSpans().MoveAndAppendTo(both.ResourceSpans())
	file := filepath.Join(t.TempDir(), "older-second.json")
	if err := spanproj.WriteJSONLines(file, both, 7); err != nil {
		t.Fatal(err)
	}
	for _, window := range []int{otlp.DefaultMaxBufferedObservations, 1} {
		cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
		cfg.OTLP.MaxBufferedObservations = window
		recs := recordsOf(t, []string{file}, func(w *jsonl.Writer) (*sink.Summary, error) {
			return SpanFiles(context.Background(), []string{file}, cfg, w)
		})
		hits := 0.0
		for _, r := range recs {
			if r["type"] == "summary" {
				hits, _ = r["limits_hit"].(map[string]any)["otlp.MaxBufferedObservations"].(float64)
			}
		}
		if (hits > 0) != (window == 1) {
			t.Errorf("window %d: %v hits of otlp.MaxBufferedObservations in the summary; want some only with a window of 1", window, hits)
		}
		if extra := missing(findingKeys(recs), alone); len(extra) > 0 {
			t.Errorf("window %d: findings the clients alone do not show: %v", window, extra)
		}
	}
}

// TestSpanFilesMergedByTime: the spans of one traffic written to two files
// (two collectors, each exporting every other trace, over the same half
// hour) are the traffic of the one file. Read one file after the other,
// the second file's spans reached the detector twenty minutes late and
// lost their findings.
func TestSpanFilesMergedByTime(t *testing.T) {
	pcaps, _ := filepath.Glob(filepath.Join("testdata", "fixtures", "*.pcap"))
	for _, pcap := range pcaps {
		name := strings.TrimSuffix(filepath.Base(pcap), ".pcap")
		td, err := spanproj.FromPcap(context.Background(), []string{pcap}, spanproj.Guard)
		if err != nil {
			t.Fatal(err)
		}
		td = spanproj.Merge(td, spanproj.Shift(spanproj.Renumber(td, 1), 10*time.Minute),
			spanproj.Shift(spanproj.Renumber(td, 2), 20*time.Minute))
		halves := [2]ptrace.Traces{ptrace.NewTraces(), ptrace.NewTraces()}
		for i, trace := range spanproj.Split(td, 1) {
			trace.ResourceSpans().MoveAndAppendTo(halves[i%2].ResourceSpans())
		}
		dir := t.TempDir()
		paths := []string{filepath.Join(dir, "whole.json"), filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")}
		for i, part := range []ptrace.Traces{td, halves[0], halves[1]} {
			if err := spanproj.WriteJSONLines(paths[i], part, 7); err != nil {
				t.Fatal(err)
			}
		}
		want := findingKeys(spansJSON(t, paths[0]))
		got := findingKeys(spansJSON(t, paths[1:]...))
		if extra := missing(got, want); len(extra) > 0 {
			t.Errorf("%s in two files: findings the one file does not show: %v", name, extra)
		}
		if lost := missing(want, got); len(lost) > 0 {
			t.Errorf("%s in two files: lost %v", name, lost)
		}
	}
}

// TestSpanFilesInputProblems: a span file that cannot be read (missing, a
// directory, not OTLP JSON from its first line) is an error before
// anything is analysed, as a capture is: a report of the other files
// would pass for the whole. A bad line after good ones (an exporter cut
// by a crash) is skipped and named, and the lines after it are read. A
// gzip-compressed file is read as it is; a zstd one is named as such.
func TestSpanFilesInputProblems(t *testing.T) {
	td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join("testdata", "fixtures", "ts-session-swap.pcap")}, spanproj.Guard)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := spanproj.WriteJSONLines(good, td, 1); err != nil {
		t.Fatal(err)
	}
	want := findingKeys(spansJSON(t, good))
	if len(want) == 0 {
		t.Fatal("the fixture's spans show no violation")
	}
	lines, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := bytes.Cut(lines, []byte("\n"))
	cut := filepath.Join(dir, "cut.json")
	garbage := filepath.Join(dir, "garbage.json")
	zstd := filepath.Join(dir, "spans.json.zst")
	gzipped := filepath.Join(dir, "spans.json.gz")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(lines)
	zw.Close()
	for file, body := range map[string][]byte{
		cut:     slices.Concat(first, []byte("\n{\"resourceSpans\": [{\"res\n"), rest),
		garbage: []byte("not json\n"),
		zstd:    []byte("\x28\xb5\x2f\xfd rest of a frame"),
		gzipped: gz.Bytes(),
	} {
		if err := os.WriteFile(file, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
	for _, bad := range []string{filepath.Join(dir, "missing.json"), dir, garbage, zstd} {
		if s, err := SpanFiles(context.Background(), []string{good, bad}, cfg, jsonl.New(io.Discard)); err == nil {
			t.Errorf("%s beside a good file: no error (summary errors %q)", bad, s.Errors)
		} else if bad == zstd && !strings.Contains(err.Error(), "zstd-compressed") {
			t.Errorf("a zstd file: %v", err)
		}
	}
	if got := findingKeys(spansJSON(t, gzipped)); !slices.Equal(got, want) {
		t.Errorf("gzip-compressed: %v, want %v", got, want)
	}
	recs := recordsOf(t, []string{cut}, func(w *jsonl.Writer) (*sink.Summary, error) {
		return SpanFiles(context.Background(), []string{cut}, cfg, w)
	})
	if lost := missing(want, findingKeys(recs)); len(lost) > 0 {
		t.Errorf("a bad second line lost the findings of the lines after it: %v", lost)
	}
	if errs := fmt.Sprint(recs[len(recs)-1]["errors"]); !strings.Contains(errs, "cut.json:2: not an OTLP JSON trace export, skipped") {
		t.Errorf("the summary's errors %s do not name the bad line", errs)
	}
}

// TestSpanFilesStoppedReportWhatWasRead: a run of span files stopped (a
// signal cancels its context) ends with a summary of what was read and the
// stop among its errors, as a run of captures does, not with no report.
func TestSpanFilesStoppedReportWhatWasRead(t *testing.T) {
	td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join("testdata", "fixtures", "ts-session-swap.pcap")}, spanproj.Guard)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "spans.json")
	if err := spanproj.WriteJSONLines(file, td, 7); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
	s, err := SpanFiles(ctx, []string{file, file}, cfg, jsonl.New(io.Discard))
	if err != nil || s == nil {
		t.Fatalf("stopped: summary %v, error %v; want a summary", s, err)
	}
	if !slices.ContainsFunc(s.Errors, func(e string) bool { return strings.Contains(e, context.Canceled.Error()) }) {
		t.Errorf("the summary's errors %q do not say the run was stopped", s.Errors)
	}
}

// TestSpansCloseAcknowledgesNothingItLoses: an OTLP/HTTP export whose body
// is still arriving when Close's deadline passes is not answered 200 after
// the buffer was flushed (its spans would never reach the detector): it is
// refused as retryable, or its connection closed, so the exporter sends it
// again.
func TestSpansCloseAcknowledgesNothingItLoses(t *testing.T) {
	td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join("testdata", "fixtures", "ts-session-swap.pcap")}, spanproj.Guard)
	if err != nil {
		t.Fatal(err)
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
	cfg.OTLP.HTTPAddr = "127.0.0.1:0"
	s, err := NewSpans(cfg, jsonl.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n", otlp.TracesPath, len(body))
	half := len(body) / 2
	if _, err := conn.Write(body[:half]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the handler is reading the body
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s.Close(ctx) // the deadline passes with the export half read
	conn.Write(body[half:])
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil && resp.StatusCode == http.StatusOK {
		t.Fatalf("the export was answered 200 after Close flushed the buffer: %d spans held, never judged", s.AssemblerStats().Buffered)
	}
	if err == nil {
		t.Logf("answered %s", resp.Status)
	} else {
		t.Logf("connection closed: %v", err)
	}
}
