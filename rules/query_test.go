package rules

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/test/chdbtest"
)

// row is one seeded row: column name -> SQL literal. Columns left out get
// their type's empty value.
type row map[string]string

// seed is what a scenario puts in the tables.
type seed map[string][]row

// instance is one alert instance a rule's query produced.
type instance struct {
	labels map[string]string
	value  float64
}

// scenario is seeded data and the instances that must fire on it (by
// labels and value); nil fires nothing.
type scenario struct {
	name string
	data seed
	want []instance
}

const (
	server = "10.0.0.9:8080"
	client = "10.0.0.5:40000"
)

func lit(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }

func at(t time.Time) string { return lit(t.UTC().Format("2006-01-02 15:04:05.000000000")) }

// scenarios returns, for a rule, data on which it must fire and data on
// which it must stay silent: the finding absent, and the finding older than
// the rule's window.
func scenarios(r *alertRule, sql string, window time.Duration, now time.Time) []scenario {
	recent, old := now.Add(-time.Minute), now.Add(-window-10*time.Minute)
	if k := detector.Kind(r.Labels["kind"]); k != "" {
		violation := func(id string, kind detector.Kind, sev detector.Severity, session string, when time.Time) row {
			return row{"id": lit(id), "kind": lit(string(kind)), "severity": lit(string(sev)),
				"time": at(when), "session_id": lit(session), "server": lit(server), "client": lit(client),
				"explanation": lit("seeded " + string(kind)), "evidence": lit("[]")}
		}
		// A rule that selects one of its kind's severities must stay
		// silent on the others.
		sev := detector.SeverityOf(k)
		if m := severityFilter.FindStringSubmatch(sql); m != nil {
			sev = detector.Severity(m[1])
		}
		var others []row
		for i, o := range catalogue {
			for j, osev := range detector.SeveritiesOf(o) {
				if o != k || osev != sev {
					others = append(others, violation(fmt.Sprint("o", i, "-", j), o, osev, "S-other-"+string(o)+"-"+string(osev), recent))
				}
			}
		}
		mine := violation("v1", k, sev, "S-"+string(k), recent)
		return []scenario{
			{"present", seed{"violations": append([]row{mine, mine}, others...)}, // the same finding twice: FINAL makes it one
				[]instance{{map[string]string{"session_id": "S-" + string(k), "server": server, "client": client}, 1}}},
			{"absent", seed{"violations": others}, nil},
			{"older than the window", seed{"violations": {violation("v1", k, sev, "S-"+string(k), old)}}, nil},
			// 2026-07-28 has no sessions: the link opens the overview.
			{"without a session", seed{"violations": {violation("v1", k, sev, "", recent)}},
				[]instance{{map[string]string{"session_id": "", "server": server, "client": client}, 1}}},
		}
	}
	resume := func(id, srv, session, outcome string, when time.Time) row {
		return row{"id": lit(id), "time": at(when), "session_id": lit(session), "last_event_id": lit("1_3"),
			"stream_id": lit("1"), "status": "200", "outcome": lit(outcome), "client": lit(client), "server": lit(srv)}
	}
	resumes := func(srv string, n, violated int, when time.Time) []row {
		var rs []row
		for i := range n {
			outcome, session := "resumed", fmt.Sprintf("S-%s-%d", srv, i)
			if i >= n-violated {
				outcome = "violated"
			}
			// Later resumes are later: the latest violated one is the last.
			rs = append(rs, resume(fmt.Sprintf("r-%s-%d", srv, i), srv, session, outcome, when.Add(time.Duration(i)*time.Second)))
		}
		return rs
	}
	unknown := func(id, session, tool string, when time.Time) row {
		return row{"id": lit(id), "time": at(when), "session_id": lit(session), "jsonrpc_id": lit(id), "method": lit("tools/call"),
			"tool": lit(tool), "arguments_hash": lit("ab12"), "called_at": at(when.Add(-time.Second)), "client": lit(client),
			"server": lit(server), "reason": lit("session lost (404)")}
	}
	switch r.UID {
	case "rw-resume-violation-ratio":
		return []scenario{
			{"present", seed{"resumes": append(resumes(server, 10, 2, recent.Add(-time.Minute)), resumes("10.0.0.7:8080", 10, 0, recent)...)},
				[]instance{{map[string]string{"server": server}, 0.2}}},
			{"absent", seed{"resumes": append(resumes(server, 10, 0, recent), resumes("10.0.0.7:8080", 4, 4, recent)...)}, nil},
			{"older than the window", seed{"resumes": resumes(server, 10, 5, old)}, nil},
		}
	case "rw-unknown-outcomes":
		u1, u2 := unknown("u1", "S-lost", "ship", recent), unknown("u2", "S-lost", "charge", recent)
		cancelled := unknown("u3", "S-lost", "ship", recent)
		cancelled["reason"] = lit(detector.UnknownCancelledPrefix + "the stream carrying the call ended before its response and no resume delivered it")
		return []scenario{
			{"present", seed{"unknown_outcomes": {u1, u2, u1}},
				[]instance{{map[string]string{"session_id": "S-lost", "server": server, "client": client, "tools": "charge,ship"}, 2}}},
			{"absent", seed{}, nil},
			{"older than the window", seed{"unknown_outcomes": {unknown("u1", "S-lost", "ship", old)}}, nil},
			// A client's own time-out: it knows it does not know.
			{"cancelled by the client", seed{"unknown_outcomes": {cancelled}}, nil},
		}
	}
	return nil
}

// TestClickHouseAlertQueries runs every ClickHouse alert query, its macros
// expanded as the plugin expands them over the rule's relative time range,
// on ClickHouse 26.x (embedded chDB) with replaywatch's schema, over seeded
// rows: each must fire when its finding is in the window, with the session,
// server and client as labels and the count as value, and stay silent when
// the finding is absent or older than the window. Then the rule's
// annotations are rendered on the real labels: they must name the session
// and the server.
func TestClickHouseAlertQueries(t *testing.T) {
	ctx := context.Background()
	s := openSchema(t)
	types := map[string]map[string]string{}
	for _, table := range clickhouse.TableNames() {
		res, err := s.Query(ctx, "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = "+lit(table))
		if err != nil {
			t.Fatal(err)
		}
		types[table] = map[string]string{}
		for _, r := range res.Rows {
			types[table][r[0].(string)] = r[1].(string)
		}
	}

	tested := 0
	for _, r := range loadProvisioning(t).rules {
		q, err := decodeRule(r)
		if err != nil {
			t.Fatalf("%s: %v", r.UID, err)
		}
		if q.clickhouse == nil {
			continue
		}
		tested++
		t.Run(r.UID, func(t *testing.T) {
			if !strings.Contains(q.clickhouse.RawSQL, " FINAL") || !strings.Contains(q.clickhouse.RawSQL, "$__timeFilter(") {
				t.Error("the query must read the collapsed view (FINAL) and filter with $__timeFilter")
			}
			now := time.Now().UTC()
			window := time.Duration(q.source.RelativeTimeRange.From) * time.Second
			sql, err := expandMacros(q.clickhouse.RawSQL, now.Add(-window), now, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			scs := scenarios(r, q.clickhouse.RawSQL, window, now)
			if len(scs) == 0 {
				t.Fatal("no seeded scenarios for this rule: add them to scenarios()")
			}
			for _, sc := range scs {
				for _, table := range clickhouse.TableNames() {
					if err := s.Exec(ctx, "TRUNCATE TABLE "+table); err != nil {
						t.Fatal(err)
					}
				}
				for _, table := range slices.Sorted(maps.Keys(sc.data)) {
					// One INSERT per row, so that repeated rows are
					// separate parts FINAL has to collapse.
					for _, rw := range sc.data[table] {
						if err := s.Exec(ctx, insertSQL(t, table, types[table], rw)); err != nil {
							t.Fatalf("%s: seeding %s: %v", sc.name, table, err)
						}
					}
				}
				res, err := s.Query(ctx, sql)
				if err != nil {
					t.Fatalf("%s: %v\n%s", sc.name, err, sql)
				}
				got := instances(t, res, sqlLabelColumns(q.clickhouse.RawSQL))
				var firing []instance
				for _, in := range got {
					if q.fires(in.value) {
						firing = append(firing, in)
					}
				}
				if !sameInstances(firing, sc.want) {
					t.Errorf("%s: fires %v, want %v\n(all rows: %v)", sc.name, firing, sc.want, got)
				}
				for _, in := range firing {
					desc, err := renderAnnotation(r.Annotations["description"], in.labels, in.value)
					if err != nil {
						t.Fatal(err)
					}
					for _, must := range []string{in.labels["session_id"], in.labels["server"]} {
						if !strings.Contains(desc, must) {
							t.Errorf("%s: description %q does not name %q", sc.name, desc, must)
						}
					}
					link, _ := renderAnnotation(r.Annotations["dashboard_url"], in.labels, in.value)
					want := overviewDashboard
					if id := in.labels["session_id"]; id != "" {
						want = sessionDashboard + url.QueryEscape(id)
					}
					if link != want {
						t.Errorf("%s: dashboard_url renders %q, want %q", sc.name, link, want)
					}
				}
			}
		})
	}
	if tested == 0 {
		t.Fatal("no ClickHouse rules")
	}
}

// openSchema opens a chDB session whose database has replaywatch's schema,
// as the sink lays it out on this ClickHouse version.
func openSchema(t *testing.T) *chdbtest.Session {
	t.Helper()
	s := chdbtest.Open(t)
	v, err := clickhouse.ParseVersion(s.Version())
	if err != nil {
		t.Fatal(err)
	}
	d := clickhouse.Dialect{Version: v, Database: s.Database(), RetentionDays: 30}
	for _, stmt := range d.Statements() {
		if err := s.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("schema: %v\n%s", err, stmt)
		}
	}
	return s
}

// insertSQL writes one row as INSERT ... VALUES in the sink's column order
// (clickhouse.InsertColumns), with empty values for the columns not given.
func insertSQL(t *testing.T, table string, types map[string]string, r row) string {
	t.Helper()
	cols := clickhouse.InsertColumns(table)
	vals := make([]string, len(cols))
	for i, c := range cols {
		if v, ok := r[c]; ok {
			vals[i] = v
			continue
		}
		typ := types[c]
		switch {
		case strings.HasPrefix(typ, "Array("):
			vals[i] = "[]"
		case strings.Contains(typ, "String"):
			vals[i] = "''"
		case strings.HasPrefix(typ, "DateTime"):
			vals[i] = at(time.Now())
		case strings.Contains(typ, "Int"):
			vals[i] = "0"
		default:
			t.Fatalf("%s.%s: no default for type %q", table, c, typ)
		}
	}
	for c := range r {
		if !slices.Contains(cols, c) {
			t.Fatalf("%s has no column %s", table, c)
		}
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", table, strings.Join(cols, ", "), strings.Join(vals, ", "))
}

// instances turns a result into alert instances as Grafana does with a
// table frame: string columns are labels, the one numeric column the value.
func instances(t *testing.T, res *chdbtest.Result, wantLabels []string) []instance {
	t.Helper()
	var labels []string
	value := -1
	for i, c := range res.Columns {
		switch {
		case strings.Contains(c.Type, "String"):
			labels = append(labels, c.Name)
		case strings.Contains(c.Type, "Int") || strings.Contains(c.Type, "Float"):
			if value >= 0 {
				t.Fatalf("two numeric columns (%s, %s): Grafana takes one value per instance", res.Columns[value].Name, c.Name)
			}
			value = i
		default:
			t.Fatalf("column %s of type %s is neither a label (String) nor the value", c.Name, c.Type)
		}
	}
	if value != len(res.Columns)-1 || !slices.Equal(labels, wantLabels) {
		t.Fatalf("columns %v: want labels %v then one numeric value last", res.Columns, wantLabels)
	}
	var out []instance
	for _, r := range res.Rows {
		in := instance{labels: map[string]string{}}
		for i, c := range res.Columns {
			switch x := r[i].(type) {
			case string:
				in.labels[c.Name] = x
			case uint64:
				in.value = float64(x)
			case int64:
				in.value = float64(x)
			case float64:
				in.value = x
			}
		}
		out = append(out, in)
	}
	return out
}

func sameInstances(a, b []instance) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !maps.Equal(a[i].labels, b[i].labels) || a[i].value != b[i].value {
			return false
		}
	}
	return true
}
