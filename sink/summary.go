// Package sink holds what every output of replaywatch shares; the outputs
// themselves live in subpackages (jsonl, text, and later ClickHouse).
package sink

import "time"

// Summary is the closing account of one analysis: what was read, what was
// understood, and what was found. JSON field names are part of the output
// contract (README "Output format").
type Summary struct {
	Files           int            `json:"files"`
	Packets         uint64         `json:"packets"`
	Bytes           uint64         `json:"bytes"`
	TCPConnections  uint64         `json:"tcp_connections"`
	HTTPExchanges   uint64         `json:"http_exchanges"`
	MCPExchanges    uint64         `json:"mcp_exchanges"`
	NonMCPExchanges uint64         `json:"non_mcp_exchanges"`
	SSEEvents       uint64         `json:"sse_events"`
	MCPSessions     uint64         `json:"mcp_sessions"`
	Resumes         map[string]int `json:"resumes"`  // by outcome
	Findings        map[string]int `json:"findings"` // violations by kind
	Violations      int            `json:"violations"`
	UnknownOutcomes int            `json:"unknown_outcomes"`
	Unverifiable    int            `json:"unverifiable"`
	CaptureGaps     uint64         `json:"capture_gaps"`
	CaptureGapBytes uint64         `json:"capture_gap_bytes"`
	LimitsHit       map[string]int `json:"limits_hit"` // named limit -> times hit
	CaptureStart    time.Time      `json:"capture_start"`
	CaptureEnd      time.Time      `json:"capture_end"`
	Elapsed         time.Duration  `json:"-"`
	ElapsedSeconds  float64        `json:"elapsed_seconds"`
	Errors          []string       `json:"errors"` // non-fatal input problems (truncated file, ...)
}
