package pipeline

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/detector"
)

// discard is a sink of findings that keeps nothing.
type discard struct{}

func (discard) Violation(*detector.Violation)           {}
func (discard) Resume(*detector.ResumeAttempt)          {}
func (discard) Session(*detector.SessionSummary)        {}
func (discard) UnknownOutcome(*detector.UnknownOutcome) {}
func (discard) Unverifiable(*detector.Unverifiable)     {}

// FuzzAnalyzeFile feeds arbitrary bytes through the whole file path:
// capture, reassembly, HTTP/SSE decoding and the detector. Whatever the
// input, analysis returns (a result or a clear error) without panicking. The
// seeds are real SDK captures, so mutations explore damaged real traffic.
func FuzzAnalyzeFile(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "cmd", "replaywatch", "testdata", "fixtures", "*.pcap"))
	for _, s := range seeds {
		if data, err := os.ReadFile(s); err == nil && len(data) < 64<<10 {
			f.Add(data)
		}
	}
	f.Add([]byte{})
	f.Add([]byte("\xd4\xc3\xb2\xa1"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in.pcap")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Capture.Workers = 1
		s, err := Files(context.Background(), []string{path}, cfg, discard{})
		if err == nil && s == nil {
			t.Fatal("no summary and no error")
		}
	})
}

// FuzzSpanFile feeds arbitrary bytes through the offline spans path: OTLP
// JSON parsing, span reading, assembly and the detector. Whatever the
// input, the analysis returns a result or a clear error without panicking.
// The seeds are real emitters' shapes and a fixture's traffic as the
// guard's spans.
func FuzzSpanFile(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "capture", "otlp", "testdata", "emitters", "*.json"))
	for _, s := range seeds {
		if data, err := os.ReadFile(s); err == nil {
			f.Add(bytes.Join(bytes.Fields(data), []byte(" "))) // one export per line
		}
	}
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",` +
		`"kind":3,"startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"http.request.method","value":{"stringValue":"GET"}},` +
		`{"key":"http.response.status_code","value":{"intValue":"200"}},{"key":"mcp.sse.recorded","value":{"boolValue":true}},` +
		`{"key":"http.response.header.content-type","value":{"arrayValue":{"values":[{"stringValue":"text/event-stream"}]}}}],` +
		`"events":[{"name":"mcp.sse.event","attributes":[{"key":"mcp.sse.event.id","value":{"stringValue":"1"}}]}]}]}]}]}`))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Detect: detector.DefaultConfig()}
		s, err := SpanFiles(context.Background(), []string{path}, cfg, discard{})
		if err == nil && s == nil {
			t.Fatal("no summary and no error")
		}
	})
}
