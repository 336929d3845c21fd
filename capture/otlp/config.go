// Package otlp receives OpenTelemetry traces (OTLP over gRPC, and over HTTP
// with protobuf or JSON bodies) and turns the HTTP spans of MCP exchanges
// into the observations packet capture gives: a request, its response head,
// the SSE events (from replaywatch's span events, docs/otlp.md) and how the
// stream ended. It is the capture path for traffic packets cannot read
// (TLS). The detector reads its observations as it reads the decoder's.
package otlp

import (
	"fmt"
	"time"
)

// Defaults for Config.
const (
	// DefaultSettleDelay is how long a trace is held after its last span
	// arrived before its spans are joined (an MCP span often ends, and is
	// exported, after the HTTP spans it caused).
	DefaultSettleDelay = 2 * time.Second
	// DefaultReorderWindow is how far behind the newest exchange (by the
	// spans' own clock) observations wait before they go to the detector:
	// an exchange's span is exported only when it ends, so a long stream
	// arrives after shorter exchanges that started later.
	DefaultReorderWindow = 10 * time.Second
	// DefaultMaxBufferedSpans bounds the spans held (settling traces) at
	// once. An export that would exceed it is refused with the OTLP
	// retryable status, so the exporter retries later and nothing is
	// dropped silently.
	DefaultMaxBufferedSpans = 100_000
	// DefaultMaxBufferedObservations bounds the observations waiting for
	// the reorder window; past it the oldest go out early and whatever
	// arrives later than them is marked late (its order is not trusted).
	DefaultMaxBufferedObservations = 1 << 20
	// MaxSpansPerTrace: a trace that grows past it is joined at once and
	// a new buffer starts for its later spans (an agent's long-lived trace
	// must not hold memory until it settles).
	MaxSpansPerTrace = 10_000
	// RememberedSpans is how many span ids are remembered to drop a span
	// received twice (an exporter retrying an export that was taken): a
	// duplicate arriving after more new spans than this is counted again.
	RememberedSpans = 100_000
	// MaxRequestBytes bounds one OTLP/HTTP request body.
	MaxRequestBytes = 16 << 20
	// RetryAfter is what a refused export is told to wait.
	RetryAfter = time.Second
)

// Config configures the receiver and the span assembler.
type Config struct {
	// GRPCAddr and HTTPAddr are listen addresses ("" does not listen).
	GRPCAddr, HTTPAddr      string
	SettleDelay             time.Duration
	ReorderWindow           time.Duration
	MaxBufferedSpans        int
	MaxBufferedObservations int
}

// DefaultConfig is the documented defaults, listening nowhere.
func DefaultConfig() Config {
	return Config{
		SettleDelay: DefaultSettleDelay, ReorderWindow: DefaultReorderWindow,
		MaxBufferedSpans: DefaultMaxBufferedSpans, MaxBufferedObservations: DefaultMaxBufferedObservations,
	}
}

// Validate says what is wrong with c.
func (c Config) Validate() error {
	switch {
	case c.SettleDelay < 0:
		return fmt.Errorf("otlp: settle delay %v is negative", c.SettleDelay)
	case c.ReorderWindow < 0:
		return fmt.Errorf("otlp: reorder window %v is negative", c.ReorderWindow)
	case c.MaxBufferedSpans <= 0:
		return fmt.Errorf("otlp: MaxBufferedSpans %d: want at least 1", c.MaxBufferedSpans)
	case c.MaxBufferedObservations <= 0:
		return fmt.Errorf("otlp: MaxBufferedObservations %d: want at least 1", c.MaxBufferedObservations)
	}
	return nil
}
