package clickhouse

import "strings"

// ReadQueries are the queries the schema is laid out for, as dashboards and
// alert rules run them: they read the collapsed view (FINAL), filter on the
// partition column, and lead with the sorting keys. "{db}" stands for the
// database; "?" parameters are bound by the client. The tests run each on
// ClickHouse 18.16 and 26.x against seeded rows.
var ReadQueries = map[string]string{
	// Findings of the last window by kind and severity (overview, alerts).
	"violations_by_kind": `SELECT kind, severity, count() AS findings
FROM {db}.violations FINAL
WHERE time >= ?
GROUP BY kind, severity
ORDER BY findings DESC, kind`,

	// Servers with most findings (overview).
	"top_servers": `SELECT server, count() AS findings, uniqExact(session_id) AS sessions
FROM {db}.violations FINAL
WHERE time >= ?
GROUP BY server
ORDER BY findings DESC, server
LIMIT 10`,

	// Resume outcomes per minute (overview: how resumes fare in a deploy).
	"resume_outcomes": `SELECT toStartOfMinute(time) AS minute, outcome, count() AS resumes
FROM {db}.resumes FINAL
WHERE time >= ?
GROUP BY minute, outcome
ORDER BY minute, outcome`,

	// One session's story in time order: its events, resumes and findings.
	// (The casts: 18.16 finds no common type for String and
	// LowCardinality(String) across UNION ALL.)
	"session_timeline": `SELECT time, what, stream_id, detail FROM (
    SELECT time, 'event' AS what, stream_id, concat(event_id, ' #', toString(position), ' delivery ', toString(delivery)) AS detail
    FROM {db}.stream_events FINAL WHERE session_id = ?
    UNION ALL
    SELECT time, CAST(concat('resume ', outcome) AS String) AS what, stream_id, concat('Last-Event-ID ', last_event_id) AS detail
    FROM {db}.resumes FINAL WHERE session_id = ?
    UNION ALL
    SELECT time, CAST(concat('violation ', kind) AS String) AS what, stream_id, explanation AS detail
    FROM {db}.violations FINAL WHERE session_id = ?
)
ORDER BY time, what`,

	// Tool calls whose outcome nobody knows (overview, alerts).
	"unknown_outcomes": `SELECT server, tool, count() AS calls
FROM {db}.unknown_outcomes FINAL
WHERE time >= ?
GROUP BY server, tool
ORDER BY calls DESC, server, tool`,
}

// ReadQuery returns a named read query for database.
func ReadQuery(name, database string) string {
	return strings.ReplaceAll(ReadQueries[name], "{db}", database)
}
