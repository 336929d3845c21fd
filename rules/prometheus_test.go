package rules

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/internal/telemetry"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// The Prometheus rule file format (rulefmt), strictly.
type prometheusRuleFile struct {
	Groups []struct {
		Name     string           `yaml:"name"`
		Interval string           `yaml:"interval"`
		Rules    []prometheusRule `yaml:"rules"`
	} `yaml:"groups"`
}

type prometheusRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

const (
	promRules     = "prometheus/agent.rules.yml"
	promRulesTest = "prometheus/agent.rules.test.yml"
)

func loadPrometheusRules(t *testing.T) []prometheusRule {
	t.Helper()
	b, err := os.ReadFile(promRules)
	if err != nil {
		t.Fatal(err)
	}
	var f prometheusRuleFile
	if err := strictDecode(b, &f); err != nil {
		t.Fatalf("%s: %v", promRules, err)
	}
	var out []prometheusRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", promRules)
	}
	return out
}

var metricName = regexp.MustCompile(`\b(replaywatch_[a-z0-9_]+|up|target_info)\b`)

// TestPrometheusRules: every rule alerts (no recording rules), has a routed
// severity, a summary and description naming the node or instance, a
// runbook that exists and the health dashboard; every metric it reads is
// one the agent exposes (telemetry.MetricNames()) or Prometheus' up.
func TestPrometheusRules(t *testing.T) {
	names := telemetry.MetricNames()
	for _, r := range loadPrometheusRules(t) {
		if !healthRule.MatchString(r.Alert) || r.Expr == "" {
			t.Errorf("rule %q: want an alert named Replaywatch... with an expression", r.Alert)
			continue
		}
		if !slices.Contains(severities, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want one of %v", r.Alert, r.Labels["severity"], severities)
		}
		if r.Annotations["summary"] == "" || !labelRef.MatchString(r.Annotations["description"]) {
			t.Errorf("%s: want a summary and a description that names the node or instance", r.Alert)
		}
		if _, err := runbookFile(r.Annotations["runbook_url"]); err != nil {
			t.Errorf("%s: %v", r.Alert, err)
		}
		if r.Annotations["dashboard_url"] != healthDashboard {
			t.Errorf("%s: dashboard_url %q, want %q", r.Alert, r.Annotations["dashboard_url"], healthDashboard)
		}
		for _, m := range metricName.FindAllString(r.Expr, -1) {
			if m != "up" && !slices.Contains(names, m) {
				t.Errorf("%s: metric %s is not one the agent exposes (telemetry.MetricNames())", r.Alert, m)
			}
		}
	}
}

// TestGrafanaHealthRulesMatchPrometheus: the Grafana-managed health rules
// are the Prometheus rules, one for one: same name, expression, for,
// severity and runbook.
func TestGrafanaHealthRulesMatchPrometheus(t *testing.T) {
	prom := map[string]prometheusRule{}
	for _, r := range loadPrometheusRules(t) {
		prom[r.Alert] = r
	}
	seen := map[string]bool{}
	for _, r := range loadProvisioning(t).rules {
		q, err := decodeRule(r)
		if err != nil {
			t.Fatalf("%s: %v", r.UID, err)
		}
		if q.prometheus == nil {
			continue
		}
		p, ok := prom[r.Title]
		if !ok {
			t.Errorf("Grafana rule %s: no Prometheus alert %s", r.UID, r.Title)
			continue
		}
		seen[r.Title] = true
		if strings.Join(strings.Fields(q.prometheus.Expr), " ") != strings.Join(strings.Fields(p.Expr), " ") {
			t.Errorf("%s: Grafana expr %q, Prometheus expr %q", r.Title, q.prometheus.Expr, p.Expr)
		}
		if r.For != p.For || r.Labels["severity"] != p.Labels["severity"] || r.Annotations["runbook_url"] != p.Annotations["runbook_url"] {
			t.Errorf("%s: for/severity/runbook differ between Grafana and Prometheus", r.Title)
		}
		// The threshold must pass the value the expression returns when it
		// fires: up == 0 returns 0; the others return positive numbers.
		want := 1.0
		if strings.HasSuffix(strings.TrimSpace(p.Expr), "== 0") {
			want = 0
		}
		if !q.fires(want) {
			t.Errorf("%s: condition C does not fire on %g, the value the expression returns", r.Title, want)
		}
	}
	for name := range prom {
		if !seen[name] {
			t.Errorf("Prometheus alert %s has no Grafana-managed twin in rules/grafana", name)
		}
	}
}

// TestPromtool runs promtool check rules and promtool test rules. Without
// promtool (Debian package prometheus) it skips, or fails under CI.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found: apt-get install prometheus (scripts/test.sh does)"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, args := range [][]string{{"check", "rules", promRules}, {"test", "rules", promRulesTest}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}
