// Package dashboards holds replaywatch's Grafana dashboards as code, built
// with github.com/grafana/grafana-foundation-sdk/go:
//
//   - replaywatch-overview: findings, resumes, lost and re-initialised
//     sessions, unknown outcomes, across servers and clients;
//   - replaywatch-session: one session's story (variable "session"; link
//     to it as /d/replaywatch-session?var-session=<id>), its story panels
//     and annotations from replaywatch's own data source plugin
//     (dashboards/plugin, variable "story");
//   - replaywatch-health: the agents' own metrics, from Prometheus.
//
// The ClickHouse panels read the collapsed view (FINAL) of the tables
// sink/clickhouse writes, through the data source variable "datasource"
// (type grafana-clickhouse-datasource), with the plugin's macros; the
// health panels read Prometheus through the variable "prometheus".
//
// The JSON is generated into dashboards/json/<uid>.json and
// deploy/kubernetes/grafana/dashboards/<uid>.json by
//
//	go generate ./dashboards   (or: go run ./dashboards/cmd/gen)
//
// and tests fail when the committed files differ from what this code gives.
package dashboards

//lint:file-ignore SA1019 Grafana provisions dashboards from files in the classic (v1) JSON model; dashboardv2 needs Grafana's new-layouts feature and API.

//go:generate go run ./cmd/gen

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// Dashboard uids: other dashboards, alert messages and runbooks link to
// them, so they never change.
const (
	OverviewUID = "replaywatch-overview"
	SessionUID  = "replaywatch-session"
	HealthUID   = "replaywatch-health"
)

// Variable names.
const (
	ClickHouseVar = "datasource"
	PrometheusVar = "prometheus"
	SessionVar    = "session"
	NodeVar       = "node"
	StoryVar      = "story"
)

func ptr[T any](v T) *T { return &v }

// clickHouseDS, prometheusDS and sessionsDS are the panels' data sources:
// the dashboards' variables, never a uid.
var (
	clickHouseDS = common.DataSourceRef{Type: ptr(ClickHousePlugin), Uid: ptr("${" + ClickHouseVar + "}")}
	prometheusDS = common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${" + PrometheusVar + "}")}
	sessionsDS   = common.DataSourceRef{Type: ptr(SessionsPlugin), Uid: ptr("${" + StoryVar + "}")}
)

// Built is one generated dashboard.
type Built struct {
	UID       string
	Dashboard dashboard.Dashboard
}

// All builds every dashboard, in a fixed order.
func All() ([]Built, error) {
	var out []Built
	for _, f := range []func() *dashboard.DashboardBuilder{overview, session, health} {
		d, err := f().Build()
		if err != nil {
			return nil, err
		}
		if d.Uid == nil {
			return nil, fmt.Errorf("dashboard %v has no uid", d.Title)
		}
		out = append(out, Built{UID: *d.Uid, Dashboard: d})
	}
	return out, nil
}

// JSON is a dashboard as the committed file holds it: indented, with a
// final newline.
func JSON(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Files returns every dashboard's file name (<uid>.json) and contents.
func Files() (map[string][]byte, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, b := range all {
		j, err := JSON(b.Dashboard)
		if err != nil {
			return nil, err
		}
		files[b.UID+".json"] = j
	}
	return files, nil
}

// chQuery is a ClickHouse query of a panel.
func chQuery(ref, sql string) *ClickHouseQueryBuilder {
	return NewClickHouseQuery(sql).RefId(ref).Datasource(clickHouseDS)
}

// promQuery is a Prometheus query of a panel.
type promQuery struct{ ref, expr, legend string }

func targetsOf[T any](qs []T, f func(T) cog.Builder[variants.Dataquery]) []cog.Builder[variants.Dataquery] {
	var out []cog.Builder[variants.Dataquery]
	for _, q := range qs {
		out = append(out, f(q))
	}
	return out
}

func clickHouseVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder(ClickHouseVar).Label("ClickHouse").Type(ClickHousePlugin).
		Description("The ClickHouse data source holding the replaywatch database (grafana-clickhouse-datasource).")
}

func storyVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder(StoryVar).Label("Story").Type(SessionsPlugin).
		Description("The replaywatch data source (" + SessionsPlugin + ", dashboards/plugin) that tells the session's story from the same database.")
}

func prometheusVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder(PrometheusVar).Label("Prometheus").Type("prometheus").
		Description("The Prometheus that scrapes the replaywatch agents' /metrics.")
}

// sessionLinkToDashboard is a dashboard link that keeps the time range.
func dashboardLink(title, uid string) *dashboard.DashboardLinkBuilder {
	return dashboard.NewDashboardLinkBuilder(title).Type(dashboard.DashboardLinkTypeLink).
		Url("/d/" + uid).KeepTime(true).Icon("dashboard")
}

func row(ids *panelIDs, title string) *dashboard.RowBuilder {
	return dashboard.NewRowBuilder(title).Id(ids.next())
}

// OutputDirs are where the JSON files go, relative to the module root: the
// committed dashboards, and the copies the Kubernetes Grafana loads (a
// kustomize configMapGenerator reads only files under its own directory).
var OutputDirs = []string{"dashboards/json", "deploy/kubernetes/grafana/dashboards"}
