package detector

import (
	"fmt"
	"time"
)

// Defaults for Config. Every per-session map the detector keeps is bounded by
// one of these; hitting a bound is counted in Stats.Limits and turns the
// checks that needed the dropped state into Unverifiable records, never into
// violations (missing state must not look like a broken contract).
const (
	DefaultSessionIdleTimeout         = 30 * time.Minute
	DefaultLinkWindow                 = 2 * time.Minute
	DefaultMaxSessions                = 100000
	DefaultMaxEventsIndexedPerSession = 100000
	DefaultMaxStreamsPerSession       = 1000
	DefaultMaxInflightPerSession      = 10000
	DefaultMaxResponsesPerSession     = 100000
	DefaultMaxProgressTokens          = 1000
	DefaultMaxOpenExchanges           = 100000
	DefaultMaxLostSessions            = 10000
	DefaultMaxEventsIndexedPerServer  = 100000
	DefaultReorderTolerance           = 2 * time.Second
	// DefaultMaxStateBytes bounds the bytes of session state (budget.go);
	// a memory budget (internal/membudget) sets it from the detector's
	// share.
	DefaultMaxStateBytes = 256 << 20
)

// Config bounds the detector's memory and sets its time windows. All times
// are capture time (the observations' timestamps), never wall clock, so an
// offline analysis gives the same answer as the live agent.
type Config struct {
	// PartialHistory says the input may miss whole exchanges without a
	// trace of the loss (OpenTelemetry spans: an exporter drops what its
	// queue cannot hold and tells no one). Checks that rest on something
	// never having been seen (an event id the session never issued; a
	// tool whose tools/list answer was not seen; a replay that would have
	// delivered whole an event cut mid-way; a second request re-using a
	// progress token) then report unverifiable
	// instead of a violation. Packet capture sees its losses (gaps), so
	// it leaves this off.
	PartialHistory bool
	// SessionIdleTimeout: a session with no traffic for this long is dropped
	// and summarised as "expired". That is our bookkeeping, not the
	// server's: it is never reported as if the server had answered 404.
	SessionIdleTimeout time.Duration
	// LinkWindow: after a session got 404, new sessions from the same
	// client IP to the same server within this window are candidates for
	// the same client re-initialising, scored by the evidence the wire
	// offers (link.go). The 404's TCP connection is a candidate regardless
	// of the window.
	LinkWindow time.Duration
	// MaxSessions tracked at once; beyond it the least recently active
	// session is evicted (summarised as "evicted") and counted.
	MaxSessions int
	// MaxStateBytes bounds the bytes all sessions' state holds (their
	// structures, event-id indexes, calls, streams, and the ids in them;
	// budget.go says how they are counted). Beyond it the least recently
	// active sessions are evicted, as at MaxSessions, and counted.
	MaxStateBytes int64
	// MaxEventsIndexedPerSession bounds the event-id index of one session.
	// Beyond it new ids are not indexed and checks that need the full index
	// on that session report Unverifiable.
	MaxEventsIndexedPerSession int
	// MaxStreamsPerSession bounds the SSE streams tracked per session.
	MaxStreamsPerSession int
	// MaxInflightPerSession bounds JSON-RPC requests awaiting a response.
	MaxInflightPerSession int
	// MaxResponsesPerSession bounds the answered JSON-RPC ids remembered for
	// duplicate-response detection.
	MaxResponsesPerSession int
	// MaxProgressTokensPerSession bounds progress tokens followed at once.
	MaxProgressTokensPerSession int
	// MaxOpenExchanges bounds HTTP exchanges awaiting their end over all
	// connections (a decoder that never ends them cannot grow us).
	MaxOpenExchanges int
	// MaxLostSessions bounds the sessions remembered after a 404 for
	// linking a re-initialising client (silent_reinit_after_404).
	MaxLostSessions int
	// MaxEventsIndexedPerServer bounds the index of event ids over all
	// sessions of all logical endpoints (which session and stream first
	// sent each, for cross-session replays). Beyond it new ids are not
	// indexed and a replayed event the index does not hold makes the
	// cross-session check unverifiable.
	MaxEventsIndexedPerServer int
	// ReorderTolerance: observations on different connections may be
	// merged slightly out of order (decode's reorder window); an event id
	// that is lower than one seen on another stream less than this long ago
	// is not called a reset. Not a bound: 0 means no tolerance, and New
	// keeps it (DefaultConfig has DefaultReorderTolerance).
	ReorderTolerance time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		SessionIdleTimeout:          DefaultSessionIdleTimeout,
		LinkWindow:                  DefaultLinkWindow,
		MaxSessions:                 DefaultMaxSessions,
		MaxStateBytes:               DefaultMaxStateBytes,
		MaxEventsIndexedPerSession:  DefaultMaxEventsIndexedPerSession,
		MaxStreamsPerSession:        DefaultMaxStreamsPerSession,
		MaxInflightPerSession:       DefaultMaxInflightPerSession,
		MaxResponsesPerSession:      DefaultMaxResponsesPerSession,
		MaxProgressTokensPerSession: DefaultMaxProgressTokens,
		MaxOpenExchanges:            DefaultMaxOpenExchanges,
		MaxLostSessions:             DefaultMaxLostSessions,
		MaxEventsIndexedPerServer:   DefaultMaxEventsIndexedPerServer,
		ReorderTolerance:            DefaultReorderTolerance,
	}
}

// Validate reports a field that cannot work (negative or zero bounds).
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"SessionIdleTimeout", int64(c.SessionIdleTimeout)},
		{"LinkWindow", int64(c.LinkWindow)},
		{"MaxSessions", int64(c.MaxSessions)},
		{"MaxStateBytes", c.MaxStateBytes},
		{"MaxEventsIndexedPerSession", int64(c.MaxEventsIndexedPerSession)},
		{"MaxStreamsPerSession", int64(c.MaxStreamsPerSession)},
		{"MaxInflightPerSession", int64(c.MaxInflightPerSession)},
		{"MaxResponsesPerSession", int64(c.MaxResponsesPerSession)},
		{"MaxProgressTokensPerSession", int64(c.MaxProgressTokensPerSession)},
		{"MaxOpenExchanges", int64(c.MaxOpenExchanges)},
		{"MaxLostSessions", int64(c.MaxLostSessions)},
		{"MaxEventsIndexedPerServer", int64(c.MaxEventsIndexedPerServer)},
	} {
		if f.v <= 0 {
			return fmt.Errorf("detector config: %s must be positive, got %d", f.name, f.v)
		}
	}
	if c.ReorderTolerance < 0 {
		return fmt.Errorf("detector config: ReorderTolerance must not be negative")
	}
	return nil
}

// withDefaults fills zero fields, so a partly set Config works.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur(&c.SessionIdleTimeout, d.SessionIdleTimeout)
	setDur(&c.LinkWindow, d.LinkWindow)
	setInt(&c.MaxSessions, d.MaxSessions)
	if c.MaxStateBytes <= 0 {
		c.MaxStateBytes = d.MaxStateBytes
	}
	setInt(&c.MaxEventsIndexedPerSession, d.MaxEventsIndexedPerSession)
	setInt(&c.MaxEventsIndexedPerServer, d.MaxEventsIndexedPerServer)
	setInt(&c.MaxStreamsPerSession, d.MaxStreamsPerSession)
	setInt(&c.MaxInflightPerSession, d.MaxInflightPerSession)
	setInt(&c.MaxResponsesPerSession, d.MaxResponsesPerSession)
	setInt(&c.MaxProgressTokensPerSession, d.MaxProgressTokensPerSession)
	setInt(&c.MaxOpenExchanges, d.MaxOpenExchanges)
	setInt(&c.MaxLostSessions, d.MaxLostSessions)
	if c.ReorderTolerance < 0 {
		c.ReorderTolerance = d.ReorderTolerance
	}
	return c
}
