package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	sdkdata "github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/replaywatch/replaywatch/dashboards"
	"github.com/replaywatch/replaywatch/dashboards/internal/dataset"
	"github.com/replaywatch/replaywatch/test/chdbtest"
)

// panel is what the pictures read of a generated panel.
type panel struct {
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Panels      []panel `json:"panels"`
	GridPos     struct {
		W, H int
	} `json:"gridPos"`
	Targets     []target `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit       string   `json:"unit"`
			Max        *float64 `json:"max"`
			Thresholds *struct {
				Steps []struct {
					Color string   `json:"color"`
					Value *float64 `json:"value"`
				} `json:"steps"`
			} `json:"thresholds"`
			Custom struct {
				DrawStyle string `json:"drawStyle"`
				Stacking  struct {
					Mode string `json:"mode"`
				} `json:"stacking"`
			} `json:"custom"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

// target is a panel's query: SQL for the ClickHouse data source, or a
// story query of the replaywatch data source, which is sent as it is.
type target struct {
	RefID      string `json:"refId"`
	RawSQL     string `json:"rawSql"`
	Datasource struct {
		Type string `json:"type"`
	} `json:"datasource"`
	raw json.RawMessage
}

func (t *target) UnmarshalJSON(b []byte) error {
	type plain target
	if err := json.Unmarshal(b, (*plain)(t)); err != nil {
		return err
	}
	t.raw = append(json.RawMessage(nil), b...)
	return nil
}

// isStory says whether the replaywatch data source answers the query.
func (t *target) isStory() bool { return t.Datasource.Type == dashboards.SessionsPlugin }

// drawn says whether the pictures draw the panel: it has a query they can
// run (SQL, or a story query).
func (p *panel) drawn() bool {
	for _, t := range p.Targets {
		if t.RawSQL != "" || t.isStory() {
			return true
		}
	}
	return false
}

// unitOf is the unit of a field: an override by name, else the panel's.
func (p *panel) unitOf(field string) string {
	for _, o := range p.FieldConfig.Overrides {
		if o.Matcher.ID != "byName" || o.Matcher.Options != field {
			continue
		}
		for _, pr := range o.Properties {
			if u, ok := pr.Value.(string); ok && pr.ID == "unit" {
				return u
			}
		}
	}
	return p.FieldConfig.Defaults.Unit
}

type dashboardJSON struct {
	UID         string  `json:"uid"`
	Title       string  `json:"title"`
	Panels      []panel `json:"panels"`
	Annotations struct {
		List []struct {
			Name   string `json:"name"`
			Target target `json:"target"`
		} `json:"list"`
	} `json:"annotations"`
}

// Dashboards pictured: the ClickHouse ones. The health dashboard reads
// Prometheus, which a captured fixture has no history of.
var pictured = []string{dashboards.OverviewUID, dashboards.SessionUID}

// Picture is one image written.
type Picture struct {
	Dashboard string // the dashboard's title
	UID       string
	Panel     string // the panel's title
	What      string // one line on what it shows
	File      string // base name in the output folder
	Rows      int    // rows the queries returned
}

// Render draws every panel of the pictured dashboards that reads
// ClickHouse or the replaywatch data source, and the session's swim-lane
// timeline, into out.
func Render(data *dataset.Data, out string) ([]Picture, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	files, err := dashboards.Files()
	if err != nil {
		return nil, err
	}
	var pics []Picture
	for _, uid := range pictured {
		var d dashboardJSON
		if err := json.Unmarshal(files[uid+".json"], &d); err != nil {
			return nil, fmt.Errorf("%s: %w", uid, err)
		}
		// The dashboard's annotations, which Grafana draws on its time
		// panels (here: the state timeline).
		var annotations []*chdbtest.Result
		for _, a := range d.Annotations.List {
			r, err := storyResult(data, a.Target)
			if err != nil {
				return nil, fmt.Errorf("%s annotation %s: %w", uid, a.Name, err)
			}
			annotations = append(annotations, r)
		}
		results := map[string][]*chdbtest.Result{}
		for _, p := range flatten(d.Panels) {
			rs, err := runPanel(data, &p)
			if err != nil {
				return nil, fmt.Errorf("%s / %s: %w", uid, p.Title, err)
			}
			if !p.drawn() {
				continue
			}
			results[p.Title] = rs
			pic := Picture{Dashboard: d.Title, UID: uid, Panel: p.Title, What: p.Description,
				File: strings.TrimPrefix(uid, "replaywatch-") + "-" + slug(p.Title) + ".png"}
			for _, r := range rs {
				pic.Rows += len(r.Rows)
			}
			if err := drawPanel(&p, rs, data, annotations, filepath.Join(out, pic.File)); err != nil {
				return nil, fmt.Errorf("%s / %s: %w", uid, p.Title, err)
			}
			pics = append(pics, pic)
		}
		if uid == dashboards.SessionUID {
			pic := Picture{Dashboard: d.Title, UID: uid, Panel: "Timeline as swim lanes", File: "session-swimlanes.png",
				What: "Not a panel of the dashboard: the renderer's own drawing of the same session from the story frames of the panels SSE events in order, Resume attempts and Findings: one lane per SSE stream, " +
					"each event at its time and height by its position in the stream (a drop is a replay), resumes and findings marked."}
			n, err := drawSwimLanes(results, data, filepath.Join(out, pic.File))
			if err != nil {
				return nil, fmt.Errorf("swim lanes: %w", err)
			}
			pic.Rows = n
			pics = append(pics, pic)
		}
	}
	return pics, nil
}

// flatten lists a dashboard's panels, rows' panels included, rows left out.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, flatten(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// runPanel runs the panel's targets: SQL expanded as Grafana and the
// ClickHouse plugin do, on chDB; story queries through the replaywatch
// data source, their frames as results. Nil when it has none.
func runPanel(data *dataset.Data, p *panel) ([]*chdbtest.Result, error) {
	var out []*chdbtest.Result
	for _, t := range p.Targets {
		if t.isStory() {
			r, err := storyResult(data, t)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
			continue
		}
		if t.RawSQL == "" {
			continue
		}
		sql, err := dashboards.Expand(t.RawSQL, data.Query)
		if err != nil {
			return nil, err
		}
		r, err := data.Session.Query(context.Background(), sql)
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", t.RefID, err, sql)
		}
		out = append(out, r)
	}
	return out, nil
}

// storyResult runs a story query through the replaywatch data source
// and gives its one frame as a result: columns named as the frame's
// fields, values as chdbtest decodes ClickHouse's (times as text).
func storyResult(data *dataset.Data, t target) (*chdbtest.Result, error) {
	frames, err := data.StoryFrames(context.Background(), t.raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.RefID, err)
	}
	if len(frames) != 1 {
		return nil, fmt.Errorf("%s: %d frames, want one", t.RefID, len(frames))
	}
	f := frames[0]
	r := &chdbtest.Result{}
	for _, field := range f.Fields {
		typ := map[sdkdata.FieldType]string{
			sdkdata.FieldTypeTime: "DateTime64(9)", sdkdata.FieldTypeInt64: "Int64", sdkdata.FieldTypeBool: "Bool",
			sdkdata.FieldTypeString: "String", sdkdata.FieldTypeNullableString: "Nullable(String)",
		}[field.Type()]
		if typ == "" {
			return nil, fmt.Errorf("%s: field %s of type %s", t.RefID, field.Name, field.Type())
		}
		r.Columns = append(r.Columns, chdbtest.Column{Name: field.Name, Type: typ})
	}
	for i := range f.Rows() {
		row := make([]any, len(f.Fields))
		for j, field := range f.Fields {
			v, ok := field.ConcreteAt(i)
			if tm, isTime := v.(time.Time); isTime {
				v = tm.UTC().Format("2006-01-02 15:04:05.000000000")
			}
			if ok {
				row[j] = v
			}
		}
		r.Rows = append(r.Rows, row)
	}
	return r, nil
}

func drawPanel(p *panel, rs []*chdbtest.Result, data *dataset.Data, annotations []*chdbtest.Result, file string) error {
	switch p.Type {
	case "state-timeline":
		return drawStateTimeline(p, rs, annotations, file)
	case "timeseries":
		return drawTimeSeries(p, rs, data, file)
	case "stat":
		return drawStat(p, rs, file)
	case "table":
		return drawTable(p, rs, file)
	}
	return fmt.Errorf("no picture for panel type %q", p.Type)
}

var nonSlug = regexp.MustCompile(`[^a-z0-9]+`)

func slug(s string) string {
	return strings.Trim(nonSlug.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// WriteDoc writes the Markdown page showing the pictures, with image paths
// relative to the page.
func WriteDoc(doc, imgDir string, data *dataset.Data, pics []Picture) error {
	rel, err := filepath.Rel(filepath.Dir(doc), imgDir)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(`# What the dashboards show

<!-- Generated by scripts/render-dashboards.sh (go run ./dashboards/pictures); do not edit. -->

No Grafana runs here, so these pictures are drawn from the dashboards' own
queries: ` + "`dashboards/pictures`" + ` takes every panel of the generated Overview and
Session dashboards (` + "`dashboards/json`" + `) over a real ` + "`replaywatch analyze`" + ` of
the fixture captures (` + "`pipeline/testdata/fixtures/*.pcap`" + `, the data set the
dashboards' tests use) written to ClickHouse 18.16. A ClickHouse panel's SQL is
expanded exactly as Grafana and grafana-clickhouse-datasource do and run on a
copy in ClickHouse 26.x (chDB). A story panel of the Session dashboard (the
session over time, epochs, session id changes, SSE events in order, resume
attempts, findings, and the dashboard's annotations) is the frame replaywatch's
own data source plugin (` + "`dashboards/plugin`" + `) returns: its ` + "`QueryData`" + ` runs on
the ClickHouse 18.16 database with the panel's query, template variables
replaced as Grafana does. The rows and frames are drawn with gonum/plot.
Colours and layout are the renderer's, not Grafana's; the numbers are what
Grafana would show. The health dashboard reads the agents' Prometheus metrics
and is not drawn; its Detector row includes "Requests by protocol revision"
(` + "`replaywatch_detector_requests_total`" + ` by ` + "`revision`" + `), the mix of 2025-11-25 and
2026-07-28 clients over time.

Regenerate with ` + "`scripts/render-dashboards.sh`" + ` (it needs clickhouse-server and
clickhouse-client from Debian's packages and chDB's libchdb.so, which
` + "`scripts/fetch-chdb.sh`" + ` fetches; the script installs both when missing).
How to load the real dashboards into Grafana: [deploy/README.md](../deploy/README.md#loading-the-dashboards-and-alerts-into-an-existing-grafana).

`)
	fmt.Fprintf(&b, "Time range: %s to %s (UTC), interval %s. Session shown: `%s`, one whose id the server swapped (a `session_swap` finding).\n",
		data.Query.From.Format("2006-01-02 15:04:05"), data.Query.To.Format("2006-01-02 15:04:05"), data.Query.Interval,
		data.Query.Vars[dashboards.SessionVar])
	last := ""
	for _, p := range pics {
		if p.Dashboard != last {
			fmt.Fprintf(&b, "\n## %s (`%s`)\n", p.Dashboard, p.UID)
			last = p.Dashboard
		}
		what := strings.TrimSpace(p.What)
		if p.Rows == 0 {
			what += " (No rows over the fixtures.)"
		}
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n![%s](%s)\n", p.Panel, what, p.Panel, filepath.ToSlash(filepath.Join(rel, p.File)))
	}
	return os.WriteFile(doc, []byte(b.String()), 0o644)
}
