package dashboards_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/replaywatch/replaywatch/dashboards"
	"github.com/replaywatch/replaywatch/dashboards/internal/dataset"
	"github.com/replaywatch/replaywatch/test/chdbtest"
	"github.com/replaywatch/replaywatch/test/chtest"
)

func TestMain(m *testing.M) {
	code := chtest.Main(m)
	if binaryBuilt {
		if bin, err := buildBinary(); err == nil {
			os.RemoveAll(filepath.Dir(bin))
		}
	}
	os.Exit(code)
}

// binaryBuilt says whether a test asked for the binary.
var binaryBuilt bool

// buildBinary builds cmd/replaywatch once per test binary.
var buildBinary = sync.OnceValues(func() (string, error) {
	binaryBuilt = true
	dir, err := os.MkdirTemp("", "dashboards-bin-")
	if err != nil {
		return "", err
	}
	return dataset.BuildBinary("..", dir)
})

func replaywatch(t *testing.T, args ...string) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := dataset.Run("..", bin, args...); err != nil {
		t.Fatal(err)
	}
}

// realFindings runs the real pipeline on the fixture captures into the
// real ClickHouse 18.16 server, then copies every table into a chDB
// (ClickHouse 26.x) database laid out by the current schema, and returns
// it with the time range and session the dashboards are opened with
// (package dataset, which the pictures use too).
func realFindings(t *testing.T) *dataset.Data {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	srv := chtest.Shared(t)
	d, err := dataset.Build(t, "..", bin, srv, chtest.NewDatabase(t, srv), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// mayBeEmpty are the panels the fixtures give no rows, with the reason.
var mayBeEmpty = map[string]string{
	"Unverifiable checks": "the fixtures' captures are whole: nothing is unverifiable in the chosen session",
}

// TestEveryQueryRuns expands every ClickHouse panel query as Grafana and
// the plugin do and runs it on ClickHouse 26.x over real findings: each
// returns the columns its panel needs, and the panels that should show
// data do.
func TestEveryQueryRuns(t *testing.T) {
	data := realFindings(t)
	s, qc := data.Session, data.Query
	session := qc.Vars[dashboards.SessionVar]
	t.Logf("time range %s to %s; session %s", qc.From, qc.To, session)
	ran := 0
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			for _, q := range p.Targets {
				name := fmt.Sprintf("%s/%s/%s", d.UID, p.Title, q.RefID)
				if q.Datasource != nil && q.Datasource.Type == dashboards.SessionsPlugin {
					t.Run(name, func(t *testing.T) { checkStoryQuery(t, data, p, q.Raw) })
					ran++
					continue
				}
				if q.RawSQL == "" {
					continue
				}
				t.Run(name, func(t *testing.T) {
					sql, err := dashboards.Expand(q.RawSQL, qc)
					if err != nil {
						t.Fatal(err)
					}
					if strings.Contains(sql, "$") {
						t.Fatalf("unexpanded variable or macro left:\n%s", sql)
					}
					r, err := s.Query(context.Background(), sql)
					if err != nil {
						t.Fatalf("%v\n%s", err, sql)
					}
					checkShape(t, p.Type, r)
					for _, l := range p.FieldConfig.Defaults.Links {
						if field := linkField(l.URL); !hasColumn(r, field) {
							t.Errorf("data link reads field %s, which the query does not return", field)
						}
					}
					if len(r.Rows) == 0 {
						if why, ok := mayBeEmpty[p.Title]; ok {
							t.Logf("no rows (%s)", why)
						} else {
							t.Errorf("no rows over the fixtures' findings:\n%s", sql)
						}
					}
				})
				ran++
			}
		}
	}
	// The annotations.
	for _, d := range loadDashboards(t) {
		for _, a := range d.Annotations.List {
			t.Run(d.UID+"/annotation "+a.Name, func(t *testing.T) {
				checkStoryQuery(t, data, jsonPanel{Type: "annotations", Title: a.Name}, a.Target)
			})
			ran++
		}
	}
	// The session picker lists the session.
	for _, d := range loadDashboards(t) {
		for _, v := range d.Templating.List {
			if v.Datasource == nil || v.Datasource.Type != dashboards.ClickHousePlugin {
				continue
			}
			var vq struct {
				RawSQL string `json:"rawSql"`
			}
			if err := json.Unmarshal(v.Query, &vq); err != nil || vq.RawSQL == "" {
				t.Errorf("%s variable %s: query %s is no ClickHouse query (%v)", d.UID, v.Name, v.Query, err)
				continue
			}
			sql, err := dashboards.Expand(vq.RawSQL, qc)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.Query(context.Background(), sql)
			if err != nil {
				t.Fatalf("variable %s: %v\n%s", v.Name, err, sql)
			}
			found := false
			for _, row := range r.Rows {
				found = found || row[0] == session
			}
			if !found {
				t.Errorf("variable %s does not offer session %s (%d rows)", v.Name, session, len(r.Rows))
			}
			ran++
		}
	}
	if ran < 25 {
		t.Errorf("ran %d queries; the dashboards have more", ran)
	}
}

// linkField is the field a data link's URL reads (${__data.fields.NAME}).
func linkField(url string) string {
	_, rest, _ := strings.Cut(url, "${__data.fields.")
	name, _, _ := strings.Cut(rest, "}")
	return name
}

// checkStoryQuery runs a query of the replaywatch data source through the
// real plugin over the data set's ClickHouse 18.16 database, as Grafana
// sends it: one frame, with rows, with the fields its panel and data links
// read.
func checkStoryQuery(t *testing.T, set *dataset.Data, p jsonPanel, target json.RawMessage) {
	t.Helper()
	frames, err := set.StoryFrames(context.Background(), target)
	if err != nil {
		t.Fatalf("%v\n%s", err, target)
	}
	if len(frames) != 1 {
		t.Fatalf("%d frames, want the one the part keeps", len(frames))
	}
	f := frames[0]
	rows, err := f.RowLen()
	if err != nil {
		t.Fatal(err)
	}
	if rows == 0 {
		t.Errorf("frame %q: no rows for session %s", f.Name, set.Query.Vars[dashboards.SessionVar])
	}
	has := func(name string) bool { field, _ := f.FieldByName(name); return field != nil }
	for _, l := range p.FieldConfig.Defaults.Links {
		if field := linkField(l.URL); !has(field) {
			t.Errorf("data link reads field %s, which frame %q does not have", field, f.Name)
		}
	}
	var want []string
	switch p.Type {
	case "state-timeline":
		// A time, then the state: the session id, null after the last epoch.
		if len(f.Fields) != 2 || f.Fields[0].Type() != data.FieldTypeTime || f.Fields[1].Type() != data.FieldTypeNullableString {
			t.Errorf("frame %q: fields %v, want a time and a nullable string", f.Name, f.Fields)
		}
	case "annotations":
		want = []string{"time", "title", "text", "tags"}
	case "table":
		want = []string{"time"}
	}
	for _, name := range want {
		if !has(name) {
			t.Errorf("frame %q has no field %s", f.Name, name)
		}
	}
}

func hasColumn(r *chdbtest.Result, name string) bool {
	for _, c := range r.Columns {
		if c.Name == name {
			return true
		}
	}
	return false
}

func isNumeric(typ string) bool {
	typ = strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(typ, "Nullable("), ")"), "LowCardinality(")
	for _, p := range []string{"UInt", "Int", "Float", "Decimal"} {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// checkShape: what each visualisation needs of its rows.
func checkShape(t *testing.T, panelType string, r *chdbtest.Result) {
	t.Helper()
	if len(r.Columns) == 0 {
		t.Fatal("no columns")
	}
	switch panelType {
	case "timeseries":
		// format 0: a time column first, label columns, numbers, sorted by
		// time.
		if !strings.HasPrefix(r.Columns[0].Type, "DateTime") {
			t.Errorf("first column %s is %s, want a time", r.Columns[0].Name, r.Columns[0].Type)
		}
		nums := 0
		for _, c := range r.Columns[1:] {
			if isNumeric(c.Type) {
				nums++
			}
		}
		if nums == 0 {
			t.Errorf("no numeric column in %v", r.Columns)
		}
		for i := 1; i < len(r.Rows); i++ {
			if fmt.Sprint(r.Rows[i][0]) < fmt.Sprint(r.Rows[i-1][0]) {
				t.Errorf("rows not sorted by time: %v after %v", r.Rows[i][0], r.Rows[i-1][0])
				break
			}
		}
	case "stat":
		if len(r.Rows) > 1 {
			t.Errorf("%d rows, want one", len(r.Rows))
		}
		for _, c := range r.Columns {
			if !isNumeric(c.Type) {
				t.Errorf("column %s is %s: a stat shows numbers", c.Name, c.Type)
			}
		}
	}
}
