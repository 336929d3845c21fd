package dashboards_test

import (
	"encoding/json"
	"testing"

	"github.com/replaywatch/replaywatch/dashboards"
)

// The tests read the dashboards as Grafana does: the generated JSON.

type jsonDashboard struct {
	UID         string `json:"uid"`
	Title       string `json:"title"`
	Refresh     string `json:"refresh"`
	Time        *struct{ From, To string }
	Panels      []jsonPanel `json:"panels"`
	Annotations struct {
		List []struct {
			Name       string          `json:"name"`
			Datasource *jsonDS         `json:"datasource"`
			Target     json.RawMessage `json:"target"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *jsonDS         `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type jsonDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type jsonPanel struct {
	ID          int          `json:"id"`
	Type        string       `json:"type"`
	Title       string       `json:"title"`
	Description string       `json:"description"`
	Datasource  *jsonDS      `json:"datasource"`
	Panels      []jsonPanel  `json:"panels"`
	Targets     []jsonTarget `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit  string `json:"unit"`
			Links []struct {
				URL string `json:"url"`
			} `json:"links"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type jsonTarget struct {
	RefID         string  `json:"refId"`
	Datasource    *jsonDS `json:"datasource"`
	RawSQL        string  `json:"rawSql"`
	Format        *int    `json:"format"`
	QueryType     string  `json:"queryType"`
	EditorType    string  `json:"editorType"`
	PluginVersion string  `json:"pluginVersion"`
	Expr          string  `json:"expr"`
	Session       string  `json:"session"`
	Part          string  `json:"part"`
	// Raw is the query as the dashboard holds it, which a data source
	// receives.
	Raw json.RawMessage `json:"-"`
}

func (q *jsonTarget) UnmarshalJSON(b []byte) error {
	type plain jsonTarget
	if err := json.Unmarshal(b, (*plain)(q)); err != nil {
		return err
	}
	q.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// allPanels returns the panels of a dashboard, rows' panels included, rows
// left out.
func (d *jsonDashboard) allPanels() []jsonPanel {
	var out []jsonPanel
	var walk func([]jsonPanel)
	walk = func(ps []jsonPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

func loadDashboards(t *testing.T) []*jsonDashboard {
	t.Helper()
	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	var out []*jsonDashboard
	for _, uid := range []string{dashboards.OverviewUID, dashboards.SessionUID, dashboards.HealthUID} {
		var d jsonDashboard
		if err := json.Unmarshal(files[uid+".json"], &d); err != nil {
			t.Fatalf("%s: %v", uid, err)
		}
		out = append(out, &d)
	}
	return out
}
