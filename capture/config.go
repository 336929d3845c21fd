// Package capture reads packet captures (pcap and pcapng files, or standard
// input) or captures packets live (Live: AF_PACKET on Linux), reassembles
// their TCP connections (in-order segments itself, the rest with gopacket's
// reassembly package) and hands each connection's bytes to a
// decode.StreamFactory.
//
// The workers (worker: connection table, in-order path, assembler) know
// nothing about where packets come from: the file reader and Live's socket
// readers decode packets and hand them the segments in batches (feeder).
package capture

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Limits and their defaults. Every limit is also a Config field; what happens
// when one is hit is counted in Stats (see README.md for the table).
const (
	// DefaultMaxBufferedPagesPerConnection bounds the out-of-order data one
	// direction of a connection may hold while it waits for a missing
	// segment. A page holds up to 1900 bytes, so this is about 1.9 MiB. When
	// it is reached the oldest buffered data is delivered after a gap
	// (Stats.PageLimitHits).
	DefaultMaxBufferedPagesPerConnection = 1024
	// DefaultMaxBufferedPagesTotal bounds the out-of-order pages held by all
	// connections together (about 62 MiB), split evenly between workers.
	DefaultMaxBufferedPagesTotal = 32768
	// PageBytes is what one buffered page costs, its data and its
	// bookkeeping: a memory budget turns its reassembly share into
	// MaxBufferedPagesTotal with it.
	PageBytes = 2048
	// DefaultMaxConnections bounds the connections followed at once, split
	// evenly between workers. When a worker exceeds its share it closes its
	// least recently active connections (decode.CloseEvicted,
	// Stats.Evictions).
	DefaultMaxConnections = 65536
	// DefaultIdleTimeout is how long, in capture time, a connection may go
	// without a packet before it is flushed and closed (decode.CloseIdle).
	// As long as the detector keeps a quiet session (its
	// DefaultSessionIdleTimeout): an MCP server's standalone SSE stream may
	// carry nothing for that long, and a connection let go while open and
	// picked up again (decode.ConnMeta.PickedUpAfter) makes the checks
	// whose evidence it may hold unverifiable. It was 5 minutes until
	// 2026-12-05. MaxConnections bounds what lingers meanwhile.
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultReorderTimeout is how long, in capture time, out-of-order data
	// waits for a missing segment before it is delivered after a gap. A
	// segment the capture lost never arrives, so waiting longer only delays
	// the rest of the stream.
	DefaultReorderTimeout = 10 * time.Second

	// MaxWorkers caps Config.Workers: past the core count more workers only
	// add hand-off cost.
	MaxWorkers = 64
	// MaxPacketBytes is the largest captured packet accepted (tcpdump's
	// largest snap length). pcapgo sizes its buffers from file headers, so
	// this is what keeps a damaged header from allocating gigabytes.
	MaxPacketBytes = 262144
)

// Config controls a capture run. The zero value of a field means its default.
type Config struct {
	// Workers is how many goroutines reassemble connections; the reader is
	// one more. 1 runs everything in the caller's goroutine with no channels.
	Workers int

	MaxBufferedPagesPerConnection int
	MaxBufferedPagesTotal         int
	MaxConnections                int
	IdleTimeout                   time.Duration
	ReorderTimeout                time.Duration
	// LossProofDelay is how long, in capture time, a hole proven by the
	// receiver's ACK waits for the data to arrive after all before it is
	// reported as lost (see README "Lost and doubled bytes"). Longer than
	// DefaultLossProofDelay, a hole is also no longer reported at once
	// before the other side's next data: for captures whose packets reach
	// the workers through several rings, out of order by tens of
	// milliseconds (Live on several named interfaces).
	LossProofDelay time.Duration

	// Progress, when set, is called from the reader goroutine with the bytes
	// read from the input files so far and their total size (-1 when one of
	// them is standard input). It is called about every megabyte and once at
	// the end.
	Progress func(read, total int64)

	// assembleAll (tests only) gives every connection to the assembler at
	// its first segment, bypassing the workers' in-order path, so that
	// tests can check the two deliver the same.
	assembleAll bool
	// noLossProofs (tests only) turns off what proveLoss reports, which
	// by design reports holes sooner on the in-order path than the
	// assembler would, so that the two can be compared without it.
	noLossProofs bool
}

// DefaultConfig returns the defaults: one worker per core (at most
// MaxWorkers) and the Default* limits.
func DefaultConfig() Config {
	return Config{
		Workers:                       min(runtime.GOMAXPROCS(0), MaxWorkers),
		MaxBufferedPagesPerConnection: DefaultMaxBufferedPagesPerConnection,
		MaxBufferedPagesTotal:         DefaultMaxBufferedPagesTotal,
		MaxConnections:                DefaultMaxConnections,
		IdleTimeout:                   DefaultIdleTimeout,
		ReorderTimeout:                DefaultReorderTimeout,
		LossProofDelay:                DefaultLossProofDelay,
	}
}

// Validate reports a negative limit. Zero fields are valid (they mean the
// default).
func (c Config) Validate() error {
	var errs []error
	check := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("capture: %s must not be negative (got %d)", name, v))
		}
	}
	check("Workers", int64(c.Workers))
	check("MaxBufferedPagesPerConnection", int64(c.MaxBufferedPagesPerConnection))
	check("MaxBufferedPagesTotal", int64(c.MaxBufferedPagesTotal))
	check("MaxConnections", int64(c.MaxConnections))
	check("IdleTimeout", int64(c.IdleTimeout))
	check("ReorderTimeout", int64(c.ReorderTimeout))
	check("LossProofDelay", int64(c.LossProofDelay))
	return errors.Join(errs...)
}

// WithDefaults returns the config a run really uses: zero fields replaced by
// their defaults and Workers capped at MaxWorkers. ReadFiles calls
// newFactory(i) for i in [0, WithDefaults().Workers), so a caller that sizes
// something per worker (a decode pipeline) must size it from this.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.Workers == 0 {
		c.Workers = d.Workers
	}
	c.Workers = min(c.Workers, MaxWorkers)
	if c.MaxBufferedPagesPerConnection == 0 {
		c.MaxBufferedPagesPerConnection = d.MaxBufferedPagesPerConnection
	}
	if c.MaxBufferedPagesTotal == 0 {
		c.MaxBufferedPagesTotal = d.MaxBufferedPagesTotal
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.ReorderTimeout == 0 {
		c.ReorderTimeout = d.ReorderTimeout
	}
	if c.LossProofDelay == 0 {
		c.LossProofDelay = d.LossProofDelay
	}
	return c
}

// share splits a global limit between workers, never below one.
func share(limit, workers int) int {
	return max(1, (limit+workers-1)/workers)
}
