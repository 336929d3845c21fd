package rules

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"
)

// templateFuncs are the functions of Grafana's (and Prometheus') alert
// templates that these files use, close enough to the real ones for a
// rendering test (Prometheus' template/template.go defines them).
var templateFuncs = template.FuncMap{
	"humanize": func(v float64) string { return fmt.Sprintf("%.4g", v) },
	"humanize1024": func(v float64) string {
		n := 0
		for math.Abs(v) >= 1024 && n < 8 {
			v /= 1024
			n++
		}
		return fmt.Sprintf("%.4g%s", v, []string{"", "ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"}[n])
	},
	"humanizeDuration":   func(v float64) string { return time.Duration(v * float64(time.Second)).String() },
	"humanizePercentage": func(v float64) string { return fmt.Sprintf("%.4g%%", v*100) },
	"toUpper":            strings.ToUpper,
}

type templateValue struct {
	Labels map[string]string
	Value  float64
}

// renderAnnotation renders an alert rule annotation as Grafana does: the
// text follows definitions of $labels, $values and $value
// (pkg/services/ngalert/state/template), and runs with missingkey=error.
func renderAnnotation(text string, labels map[string]string, value float64) (string, error) {
	const header = "{{- $labels := .Labels -}}{{- $values := .Values -}}{{- $value := .Value -}}"
	tmpl, err := template.New("annotation").Option("missingkey=error").Funcs(templateFuncs).Parse(header + text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = tmpl.Execute(&b, map[string]any{
		"Labels": labels,
		"Values": map[string]templateValue{
			"A": {labels, value}, "B": {labels, value}, "C": {labels, 1},
		},
		"Value": fmt.Sprintf("[ var='B' labels={} value=%g ]", value),
	})
	return b.String(), err
}

// The data of Grafana's notification templates, as far as the replaywatch
// template reads it (Grafana's ExtendedData and ExtendedAlert).
type notifyData struct {
	Status       string
	Alerts       notifyAlerts
	CommonLabels map[string]string
	ExternalURL  string
}

type notifyAlerts []notifyAlert

func (as notifyAlerts) Firing() []notifyAlert {
	return slices.DeleteFunc(slices.Clone(as), func(a notifyAlert) bool { return a.Status != "firing" })
}

type notifyAlert struct {
	Status      string
	Labels      kv
	Annotations kv
}

type kv map[string]string

type pair struct{ Name, Value string }

func (m kv) SortedPairs() []pair {
	var ps []pair
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		ps = append(ps, pair{k, m[k]})
	}
	return ps
}

// TestNotificationTemplate renders the message template for a firing
// session_swap: it must carry the summary, the description, the runbook and
// the session dashboard as an absolute link.
func TestNotificationTemplate(t *testing.T) {
	p := loadProvisioning(t)
	if len(p.templates) != 1 {
		t.Fatalf("%d notification templates, want 1", len(p.templates))
	}
	tmpl, err := template.New("").Option("missingkey=zero").Funcs(templateFuncs).Parse(p.templates[0].Template)
	if err != nil {
		t.Fatal(err)
	}
	alert := notifyAlert{
		Status: "firing",
		Labels: kv{"alertname": "MCP session swapped (session_swap)", "severity": "critical", "session_id": "S1", "server": "10.0.0.9:8080"},
		Annotations: kv{
			"summary": "session_swap in session S1", "description": "session S1 on 10.0.0.9:8080 was swapped",
			"runbook_url":   runbookBase + "docs/runbooks/session_swap.md",
			"dashboard_url": sessionDashboard + url.QueryEscape("S1"),
		},
	}
	data := notifyData{Status: "firing", Alerts: notifyAlerts{alert}, CommonLabels: alert.Labels, ExternalURL: "https://grafana.example.com"}
	for name, want := range map[string][]string{
		"replaywatch.title": {"[FIRING:1] MCP session swapped (session_swap) on 10.0.0.9:8080"},
		"replaywatch.message": {"session_swap in session S1", "session S1 on 10.0.0.9:8080 was swapped",
			"Runbook: " + runbookBase + "docs/runbooks/session_swap.md",
			"Dashboard: https://grafana.example.com/d/replaywatch-session?var-session=S1", "severity=critical"},
	} {
		var b strings.Builder
		if err := tmpl.ExecuteTemplate(&b, name, data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s renders %q, without %q", name, b.String(), w)
			}
		}
	}
	// Every contact point's templated setting names a defined template.
	for _, cp := range p.contacts {
		for _, r := range cp.Receivers {
			for k, v := range r.Settings {
				s, _ := v.(string)
				for _, m := range strings.Split(s, `{{ template "`)[1:] {
					name, _, _ := strings.Cut(m, `"`)
					if tmpl.Lookup(name) == nil {
						t.Errorf("contact point %s, %s: template %q is not defined", cp.Name, k, name)
					}
				}
			}
		}
	}
}
