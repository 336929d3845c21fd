//lint:file-ignore SA1019 Grafana provisions dashboards from files in the classic (v1) JSON model; dashboardv2 needs Grafana's new-layouts feature and API.

package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The session dashboard's SQL: every query is about the session in
// ${session} (its rows lead with session_id, so each is a few granules),
// within the time range (links carry the range over). The id comes
// percent-encoded and is decoded by the server: Grafana puts a variable's
// value in the SQL as it is, and a session id is whatever the wire carried
// (a quote, a backslash), which would end the string or add a condition.
// The story panels
// (epochs, transitions, events, resumes, findings) and the annotations
// come from the replaywatch data source instead (storyTable).
const (
	sqlSessionPicker = `SELECT session_id
FROM sessions FINAL
WHERE $__timeFilter(last_seen)
ORDER BY last_seen DESC
LIMIT 1000`

	sqlSessionEventsPerStream = `SELECT $__timeInterval(time) AS t, stream_id, count() AS events
FROM stream_events FINAL
WHERE session_id = decodeURLComponent('${session:percentencode}') AND $__timeFilter(time)
GROUP BY t, stream_id
ORDER BY t, stream_id`

	sqlSessionUnknown = `SELECT time, called_at, jsonrpc_id, method, tool, arguments_hash, reason, reissued_in_session
FROM unknown_outcomes FINAL
WHERE session_id = decodeURLComponent('${session:percentencode}') AND $__timeFilter(time)
ORDER BY time`

	sqlSessionUnverifiable = `SELECT time, check_name, reason
FROM unverifiable FINAL
WHERE session_id = decodeURLComponent('${session:percentencode}') AND $__timeFilter(time)
ORDER BY time`

	// The story in one list. The casts: older servers find no common type
	// for String and LowCardinality(String) across UNION ALL.
	sqlSessionTimeline = `SELECT time, what, stream_id, detail FROM (
    SELECT time, 'event' AS what, stream_id,
        concat(event_id, ' #', toString(position), ' delivery ', toString(delivery)) AS detail
    FROM stream_events FINAL WHERE session_id = decodeURLComponent('${session:percentencode}') AND $__timeFilter(time)
    UNION ALL
    SELECT time, CAST(concat('resume ', outcome) AS String) AS what, stream_id,
        concat('Last-Event-ID ', last_event_id, ', status ', toString(status)) AS detail
    FROM resumes FINAL WHERE session_id = decodeURLComponent('${session:percentencode}') AND $__timeFilter(time)
    UNION ALL
    SELECT time, CAST(concat('finding ', kind) AS String) AS what, stream_id, explanation AS detail
    FROM violations FINAL WHERE session_id = decodeURLComponent('${session:percentencode}') AND $__timeFilter(time)
)
ORDER BY time, what`
)

func sessionVariable() *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(SessionVar).Label("Session").
		Description("The MCP session id (Mcp-Session-Id). Sessions last seen in the time range are listed; any id may be typed.").
		Datasource(clickHouseDS).
		Query(dashboard.StringOrMap{Map: map[string]any{
			"refId": "session", "editorType": "sql", "pluginVersion": PluginVersion,
			"format": int(FormatTable), "queryType": string(QueryTypeTable), "rawSql": sqlSessionPicker,
		}}).
		Definition(sqlSessionPicker).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		AllowCustomValue(true)
}

func session() *dashboard.DashboardBuilder {
	ids := &panelIDs{}
	return dashboard.NewDashboardBuilder("replaywatch: session").
		Uid(SessionUID).
		Description("One MCP session's story: its epochs, events per stream, resumes, and findings with their evidence.").
		Tags([]string{"replaywatch", "mcp"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Time("now-24h", "now").
		Refresh("5m").
		Timezone(common.TimeZoneUtc).
		WithVariable(clickHouseVariable()).
		WithVariable(sessionVariable()).
		WithVariable(storyVariable()).
		Annotation(dashboard.NewAnnotationQueryBuilder().Name("Story").Datasource(sessionsDS).Enable(true).IconColor("red").
			Target(storyQuery("annotations"))).
		Link(dashboardLink("Overview", OverviewUID)).
		WithRow(row(ids, "Lifecycle")).
		WithPanel(storyTimeline(ids, meta{"Session over time", "The session id the client held, epoch by epoch (S1, then S2): from the replaywatch data source's story.", "none", 24, 4})).
		WithPanel(storyTable(ids, meta{"Epochs", "The session, the session it follows and those that follow it (S1 -> S2): when each was seen, how it ended, the link's confidence, and what it carried.", "none", 24, 6}, "epochs").
			DataLinks(sessionDataLink("session"))).
		WithPanel(storyTable(ids, meta{"Session id changes", "Where the session id changed under the client, and why (the finding's kind and explanation).", "none", 24, 5}, "transitions").
			DataLinks(sessionDataLink("to"))).
		WithRow(row(ids, "Streams")).
		WithPanel(countBars(chTimeSeries(ids, meta{"SSE events per stream", "Events delivered per interval on each SSE stream of the session.", "none", 24, 7},
			chQuery("A", sqlSessionEventsPerStream))).DisplayName("${__field.labels.stream_id}")).
		WithPanel(storyTable(ids, meta{"SSE events in order", "Every event by stream in the order delivered, with its position in the stream and the delivery (connection) it came on; a position that goes back is a replay.", "none", 24, 10}, "events")).
		WithRow(row(ids, "Resumes and findings")).
		WithPanel(storyTable(ids, meta{"Resume attempts", "Requests that carried Last-Event-ID, what the server answered, and the outcome.", "none", 24, 7}, "resumes")).
		WithPanel(storyTable(ids, meta{"Findings", "The session's findings with their explanation and evidence (JSON).", "none", 24, 10}, "findings")).
		WithPanel(chTable(ids, meta{"Unknown outcomes", "Calls in flight when the session was lost; reissued_in_session names the session that sent the same call again.", "none", 12, 6},
			chQuery("A", sqlSessionUnknown))).
		WithPanel(chTable(ids, meta{"Unverifiable checks", "Checks the capture could not decide (gaps, limits).", "none", 12, 6},
			chQuery("A", sqlSessionUnverifiable))).
		WithRow(row(ids, "Timeline")).
		WithPanel(chTable(ids, meta{"Timeline", "Events, resumes and findings in one list, in time order.", "none", 24, 12},
			chQuery("A", sqlSessionTimeline)))
}
