package main

// Deliberately broken backends: HTTP middleware in front of a real go-sdk
// StreamableHTTPHandler that edits what the SDK writes, the way a buggy
// event store, gateway or server framework would. The SDK underneath stays
// real; only the named fault is ours.

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// maxPeekBody bounds how much of a request body a broken backend reads to
// decide what to do with it; fixture requests are a few hundred bytes.
const maxPeekBody = 64 << 10

// peekBody returns the request body and puts it back for the next handler.
func peekBody(r *http.Request) []byte {
	if r.Body == nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, maxPeekBody))
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b
}

// sseEdit rewrites one SSE event (its raw text, ending in a blank line)
// into zero or more events to send instead.
type sseEdit func(event []byte) [][]byte

// sseEditWriter applies an sseEdit to a text/event-stream response, event
// by event; other responses pass through untouched.
type sseEditWriter struct {
	http.ResponseWriter
	edit sseEdit
	buf  []byte
}

func (w *sseEditWriter) isSSE() bool {
	return strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream")
}

func (w *sseEditWriter) Write(p []byte) (int, error) {
	if !w.isSSE() {
		return w.ResponseWriter.Write(p)
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.Index(w.buf, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		ev := w.buf[:i+2]
		for _, out := range w.edit(ev) {
			if _, err := w.ResponseWriter.Write(out); err != nil {
				return 0, err
			}
		}
		w.buf = w.buf[i+2:]
	}
}

// Flush lets the SDK's per-event flushes through the wrapper.
func (w *sseEditWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap serves http.ResponseController.
func (w *sseEditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// editSSE wraps h: when pick returns an edit for a request, that request's
// SSE response goes through it.
func editSSE(h http.Handler, pick func(r *http.Request) sseEdit) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		edit := pick(r)
		if edit == nil {
			h.ServeHTTP(w, r)
			return
		}
		ew := &sseEditWriter{ResponseWriter: w, edit: edit}
		h.ServeHTTP(ew, r)
		if len(ew.buf) > 0 {
			w.Write(ew.buf)
		}
	})
}

// eventID is the value of an SSE event's id field, "" when it has none.
func eventID(ev []byte) string {
	for _, line := range strings.Split(string(ev), "\n") {
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			return v
		}
	}
	return ""
}

// rewriteCursor wraps h: a GET carrying Last-Event-ID has it replaced by
// to(id) before the SDK sees it (the capture, taken in front of the
// backend, still shows what the client sent).
func rewriteCursor(h http.Handler, to func(id string) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("Last-Event-ID"); r.Method == http.MethodGet && id != "" {
			r = r.Clone(r.Context())
			r.Header.Set("Last-Event-ID", to(id))
		}
		h.ServeHTTP(w, r)
	})
}
