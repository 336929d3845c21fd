package decode

import "sync/atomic"

// parseErr names a kind of malformed input the decoder counted and survived.
type parseErr uint8

const (
	errBadStartLine parseErr = iota
	errBadHeader
	errBadContentLength
	errBadTransferEncoding
	errBadChunk
	errRoleConflict
	numParseErrs
)

var parseErrNames = [numParseErrs]string{
	errBadStartLine:        "bad_start_line",
	errBadHeader:           "bad_header",
	errBadContentLength:    "bad_content_length",
	errBadTransferEncoding: "bad_transfer_encoding",
	errBadChunk:            "bad_chunk",
	errRoleConflict:        "role_conflict",
}

// Stats are the pipeline's counters. Each is a total since NewPipeline.
type Stats struct {
	Connections        int64 // TCP connections handed to the decoder
	NonHTTPConnections int64 // connections given up as not HTTP/1.x (HTTP/2 apart)
	TLSConnections     int64 // of those, connections whose captured start was a TLS ClientHello
	ProxyHeaders       int64 // PROXY protocol headers (v1 or v2) skipped at the start of connections
	HTTP2Connections   int64 // connections that switched to HTTP/2 (h2c): counted, not decoded
	HTTP2Bytes         int64 // their payload bytes from the switch on (the preface, or what follows the 101)
	HTTPExchanges      int64 // requests seen, plus responses whose request was not
	MCPExchanges       int64 // requests that were MCP (Request.MCP)
	NonMCPExchanges    int64 // requests that were not
	SSEStreams         int64 // text/event-stream responses
	SSEEvents          int64 // dispatched SSE events
	NonMCPSSEStreams   int64 // SSE responses to requests that were not MCP
	JSONRPCMessages    int64 // JSON-RPC messages in requests, bodies and events
	InflatedBodies     int64 // gzip and deflate bodies inflated and read
	EncodedUnread      int64 // bodies under a Content-Encoding not read (another coding, MaxInflatingBodies reached, or data that would not inflate): counted only
	InflateLimitHits   int64 // bodies not inflated at MaxInflatingBodies, or cut at maxInflateRatio
	// ParseErrors counts malformed input by kind (bad_start_line,
	// bad_header, bad_content_length, bad_transfer_encoding, bad_chunk,
	// role_conflict).
	ParseErrors        map[string]int64
	Resyncs            int64 // times a direction found its footing again after skipping or losing bytes
	ResyncSkippedBytes int64 // bytes skipped while looking for a request or status line
	Gaps               int64 // TCPStream.Gap calls
	HeaderLimitHits    int64 // heads (or trailers) over MaxHeaderBytes
	LineLimitHits      int64 // SSE lines over MaxSSELineBytes
	EventLimitHits     int64 // SSE event data over MaxEventBytes
	BodyLimitHits      int64 // bodies over MaxBodyBytes (not peeked)
	PipelineOverflows  int64 // requests forgotten past MaxPipelinedRequests
	BufferLimitHits    int64 // connections whose buffers were let go at MaxBufferedBytes
	PeakBufferedBytes  int64 // the most the workers' buffers held at a count (summed over workers)
	Observations       int64 // observations delivered to out
	LateObservations   int64 // delivered after a newer one had been released
	EarlyReleases      int64 // released before their time because MaxBufferedObservations was reached
	// LateAfterEarlyRelease counts the late observations that arrived
	// older than one released early (Late = LateMaxBufferedObservations):
	// what the fixed window cost. An early release alone costs nothing
	// while the workers keep pace with each other, so this, not
	// EarlyReleases, is the limit's hit count.
	LateAfterEarlyRelease int64
	MergerPeak            int64 // the most observations the merger held at once (buffered and queued for delivery)
}

// counters is one worker's share of Stats. Atomic so Stats can be read while
// workers run; each worker writes only its own.
type counters struct {
	connections, nonHTTPConnections, httpExchanges, mcpExchanges, nonMCPExchanges atomic.Int64
	tlsConnections, proxyHeaders, http2Connections, http2Bytes                    atomic.Int64
	sseStreams, sseEvents, nonMCPSSEStreams, jsonrpcMessages                      atomic.Int64
	inflatedBodies, encodedUnread, inflateLimitHits                               atomic.Int64
	resyncs, resyncSkippedBytes, gaps                                             atomic.Int64
	headerLimitHits, lineLimitHits, eventLimitHits, bodyLimitHits                 atomic.Int64
	pipelineOverflows, bufferLimitHits, peakHeld                                  atomic.Int64
	parseErrors                                                                   [numParseErrs]atomic.Int64
}

func (c *counters) addTo(s *Stats) {
	s.Connections += c.connections.Load()
	s.NonHTTPConnections += c.nonHTTPConnections.Load()
	s.TLSConnections += c.tlsConnections.Load()
	s.ProxyHeaders += c.proxyHeaders.Load()
	s.HTTP2Connections += c.http2Connections.Load()
	s.HTTP2Bytes += c.http2Bytes.Load()
	s.HTTPExchanges += c.httpExchanges.Load()
	s.MCPExchanges += c.mcpExchanges.Load()
	s.NonMCPExchanges += c.nonMCPExchanges.Load()
	s.SSEStreams += c.sseStreams.Load()
	s.SSEEvents += c.sseEvents.Load()
	s.NonMCPSSEStreams += c.nonMCPSSEStreams.Load()
	s.JSONRPCMessages += c.jsonrpcMessages.Load()
	s.InflatedBodies += c.inflatedBodies.Load()
	s.EncodedUnread += c.encodedUnread.Load()
	s.InflateLimitHits += c.inflateLimitHits.Load()
	s.Resyncs += c.resyncs.Load()
	s.ResyncSkippedBytes += c.resyncSkippedBytes.Load()
	s.Gaps += c.gaps.Load()
	s.HeaderLimitHits += c.headerLimitHits.Load()
	s.LineLimitHits += c.lineLimitHits.Load()
	s.EventLimitHits += c.eventLimitHits.Load()
	s.BodyLimitHits += c.bodyLimitHits.Load()
	s.PipelineOverflows += c.pipelineOverflows.Load()
	s.BufferLimitHits += c.bufferLimitHits.Load()
	s.PeakBufferedBytes += c.peakHeld.Load()
	for i := range c.parseErrors {
		if n := c.parseErrors[i].Load(); n > 0 {
			s.ParseErrors[parseErrNames[i]] += n
		}
	}
}
