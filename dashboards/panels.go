//lint:file-ignore SA1019 Grafana provisions dashboards from files in the classic (v1) JSON model; dashboardv2 needs Grafana's new-layouts feature and API.

package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// panelIDs numbers the panels of one dashboard.
type panelIDs struct{ n uint32 }

func (p *panelIDs) next() uint32 { p.n++; return p.n }

// meta is what every panel has.
type meta struct {
	title, description, unit string
	w, h                     uint32
}

func chTargets(qs []*ClickHouseQueryBuilder) []cog.Builder[variants.Dataquery] {
	return targetsOf(qs, func(q *ClickHouseQueryBuilder) cog.Builder[variants.Dataquery] { return q })
}

func promTargets(qs []promQuery) []cog.Builder[variants.Dataquery] {
	return targetsOf(qs, func(q promQuery) cog.Builder[variants.Dataquery] {
		return prometheus.NewDataqueryBuilder().RefId(q.ref).Expr(q.expr).LegendFormat(q.legend).
			Datasource(prometheusDS).Range()
	})
}

// timeSeries is a time series panel over ClickHouse (long results made
// wide by the data source: format 0) or Prometheus.
func timeSeries(ids *panelIDs, m meta, ds common.DataSourceRef, targets []cog.Builder[variants.Dataquery]) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Id(ids.next()).Title(m.title).Description(m.description).Unit(m.unit).
		Span(m.w).Height(m.h).Datasource(ds).Targets(targets).Min(0).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
}

// stacked bars: counts per interval.
func countBars(b *timeseries.PanelBuilder) *timeseries.PanelBuilder {
	return b.DrawStyle(common.GraphDrawStyleBars).FillOpacity(80).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

func chTimeSeries(ids *panelIDs, m meta, qs ...*ClickHouseQueryBuilder) *timeseries.PanelBuilder {
	for _, q := range qs {
		q.TimeSeries()
	}
	return timeSeries(ids, m, clickHouseDS, chTargets(qs))
}

func promTimeSeries(ids *panelIDs, m meta, qs ...promQuery) *timeseries.PanelBuilder {
	return timeSeries(ids, m, prometheusDS, promTargets(qs)).LineWidth(1).FillOpacity(10)
}

// chStat shows each numeric column of a one-row ClickHouse result.
func chStat(ids *panelIDs, m meta, qs ...*ClickHouseQueryBuilder) *stat.PanelBuilder {
	for _, q := range qs {
		q.Table()
	}
	return stat.NewPanelBuilder().Id(ids.next()).Title(m.title).Description(m.description).Unit(m.unit).
		Span(m.w).Height(m.h).Datasource(clickHouseDS).Targets(chTargets(qs)).
		Orientation(common.VizOrientationAuto).GraphMode(common.BigValueGraphModeNone).ColorMode(common.BigValueColorModeValue).
		TextMode(common.BigValueTextModeValueAndName).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false).Fields("/.*/"))
}

// chTable is a table of ClickHouse rows.
func chTable(ids *panelIDs, m meta, qs ...*ClickHouseQueryBuilder) *table.PanelBuilder {
	for _, q := range qs {
		q.Table()
	}
	return table.NewPanelBuilder().Id(ids.next()).Title(m.title).Description(m.description).Unit(m.unit).
		Span(m.w).Height(m.h).Datasource(clickHouseDS).Targets(chTargets(qs)).
		CellHeight(common.TableCellHeightSm).ShowHeader(true)
}

// storyTable is a table of one frame of the session's story, from the
// replaywatch data source.
func storyTable(ids *panelIDs, m meta, part string) *table.PanelBuilder {
	return table.NewPanelBuilder().Id(ids.next()).Title(m.title).Description(m.description).Unit(m.unit).
		Span(m.w).Height(m.h).Datasource(sessionsDS).WithTarget(storyQuery(part)).
		CellHeight(common.TableCellHeightSm).ShowHeader(true)
}

// storyTimeline is the session id over time as a state timeline: S1, then
// S2, from the story's epoch timeline frame.
func storyTimeline(ids *panelIDs, m meta) *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().Id(ids.next()).Title(m.title).Description(m.description).Unit(m.unit).
		Span(m.w).Height(m.h).Datasource(sessionsDS).WithTarget(storyQuery("timeline")).
		ShowValue(common.VisibilityModeAuto).MergeValues(true).RowHeight(0.8).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdPaletteClassic)).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(false).DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone))
}

// sessionDataLink opens the session dashboard for the row's session_id,
// keeping the time range.
func sessionDataLink(field string) []cog.Builder[dashboard.DashboardLink] {
	return []cog.Builder[dashboard.DashboardLink]{
		dashboard.NewDashboardLinkBuilder("Open this session").Type(dashboard.DashboardLinkTypeLink).
			Url(sprintfLink("${__data.fields."+field+"}") + "&${__url_time_range}"),
	}
}

func sprintfLink(id string) string { return "/d/" + SessionUID + "?var-" + SessionVar + "=" + id }

// neutral colours a stat by nothing: its counts are neither good nor bad
// (Grafana's default turns 80 red).
func neutral() *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{{Color: "text"}})
}

// redFromOne: thresholds that turn red from the first finding.
func redFromOne() *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(redFromOneConfig().Steps)
}

// redFromOneConfig is redFromOne as a value, for a field override.
func redFromOneConfig() dashboard.ThresholdsConfig {
	return dashboard.ThresholdsConfig{Mode: dashboard.ThresholdsModeAbsolute, Steps: []dashboard.Threshold{
		{Color: "green"}, {Value: ptr(1.0), Color: "red"},
	}}
}
