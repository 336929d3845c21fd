package telemetry

import "slices"

// metricNames are the Prometheus metric family names /metrics can show once
// every source has reported (README.md describes each). A test scrapes a
// server fed by every source, and the real ClickHouse sink's instruments,
// and requires exactly these families.
var metricNames = []string{
	// capture (PipelineSources.Capture, .Kernel, .Levels)
	"replaywatch_capture_packets_total",
	"replaywatch_capture_bytes_total",
	"replaywatch_capture_skipped_packets_total",
	"replaywatch_capture_payload_bytes_total",
	"replaywatch_capture_connections_opened_total",
	"replaywatch_capture_connections_without_syn_total",
	"replaywatch_capture_gaps_total",
	"replaywatch_capture_gap_bytes_total",
	"replaywatch_capture_fins_total",
	"replaywatch_capture_resets_total",
	"replaywatch_capture_idle_flushes_total",
	"replaywatch_capture_kernel_packets_total",
	"replaywatch_capture_kernel_drops_total",
	"replaywatch_capture_duplicates_total",
	"replaywatch_capture_connections",
	// every stage's named limits
	"replaywatch_limit_hits_total",
	// decode
	"replaywatch_decode_non_http_connections_total",
	"replaywatch_decode_tls_connections_total",
	"replaywatch_decode_proxy_protocol_headers_total",
	"replaywatch_decode_http2_connections_total",
	"replaywatch_decode_http2_bytes_total",
	"replaywatch_decode_http_exchanges_total",
	"replaywatch_decode_mcp_exchanges_total",
	"replaywatch_decode_non_mcp_exchanges_total",
	"replaywatch_decode_sse_streams_total",
	"replaywatch_decode_non_mcp_sse_streams_total",
	"replaywatch_decode_sse_events_total",
	"replaywatch_decode_jsonrpc_messages_total",
	"replaywatch_decode_inflated_bodies_total",
	"replaywatch_decode_encoded_unread_bodies_total",
	"replaywatch_decode_parse_errors_total",
	"replaywatch_decode_resyncs_total",
	"replaywatch_decode_resync_skipped_bytes_total",
	"replaywatch_decode_gaps_total",
	"replaywatch_decode_observations_total",
	"replaywatch_decode_late_observations_total",
	"replaywatch_decode_early_releases_total",
	"replaywatch_decode_merger_peak",
	// detector
	"replaywatch_otlp_spans_total",
	"replaywatch_otlp_observations_total",
	"replaywatch_otlp_buffered_spans",
	"replaywatch_detector_observations_total",
	"replaywatch_detector_malformed_observations_total",
	"replaywatch_detector_sessionless_exchanges_total",
	"replaywatch_detector_sessions",
	"replaywatch_detector_sessions_seen_total",
	"replaywatch_detector_sessions_ended_total",
	"replaywatch_detector_resumes_total",
	"replaywatch_detector_violations_total",
	"replaywatch_detector_unverifiable_total",
	"replaywatch_detector_unknown_outcomes_total",
	"replaywatch_detector_requests_total",
	"replaywatch_detector_header_mismatches_total",
	"replaywatch_detector_proxy_hops_total",
	"replaywatch_detector_repeatable_reissues_total",
	"replaywatch_detector_state_bytes",
	"replaywatch_detector_shed_bytes_total",
	// the memory budget (RegisterMemoryPlan)
	"replaywatch_memory_limit_bytes",
	"replaywatch_memory_share_bytes",
	// sink/clickhouse (given MeterProvider())
	"replaywatch_sink_rows_total",
	"replaywatch_sink_batches_total",
	"replaywatch_sink_retries_total",
	"replaywatch_sink_insert_duration_seconds",
	"replaywatch_sink_spool_bytes",
	"replaywatch_sink_spool_rows",
	"replaywatch_sink_spool_batches",
	"replaywatch_sink_spool_oldest_age_seconds",
	"replaywatch_sink_spool_corrupt_total",
	"replaywatch_sink_spool_rejected_total",
	// health
	"replaywatch_heartbeat_age_seconds",
	"replaywatch_ready",
	// the resource (service.name, service.version, host.name, k8s.*)
	"target_info",
}

// MetricNames returns the Prometheus metric family names the agent's
// /metrics exposes (this package's and the ClickHouse sink's), sorted. A
// histogram is one family: its _bucket, _sum and _count series share its
// name. Every series carries the node label.
func MetricNames() []string {
	return slices.Sorted(slices.Values(metricNames))
}
