package dashboards

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file expands a ClickHouse panel's SQL the way Grafana and
// grafana-clickhouse-datasource do before the SQL reaches ClickHouse, so
// tests can run exactly what a dashboard runs:
//
//  1. Grafana's frontend replaces template variables ($name, ${name},
//     [[name]], and the globals $__from, $__to, $__interval,
//     $__interval_ms); the plugin's applyTemplateVariables
//     (src/data/CHDatasource.ts) formats a single value as it is, a list as
//     'a','b'.
//  2. The plugin's backend expands its macros through sqlds, which calls
//     sqlutil.Interpolate of grafana-plugin-sdk-go
//     (data/sqlutil/macros.go: getMacroMatches and Interpolate) with the
//     plugin's table of macros (pkg/macros/macros.go of
//     grafana/clickhouse-datasource: Macros), plus sqlutil's DefaultMacros
//     for the names the plugin does not define (timeFrom, timeTo,
//     timeGroup, table, column).
//
// Followed to the letter, quirks included: a macro is found by the regexp
// `\$__NAME\b`; its arguments run from the first "(" after it to the
// matching ")", even when other text stands between the name and that
// "(" (so "$__fromTime AND x IN (1)" swallows "AND x IN (1)"), unless a ")"
// comes first; arguments are split at every comma and trimmed; each match's
// text is replaced everywhere it occurs.

// ErrBadArgumentCount is sqlutil.ErrorBadArgumentCount: a macro was given
// the wrong number of arguments.
var ErrBadArgumentCount = errors.New("unexpected number of arguments")

// QueryContext is what a query is run with: the dashboard's time range,
// the interval Grafana chose for the panel, and the template variables'
// values.
type QueryContext struct {
	From, To time.Time
	Interval time.Duration
	Vars     map[string]string
}

type macroFunc func(q QueryContext, args []string) (string, error)

// timeToDate, timeToDateTime and timeToDateTime64 are the plugin's
// conversions of a time to SQL.
func timeToDate(t time.Time) string { return fmt.Sprintf("toDate('%s')", t.Format("2006-01-02")) }
func timeToDateTime(t time.Time) string {
	return fmt.Sprintf("toDateTime(%d)", t.Unix())
}
func timeToDateTime64(t time.Time) string {
	return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli())
}

func argCount(args []string, n int) error {
	if len(args) != n {
		if n == 1 {
			return fmt.Errorf("%w: expected 1 argument, received %d", ErrBadArgumentCount, len(args))
		}
		return fmt.Errorf("%w: expected %d arguments, received %d", ErrBadArgumentCount, n, len(args))
	}
	return nil
}

// clickHouseMacros is pkg/macros/macros.go's Macros.
var clickHouseMacros = map[string]macroFunc{
	"fromTime":    func(q QueryContext, _ []string) (string, error) { return timeToDateTime(q.From), nil },
	"toTime":      func(q QueryContext, _ []string) (string, error) { return timeToDateTime(q.To), nil },
	"fromTime_ms": func(q QueryContext, _ []string) (string, error) { return timeToDateTime64(q.From), nil },
	"toTime_ms":   func(q QueryContext, _ []string) (string, error) { return timeToDateTime64(q.To), nil },
	"timeFilter": func(q QueryContext, args []string) (string, error) {
		if err := argCount(args, 1); err != nil {
			return "", err
		}
		c := args[0]
		return fmt.Sprintf("%s >= %s AND %s <= %s", c, timeToDateTime(q.From), c, timeToDateTime(q.To)), nil
	},
	"timeFilter_ms": func(q QueryContext, args []string) (string, error) {
		if err := argCount(args, 1); err != nil {
			return "", err
		}
		c := args[0]
		return fmt.Sprintf("%s >= %s AND %s <= %s", c, timeToDateTime64(q.From), c, timeToDateTime64(q.To)), nil
	},
	"dateFilter": func(q QueryContext, args []string) (string, error) {
		if err := argCount(args, 1); err != nil {
			return "", err
		}
		c := args[0]
		return fmt.Sprintf("%s >= %s AND %s <= %s", c, timeToDate(q.From), c, timeToDate(q.To)), nil
	},
	"dateTimeFilter": dateTimeFilter,
	"dt":             dateTimeFilter,
	"timeInterval": func(q QueryContext, args []string) (string, error) {
		if err := argCount(args, 1); err != nil {
			return "", err
		}
		seconds := math.Max(q.Interval.Seconds(), 1)
		return fmt.Sprintf("toStartOfInterval(toDateTime(%s), INTERVAL %d second)", args[0], int(seconds)), nil
	},
	"timeInterval_ms": func(q QueryContext, args []string) (string, error) {
		if err := argCount(args, 1); err != nil {
			return "", err
		}
		ms := math.Max(float64(q.Interval.Milliseconds()), 1)
		return fmt.Sprintf("toStartOfInterval(toDateTime64(%s, 3), INTERVAL %d millisecond)", args[0], int(ms)), nil
	},
	"interval_s": func(q QueryContext, _ []string) (string, error) {
		return strconv.Itoa(int(math.Max(q.Interval.Seconds(), 1))), nil
	},
}

func dateTimeFilter(q QueryContext, args []string) (string, error) {
	if err := argCount(args, 2); err != nil {
		return "", err
	}
	d, t := args[0], args[1]
	return fmt.Sprintf("(%s >= %s AND %s <= %s) AND (%s >= %s AND %s <= %s)",
		d, timeToDate(q.From), d, timeToDate(q.To), t, timeToDateTime(q.From), t, timeToDateTime(q.To)), nil
}

// defaultMacros is sqlutil.DefaultMacros less the names the plugin
// overrides (timeFilter). table and column are empty for SQL-editor
// queries.
var defaultMacros = map[string]macroFunc{
	"timeFrom": func(q QueryContext, args []string) (string, error) {
		if err := argCount(args, 1); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s >= '%s'", args[0], q.From.UTC().Format(time.RFC3339)), nil
	},
	"timeTo": func(q QueryContext, args []string) (string, error) {
		if err := argCount(args, 1); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s <= '%s'", args[0], q.To.UTC().Format(time.RFC3339)), nil
	},
	"timeGroup": func(q QueryContext, args []string) (string, error) {
		if len(args) != 2 {
			return "", fmt.Errorf("%w: expected 1 argument, received %d", ErrBadArgumentCount, len(args))
		}
		res := ""
		switch args[1] {
		case "minute":
			res += fmt.Sprintf("datepart(minute, %s),", args[0])
			fallthrough
		case "hour":
			res += fmt.Sprintf("datepart(hour, %s),", args[0])
			fallthrough
		case "day":
			res += fmt.Sprintf("datepart(day, %s),", args[0])
			fallthrough
		case "month":
			res += fmt.Sprintf("datepart(month, %s),", args[0])
			fallthrough
		case "year":
			res += fmt.Sprintf("datepart(year, %s)", args[0])
		}
		return res, nil
	},
	"table":  func(QueryContext, []string) (string, error) { return "", nil },
	"column": func(QueryContext, []string) (string, error) { return "", nil },
}

// MacroNames lists every macro the backend expands, sorted.
func MacroNames() []string {
	var names []string
	for n := range clickHouseMacros {
		names = append(names, n)
	}
	for n := range defaultMacros {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func macroByName(name string) macroFunc {
	if m, ok := clickHouseMacros[name]; ok {
		return m
	}
	return defaultMacros[name]
}

// macroMatch is one occurrence of a macro: its whole text and the text
// between its parentheses.
type macroMatch struct{ text, args string }

// macroMatches is sqlutil's getMacroMatches.
func macroMatches(input, name string) []macroMatch {
	rgx := regexp.MustCompile(`\$__` + regexp.QuoteMeta(name) + `\b`)
	var out []macroMatch
	for _, m := range rgx.FindAllStringIndex(input, -1) {
		start := m[0]
		rest := input[start:]
		end, argStart, depth, forceBreak := 0, 0, 0, false
		for idx, r := range rest {
			if depth == 0 && end > 0 || forceBreak {
				break
			}
			switch r {
			case '(':
				depth++
				if argStart == 0 {
					argStart = idx + 1
				}
			case ')':
				if depth == 0 {
					end, forceBreak = 0, true
					break
				}
				depth--
				end = idx + 1
			}
		}
		if end == 0 {
			end = m[1] - start
		}
		mm := macroMatch{text: rest[:end]}
		if argStart > 0 {
			mm.args = rest[argStart : end-1]
		}
		out = append(out, mm)
	}
	return out
}

// ExpandMacros expands the plugin's macros in sql as its backend does.
// The backend walks a Go map, in no fixed order; this walks the names
// sorted, which gives the same result whenever no macro's expansion holds
// another macro (none of the plugin's does).
func ExpandMacros(sql string, q QueryContext) (string, error) {
	for _, name := range MacroNames() {
		for _, m := range macroMatches(sql, name) {
			args := strings.Split(m.args, ",")
			for i := range args {
				args[i] = strings.TrimSpace(args[i])
			}
			res, err := macroByName(name)(q, args)
			if err != nil {
				return sql, fmt.Errorf("$__%s: %w", name, err)
			}
			sql = strings.ReplaceAll(sql, m.text, res)
		}
	}
	return sql, nil
}

// templateVarRE is Grafana's variable syntax (public/app/features/
// templating/template_srv: variableRegex): $name, [[name]] and
// ${name} / ${name:format}.
var templateVarRE = regexp.MustCompile(`\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}`)

// ReplaceVariables does what Grafana's template service does with the
// plugin's formatter: every known variable is replaced by its value, and
// the globals $__from and $__to (milliseconds since the epoch),
// $__interval and $__interval_ms come from q. Unknown names stay.
func ReplaceVariables(sql string, q QueryContext) string {
	vars := map[string]string{
		"__from":        strconv.FormatInt(q.From.UnixMilli(), 10),
		"__to":          strconv.FormatInt(q.To.UnixMilli(), 10),
		"__interval_ms": strconv.FormatInt(q.Interval.Milliseconds(), 10),
		"__interval":    grafanaInterval(q.Interval),
	}
	for k, v := range q.Vars {
		vars[k] = v
	}
	return templateVarRE.ReplaceAllStringFunc(sql, func(m string) string {
		sub := templateVarRE.FindStringSubmatch(m)
		name, format := sub[1]+sub[2]+sub[4], sub[3]+sub[6]
		v, ok := vars[name]
		switch {
		case !ok:
		case format == "":
			return v
		case format == "percentencode":
			return percentEncode(v)
		}
		return m // a format not followed here stays, for the tests to see
	})
}

// percentEncode is Grafana's ${name:percentencode} (encodeURIComponentStrict):
// every UTF-8 byte but RFC 3986's unreserved characters as %XX. What it
// leaves is safe between single quotes in SQL, where a value as it is (a
// session id holds any visible ASCII the wire carried: quotes, backslashes)
// is not; decodeURLComponent turns it back on the server.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// grafanaInterval writes an interval as Grafana's $__interval does: the
// largest whole unit ("30s", "5m", "1h"), milliseconds below a second.
func grafanaInterval(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// Expand is what the ClickHouse server receives for a panel's SQL: the
// template variables replaced, then the macros expanded.
func Expand(sql string, q QueryContext) (string, error) {
	return ExpandMacros(ReplaceVariables(sql, q), q)
}
