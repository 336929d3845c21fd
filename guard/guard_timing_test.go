package guard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// sseEvents is a stream of n progress events, as a long tool call sends.
func sseEvents(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "id: s_%d\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":%d}}\n\n", i, i)
	}
	return b.String()
}

// BenchmarkStream reads a 1,000-event SSE response of a session through
// the bare transport, through the guard, and through the guard with spans
// (an SDK TracerProvider keeping every event, exporting to nowhere): the
// differences are the guard's cost per event (SSE parsing, the
// delivered-id set, the token) and the spans' (peeking every event, one
// span event each).
//
//	go test -run '^$' -bench BenchmarkStream -benchtime 2s -count 3 ./guard
func BenchmarkStream(b *testing.B) {
	const events = 1000
	body := sseEvents(events)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{EventCountLimit: 2 * events, AttributeCountLimit: 128,
			AttributeValueLengthLimit: -1, AttributePerEventCountLimit: 128, AttributePerLinkCountLimit: 128, LinkCountLimit: 128}))
	defer tp.Shutdown(context.Background())
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", http.DefaultTransport},
		{"guard", New(http.DefaultTransport)},
		{"guard+spans", &Transport{TracerProvider: tp}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("Mcp-Session-Id", "S")
				resp, err := tc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != int64(len(body)) {
					b.Fatalf("%d bytes, %v", n, err)
				}
				resp.Body.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}
