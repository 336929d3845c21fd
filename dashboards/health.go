//lint:file-ignore SA1019 Grafana provisions dashboards from files in the classic (v1) JSON model; dashboardv2 needs Grafana's new-layouts feature and API.

package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// sel is the series selector every health query uses: the chosen nodes.
const sel = `{node=~"$node"}`

func nodeVariable() *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(NodeVar).Label("Node").
		Description("The agents' nodes (the node label every series carries).").
		Datasource(prometheusDS).
		Query(dashboard.StringOrMap{Map: map[string]any{
			"qryType": 1, "query": "label_values(replaywatch_ready, node)", "refId": "PrometheusVariableQueryEditor-VariableQuery",
		}}).
		Definition("label_values(replaywatch_ready, node)").
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: ptr("All")}, Value: dashboard.StringOrArrayOfString{String: ptr("$__all")}}).
		Sort(dashboard.VariableSortAlphabeticalAsc)
}

func rate(metric string) string {
	return `sum by (node) (rate(` + metric + sel + `[$__rate_interval]))`
}

func gauge(metric string) string { return `sum by (node) (` + metric + sel + `)` }

func health() *dashboard.DashboardBuilder {
	ids := &panelIDs{}
	return dashboard.NewDashboardBuilder("replaywatch: pipeline health").
		Uid(HealthUID).
		Description("The agents' own metrics, per node: capture, reassembly, detector, ClickHouse sink and spool.").
		Tags([]string{"replaywatch", "agent"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-3h", "now").
		Refresh("30s").
		Timezone(common.TimeZoneUtc).
		WithVariable(prometheusVariable()).
		WithVariable(nodeVariable()).
		Link(dashboardLink("Overview", OverviewUID)).
		WithRow(row(ids, "Agents")).
		WithPanel(promTimeSeries(ids, meta{"Readiness", "1 while the agent's readiness condition holds (capture, output), per node.", "bool", 12, 6},
			promQuery{"A", `min by (node, condition) (replaywatch_ready` + sel + `)`, "{{node}} {{condition}}"}).Max(1)).
		WithPanel(promTimeSeries(ids, meta{"Heartbeat age", "Time since each loop's last heartbeat; above its timeout the agent reports unhealthy.", "s", 12, 6},
			promQuery{"A", `max by (node, loop) (replaywatch_heartbeat_age_seconds` + sel + `)`, "{{node}} {{loop}}"})).
		WithRow(row(ids, "Capture")).
		WithPanel(promTimeSeries(ids, meta{"Packets captured", "Packet records read per second.", "pps", 8, 7},
			promQuery{"A", rate("replaywatch_capture_packets_total"), "{{node}}"})).
		WithPanel(promTimeSeries(ids, meta{"Bytes captured", "Captured bytes per second.", "Bps", 8, 7},
			promQuery{"A", rate("replaywatch_capture_bytes_total"), "{{node}}"})).
		WithPanel(promTimeSeries(ids, meta{"Kernel drops", "Packets the kernel dropped per second (ring or buffer full): traffic the agent never saw; and duplicates, second copies of packets already captured (one packet seen on two interfaces), set aside on purpose.", "pps", 8, 7},
			promQuery{"A", rate("replaywatch_capture_kernel_drops_total"), "{{node}} dropped"},
			promQuery{"B", rate("replaywatch_capture_duplicates_total"), "{{node}} duplicates"})).
		WithPanel(promTimeSeries(ids, meta{"Reassembly page limit", "Times per second a connection's out-of-order data outgrew the reassembly page limits and was handed on after a gap (gopacket does not expose the pages in use).", "cps", 8, 7},
			promQuery{"A", `sum by (node) (rate(replaywatch_limit_hits_total{limit="capture.MaxBufferedPages", node=~"$node"}[$__rate_interval]))`, "{{node}}"})).
		WithPanel(promTimeSeries(ids, meta{"Stream gaps", "Holes in TCP byte streams handed on as gaps, per second, as the capture and the decoder count them.", "cps", 8, 7},
			promQuery{"A", rate("replaywatch_capture_gaps_total"), "{{node}} gaps"},
			promQuery{"B", rate("replaywatch_decode_gaps_total"), "{{node}} gaps at the decoder"})).
		WithPanel(promTimeSeries(ids, meta{"Connections", "TCP connections the capture holds open now.", "none", 8, 7},
			promQuery{"A", gauge("replaywatch_capture_connections"), "{{node}} open"})).
		WithRow(row(ids, "Detector")).
		WithPanel(promTimeSeries(ids, meta{"Sessions tracked", "MCP sessions the detector tracks now.", "none", 8, 7},
			promQuery{"A", gauge("replaywatch_detector_sessions"), "{{node}}"})).
		WithPanel(promTimeSeries(ids, meta{"Limits hit", "Times a named limit was reached over the rate interval (at least four scrapes, so one hit shows in several points); each package's README says what that costs.", "none", 8, 7},
			promQuery{"A", `sum by (node, limit) (increase(replaywatch_limit_hits_total` + sel + `[$__rate_interval])) > 0`, "{{node}} {{limit}}"})).
		WithPanel(promTimeSeries(ids, meta{"Findings and resumes", "Violations and resume attempts per second, as the detector counts them. A violation counts under its kind's catalogue severity, the kind's highest: one graded lower (a high silent_reinit_after_404) shows as critical here; the Overview has each finding's own.", "cps", 8, 7},
			promQuery{"A", `sum by (node, severity) (rate(replaywatch_detector_violations_total` + sel + `[$__rate_interval]))`, "{{node}} {{severity}}"},
			promQuery{"B", `sum by (node, outcome) (rate(replaywatch_detector_resumes_total` + sel + `[$__rate_interval]))`, "{{node}} resume {{outcome}}"})).
		WithPanel(promTimeSeries(ids, meta{"Requests by protocol revision", "MCP requests per second by the revision they spoke: the mix of 2025-11-25 (sessions, resumption) and 2026-07-28 (no sessions) clients.", "reqps", 8, 7},
			promQuery{"A", `sum by (node, revision) (rate(replaywatch_detector_requests_total` + sel + `[$__rate_interval]))`, "{{node}} {{revision}}"})).
		WithRow(row(ids, "ClickHouse sink")).
		WithPanel(promTimeSeries(ids, meta{"Sink rows", "Rows per second by table and result: written (replayed rows included), spooled (their insert failed after its retries), replayed (from the spool), lost (never reached ClickHouse: see the sink_failures runbook).", "cps", 8, 7},
			promQuery{"A", `sum by (node, table, result) (rate(replaywatch_sink_rows_total` + sel + `[$__rate_interval]))`, "{{node}} {{table}} {{result}}"})).
		WithPanel(promTimeSeries(ids, meta{"Insert retries and failures", "Inserts retried, and insert attempts that failed, per second (a retry may have mended them: rows that failed for good are spooled, in Sink rows).", "cps", 8, 7},
			promQuery{"A", `sum by (node, table) (rate(replaywatch_sink_retries_total` + sel + `[$__rate_interval]))`, "{{node}} {{table}} retries"},
			promQuery{"B", `sum by (node, table) (rate(replaywatch_sink_batches_total{node=~"$node", result="failed"}[$__rate_interval]))`, "{{node}} {{table}} failed attempts"})).
		WithPanel(promTimeSeries(ids, meta{"Insert latency (p99)", "99th percentile time to send a batch and have it confirmed.", "s", 8, 7},
			promQuery{"A", `histogram_quantile(0.99, sum by (node, le) (rate(replaywatch_sink_insert_duration_seconds_bucket` + sel + `[$__rate_interval])))`, "{{node}}"})).
		WithPanel(promTimeSeries(ids, meta{"Spool size", "Bytes waiting in the on-disk spool; it grows while ClickHouse cannot take rows.", "bytes", 12, 7},
			promQuery{"A", gauge("replaywatch_sink_spool_bytes"), "{{node}}"})).
		WithPanel(promTimeSeries(ids, meta{"Spool age", "Age of the spool's oldest batch (0 when empty): how far behind ClickHouse is.", "s", 12, 7},
			promQuery{"A", `max by (node) (replaywatch_sink_spool_oldest_age_seconds` + sel + `)`, "{{node}}"}))
}
