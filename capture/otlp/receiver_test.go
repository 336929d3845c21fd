package otlp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/spanproj"
)

// emitterTraces is one of testdata/emitters' exports.
func emitterTraces(t testing.TB, name string) ptrace.Traces {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "emitters", name))
	if err != nil {
		t.Fatal(err)
	}
	td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(b)
	if err != nil {
		t.Fatal(err)
	}
	return td
}

// listen starts a receiver on loopback for cfg, with an assembler that
// keeps every observation.
func listen(t *testing.T, cfg otlp.Config) (*otlp.Receiver, *otlp.Assembler) {
	t.Helper()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	asm := otlp.NewAssembler(cfg, nil, func(*decode.Observation) {})
	r, err := otlp.Listen(cfg, asm)
	if err != nil {
		t.Fatal(err)
	}
	r.Serve()
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return r, asm
}

// TestReceiverTakesRealExporters: the OpenTelemetry Go SDK's gRPC and HTTP
// exporters, and a JSON body as the Collector's otlphttp exporter may
// send it (gzip), all land in the assembler.
func TestReceiverTakesRealExporters(t *testing.T) {
	r, asm := listen(t, otlp.DefaultConfig())
	ctx := context.Background()
	td := emitterTraces(t, "otelhttp.json")
	spans := spanproj.SDKSpans(td)

	grpcExp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.GRPCAddr()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	httpExp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure(),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	for _, exp := range []sdktrace.SpanExporter{grpcExp, httpExp} {
		if err := exp.ExportSpans(ctx, spans); err != nil {
			t.Fatalf("%T: %v", exp, err)
		}
		exp.Shutdown(ctx)
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, r.HTTPAddr(), "application/json", "gzip", gzipped(body))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("JSON export: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	if got, want := asm.Stats().Spans, uint64(3*td.SpanCount()); got != want {
		t.Errorf("%d spans received, want %d", got, want)
	}
	// The same spans three times: the second and third copies are the
	// first's ids again, dropped as retries.
	if st := asm.Stats(); st.Duplicates != uint64(2*td.SpanCount()) {
		t.Errorf("%d duplicates, want %d", st.Duplicates, 2*td.SpanCount())
	}
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func post(t *testing.T, addr, contentType, encoding string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+otlp.TracesPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// statusOf decodes a failed answer's google.rpc.Status in the encoding its
// Content-Type names.
func statusOf(resp *http.Response) (*spb.Status, error) {
	b, _ := io.ReadAll(resp.Body)
	st := &spb.Status{}
	switch ct := resp.Header.Get("Content-Type"); ct {
	case "application/json":
		return st, protojson.Unmarshal(b, st)
	case "application/x-protobuf":
		return st, proto.Unmarshal(b, st)
	default:
		return nil, fmt.Errorf("Content-Type %q", ct)
	}
}

// TestReceiverRefusesBadInput: what is not an OTLP export gets the HTTP
// status that says why, and nothing reaches the assembler.
func TestReceiverRefusesBadInput(t *testing.T) {
	r, asm := listen(t, otlp.DefaultConfig())
	huge := bytes.Repeat([]byte{'x'}, otlp.MaxRequestBytes+1)
	for _, tc := range []struct {
		name, contentType, encoding string
		body                        []byte
		want                        int
	}{
		{"text body", "text/plain", "", []byte("hello"), http.StatusUnsupportedMediaType},
		{"unknown encoding", "application/json", "br", []byte("{}"), http.StatusUnsupportedMediaType},
		{"garbage protobuf", "application/x-protobuf", "", []byte{0xff, 0xff, 0xff, 0x0f}, http.StatusBadRequest},
		{"garbage JSON", "application/json", "", []byte(`{"resourceSpans": 7}`), http.StatusBadRequest},
		{"not gzip", "application/json", "gzip", []byte("{}"), http.StatusBadRequest},
		{"gzip cut short", "application/x-protobuf", "gzip", gzipped(huge)[:200], http.StatusBadRequest},
		{"gzip corrupt", "application/json", "gzip", corrupt(gzipped([]byte("{}"))), http.StatusBadRequest},
		{"over MaxRequestBytes", "application/x-protobuf", "", huge, http.StatusRequestEntityTooLarge},
		{"over MaxRequestBytes once unzipped", "application/x-protobuf", "gzip", gzipped(huge), http.StatusRequestEntityTooLarge},
	} {
		resp := post(t, r.HTTPAddr(), tc.contentType, tc.encoding, tc.body)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
		// OTLP/HTTP: the body is a google.rpc.Status in the request's
		// encoding (protobuf when it named neither).
		if st, err := statusOf(resp); err != nil || st.GetMessage() == "" {
			t.Errorf("%s: the answer's body is no Status: %v %v", tc.name, st, err)
		} else if want := tc.contentType; want == "application/json" && resp.Header.Get("Content-Type") != want {
			t.Errorf("%s: a JSON request answered in %s", tc.name, resp.Header.Get("Content-Type"))
		}
	}
	resp, err := http.Get("http://" + r.HTTPAddr() + otlp.TracesPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %s, want 405", resp.Status)
	}
	if st := asm.Stats(); st.Spans != 0 {
		t.Errorf("%d spans taken from bad input", st.Spans)
	}
}

// TestBackpressure: a full buffer refuses exports with OTLP's retryable
// answers (gRPC UNAVAILABLE with a retry delay, HTTP 503 with
// Retry-After), and a real exporter that keeps retrying delivers every
// span once the buffer drains: nothing is lost.
func TestBackpressure(t *testing.T) {
	cfg := otlp.DefaultConfig()
	cfg.SettleDelay, cfg.ReorderWindow = 0, 0
	td := emitterTraces(t, "obi.json")
	cfg.MaxBufferedSpans = td.SpanCount()
	r, asm := listen(t, cfg)
	ctx := context.Background()
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	if _, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
		t.Fatalf("first export: %v", err)
	}
	_, err = client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(emitterTraces(t, "csharp.json")))
	st, _ := status.FromError(err)
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if st.Code() != codes.Unavailable || delay != otlp.RetryAfter {
		t.Fatalf("export into a full buffer: %v (retry delay %v), want UNAVAILABLE with a retry delay of %v", err, delay, otlp.RetryAfter)
	}
	body, _ := ptraceotlp.NewExportRequestFromTraces(emitterTraces(t, "csharp.json")).MarshalProto()
	if resp := post(t, r.HTTPAddr(), "application/x-protobuf", "", body); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("HTTP export into a full buffer: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}

	// The SDK's exporter retries UNAVAILABLE; the buffer drains meanwhile.
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.GRPCAddr()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	more := emitterTraces(t, "otelhttp.json")
	done := make(chan error, 1)
	go func() { done <- exp.ExportSpans(ctx, spanproj.SDKSpans(more)) }()
	time.Sleep(300 * time.Millisecond) // refused at least once
	asm.Advance(time.Now().Add(time.Hour))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the retried export failed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the retried export never got through")
	}
	s := asm.Stats()
	if s.Refused == 0 || s.Spans != uint64(td.SpanCount()+more.SpanCount()) {
		t.Errorf("stats %+v: want refusals, and every span of both accepted exports received", s)
	}
	if !strings.Contains(otlp.ErrFull.Error(), "MaxBufferedSpans") {
		t.Errorf("ErrFull does not name its limit: %v", otlp.ErrFull)
	}
}

// corrupt flips a byte in the middle of b's deflate data.
func corrupt(b []byte) []byte {
	b = bytes.Clone(b)
	b[12] ^= 0xff
	return b
}

// TestSpansWithoutIDsAreRejected: spans without a trace or span id, which
// OTLP requires, are rejected in the answer's partial success (HTTP and
// gRPC), never buffered, and never taken for one another as duplicates; the
// valid span of the same export is taken.
func TestSpansWithoutIDsAreRejected(t *testing.T) {
	r, asm := listen(t, otlp.DefaultConfig())
	export := func() ptrace.Traces {
		td := ptrace.NewTraces()
		spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
		for i, ids := range []struct {
			trace pcommon.TraceID
			span  pcommon.SpanID
		}{{}, {trace: pcommon.TraceID{1}}, {trace: pcommon.TraceID{2}, span: pcommon.SpanID{2}}} {
			sp := spans.AppendEmpty()
			sp.SetName(fmt.Sprint("span ", i))
			sp.SetTraceID(ids.trace)
			sp.SetSpanID(ids.span)
		}
		return td
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(export()).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, r.HTTPAddr(), "application/x-protobuf", "", body)
	answer := ptraceotlp.NewExportResponse()
	b, _ := io.ReadAll(resp.Body)
	if err := answer.UnmarshalProto(b); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP: %s, %v", resp.Status, err)
	}
	if got := answer.PartialSuccess().RejectedSpans(); got != 2 {
		t.Errorf("HTTP: partial success rejects %d spans, want 2", got)
	}
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ganswer, err := ptraceotlp.NewGRPCClient(conn).Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(export()))
	if err != nil || ganswer.PartialSuccess().RejectedSpans() != 2 {
		t.Errorf("gRPC: %v, partial success rejects %d spans, want 2", err, ganswer.PartialSuccess().RejectedSpans())
	}
	if st := asm.Stats(); st.Invalid != 4 || st.Duplicates != 1 || st.Buffered != 1 {
		t.Errorf("stats %+v: want 4 invalid, the valid span once buffered and once a duplicate", st)
	}
}
