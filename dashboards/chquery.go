package dashboards

import (
	"errors"
	"reflect"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
)

// ClickHousePlugin is the plugin id of Grafana's official ClickHouse data
// source, grafana-clickhouse-datasource.
const ClickHousePlugin = "grafana-clickhouse-datasource"

// PluginVersion is the plugin version the queries are written for. The
// plugin's frontend (src/data/migration.ts) rewrites a saved query as a v3
// one when its pluginVersion is missing or below 4.0.0, so it must be set.
const PluginVersion = "4.0.0"

// Format is the plugin's result format: sqlutil.FormatQueryOption of
// grafana-plugin-sdk-go (data/sqlutil/query.go), which the plugin's backend
// (through sqlds) reads from the query's "format".
type Format int

const (
	// FormatTimeSeries makes the backend turn a long result (time, label
	// columns, values) into wide series, one per label set: rows must be
	// sorted by time.
	FormatTimeSeries Format = 0
	// FormatTable hands the rows on as they are.
	FormatTable Format = 1
	// FormatLogs and FormatTraces set the preferred visualisation.
	FormatLogs   Format = 2
	FormatTraces Format = 3
)

// QueryType is the plugin's query type (src/types/queryBuilder.ts QueryType):
// the editor's choice of how the result is shown.
type QueryType string

const (
	QueryTypeTable      QueryType = "table"
	QueryTypeTimeSeries QueryType = "timeseries"
	QueryTypeLogs       QueryType = "logs"
	QueryTypeTraces     QueryType = "traces"
)

// ClickHouseQuery is a raw-SQL query of grafana-clickhouse-datasource, as
// its frontend saves one (src/types/sql.ts CHSqlQuery): the SQL editor
// ("editorType": "sql"), the SQL with the plugin's macros in "rawSql", and
// the format the backend shapes the result into. The foundation SDK has no
// type for this plugin; this one is a dataquery variant.
type ClickHouseQuery struct {
	RefId         *string               `json:"refId,omitempty"`
	Hide          *bool                 `json:"hide,omitempty"`
	Datasource    *common.DataSourceRef `json:"datasource,omitempty"`
	PluginVersion string                `json:"pluginVersion"`
	EditorType    string                `json:"editorType"`
	QueryType     QueryType             `json:"queryType,omitempty"`
	RawSql        string                `json:"rawSql"`
	Format        Format                `json:"format"`
}

// ImplementsDataqueryVariant marks ClickHouseQuery as a dataquery.
func (q ClickHouseQuery) ImplementsDataqueryVariant() {}

// DataqueryType is the plugin id.
func (q ClickHouseQuery) DataqueryType() string { return ClickHousePlugin }

// Equals compares two queries field by field.
func (q ClickHouseQuery) Equals(other variants.Dataquery) bool {
	o, ok := other.(ClickHouseQuery)
	return ok && reflect.DeepEqual(q, o)
}

// Validate requires the SQL and the editor type.
func (q ClickHouseQuery) Validate() error {
	var errs []error
	if q.RawSql == "" {
		errs = append(errs, errors.New("rawSql is empty"))
	}
	if q.EditorType != "sql" {
		errs = append(errs, errors.New(`editorType must be "sql"`))
	}
	return errors.Join(errs...)
}

var _ cog.Builder[variants.Dataquery] = (*ClickHouseQueryBuilder)(nil)

// ClickHouseQueryBuilder builds a ClickHouseQuery.
type ClickHouseQueryBuilder struct{ q ClickHouseQuery }

// NewClickHouseQuery starts a SQL-editor query of rawSQL, a table by default.
func NewClickHouseQuery(rawSQL string) *ClickHouseQueryBuilder {
	return &ClickHouseQueryBuilder{q: ClickHouseQuery{
		PluginVersion: PluginVersion, EditorType: "sql", RawSql: rawSQL,
		Format: FormatTable, QueryType: QueryTypeTable,
	}}
}

// Build returns the query, or the reason it is invalid.
func (b *ClickHouseQueryBuilder) Build() (variants.Dataquery, error) {
	if err := b.q.Validate(); err != nil {
		return nil, cog.MakeBuildErrors("ClickHouseQuery", err)
	}
	return b.q, nil
}

// RefId names the query within its panel.
func (b *ClickHouseQueryBuilder) RefId(refID string) *ClickHouseQueryBuilder {
	b.q.RefId = &refID
	return b
}

// Datasource sets the query's data source.
func (b *ClickHouseQueryBuilder) Datasource(ref common.DataSourceRef) *ClickHouseQueryBuilder {
	b.q.Datasource = &ref
	return b
}

// TimeSeries makes the result wide time series (format 0, query type
// "timeseries").
func (b *ClickHouseQueryBuilder) TimeSeries() *ClickHouseQueryBuilder {
	b.q.Format, b.q.QueryType = FormatTimeSeries, QueryTypeTimeSeries
	return b
}

// Table keeps the rows as a table (format 1, query type "table").
func (b *ClickHouseQueryBuilder) Table() *ClickHouseQueryBuilder {
	b.q.Format, b.q.QueryType = FormatTable, QueryTypeTable
	return b
}
