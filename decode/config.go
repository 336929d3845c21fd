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
	// DefaultMaxBufferedObservations bounds the merger's heap: a fixed
	// window of observations, whatever the skew between workers (one
	// giant stream on one, nothing on the others). Beyond it the oldest
	// are released before the reorder window has passed; an observation
	// that then arrives older than one released is delivered late and
	// makes its checks unverifiable. A memory budget
	// (internal/membudget) sets it from the merger's share.
	DefaultMaxBufferedObservations = 1 << 16
	// ObservationBytes is what one buffered observation costs, with its
	// request or response and messages: a memory budget turns the
	// merger's share into MaxBufferedObservations with it.
	ObservationBytes = 1024
	// DefaultMaxBufferedBytes bounds what all connections' decoder
	// buffers hold at once (buffered.go); a memory budget
	// (internal/membudget) sets it from the decoder's share.
	DefaultMaxBufferedBytes = 256 << 20
	// DefaultMaxArgumentBytes bounds the tool arguments kept of one
	// tools/call request when KeepToolArguments is set. 64 KiB keeps the
	// arguments of ordinary calls (queries, paths, ids, a few paragraphs of
	// text) whole, while a call that uploads a document keeps a readable
	// prefix instead of making its stored row carry up to MaxBodyBytes
	// (1 MiB): the kept text lives as long as its observation, and the
	// sink writes it once per call.
	DefaultMaxArgumentBytes = 64 << 10
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
	// MaxInflatingBodies bounds the gzip and deflate bodies inflated at
	// once (split evenly between the workers; inflate.go), each holding
	// about 64 KiB, counted in MaxBufferedBytes too. A body past it is
	// delimited and counted, not read (EncodedUnread), and the limit's
	// hit counted.
	MaxInflatingBodies = 256
)

// Config holds the decoder's limits, the merger's reorder window and what
// the decoder may keep of tool calls.
type Config struct {
	MaxHeaderBytes          int
	MaxBodyBytes            int
	MaxSSELineBytes         int
	MaxEventBytes           int
	ReorderWindow           time.Duration
	MaxBufferedObservations int
	// MaxBufferedBytes bounds the bytes all connections' head, body and
	// SSE buffers hold at once, split evenly between the workers; past
	// it the largest holders' buffers are let go (buffered.go).
	MaxBufferedBytes int64

	// KeepToolArguments keeps params.arguments of each tools/call request
	// in Message.Arguments. Off by default: captured traffic is sensitive,
	// and without it argument values are only hashed (Message.ParamsHash),
	// never kept.
	KeepToolArguments bool
	// MaxArgumentBytes bounds Message.Arguments (after compaction); longer
	// arguments are cut and Message.ArgumentsTruncated is set. Arguments
	// of a body over MaxBodyBytes are not seen at all (the body is not
	// peeked). Unused unless KeepToolArguments is set.
	MaxArgumentBytes int

	// KeepQueryStrings keeps a request target's query string in
	// Request.Path. Off by default: a query can carry a token or a user id,
	// and paths go into evidence and explanations; without it the query is
	// replaced by "?(query of N bytes not kept)".
	KeepQueryStrings bool

	// HashKey keys every hash of user data: Authorization values, tool
	// arguments (ParamsHash, args_hash) and SSE event data (DataHash) are
	// HMAC-SHA-256 under it, so a low-entropy value cannot be found by
	// hashing guesses. Agents of one deployment share it, so hashes and
	// finding ids agree across nodes. Empty: unkeyed SHA-256 (tests,
	// tools); the CLI always sets a key (see README, "Privacy").
	HashKey []byte

	// ReuseObservations lets the pipeline reuse the memory of event, body
	// and end observations once out has returned from them, and of a
	// request and its response once out has returned from their
	// exchange's End: allocating each anew was most of what the decoder
	// allocates. Set it only when out keeps nothing of these beyond that:
	// no pointer to an observation or its Event, Body or End, or into
	// their Messages, once out returns from it; none to a Request or
	// Response, or into the request's Messages, once out returns from
	// their End; and no copy of an Event.DataHash string (whose bytes are
	// the observation's; strings.Clone it to keep it). The detector keeps
	// nothing beyond that (Detector.Observe); a consumer that collects
	// observations must leave it off.
	ReuseObservations bool
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
		MaxBufferedBytes:        DefaultMaxBufferedBytes,
		MaxArgumentBytes:        DefaultMaxArgumentBytes,
	}
}

// Validate reports a limit that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxHeaderBytes < 256:
		return fmt.Errorf("decode: MaxHeaderBytes %d is below 256", c.MaxHeaderBytes)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("decode: MaxBodyBytes %d is negative", c.MaxBodyBytes)
	case len(c.HashKey) > 0 && len(c.HashKey) < MinHashKeyBytes:
		return fmt.Errorf("decode: HashKey of %d bytes is below %d", len(c.HashKey), MinHashKeyBytes)
	case c.MaxSSELineBytes < 16:
		return fmt.Errorf("decode: MaxSSELineBytes %d is below 16", c.MaxSSELineBytes)
	case c.MaxEventBytes < 0:
		return fmt.Errorf("decode: MaxEventBytes %d is negative", c.MaxEventBytes)
	case c.ReorderWindow < 0:
		return fmt.Errorf("decode: ReorderWindow %s is negative", c.ReorderWindow)
	case c.MaxBufferedObservations < 1:
		return fmt.Errorf("decode: MaxBufferedObservations %d is below 1", c.MaxBufferedObservations)
	case c.MaxBufferedBytes < 0:
		return fmt.Errorf("decode: MaxBufferedBytes %d is negative", c.MaxBufferedBytes)
	case c.MaxArgumentBytes < 0:
		return fmt.Errorf("decode: MaxArgumentBytes %d is negative", c.MaxArgumentBytes)
	}
	return nil
}
