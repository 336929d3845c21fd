package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

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
	Targets []struct {
		RefID  string `json:"refId"`
		RawSQL string `json:"rawSql"`
	} `json:"targets"`
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
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
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

// Render draws every ClickHouse panel of the pictured dashboards, and the
// session's swim-lane timeline, into out.
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
		results := map[string][]*chdbtest.Result{}
		for _, p := range flatten(d.Panels) {
			rs, err := runPanel(data, &p)
			if err != nil {
				return nil, fmt.Errorf("%s / %s: %w", uid, p.Title, err)
			}
			if rs == nil {
				continue
			}
			results[p.Title] = rs
			pic := Picture{Dashboard: d.Title, UID: uid, Panel: p.Title, What: p.Description,
				File: strings.TrimPrefix(uid, "replaywatch-") + "-" + slug(p.Title) + ".png"}
			for _, r := range rs {
				pic.Rows += len(r.Rows)
			}
			if err := drawPanel(&p, rs, data, filepath.Join(out, pic.File)); err != nil {
				return nil, fmt.Errorf("%s / %s: %w", uid, p.Title, err)
			}
			pics = append(pics, pic)
		}
		if uid == dashboards.SessionUID {
			pic := Picture{Dashboard: d.Title, UID: uid, Panel: "Timeline as swim lanes", File: "session-swimlanes.png",
				What: "The same session drawn from the panels SSE events in order, Resume attempts and Findings: one lane per SSE stream, " +
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

// runPanel runs the panel's SQL targets, expanded as Grafana and the
// plugin do; nil when it has none.
func runPanel(data *dataset.Data, p *panel) ([]*chdbtest.Result, error) {
	var out []*chdbtest.Result
	for _, t := range p.Targets {
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

func drawPanel(p *panel, rs []*chdbtest.Result, data *dataset.Data, file string) error {
	switch p.Type {
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
queries: ` + "`dashboards/pictures`" + ` takes every ClickHouse panel of the generated
Overview and Session dashboards (` + "`dashboards/json`" + `), expands its SQL exactly as
Grafana and grafana-clickhouse-datasource do, runs it on ClickHouse 26.x (chDB)
over a real ` + "`replaywatch analyze`" + ` of the fixture captures
(` + "`pipeline/testdata/fixtures/*.pcap`" + `, the data set the dashboards' tests
use), and draws the rows with gonum/plot. Colours and layout are the
renderer's, not Grafana's; the numbers are what Grafana would show.
The health dashboard reads the agents' Prometheus metrics and is not drawn.

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
