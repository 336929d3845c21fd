package main

// go-sdk behind a compression middleware: bodies under Content-Encoding:
// gzip, which the decoder delimits but does not read. What needs the
// bodies becomes unverifiable; what the heads show is still found.

import (
	"compress/gzip"
	"context"
	"net/http"
	"strings"
)

func init() {
	register(
		scenario{name: "go-gzip-polling", desc: "go-priming-polling behind a gzip middleware: every SSE stream compressed, nothing flagged", run: runGoGzipPolling},
		scenario{name: "go-gzip-deploy-swap", desc: "the README sample's rolling deploy, the new backend compressing its responses: the swap is still found", run: runGoGzipDeploySwap},
	)
}

// gzipResponses compresses every response whose request accepts gzip (Go's
// client asks for it on its own), as a compression middleware or proxy in
// front of an MCP server does, flushing the compressor whenever the handler
// flushes so that SSE still streams.
func gzipResponses(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			h.ServeHTTP(w, r)
			return
		}
		gw := &gzipWriter{ResponseWriter: w}
		defer gw.close()
		h.ServeHTTP(gw, r)
	})
}

// gzipWriter starts compressing at the head, unless the response has no
// body (202, 204).
type gzipWriter struct {
	http.ResponseWriter
	gz *gzip.Writer
}

func (g *gzipWriter) WriteHeader(code int) {
	if code != http.StatusNoContent && code != http.StatusAccepted && code != http.StatusNotModified {
		g.Header().Del("Content-Length")
		g.Header().Set("Content-Encoding", "gzip")
		g.Header().Add("Vary", "Accept-Encoding")
		g.gz = gzip.NewWriter(g.ResponseWriter)
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *gzipWriter) Write(b []byte) (int, error) {
	if g.gz == nil {
		if g.Header().Get("Content-Encoding") == "" {
			g.WriteHeader(http.StatusOK)
		}
		if g.gz == nil {
			return g.ResponseWriter.Write(b)
		}
	}
	return g.gz.Write(b)
}

func (g *gzipWriter) Flush() {
	if g.gz != nil {
		_ = g.gz.Flush()
	}
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (g *gzipWriter) close() {
	if g.gz != nil {
		_ = g.gz.Close()
	}
}

func runGoGzipPolling(ctx context.Context, dir string) error {
	srv := newGoServer(toolSet{})
	return recordGo(dir, "go-gzip-polling", []http.Handler{gzipResponses(goHandler(srv, storeOpts()))}, pollingSession(ctx),
		"# go-priming-polling (go-sdk v1.8.0 client and server, 2025-11-25, MemoryEventStore, standalone GET)",
		"# behind a gzip middleware: Go's client sends Accept-Encoding: gzip, so every response with a body",
		"# (initialize's SSE stream, the standalone GET, tools/call stream and echo, the resumed stream) is",
		"# Content-Encoding: gzip, chunked; 202 and 204 are not. The server closes stream's SSE stream after",
		"# progress 2 (`event: close`, retry 150) and the client resumes from the last id it read. None of the",
		"# events, ids or responses can be read from the capture: no finding may rest on their absence. The",
		"# resume is unverifiable, the two calls' outcomes too (their answers were compressed), not unknown.",
		"expect violation count=0",
		"expect resume outcome=unverifiable count=1",
		"expect resume count=1",
		"expect unknown_outcome count=0",
		"expect unverifiable check=unknown_outcome count=2",
		"expect session ended=deleted count=1",
	)
}

func runGoGzipDeploySwap(ctx context.Context, dir string) error {
	release := make(chan struct{})
	defer close(release)
	old, permissive := swapBackends(release)
	return recordGo(dir, "go-gzip-deploy-swap", []http.Handler{old, gzipResponses(permissive)}, func(r *rig) error {
		return swapClient(ctx, r, permissive)
	},
		"# go-rolling-deploy-swap (the README sample), with the new backend B compressing its responses",
		"# (gzip, as a compression middleware does) and the old backend A not. On A: initialize (S1),",
		"# tools/call slow_write cut by the drain after W_2. On B, every body is compressed: the resume",
		"# (GET Last-Event-Id: W_2) is answered 200 with Mcp-Session-Id: S2, a fresh stream, gzip; the",
		"# retried slow_write's answer is gzip too. The swap is in the heads and is still found; the first",
		"# slow_write's outcome is unknown (its stream, on A, was read and cut); the retry's answer is not",
		"# read, so its outcome is unverifiable, never unknown.",
		"expect violation kind=session_swap last_event_id={cut} count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id={cut} count=1",
		"expect resume count=1",
		"expect unknown_outcome tool=slow_write count=1",
		"expect unknown_outcome count=1",
	)
}
