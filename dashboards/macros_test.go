package dashboards_test

import (
	"errors"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/dashboards"
)

// TestExpandMacros: the plugin's macros (pkg/macros/macros.go of
// grafana/clickhouse-datasource) as sqlutil.Interpolate
// (grafana-plugin-sdk-go data/sqlutil/macros.go) applies them.
func TestExpandMacros(t *testing.T) {
	from := time.Date(2026, 11, 2, 10, 0, 0, 250e6, time.UTC) // 1793613600.25
	to := from.Add(time.Hour)
	q := dashboards.QueryContext{From: from, To: to, Interval: 30 * time.Second}
	for _, tc := range []struct{ in, want string }{
		{"WHERE $__timeFilter(time)", "WHERE time >= toDateTime(1793613600) AND time <= toDateTime(1793617200)"},
		{"WHERE $__timeFilter( time )", "WHERE time >= toDateTime(1793613600) AND time <= toDateTime(1793617200)"},
		{"WHERE $__timeFilter_ms(time)", "WHERE time >= fromUnixTimestamp64Milli(1793613600250) AND time <= fromUnixTimestamp64Milli(1793617200250)"},
		{"WHERE $__dateFilter(d)", "WHERE d >= toDate('2026-11-02') AND d <= toDate('2026-11-02')"},
		{"WHERE $__dateTimeFilter(d, t)", "WHERE (d >= toDate('2026-11-02') AND d <= toDate('2026-11-02')) AND (t >= toDateTime(1793613600) AND t <= toDateTime(1793617200))"},
		{"WHERE $__dt(d, t)", "WHERE (d >= toDate('2026-11-02') AND d <= toDate('2026-11-02')) AND (t >= toDateTime(1793613600) AND t <= toDateTime(1793617200))"},
		{"SELECT $__timeInterval(time)", "SELECT toStartOfInterval(toDateTime(time), INTERVAL 30 second)"},
		{"SELECT $__timeInterval_ms(time)", "SELECT toStartOfInterval(toDateTime64(time, 3), INTERVAL 30000 millisecond)"},
		{"SELECT $__interval_s", "SELECT 30"},
		{"WHERE t >= $__fromTime AND t <= $__toTime", "WHERE t >= toDateTime(1793613600) AND t <= toDateTime(1793617200)"},
		{"WHERE t >= $__fromTime_ms", "WHERE t >= fromUnixTimestamp64Milli(1793613600250)"},
		{"SELECT toDate($__fromTime)", "SELECT toDate(toDateTime(1793613600))"},
		// Nested parentheses belong to the argument.
		{"WHERE $__timeFilter(toDateTime(time))", "WHERE toDateTime(time) >= toDateTime(1793613600) AND toDateTime(time) <= toDateTime(1793617200)"},
		// The quirk: a macro without arguments followed later by "(" takes
		// everything up to the matching ")" as its arguments.
		{"WHERE t >= $__fromTime AND k IN ('a')", "WHERE t >= toDateTime(1793613600)"},
		// sqlutil's defaults, for what the plugin does not define.
		{"WHERE $__timeFrom(t)", "WHERE t >= '2026-11-02T10:00:00Z'"},
		{"WHERE $__timeTo(t)", "WHERE t <= '2026-11-02T11:00:00Z'"},
		// Not macros.
		{"SELECT '$__unknown(x)'", "SELECT '$__unknown(x)'"},
	} {
		got, err := dashboards.ExpandMacros(tc.in, q)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%q\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	// Intervals under a second count as one.
	got, _ := dashboards.ExpandMacros("$__timeInterval(t)", dashboards.QueryContext{From: from, To: to, Interval: 200 * time.Millisecond})
	if want := "toStartOfInterval(toDateTime(t), INTERVAL 1 second)"; got != want {
		t.Errorf("sub-second interval: %q, want %q", got, want)
	}
	for _, bad := range []string{"$__timeFilter(a, b)", "$__dateTimeFilter(d)", "$__timeInterval(a, b)"} {
		if _, err := dashboards.ExpandMacros(bad, q); !errors.Is(err, dashboards.ErrBadArgumentCount) {
			t.Errorf("%q: error %v, want ErrBadArgumentCount", bad, err)
		}
	}
}

func TestReplaceVariables(t *testing.T) {
	q := dashboards.QueryContext{
		From: time.UnixMilli(1000), To: time.UnixMilli(2000), Interval: time.Minute,
		Vars: map[string]string{"session": "abc"},
	}
	in := "s = '${session}' OR s = '$session' OR s = '[[session]]' AND $__from < $__to AND '$__interval' AND $__interval_ms AND $__fromTime AND $other"
	want := "s = 'abc' OR s = 'abc' OR s = 'abc' AND 1000 < 2000 AND '1m' AND 60000 AND $__fromTime AND $other"
	if got := dashboards.ReplaceVariables(in, q); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	q.Vars["session"] = `a b'(c)*!\~é%`
	in = "'${session:percentencode}' '[[session:percentencode]]' '${session:sqlstring}'"
	want = "'a%20b%27%28c%29%2A%21%5C~%C3%A9%25' 'a%20b%27%28c%29%2A%21%5C~%C3%A9%25' '${session:sqlstring}'"
	if got := dashboards.ReplaceVariables(in, q); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
