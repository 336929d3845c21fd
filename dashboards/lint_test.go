package dashboards_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/dashboards"
	"github.com/replaywatch/replaywatch/dashboards/plugin/pkg/plugin"
)

// TestLint enforces the dashboards' conventions, in the spirit of
// grafana/dashboard-linter: every panel titled, described and with a
// unit; data sources only through the dashboard's variables (no uid
// written down); refresh and time range set; every ClickHouse query that
// reads a time column filters it with the plugin's time macros, reads the
// collapsed view (FINAL), and is written for the plugin's SQL editor.
func TestLint(t *testing.T) {
	timeColumns := regexp.MustCompile(`\b(time|first_seen|last_seen|called_at)\b`)
	timeMacro := regexp.MustCompile(`\$__(timeFilter|timeFilter_ms|dateTimeFilter|dt)\(`)
	fromTable := regexp.MustCompile(`(?i)\bFROM\s+(\w+)(\s+FINAL)?`)
	for _, d := range loadDashboards(t) {
		t.Run(d.UID, func(t *testing.T) {
			if d.Title == "" {
				t.Error("no title")
			}
			if d.Refresh == "" {
				t.Error("no refresh interval")
			}
			if d.Time == nil || d.Time.From == "" || d.Time.To == "" {
				t.Error("no default time range")
			}
			vars := map[string]string{}
			for _, v := range d.Templating.List {
				vars[v.Name] = v.Type
				if v.Datasource != nil && !isVariable(v.Datasource.UID) {
					t.Errorf("variable %s: data source uid %q is written down; use a data source variable", v.Name, v.Datasource.UID)
				}
			}
			for _, a := range d.Annotations.List {
				if a.Datasource == nil || !isVariable(a.Datasource.UID) {
					t.Errorf("annotation %q: data source %+v is not a variable", a.Name, a.Datasource)
					continue
				}
				if a.Datasource.Type != dashboards.SessionsPlugin {
					t.Errorf("annotation %q: data source type %q", a.Name, a.Datasource.Type)
					continue
				}
				var q struct{ QueryType, Session, Part string }
				if err := json.Unmarshal(a.Target, &q); err != nil {
					t.Errorf("annotation %q: target: %v", a.Name, err)
				}
				checkStoryTarget(t, "annotation "+a.Name, q.QueryType, q.Session, q.Part)
			}
			ids := map[int]bool{}
			for _, p := range d.allPanels() {
				name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
				if ids[p.ID] {
					t.Errorf("%s: id used twice", name)
				}
				ids[p.ID] = true
				if strings.TrimSpace(p.Title) == "" {
					t.Errorf("%s: no title", name)
				}
				if len(p.Description) < 20 {
					t.Errorf("%s: no description worth the name", name)
				}
				if p.FieldConfig.Defaults.Unit == "" {
					t.Errorf("%s: no unit", name)
				}
				if p.Datasource == nil || !isVariable(p.Datasource.UID) {
					t.Errorf("%s: data source %+v is not a variable", name, p.Datasource)
					continue
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: no query", name)
				}
				for _, q := range p.Targets {
					if q.Datasource == nil || *q.Datasource != *p.Datasource {
						t.Errorf("%s %s: query data source %+v, want the panel's %+v", name, q.RefID, q.Datasource, p.Datasource)
					}
					switch p.Datasource.Type {
					case dashboards.ClickHousePlugin:
						if vars[dashboards.ClickHouseVar] != "datasource" || p.Datasource.UID != "${"+dashboards.ClickHouseVar+"}" {
							t.Errorf("%s: ClickHouse panels use the data source variable %q", name, dashboards.ClickHouseVar)
						}
						if q.EditorType != "sql" || q.RawSQL == "" || q.Format == nil || q.PluginVersion == "" {
							t.Errorf("%s %s: not a SQL-editor query with format and pluginVersion", name, q.RefID)
						}
						if timeColumns.MatchString(q.RawSQL) && !timeMacro.MatchString(q.RawSQL) {
							t.Errorf("%s %s: reads a time column without $__timeFilter", name, q.RefID)
						}
						for _, m := range fromTable.FindAllStringSubmatch(q.RawSQL, -1) {
							if m[2] == "" {
								t.Errorf("%s %s: reads %s without FINAL (duplicates not collapsed)", name, q.RefID, m[1])
							}
						}
						if p.Type == "timeseries" && (*q.Format != int(dashboards.FormatTimeSeries) || !strings.Contains(q.RawSQL, "$__timeInterval(")) {
							t.Errorf("%s %s: time series want format 0 and $__timeInterval buckets", name, q.RefID)
						}
					case dashboards.SessionsPlugin:
						if vars[dashboards.StoryVar] != "datasource" || p.Datasource.UID != "${"+dashboards.StoryVar+"}" {
							t.Errorf("%s: story panels use the data source variable %q", name, dashboards.StoryVar)
						}
						checkStoryTarget(t, name+" "+q.RefID, q.QueryType, q.Session, q.Part)
					case "prometheus":
						if vars[dashboards.PrometheusVar] != "datasource" || p.Datasource.UID != "${"+dashboards.PrometheusVar+"}" {
							t.Errorf("%s: Prometheus panels use the data source variable %q", name, dashboards.PrometheusVar)
						}
						if q.Expr == "" {
							t.Errorf("%s %s: empty PromQL", name, q.RefID)
						}
						if strings.Contains(q.Expr, "rate(") && !strings.Contains(q.Expr, "[$__rate_interval]") {
							t.Errorf("%s %s: rate over a fixed window; use $__rate_interval", name, q.RefID)
						}
					default:
						t.Errorf("%s: data source type %q", name, p.Datasource.Type)
					}
				}
			}
		})
	}
}

// checkStoryTarget: a story query of the session variable, keeping one
// frame the plugin has.
func checkStoryTarget(t *testing.T, name, queryType, session, part string) {
	t.Helper()
	if queryType != plugin.QueryStory {
		t.Errorf("%s: query type %q, want %q", name, queryType, plugin.QueryStory)
	}
	if session != "${"+dashboards.SessionVar+"}" {
		t.Errorf("%s: session %q, want the variable %s", name, session, dashboards.SessionVar)
	}
	if _, ok := plugin.StoryParts[part]; !ok {
		t.Errorf("%s: part %q is no frame of the plugin's story", name, part)
	}
}

func isVariable(uid string) bool {
	return strings.HasPrefix(uid, "${") && strings.HasSuffix(uid, "}") || strings.HasPrefix(uid, "$")
}

// TestSessionLinks: links into the session dashboard use the format
// others rely on, /d/replaywatch-session?var-session=<id>.
func TestSessionLinks(t *testing.T) {
	found := 0
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			for _, l := range p.FieldConfig.Defaults.Links {
				if !strings.HasPrefix(l.URL, "/d/replaywatch-session?var-session=${__data.fields.") {
					t.Errorf("%s %q: link %q", d.UID, p.Title, l.URL)
				}
				found++
			}
		}
		if d.UID == dashboards.SessionUID {
			ok := false
			for _, v := range d.Templating.List {
				ok = ok || v.Name == "session" && v.Type == "query"
			}
			if !ok {
				t.Error("the session dashboard has no query variable named session")
			}
		}
	}
	if found == 0 {
		t.Error("no panel links to the session dashboard")
	}
}
