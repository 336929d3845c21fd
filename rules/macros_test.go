package rules

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

// expandMacros expands the grafana-clickhouse-datasource macros these rules
// use, exactly as the plugin does. The definitions follow the plugin's
// pkg/macros/macros.go (github.com/grafana/clickhouse-datasource):
//
//	$__timeFilter(c)    c >= toDateTime(<from unix s>) AND c <= toDateTime(<to unix s>)
//	$__timeFilter_ms(c) c >= fromUnixTimestamp64Milli(<from ms>) AND c <= fromUnixTimestamp64Milli(<to ms>)
//	$__fromTime         toDateTime(<from unix s>)       $__toTime     toDateTime(<to unix s>)
//	$__fromTime_ms      fromUnixTimestamp64Milli(<ms>)  $__toTime_ms  likewise
//	$__timeInterval(c)  toStartOfInterval(toDateTime(c), INTERVAL <interval s, at least 1> second)
//	$__interval_s       <interval s, at least 1>
//
// and the matching of grafana/sqlds (macros.go): `$__name` followed by an
// optional parenthesised argument list, arguments split on commas and
// trimmed. A macro the plugin does not define is an error here (the plugin
// would leave the text as is and ClickHouse would fail on it).
func expandMacros(sql string, from, to time.Time, interval time.Duration) (string, error) {
	dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	dt64 := func(t time.Time) string { return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli()) }
	seconds := int(math.Max(interval.Seconds(), 1))
	var firstErr error
	out := macroCall.ReplaceAllStringFunc(sql, func(m string) string {
		sub := macroCall.FindStringSubmatch(m)
		name, hasArgs := sub[1], sub[2] != ""
		var args []string
		if hasArgs {
			for a := range strings.SplitSeq(sub[3], ",") {
				args = append(args, strings.TrimSpace(a))
			}
		}
		one := func(f func(string) string) string {
			if len(args) != 1 {
				firstErr = fmt.Errorf("$__%s: expected 1 argument, received %d", name, len(args))
				return m
			}
			return f(args[0])
		}
		switch name {
		case "timeFilter":
			return one(func(c string) string { return fmt.Sprintf("%s >= %s AND %s <= %s", c, dt(from), c, dt(to)) })
		case "timeFilter_ms":
			return one(func(c string) string { return fmt.Sprintf("%s >= %s AND %s <= %s", c, dt64(from), c, dt64(to)) })
		case "timeInterval":
			return one(func(c string) string {
				return fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", c, seconds)
			})
		}
		// Macros without arguments keep what follows them.
		rest := ""
		if hasArgs {
			rest = sub[2]
		}
		switch name {
		case "fromTime":
			return dt(from) + rest
		case "toTime":
			return dt(to) + rest
		case "fromTime_ms":
			return dt64(from) + rest
		case "toTime_ms":
			return dt64(to) + rest
		case "interval_s":
			return fmt.Sprint(seconds) + rest
		}
		firstErr = fmt.Errorf("unknown macro $__%s", name)
		return m
	})
	return out, firstErr
}

// macroCall: $__name, then an optional (args) without nested parentheses,
// which is all these rules use.
var macroCall = regexp.MustCompile(`\$__(\w+)(\(([^()]*)\))?`)

func TestExpandMacros(t *testing.T) {
	from := time.Unix(1700000000, 0)
	to := from.Add(10 * time.Minute)
	for _, c := range []struct{ in, want string }{
		{"WHERE $__timeFilter(time) AND x", "WHERE time >= toDateTime(1700000000) AND time <= toDateTime(1700000600) AND x"},
		{"$__timeFilter_ms( t )", "t >= fromUnixTimestamp64Milli(1700000000000) AND t <= fromUnixTimestamp64Milli(1700000600000)"},
		{"$__fromTime, $__toTime", "toDateTime(1700000000), toDateTime(1700000600)"},
		{"$__timeInterval(time)", "toStartOfInterval(toDateTime(time), INTERVAL 60 second)"},
		{"$__interval_s", "60"},
	} {
		got, err := expandMacros(c.in, from, to, time.Minute)
		if err != nil || got != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := expandMacros("$__timeFliter(time)", from, to, time.Minute); err == nil {
		t.Error("an unknown macro expanded")
	}
	if _, err := expandMacros("$__timeFilter(a, b)", from, to, time.Minute); err == nil {
		t.Error("$__timeFilter with two arguments expanded")
	}
}
