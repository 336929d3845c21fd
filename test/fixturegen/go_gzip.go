package main

// go-sdk behind a compression middleware. gzip (what Go's client asks for
// on its own) is inflated by the decoder and everything is read; brotli is
// not read, so what needs the bodies becomes unverifiable while what the
// heads show is still found.

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
)

func init() {
	register(
		scenario{name: "go-gzip-polling", desc: "go-priming-polling behind a gzip middleware: every body compressed, all of it read", run: runGoGzipPolling},
		scenario{name: "go-gzip-deploy-swap", desc: "the README sample's rolling deploy, the new backend gzipping its responses: the same findings", run: runGoGzipDeploySwap},
		scenario{name: "go-brotli-polling", desc: "go-priming-polling with brotli on every body, which the decoder does not read: nothing flagged", run: runGoBrotliPolling},
		scenario{name: "go-brotli-deploy-swap", desc: "the README sample's rolling deploy, the new backend answering in brotli: the swap is still found", run: runGoBrotliDeploySwap},
	)
}

// compressor is what gzip.Writer and brotli.Writer have in common.
type compressor interface {
	io.Writer
	Flush() error
	Close() error
}

// codingWriters make the compressors of the codings the middleware serves.
var codingWriters = map[string]func(io.Writer) compressor{
	"gzip": func(w io.Writer) compressor { return gzip.NewWriter(w) },
	"br":   func(w io.Writer) compressor { return brotli.NewWriter(w) },
}

// compressResponses compresses every response with a body in coding when
// the request accepts it, as a compression middleware or proxy in front of
// an MCP server does, flushing the compressor whenever the handler flushes
// so that SSE still streams.
func compressResponses(coding string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), coding) {
			h.ServeHTTP(w, r)
			return
		}
		cw := &compressingWriter{ResponseWriter: w, coding: coding}
		defer cw.close()
		h.ServeHTTP(cw, r)
	})
}

// compressingWriter starts compressing at the head, unless the response
// has no body (202, 204, 304).
type compressingWriter struct {
	http.ResponseWriter
	coding      string
	z           compressor
	wroteHeader bool
}

func (c *compressingWriter) WriteHeader(code int) {
	if c.wroteHeader {
		return
	}
	c.wroteHeader = true
	if code != http.StatusNoContent && code != http.StatusAccepted && code != http.StatusNotModified {
		c.Header().Del("Content-Length")
		c.Header().Set("Content-Encoding", c.coding)
		c.Header().Add("Vary", "Accept-Encoding")
		c.z = codingWriters[c.coding](c.ResponseWriter)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *compressingWriter) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if c.z == nil {
		return c.ResponseWriter.Write(b)
	}
	return c.z.Write(b)
}

func (c *compressingWriter) Flush() {
	if c.z != nil {
		_ = c.z.Flush()
	}
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *compressingWriter) close() {
	if c.z != nil {
		_ = c.z.Close()
	}
}

// acceptBrotli is the client side of brotli: it asks for br and decodes
// it, as a client whose HTTP stack speaks br does.
func acceptBrotli(base http.RoundTripper) http.RoundTripper { return brotliTransport{base} }

type brotliTransport struct{ base http.RoundTripper }

func (t brotliTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Accept-Encoding", "br")
	resp, err := t.base.RoundTrip(r)
	if err == nil && resp.Header.Get("Content-Encoding") == "br" {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{brotli.NewReader(resp.Body), resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.ContentLength = -1
	}
	return resp, err
}

// CloseIdleConnections passes http.Client.CloseIdleConnections on: a
// drain (go_deploy.go) closes the client's idle connections to the old
// backend, and without this the resume could go out on one of them.
func (t brotliTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// recordCompressedPolling records go-priming-polling with every body
// compressed in coding.
func recordCompressedPolling(ctx context.Context, dir, name, coding string, spec ...string) error {
	srv := newGoServer(toolSet{})
	return recordGo(dir, name, []http.Handler{compressResponses(coding, goHandler(srv, storeOpts()))}, pollingSession(ctx, clientFor(coding)), spec...)
}

// clientFor is the client transport's wrapper that asks for coding and
// decodes it (nil for gzip, which Go's client does on its own).
func clientFor(coding string) func(http.RoundTripper) http.RoundTripper {
	if coding == "br" {
		return acceptBrotli
	}
	return nil
}

func runGoGzipPolling(ctx context.Context, dir string) error {
	return recordCompressedPolling(ctx, dir, "go-gzip-polling", "gzip",
		"# go-priming-polling (go-sdk v1.8.0 client and server, 2025-11-25, MemoryEventStore, standalone GET)",
		"# behind a gzip middleware: Go's client sends Accept-Encoding: gzip, so every response with a body",
		"# (initialize's SSE stream, the standalone GET, tools/call stream and echo, the resumed stream) is",
		"# Content-Encoding: gzip, chunked, flushed per event; 202 and 204 are not. The decoder inflates them",
		"# and reads everything, so the findings are go-priming-polling's: the server-closed polling stream",
		"# resumed correctly, nothing flagged, nothing unverifiable.",
		"expect violation count=0",
		"expect resume outcome=resumed count=1",
		"expect resume count=1",
		"expect unknown_outcome count=0",
		"expect unverifiable count=0",
		"expect session ended=deleted count=1",
	)
}

func runGoBrotliPolling(ctx context.Context, dir string) error {
	return recordCompressedPolling(ctx, dir, "go-brotli-polling", "br",
		"# go-priming-polling with brotli: the client asks for br and decodes it, and every response with a",
		"# body is Content-Encoding: br, flushed per event. The decoder does not read br: no event, id or",
		"# answer can be read from the capture, and no finding may rest on their absence. The resume is",
		"# unverifiable, and so are the two calls' outcomes (their answers were compressed), not unknown.",
		"expect violation count=0",
		"expect resume outcome=unverifiable count=1",
		"expect resume count=1",
		"expect unknown_outcome count=0",
		"expect unverifiable check=unknown_outcome count=2",
		"expect session ended=deleted count=1",
	)
}

// recordCompressedDeploySwap records the README sample's rolling deploy
// with the new backend compressing its responses in coding.
func recordCompressedDeploySwap(ctx context.Context, dir, name, coding string, spec ...string) error {
	release := make(chan struct{})
	defer close(release)
	old, permissive := swapBackends(release)
	return recordGo(dir, name, []http.Handler{old, compressResponses(coding, permissive)}, func(r *rig) error {
		return swapClient(ctx, r, permissive, clientFor(coding))
	}, spec...)
}

func runGoGzipDeploySwap(ctx context.Context, dir string) error {
	return recordCompressedDeploySwap(ctx, dir, "go-gzip-deploy-swap", "gzip",
		"# go-rolling-deploy-swap (the README sample), with the new backend B gzipping its responses and the",
		"# old backend A not. On B the resume is answered 200 with Mcp-Session-Id: S2 and a fresh stream, and",
		"# the retried slow_write's answer comes, all gzip, all inflated and read: the findings are the",
		"# sample's. The retry is sent again in S1 after the first attempt's stream broke, and no tools/list",
		"# of the session was seen: reissued_call_after_break is unverifiable (before 2026-12-05 no check).",
		"expect violation kind=session_swap last_event_id={cut} count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id={cut} count=1",
		"expect resume count=1",
		"expect unknown_outcome tool=slow_write count=1",
		"expect unknown_outcome count=1",
		`expect unverifiable check=reissued_call_after_break reason="tool annotations not seen" count=1`,
		"expect unverifiable count=1",
	)
}

func runGoBrotliDeploySwap(ctx context.Context, dir string) error {
	return recordCompressedDeploySwap(ctx, dir, "go-brotli-deploy-swap", "br",
		"# go-rolling-deploy-swap with backend B answering in brotli, which Go's client does not ask for",
		"# itself: the proxy's clients do (a wrapped transport asks for br and decodes it). A (no compression):",
		"# initialize (S1), tools/call slow_write cut by the drain after W_2. On B every body is br, which the",
		"# decoder does not read: the resume (GET Last-Event-Id: W_2) answered 200 with Mcp-Session-Id: S2, and",
		"# the retried slow_write's answer. The swap is in the heads and is still found; the first slow_write's",
		"# outcome is unknown (its stream, on A, was read and cut); the retry's answer was not read, so its",
		"# outcome is unverifiable, never unknown.",
		"expect violation kind=session_swap last_event_id={cut} count=1",
		"expect violation count=1",
		"expect resume outcome=violated last_event_id={cut} count=1",
		"expect resume count=1",
		"expect unknown_outcome tool=slow_write count=1",
		"expect unknown_outcome count=1",
		"expect unverifiable check=unknown_outcome count=1",
	)
}
