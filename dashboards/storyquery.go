package dashboards

import (
	"errors"
	"reflect"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
)

// SessionsPlugin is the plugin id of replaywatch's own data source
// (dashboards/plugin), which tells a session's story.
const SessionsPlugin = "replaywatch-sessions-datasource"

// StoryQuery is a session-story query of the replaywatch data source as
// its query editor saves one (dashboards/plugin/src/types.ts
// ReplaywatchQuery; the backend's plugin.Model): the session, and the one
// frame of the story (part) a panel draws. The foundation SDK has no type
// for this plugin; this one is a dataquery variant.
type StoryQuery struct {
	RefId      *string               `json:"refId,omitempty"`
	Datasource *common.DataSourceRef `json:"datasource,omitempty"`
	QueryType  string                `json:"queryType"`
	Session    string                `json:"session"`
	Part       string                `json:"part"`
}

// ImplementsDataqueryVariant marks StoryQuery as a dataquery.
func (q StoryQuery) ImplementsDataqueryVariant() {}

// DataqueryType is the plugin id.
func (q StoryQuery) DataqueryType() string { return SessionsPlugin }

// Equals compares two queries field by field.
func (q StoryQuery) Equals(other variants.Dataquery) bool {
	o, ok := other.(StoryQuery)
	return ok && reflect.DeepEqual(q, o)
}

// Validate requires the session and the part.
func (q StoryQuery) Validate() error {
	var errs []error
	if q.Session == "" {
		errs = append(errs, errors.New("session is empty"))
	}
	if q.Part == "" {
		errs = append(errs, errors.New("part is empty: a panel draws one frame of the story"))
	}
	return errors.Join(errs...)
}

var _ cog.Builder[variants.Dataquery] = (*StoryQueryBuilder)(nil)

// StoryQueryBuilder builds a StoryQuery.
type StoryQueryBuilder struct{ q StoryQuery }

// storyQuery is the story part of the dashboard's session, from the
// replaywatch data source variable.
func storyQuery(part string) *StoryQueryBuilder {
	ref := "A"
	return &StoryQueryBuilder{q: StoryQuery{RefId: &ref, Datasource: &sessionsDS, QueryType: "story",
		Session: "${" + SessionVar + "}", Part: part}}
}

// Build returns the query, or the reason it is invalid.
func (b *StoryQueryBuilder) Build() (variants.Dataquery, error) {
	if err := b.q.Validate(); err != nil {
		return nil, cog.MakeBuildErrors("StoryQuery", err)
	}
	return b.q, nil
}
