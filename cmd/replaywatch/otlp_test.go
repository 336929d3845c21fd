package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/replaywatch/replaywatch/guard"
	"github.com/replaywatch/replaywatch/test/faultsrv"
	"github.com/replaywatch/replaywatch/test/pcaprec"
	"github.com/replaywatch/replaywatch/test/spanproj"
)

// TestOTLPMatchesPcap drives a real go-sdk client through a recording proxy
// against a real go-sdk server behind each fault of test/faultsrv (a cut
// tools/call stream resumed correctly, under another session, from a
// replayed cursor, renumbered, or answered 404). The client's HTTP goes
// through the guard in ObserveOnly mode, exporting its spans with the OTel
// Go SDK's OTLP exporters (gRPC for half the faults, HTTP for the others)
// to a real `replaywatch agent --interface none`, while the proxy records
// the same traffic to a pcap that `replaywatch analyze` reads. Both paths
// must report the same violations (kind and session), and each fault its
// own.
func TestOTLPMatchesPcap(t *testing.T) {
	bin := buildBinary(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	agent := &liveAgent{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	agent.cmd = exec.Command(bin, "agent", "--interface", "none", "--otlp-grpc", grpcAddr, "--otlp-http", httpAddr,
		"--format", "json", "--listen", "127.0.0.1:0", "--hash-key-file", filepath.Join(t.TempDir(), "key"))
	agent.cmd.Stdout, agent.cmd.Stderr = agent.stdout, agent.stderr
	if err := agent.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.cmd.Process.Kill() })
	waitForLog(t, agent.stderr, `"msg":"receiving OTLP traces"`)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pcap := filepath.Join(t.TempDir(), "faults.pcap")
	rec, err := pcaprec.Create(pcap)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		// A correct resume, a 404 and ids never seen (opaque: nothing to
		// order them by) prove nothing wrong.
		faultsrv.Correct: nil, faultsrv.NotFound: nil, faultsrv.ResetUnknown: nil,
		faultsrv.Swap: {"session_swap"}, faultsrv.Replay: {"replayed_event"},
		faultsrv.ReplayEarlier: {"replayed_event"}, faultsrv.ResetDelivered: {"event_id_reset"},
	}
	sessionOf := map[string]string{} // session id -> fault
	for i, fault := range faultsrv.All {
		var exp sdktrace.SpanExporter
		if i%2 == 0 {
			// gzip, as the Collector's otlp exporter sends by default: the
			// agent binary must register gRPC's decompressor itself.
			exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(grpcAddr), otlptracegrpc.WithInsecure(), otlptracegrpc.WithCompressor("gzip"))
		} else {
			exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(httpAddr), otlptracehttp.WithInsecure(), otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}
		if err != nil {
			t.Fatal(err)
		}
		open := &openSpans{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(open), sdktrace.WithBatcher(exp))
		srv := faultsrv.Start(fault)
		proxy, err := pcaprec.NewProxy(rec, func(int) string { return srv.Listener.Addr().String() }, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := &guard.Transport{Base: &http.Transport{}, ObserveOnly: true, TracerProvider: tp}
		hc := &http.Client{Transport: &sessionSpy{next: g, fault: fault, seen: sessionOf}}
		text, err := faultsrv.Call(ctx, proxy.URL("/mcp"), hc)
		t.Logf("%s: result %q, error %v", fault, text, err)
		proxy.Close()
		srv.Close()
		// A stream's span ends when its body is closed, which the SDK may
		// do after the call returned; a span not ended is never exported.
		if err := open.wait(10 * time.Second); err != nil {
			t.Fatalf("%s: %v", fault, err)
		}
		if err := tp.Shutdown(ctx); err != nil { // flushes the exporter
			t.Fatalf("%s: exporting spans: %v", fault, err)
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	spans := violationsBySession(t, agent.stop(t))
	out, _ := exec.Command(bin, "analyze", "--format", "json", pcap).Output()
	packets := violationsBySession(t, string(out))
	if !slices.Equal(spans, packets) {
		t.Errorf("spans and packets differ:\nspans:   %v\npackets: %v", spans, packets)
	}
	// Each fault's own findings, in its own session.
	got := map[string][]string{}
	for _, v := range packets {
		kind, session, _ := strings.Cut(v, " ")
		got[sessionOf[session]] = append(got[sessionOf[session]], kind)
	}
	for fault, kinds := range want {
		if !slices.Equal(slices.Compact(got[fault]), kinds) {
			t.Errorf("%s: violations %v, want %v", fault, got[fault], kinds)
		}
	}
	t.Logf("%d violations on both paths: %v", len(packets), packets)
}

// openSpans counts the spans started and not yet ended.
type openSpans struct{ n atomic.Int64 }

func (o *openSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) { o.n.Add(1) }
func (o *openSpans) OnEnd(sdktrace.ReadOnlySpan)                     { o.n.Add(-1) }
func (o *openSpans) Shutdown(context.Context) error                  { return nil }
func (o *openSpans) ForceFlush(context.Context) error                { return nil }

// wait returns once every span started has ended.
func (o *openSpans) wait(timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); o.n.Load() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d spans still open after %v: their streams were never closed", o.n.Load(), timeout)
		}
	}
	return nil
}

// violationsBySession is the "kind session" of every violation in JSON
// Lines, sorted.
func violationsBySession(t *testing.T, out string) []string {
	t.Helper()
	return violationKeys(t, out, "session_id")
}

// violationKeys is the "kind value" of every violation in JSON Lines, its
// value the record's field, sorted.
func violationKeys(t *testing.T, out, field string) []string {
	t.Helper()
	var keys []string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad JSON line %q: %v", line, err)
		}
		if r["type"] == "violation" {
			keys = append(keys, fmt.Sprintf("%v %v", r["kind"], r[field]))
		}
	}
	slices.Sort(keys)
	return keys
}

// sessionSpy notes which fault each session id the server minted belongs to.
type sessionSpy struct {
	next  http.RoundTripper
	fault string
	seen  map[string]string
}

var sessionHeader = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (s *sessionSpy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		for _, id := range []string{resp.Header.Get("Mcp-Session-Id"), r.Header.Get("Mcp-Session-Id")} {
			if id != "" && sessionHeader.MatchString(id) {
				s.seen[id] = s.fault
			}
		}
	}
	return resp, err
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestAnalyzeSpans runs `analyze --spans` on a fixture's traffic as the
// guard would have exported it (OTLP JSON lines): the same session swap as
// the capture, marked otlp; and the errors a user can make, each with its
// message and exit 2.
func TestAnalyzeSpans(t *testing.T) {
	bin := buildBinary(t)
	td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join(fixtureDir, "ts-session-swap.pcap")}, spanproj.Guard)
	if err != nil {
		t.Fatal(err)
	}
	spans := filepath.Join(t.TempDir(), "spans.json")
	if err := spanproj.WriteJSONLines(spans, td, 4); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "key")
	cmd := exec.Command(bin, "analyze", "--spans", "--format", "json", "--hash-key-file", key, spans)
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != exitViolations {
		t.Fatalf("exit %d (%v), want %d", code, err, exitViolations)
	}
	var summary map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		switch r["type"] {
		case "violation":
			if r["kind"] != "session_swap" || r["source"] != "otlp" {
				t.Errorf("violation %v %v from %v, want session_swap from otlp", r["kind"], r["session_id"], r["source"])
			}
		case "summary":
			summary = r
		}
	}
	if summary == nil || summary["spans"].(float64) != float64(td.SpanCount()) || summary["violations"].(float64) != 1 {
		t.Errorf("summary %v, want %d spans and 1 violation", summary, td.SpanCount())
	}

	notSpans := filepath.Join(t.TempDir(), "capture.json")
	if err := os.WriteFile(notSpans, []byte("{\"resourceSpans\": 7}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--spans", "-"}, "--spans reads files"},
		{[]string{"--spans", notSpans}, "not an OTLP JSON trace export"},
		{[]string{"--spans", filepath.Join(t.TempDir(), "missing.json")}, "no such file"},
		{[]string{"--spans", samplePcap}, "a packet capture, not OTLP JSON: analyse it without --spans"},
	} {
		cmd := exec.Command(bin, append([]string{"analyze", "--hash-key-file", key}, tc.args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != exitError || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("analyze %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), exitError, tc.want)
		}
	}
}
