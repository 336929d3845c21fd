package decode

import (
	"fmt"
	"time"
)

// Defaults for Config. Each one bounds memory per connection or per pipeline;
// decode/README.md says what happens when one is hit.
const (
	// DefaultMaxHeaderBytes bounds one request or response head (and one
	// chunked trailer section).
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxBodyBytes bounds the part of a request body or a non-SSE
	// response body kept for the JSON-RPC peek.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxSSELineBytes bounds one buffered SSE line.
	DefaultMaxSSELineBytes = 1 << 20
	// DefaultMaxEventBytes bounds the buffered data of one SSE event.
	DefaultMaxEventBytes = 4 << 20
	// DefaultReorderWindow is how far behind the slowest worker's capture
	// time the merger waits before it releases an observation.
	DefaultReorderWindow = 2 * time.Second
	// DefaultMaxBufferedObservations bounds the merger's heap.
	DefaultMaxBufferedObservations = 1 << 20
)

// Fixed limits that are not worth a knob.
const (
	// MaxStartLineBytes bounds a line examined while looking for a request or
	// status line (resynchronisation, connection start). Longer lines are
	// skipped without being buffered.
	MaxStartLineBytes = 8 << 10
	// MaxChunkLineBytes bounds a chunk-size line including its extensions.
	MaxChunkLineBytes = 4 << 10
	// NonHTTPScanLimit is how many bytes one direction of a connection may
	// carry without a single request or status line before the connection is
	// declared not HTTP and ignored.
	NonHTTPScanLimit = 64 << 10
	// MaxPipelinedRequests bounds requests waiting for their responses on one
	// connection; beyond it the oldest is forgotten (its response, if it ever
	// comes, is paired with the next one).
	MaxPipelinedRequests = 256
)

// Config holds the decoder's limits and the merger's reorder window.
type Config struct {
	MaxHeaderBytes          int
	MaxBodyBytes            int
	MaxSSELineBytes         int
	MaxEventBytes           int
	ReorderWindow           time.Duration
	MaxBufferedObservations int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxHeaderBytes:          DefaultMaxHeaderBytes,
		MaxBodyBytes:            DefaultMaxBodyBytes,
		MaxSSELineBytes:         DefaultMaxSSELineBytes,
		MaxEventBytes:           DefaultMaxEventBytes,
		ReorderWindow:           DefaultReorderWindow,
		MaxBufferedObservations: DefaultMaxBufferedObservations,
	}
}

// Validate reports a limit that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxHeaderBytes < 256:
		return fmt.Errorf("decode: MaxHeaderBytes %d is below 256", c.MaxHeaderBytes)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("decode: MaxBodyBytes %d is negative", c.MaxBodyBytes)
	case c.MaxSSELineBytes < 16:
		return fmt.Errorf("decode: MaxSSELineBytes %d is below 16", c.MaxSSELineBytes)
	case c.MaxEventBytes < 0:
		return fmt.Errorf("decode: MaxEventBytes %d is negative", c.MaxEventBytes)
	case c.ReorderWindow < 0:
		return fmt.Errorf("decode: ReorderWindow %s is negative", c.ReorderWindow)
	case c.MaxBufferedObservations < 1:
		return fmt.Errorf("decode: MaxBufferedObservations %d is below 1", c.MaxBufferedObservations)
	}
	return nil
}
