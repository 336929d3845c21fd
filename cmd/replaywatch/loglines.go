package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// lineHandler writes a library's warnings and errors (the ClickHouse
// sink's, during analyze) the way analyze writes its own lines on standard
// error, "replaywatch analyze: warning: ...", instead of key=value records
// between them. Below warning nothing is written.
type lineHandler struct {
	w      io.Writer
	prefix string
	mu     *sync.Mutex
	attrs  []slog.Attr
}

func newLineHandler(w io.Writer, prefix string) *lineHandler {
	return &lineHandler{w: w, prefix: prefix, mu: &sync.Mutex{}}
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix)
	if r.Level >= slog.LevelError {
		b.WriteString("error: ")
	} else {
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	attrs := slices.Clone(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	for i, a := range attrs {
		sep := " ("
		if i > 0 {
			sep = ", "
		}
		fmt.Fprintf(&b, "%s%s=%v", sep, a.Key, a.Value)
	}
	if len(attrs) > 0 {
		b.WriteByte(')')
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clone(h.attrs), attrs...)
	return &c
}

// WithGroup keeps the attributes' own keys: the sink logs no groups.
func (h *lineHandler) WithGroup(string) slog.Handler { return h }
