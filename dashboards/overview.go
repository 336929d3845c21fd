//lint:file-ignore SA1019 Grafana provisions dashboards from files in the classic (v1) JSON model; dashboardv2 needs Grafana's new-layouts feature and API.

package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The overview's SQL. Every query reads the collapsed view (FINAL) and
// filters its time column with $__timeFilter; series are bucketed with
// $__timeInterval and sorted by time, as format 0 needs.
const (
	sqlFindingsByKind = `SELECT $__timeInterval(time) AS t, kind, count() AS findings
FROM violations FINAL
WHERE $__timeFilter(time)
GROUP BY t, kind
ORDER BY t, kind`

	sqlFindingsBySeverity = `SELECT $__timeInterval(time) AS t, severity, count() AS findings
FROM violations FINAL
WHERE $__timeFilter(time)
GROUP BY t, severity
ORDER BY t, severity`

	sqlFindingCounts = `SELECT
    countIf(severity = 'critical') AS critical,
    countIf(severity = 'high') AS high,
    countIf(severity = 'medium') AS medium,
    uniqExact(session_id) AS sessions_affected,
    uniqExact(server) AS servers_affected
FROM violations FINAL
WHERE $__timeFilter(time)`

	sqlResumeCounts = `SELECT
    count() AS resumes,
    countIf(outcome = 'violated') AS violated,
    if(count() = 0, 0, countIf(outcome = 'violated') / count()) AS violated_share
FROM resumes FINAL
WHERE $__timeFilter(time)`

	sqlSessionCounts = `SELECT
    count() AS sessions,
    countIf(ended = '404') AS lost_404,
    countIf(previous_session_id != '') AS reinitialised
FROM sessions FINAL
WHERE $__timeFilter(last_seen)`

	sqlUnknownCount = `SELECT count() AS unknown_outcomes, uniqExact(session_id) AS sessions
FROM unknown_outcomes FINAL
WHERE $__timeFilter(time)`

	sqlResumeOutcomes = `SELECT $__timeInterval(time) AS t, outcome, count() AS resumes
FROM resumes FINAL
WHERE $__timeFilter(time)
GROUP BY t, outcome
ORDER BY t, outcome`

	sqlResumeViolatedShare = `SELECT $__timeInterval(time) AS t, countIf(outcome = 'violated') / count() AS violated_share
FROM resumes FINAL
WHERE $__timeFilter(time)
GROUP BY t
ORDER BY t`

	sqlSessionsLost = `SELECT $__timeInterval(last_seen) AS t, countIf(ended = '404') AS lost_404
FROM sessions FINAL
WHERE $__timeFilter(last_seen)
GROUP BY t
ORDER BY t`

	sqlSessionsReinit = `SELECT $__timeInterval(first_seen) AS t, countIf(previous_session_id != '') AS reinitialised
FROM sessions FINAL
WHERE $__timeFilter(first_seen)
GROUP BY t
ORDER BY t`

	sqlTopServers = `SELECT server, count() AS findings, countIf(severity = 'critical') AS critical,
    uniqExact(session_id) AS sessions, uniqExact(kind) AS kinds
FROM violations FINAL
WHERE $__timeFilter(time)
GROUP BY server
ORDER BY findings DESC, server
LIMIT 10`

	sqlTopClients = `SELECT arrayStringConcat(arrayPopBack(splitByChar(':', client)), ':') AS address, count() AS findings,
    countIf(severity = 'critical') AS critical, uniqExact(session_id) AS sessions, uniqExact(server) AS servers
FROM violations FINAL
WHERE $__timeFilter(time)
GROUP BY address
ORDER BY findings DESC, address
LIMIT 10`

	sqlUnknownOverTime = `SELECT $__timeInterval(time) AS t, server, count() AS calls
FROM unknown_outcomes FINAL
WHERE $__timeFilter(time)
GROUP BY t, server
ORDER BY t, server`

	sqlUnknownByTool = `SELECT server, tool, method, count() AS calls, uniqExact(session_id) AS sessions,
    countIf(reissued_in_session != '') AS reissued, max(time) AS last_seen
FROM unknown_outcomes FINAL
WHERE $__timeFilter(time)
GROUP BY server, tool, method
ORDER BY calls DESC, server, tool
LIMIT 50`

	sqlRecentFindings = `SELECT time, severity, kind, server, client, session_id, new_session_id, tool, confidence, explanation
FROM violations FINAL
WHERE $__timeFilter(time)
ORDER BY time DESC, kind, id
LIMIT 500`
)

func overview() *dashboard.DashboardBuilder {
	ids := &panelIDs{}
	return dashboard.NewDashboardBuilder("replaywatch: overview").
		Uid(OverviewUID).
		Description("Whether any MCP session was corrupted, which servers and clients are involved, and how resumes fare.").
		Tags([]string{"replaywatch", "mcp"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-6h", "now").
		Refresh("1m").
		Timezone(common.TimeZoneUtc).
		WithVariable(clickHouseVariable()).
		Link(dashboardLink("Session", SessionUID)).
		Link(dashboardLink("Pipeline health", HealthUID)).
		WithRow(row(ids, "Now")).
		WithPanel(chStat(ids, meta{"Findings", "Findings in the time range by severity, and how many sessions and servers they touch.", "none", 10, 4},
			chQuery("A", sqlFindingCounts)).Thresholds(redFromOne())).
		WithPanel(chStat(ids, meta{"Resumes", "Resume attempts (requests with Last-Event-ID) in the time range; the share whose replay broke the resumability contract.", "none", 6, 4},
			chQuery("A", sqlResumeCounts)).Thresholds(neutral()).
			OverrideByName("violated", []dashboard.DynamicConfigValue{{Id: "thresholds", Value: redFromOneConfig()}}).
			OverrideByName("violated_share", []dashboard.DynamicConfigValue{{Id: "unit", Value: "percentunit"}})).
		WithPanel(chStat(ids, meta{"Sessions", "Sessions last seen in the time range; those that ended with 404 (lost) and those that replaced an earlier session (re-initialised after a 404, or swapped in by the server).", "none", 5, 4},
			chQuery("A", sqlSessionCounts)).Thresholds(neutral())).
		WithPanel(chStat(ids, meta{"Unknown outcomes", "Tool calls in flight when their session was lost: nobody knows whether they ran.", "none", 3, 4},
			chQuery("A", sqlUnknownCount)).Thresholds(redFromOne())).
		WithRow(row(ids, "Findings")).
		WithPanel(countBars(chTimeSeries(ids, meta{"Findings by kind", "Findings per interval, stacked by kind (the catalogue's names).", "none", 12, 8},
			chQuery("A", sqlFindingsByKind))).DisplayName("${__field.labels.kind}")).
		WithPanel(countBars(chTimeSeries(ids, meta{"Findings by severity", "Findings per interval, stacked by severity: critical pages, high warns.", "none", 12, 8},
			chQuery("A", sqlFindingsBySeverity))).DisplayName("${__field.labels.severity}")).
		WithPanel(chTable(ids, meta{"Top servers by findings", "MCP servers with the most findings in the time range.", "none", 12, 8},
			chQuery("A", sqlTopServers))).
		WithPanel(chTable(ids, meta{"Top clients by findings", "Client addresses (IP, every port of it together) with the most findings in the time range; clients behind one NAT or proxy share one.", "none", 12, 8},
			chQuery("A", sqlTopClients))).
		WithRow(row(ids, "Resumes and sessions")).
		WithPanel(countBars(chTimeSeries(ids, meta{"Resume outcomes", "Resume attempts per interval by outcome: resumed, rejected_404, rejected_4xx, violated, unverifiable.", "none", 8, 8},
			chQuery("A", sqlResumeOutcomes))).DisplayName("${__field.labels.outcome}")).
		WithPanel(chTimeSeries(ids, meta{"Resumes that violated the contract", "Share of the interval's resume attempts whose replay was wrong (outcome violated).", "percentunit", 8, 8},
			chQuery("A", sqlResumeViolatedShare)).Max(1)).
		WithPanel(countBars(chTimeSeries(ids, meta{"Sessions lost (404) and re-initialised", "Sessions that ended with a 404 (by when they were last seen) and sessions that replaced an earlier one, after a 404 or swapped in by the server (by when they began).", "none", 8, 8},
			chQuery("A", sqlSessionsLost), chQuery("B", sqlSessionsReinit)))).
		WithRow(row(ids, "Unknown outcomes")).
		WithPanel(countBars(chTimeSeries(ids, meta{"Tool calls with unknown outcome", "Calls in flight when their session was lost, per interval and server: they may or may not have run, and a retry may run them twice.", "none", 10, 8},
			chQuery("A", sqlUnknownOverTime))).DisplayName("${__field.labels.server}")).
		WithPanel(chTable(ids, meta{"Unknown outcomes by tool", "Which tools were left with unknown outcome, and how many were issued again, in a new session or their own (possible duplicated side effects).", "none", 14, 8},
			chQuery("A", sqlUnknownByTool))).
		WithRow(row(ids, "Recent findings")).
		WithPanel(chTable(ids, meta{"Recent findings", "The latest findings; click a row to open its session's dashboard.", "none", 24, 12},
			chQuery("A", sqlRecentFindings)).DataLinks(sessionDataLink("session_id")))
}
