// Package sink holds what every output of replaywatch shares; the outputs
// themselves live in subpackages (jsonl, text, and later ClickHouse).
package sink

import (
	"math"
	"strconv"
	"time"
)

// Summary is the closing account of one analysis: what was read, what was
// understood, and what was found. JSON field names are part of the output
// contract (README "Output format").
type Summary struct {
	Files   int    `json:"files"`
	Packets uint64 `json:"packets"`
	// Spans is how many OpenTelemetry spans were read (analyze --spans);
	// 0 for captures.
	Spans           uint64 `json:"spans"`
	Bytes           uint64 `json:"bytes"`
	TCPConnections  uint64 `json:"tcp_connections"`
	HTTPExchanges   uint64 `json:"http_exchanges"`
	MCPExchanges    uint64 `json:"mcp_exchanges"`
	NonMCPExchanges uint64 `json:"non_mcp_exchanges"`
	SSEEvents       uint64 `json:"sse_events"`
	MCPSessions     uint64 `json:"mcp_sessions"`
	// Revisions counts MCP requests by the protocol revision they spoke;
	// HeaderMismatches the requests whose Mcp-Method/Mcp-Name headers
	// disagree with their body.
	Revisions map[string]int `json:"revisions"`
	// RevisionsByPair: the same per client address and server
	// ("10.0.0.5 -> 10.0.0.9:8080"), at most 256 pairs.
	RevisionsByPair  map[string]map[string]int `json:"revisions_by_pair"`
	HeaderMismatches int                       `json:"header_mismatches"`
	// ProxyHops: requests set aside as a proxy's second hop, or a NAT
	// copy, of a request already seen (judged once, on the first).
	ProxyHops       int            `json:"proxy_hops"`
	Resumes         map[string]int `json:"resumes"`  // by outcome
	Findings        map[string]int `json:"findings"` // violations by kind
	Violations      int            `json:"violations"`
	UnknownOutcomes int            `json:"unknown_outcomes"`
	Unverifiable    int            `json:"unverifiable"`
	CaptureGaps     uint64         `json:"capture_gaps"`
	CaptureGapBytes uint64         `json:"capture_gap_bytes"` // includes SnaplenBytes
	LimitsHit       map[string]int `json:"limits_hit"`        // named limit -> times hit

	// What share of the capture could be analysed. AnalysedShare is
	// (PayloadBytes - HTTP2Bytes) / (PayloadBytes + CaptureGapBytes +
	// UnreadFileBytes), nil when the last three are zero (no packets, or no
	// TCP payload at all).
	PayloadBytes       uint64 `json:"tcp_payload_bytes"`   // TCP payload bytes delivered to the decoder
	SnaplenBytes       uint64 `json:"snaplen_bytes"`       // payload bytes cut by the capture's snap length
	UnreadFileBytes    uint64 `json:"unread_file_bytes"`   // bytes of damaged files after the damage, never read
	UndecodablePackets uint64 `json:"undecodable_packets"` // packets whose headers could not be decoded
	// TunnelledPackets carried their TCP in a tunnel (VXLAN, Geneve, GRE,
	// ERSPAN II, IP in IP), as traffic mirroring delivers it: decapsulated
	// and analysed as the inner packets.
	TunnelledPackets uint64 `json:"tunnelled_packets"`
	// InflatedBodies were under Content-Encoding gzip or deflate, inflated
	// and read; EncodedUnreadBodies under one not read (another coding, a
	// limit, or data that would not inflate), delimited and counted only.
	InflatedBodies      uint64 `json:"inflated_bodies"`
	EncodedUnreadBodies uint64 `json:"encoded_unread_bodies"`
	// TLSConnections began with a TLS ClientHello: encrypted, not HTTP to
	// the decoder, and counted as analysed like any other protocol.
	TLSConnections uint64 `json:"tls_connections"`
	// ProxyProtocolHeaders: PROXY protocol headers skipped before the HTTP
	// of a connection (its client is the one the header names).
	ProxyProtocolHeaders uint64 `json:"proxy_protocol_headers"`
	// HTTP2Connections spoke HTTP/2 (h2c), which is not decoded;
	// HTTP2Bytes is their payload from the segment that switched them, in
	// PayloadBytes but not analysed.
	HTTP2Connections uint64   `json:"http2_connections"`
	HTTP2Bytes       uint64   `json:"http2_bytes"`
	AnalysedShare    *float64 `json:"analysed_share"` // 0..1
	// PartialReason says why the capture could not be analysed (less than
	// half of it analysed, or most packets undecodable); nil when it could.
	// PartialAdvice is what to do about it, for the text report.
	PartialReason *string `json:"partial_reason"`
	PartialAdvice string  `json:"-"`

	// CaptureStart and CaptureEnd are the capture times of the first and
	// last HTTP message or SSE event decoded; nil when none was (no packets,
	// no TCP payload, headers only).
	CaptureStart   *time.Time    `json:"capture_start"`
	CaptureEnd     *time.Time    `json:"capture_end"`
	Elapsed        time.Duration `json:"-"`
	ElapsedSeconds float64       `json:"elapsed_seconds"`
	Errors         []string      `json:"errors"` // non-fatal input problems (truncated file, ...)
}

// Percent prints a share (0..1) as a whole percentage rounded down, so a
// share below a threshold never prints as the threshold and only a complete
// capture prints 100%; a sliver above nothing prints "under 1%".
func Percent(share float64) string {
	if share > 0 && share < 0.01 {
		return "under 1%"
	}
	// The epsilon keeps 0.29 (28.999...) from printing as 28%.
	return strconv.Itoa(int(math.Floor(share*100+1e-9))) + "%"
}

// AnalysedPercent is Percent of the analysed share, "-" when there was
// nothing to analyse.
func (s *Summary) AnalysedPercent() string {
	if s.AnalysedShare == nil {
		return "-"
	}
	return Percent(*s.AnalysedShare)
}
