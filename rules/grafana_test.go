package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/detector"
	"go.yaml.in/yaml/v3"
)

// The Grafana alerting file provisioning format, apiVersion 1, as far as
// these files use it: the field names are those of Grafana's
// pkg/services/provisioning/alerting (AlertRuleGroupV1, AlertRuleV1,
// QueryV1, ContactPointV1, NotificiationPolicyV1, TemplateV1). Decoding is
// strict: a key Grafana does not know (a typo) fails the test instead of
// being dropped silently at provisioning.
type provisioningFile struct {
	APIVersion    int             `yaml:"apiVersion"`
	Groups        []ruleGroup     `yaml:"groups"`
	DeleteRules   []deleteRule    `yaml:"deleteRules"`
	ContactPoints []contactPoint  `yaml:"contactPoints"`
	Policies      []policy        `yaml:"policies"`
	ResetPolicies []int           `yaml:"resetPolicies"`
	Templates     []templateEntry `yaml:"templates"`
}

type deleteRule struct {
	OrgID int    `yaml:"orgId"`
	UID   string `yaml:"uid"`
}

type ruleGroup struct {
	OrgID    int         `yaml:"orgId"`
	Name     string      `yaml:"name"`
	Folder   string      `yaml:"folder"`
	Interval string      `yaml:"interval"`
	Rules    []alertRule `yaml:"rules"`
}

type alertRule struct {
	UID          string            `yaml:"uid"`
	Title        string            `yaml:"title"`
	Condition    string            `yaml:"condition"`
	Data         []query           `yaml:"data"`
	DashboardUID string            `yaml:"dashboardUid"`
	PanelID      int               `yaml:"panelId"`
	NoDataState  string            `yaml:"noDataState"`
	ExecErrState string            `yaml:"execErrState"`
	For          string            `yaml:"for"`
	Annotations  map[string]string `yaml:"annotations"`
	Labels       map[string]string `yaml:"labels"`
	IsPaused     bool              `yaml:"isPaused"`

	group string // the group's name, for messages
}

type query struct {
	RefID             string `yaml:"refId"`
	QueryType         string `yaml:"queryType"`
	RelativeTimeRange struct {
		From int `yaml:"from"` // seconds before now
		To   int `yaml:"to"`
	} `yaml:"relativeTimeRange"`
	DatasourceUID string    `yaml:"datasourceUid"`
	Model         yaml.Node `yaml:"model"`
}

type datasourceRef struct {
	Type string `yaml:"type"`
	UID  string `yaml:"uid"`
}

// clickHouseModel is the grafana-clickhouse-datasource query model (its
// src/types/sql.ts CHSqlQuery; format is the plugin SDK's
// sqlutil.FormatQueryOption: 0 time series, 1 table, 2 logs, 3 traces).
type clickHouseModel struct {
	RefID      string        `yaml:"refId"`
	Datasource datasourceRef `yaml:"datasource"`
	EditorType string        `yaml:"editorType"`
	QueryType  string        `yaml:"queryType"`
	Format     *int          `yaml:"format"`
	RawSQL     string        `yaml:"rawSql"`
}

// prometheusModel is Grafana's Prometheus query model, instant queries.
type prometheusModel struct {
	RefID      string        `yaml:"refId"`
	Datasource datasourceRef `yaml:"datasource"`
	Expr       string        `yaml:"expr"`
	Instant    bool          `yaml:"instant"`
	Range      bool          `yaml:"range"`
}

// expressionModel is a server-side expression (datasource __expr__):
// reduce or threshold.
type expressionModel struct {
	RefID      string        `yaml:"refId"`
	Datasource datasourceRef `yaml:"datasource"`
	Type       string        `yaml:"type"`
	Expression string        `yaml:"expression"`
	Reducer    string        `yaml:"reducer"`
	Conditions []struct {
		Evaluator struct {
			Type   string    `yaml:"type"`
			Params []float64 `yaml:"params"`
		} `yaml:"evaluator"`
	} `yaml:"conditions"`
}

type contactPoint struct {
	OrgID     int        `yaml:"orgId"`
	Name      string     `yaml:"name"`
	Receivers []receiver `yaml:"receivers"`
}

type receiver struct {
	UID                   string         `yaml:"uid"`
	Type                  string         `yaml:"type"`
	Settings              map[string]any `yaml:"settings"`
	DisableResolveMessage bool           `yaml:"disableResolveMessage"`
}

type policy struct {
	OrgID int `yaml:"orgId"`
	route `yaml:",inline"`
}

type route struct {
	Receiver       string     `yaml:"receiver"`
	GroupBy        []string   `yaml:"group_by"`
	ObjectMatchers [][]string `yaml:"object_matchers"`
	Continue       bool       `yaml:"continue"`
	GroupWait      string     `yaml:"group_wait"`
	GroupInterval  string     `yaml:"group_interval"`
	RepeatInterval string     `yaml:"repeat_interval"`
	Routes         []route    `yaml:"routes"`
}

type templateEntry struct {
	OrgID    int    `yaml:"orgId"`
	Name     string `yaml:"name"`
	Template string `yaml:"template"`
}

const (
	grafanaDir       = "grafana"
	runbookBase      = "https://github.com/replaywatch/replaywatch/blob/main/"
	clickhouseUID    = "replaywatch-clickhouse"
	clickhousePlugin = "grafana-clickhouse-datasource"
	prometheusUID    = "replaywatch-prometheus"
	sessionDashboard = "/d/replaywatch-session?var-session="
	// sessionLink opens a finding's session, or the overview for a finding
	// without one (2026-07-28): the session dashboard opened on no session
	// would show every sessionless finding's rows as one session's.
	sessionLink       = "{{ if $labels.session_id }}" + sessionDashboard + "{{ urlquery $labels.session_id }}{{ else }}" + overviewDashboard + "{{ end }}"
	overviewDashboard = "/d/replaywatch-overview"
	healthDashboard   = "/d/replaywatch-health"
)

// severities are the values of the severity label, and what each does.
var severities = []string{"critical", "warning", "info"}

// strictDecode decodes one YAML document, refusing unknown keys.
func strictDecode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

// decodeModel decodes a query's model strictly into v.
func decodeModel(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	return strictDecode(b, v)
}

// grafanaFiles returns rules/grafana's files by name.
func grafanaFiles(t *testing.T) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(grafanaDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			t.Errorf("%s: rules/grafana holds only .yaml provisioning files", name)
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(name)] = b
	}
	if len(files) == 0 {
		t.Fatal("no provisioning files in rules/grafana")
	}
	return files
}

// provisioning is every rules/grafana file, decoded.
type provisioning struct {
	rules     []*alertRule
	contacts  []contactPoint
	policies  []policy
	templates []templateEntry
}

func loadProvisioning(t *testing.T) *provisioning {
	t.Helper()
	p := &provisioning{}
	for name, b := range grafanaFiles(t) {
		var f provisioningFile
		if err := strictDecode(b, &f); err != nil {
			t.Fatalf("rules/grafana/%s: %v", name, err)
		}
		if f.APIVersion != 1 {
			t.Errorf("rules/grafana/%s: apiVersion %d, want 1", name, f.APIVersion)
		}
		for gi := range f.Groups {
			g := &f.Groups[gi]
			if g.OrgID != 1 || g.Name == "" || g.Folder != "replaywatch" || g.Interval == "" {
				t.Errorf("rules/grafana/%s: group %q: want orgId 1, a name, folder replaywatch and an interval", name, g.Name)
			}
			for ri := range g.Rules {
				r := &g.Rules[ri]
				r.group = g.Name
				p.rules = append(p.rules, r)
			}
		}
		p.contacts = append(p.contacts, f.ContactPoints...)
		p.policies = append(p.policies, f.Policies...)
		p.templates = append(p.templates, f.Templates...)
	}
	sort.Slice(p.rules, func(i, j int) bool { return p.rules[i].UID < p.rules[j].UID })
	return p
}

// ruleQueries is a rule's data, decoded by kind of data source.
type ruleQueries struct {
	source      *query // the one data source query
	clickhouse  *clickHouseModel
	prometheus  *prometheusModel
	expressions map[string]*expressionModel
}

func decodeRule(r *alertRule) (*ruleQueries, error) {
	q := &ruleQueries{expressions: map[string]*expressionModel{}}
	for i := range r.Data {
		d := &r.Data[i]
		switch d.DatasourceUID {
		case "__expr__":
			var m expressionModel
			if err := decodeModel(&d.Model, &m); err != nil {
				return nil, fmt.Errorf("expression %s: %v", d.RefID, err)
			}
			if m.RefID != d.RefID || m.Datasource != (datasourceRef{"__expr__", "__expr__"}) {
				return nil, fmt.Errorf("expression %s: model refId %q, datasource %+v", d.RefID, m.RefID, m.Datasource)
			}
			q.expressions[d.RefID] = &m
		case clickhouseUID:
			var m clickHouseModel
			if err := decodeModel(&d.Model, &m); err != nil {
				return nil, fmt.Errorf("query %s: %v", d.RefID, err)
			}
			if m.RefID != d.RefID || m.Datasource != (datasourceRef{clickhousePlugin, clickhouseUID}) {
				return nil, fmt.Errorf("query %s: model refId %q, datasource %+v", d.RefID, m.RefID, m.Datasource)
			}
			if m.EditorType != "sql" || m.QueryType != "table" || m.Format == nil || *m.Format != 1 || m.RawSQL == "" {
				return nil, fmt.Errorf("query %s: want editorType sql, queryType table, format 1 (table) and rawSql", d.RefID)
			}
			q.source, q.clickhouse = d, &m
		case prometheusUID:
			var m prometheusModel
			if err := decodeModel(&d.Model, &m); err != nil {
				return nil, fmt.Errorf("query %s: %v", d.RefID, err)
			}
			if m.RefID != d.RefID || m.Datasource != (datasourceRef{"prometheus", prometheusUID}) || !m.Instant || m.Range || m.Expr == "" {
				return nil, fmt.Errorf("query %s: want an instant query on the prometheus data source %s", d.RefID, prometheusUID)
			}
			q.source, q.prometheus = d, &m
		default:
			return nil, fmt.Errorf("query %s: data source %q: want %s, %s or __expr__", d.RefID, d.DatasourceUID, clickhouseUID, prometheusUID)
		}
	}
	if q.source == nil || (q.clickhouse != nil) == (q.prometheus != nil) {
		return nil, errors.New("want exactly one data source query")
	}
	if q.source.RefID != "A" || q.source.RelativeTimeRange.From <= 0 || q.source.RelativeTimeRange.To != 0 {
		return nil, fmt.Errorf("query %s: want refId A over a relative time range ending now", q.source.RefID)
	}
	// A -> B (reduce last) -> C (threshold), the condition.
	b, c := q.expressions["B"], q.expressions["C"]
	if len(q.expressions) != 2 || b == nil || c == nil {
		return nil, errors.New("want expressions B (reduce) and C (threshold)")
	}
	if b.Type != "reduce" || b.Expression != "A" || b.Reducer != "last" {
		return nil, errors.New("B: want reduce last of A")
	}
	if c.Type != "threshold" || c.Expression != "B" || len(c.Conditions) != 1 || len(c.Conditions[0].Evaluator.Params) != 1 ||
		!slices.Contains([]string{"gt", "lt"}, c.Conditions[0].Evaluator.Type) {
		return nil, errors.New("C: want one threshold (gt or lt, one parameter) on B")
	}
	if r.Condition != "C" {
		return nil, fmt.Errorf("condition %q, want C", r.Condition)
	}
	return q, nil
}

// fires applies the rule's threshold C to a value of B.
func (q *ruleQueries) fires(v float64) bool {
	ev := q.expressions["C"].Conditions[0].Evaluator
	if ev.Type == "gt" {
		return v > ev.Params[0]
	}
	return v < ev.Params[0]
}

var (
	labelRef   = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
	envRef     = regexp.MustCompile(`^\$\{[A-Z][A-Z0-9_]*\}$`)
	anyEnvRef  = regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*)\}`)
	catalogue  = detector.Kinds()
	healthRule = regexp.MustCompile(`^Replaywatch[A-Z][A-Za-z]+$`)
)

// severityFor is the severity label a finding of kind carries: critical
// pages, high warns, medium informs.
func severityFor(k detector.Kind) string { return severityLabel(detector.SeverityOf(k)) }

// severityFilter finds a rule query's filter on the finding's own severity
// (for kinds whose findings carry several: detector.SeveritiesOf).
var severityFilter = regexp.MustCompile(`AND severity = '([a-z]+)'`)

func severityLabel(s detector.Severity) string {
	switch s {
	case detector.SeverityCritical:
		return "critical"
	case detector.SeverityHigh:
		return "warning"
	case detector.SeverityMedium:
		return "info"
	}
	return ""
}

// TestCatalogueIsComplete: every kind of the catalogue (detector.Kinds,
// which detector's own tests hold to its severities) has a severity label.
func TestCatalogueIsComplete(t *testing.T) {
	for _, k := range catalogue {
		if severityFor(k) == "" {
			t.Errorf("%s: no severity in detector.SeverityOf", k)
		}
	}
}

// runbookFile checks a runbook_url and returns the repository file it names.
func runbookFile(url string) (string, error) {
	rel, ok := strings.CutPrefix(url, runbookBase)
	if !ok || !strings.HasPrefix(rel, "docs/runbooks/") || !strings.HasSuffix(rel, ".md") {
		return "", fmt.Errorf("runbook_url %q: want %sdocs/runbooks/<name>.md", url, runbookBase)
	}
	p := filepath.Join("..", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("runbook_url %q: %v", url, err)
	}
	return p, nil
}

// TestAlertRules checks every Grafana rule's shape, labels and annotations.
func TestAlertRules(t *testing.T) {
	p := loadProvisioning(t)
	uids := map[string]bool{}
	covered := map[detector.Kind][]*alertRule{}
	bySeverity := map[detector.Kind][]detector.Severity{}
	for _, r := range p.rules {
		t.Run(r.UID, func(t *testing.T) {
			if uids[r.UID] {
				t.Errorf("uid %s twice", r.UID)
			}
			uids[r.UID] = true
			if !regexp.MustCompile(`^[a-zA-Z0-9_-]{1,40}$`).MatchString(r.UID) || r.Title == "" {
				t.Errorf("uid %q (Grafana: 1-40 of [a-zA-Z0-9_-]) and a title", r.UID)
			}
			q, err := decodeRule(r)
			if err != nil {
				t.Fatal(err)
			}
			if r.NoDataState != "OK" || !slices.Contains([]string{"Error", "KeepLast", "Alerting"}, r.ExecErrState) {
				t.Errorf("noDataState %q (want OK: no rows is no finding), execErrState %q", r.NoDataState, r.ExecErrState)
			}
			if r.IsPaused {
				t.Error("paused")
			}
			if !slices.Contains(severities, r.Labels["severity"]) {
				t.Errorf("severity label %q, want one of %v", r.Labels["severity"], severities)
			}
			for k, v := range r.Labels {
				// Provisioning interpolates environment variables into
				// labels: a "$" there would be eaten.
				if strings.Contains(k+v, "$") {
					t.Errorf("label %s=%q has a $", k, v)
				}
			}
			a := r.Annotations
			for _, key := range []string{"summary", "description", "runbook_url", "dashboard_url"} {
				if strings.TrimSpace(a[key]) == "" {
					t.Errorf("no %s annotation", key)
				}
			}
			for k, v := range a {
				// Grafana 12 keeps annotations raw; newer ones expand
				// ${NAME} there: keep the templates clear of it.
				if strings.Contains(v, "${") {
					t.Errorf("annotation %s holds ${: newer Grafana versions would expand it", k)
				}
			}
			if _, err := runbookFile(a["runbook_url"]); err != nil {
				t.Error(err)
			}
			if q.clickhouse != nil {
				labels := sqlLabelColumns(q.clickhouse.RawSQL)
				if !slices.Contains(labels, "server") {
					t.Errorf("labels %v: the server must be one", labels)
				}
				for _, l := range labels {
					if ref := "$labels." + l; !strings.Contains(a["description"], ref) {
						t.Errorf("description does not name label %s: no %s", l, ref)
					}
				}
				// Grafana tells a rule's instances apart by their
				// labels: one that names a finding's session, while
				// pending for a while, starts over with every new
				// session and never fires during the incident it is
				// for (a rule over a server's share of resumes did).
				if r.For != "0s" && slices.Contains(labels, "session_id") {
					t.Errorf("for %s with a session_id label: each new session restarts the wait", r.For)
				}
				want := overviewDashboard
				if slices.Contains(labels, "session_id") {
					want = sessionLink
				}
				if a["dashboard_url"] != want {
					t.Errorf("dashboard_url %q, want %q", a["dashboard_url"], want)
				}
				if r.Labels["kind"] != "" {
					k := detector.Kind(r.Labels["kind"])
					if !slices.Contains(catalogue, k) {
						t.Errorf("kind label %q is not in the catalogue", k)
					}
					covered[k] = append(covered[k], r)
					if !strings.HasSuffix(a["runbook_url"], "/"+string(k)+".md") {
						t.Errorf("runbook_url %q is not the kind's runbook", a["runbook_url"])
					}
					if !strings.Contains(q.clickhouse.RawSQL, "kind = '"+string(k)+"'") {
						t.Errorf("the query does not select kind %s", k)
					}
					sev := detector.SeverityOf(k)
					if m := severityFilter.FindStringSubmatch(q.clickhouse.RawSQL); m != nil {
						sev = detector.Severity(m[1])
					} else if len(detector.SeveritiesOf(k)) > 1 {
						t.Errorf("kind %s carries severities %v: each rule selects one (AND severity = '...')", k, detector.SeveritiesOf(k))
					}
					if !slices.Contains(detector.SeveritiesOf(k), sev) {
						t.Errorf("kind %s never carries severity %s", k, sev)
					}
					bySeverity[k] = append(bySeverity[k], sev)
					want := severityLabel(sev)
					if got := r.Labels["severity"]; got != want {
						t.Errorf("kind %s (%s): severity %s, want %s", k, sev, got, want)
					}
					if want == "critical" && r.For != "0s" {
						t.Errorf("critical kind %s: for %q, want 0s (page at once)", k, r.For)
					}
				}
			} else {
				if !healthRule.MatchString(r.Title) {
					t.Errorf("title %q: a health rule is named as its Prometheus alert", r.Title)
				}
				if !strings.Contains(a["description"], "$labels.") {
					t.Error("description names no label (node or instance)")
				}
				if a["dashboard_url"] != healthDashboard {
					t.Errorf("dashboard_url %q, want %q", a["dashboard_url"], healthDashboard)
				}
			}
		})
	}
	for _, k := range catalogue {
		rs := covered[k]
		if len(rs) == 0 {
			t.Errorf("catalogue kind %s: no rule alerts on it", k)
		}
		if severityFor(k) == "critical" && !slices.ContainsFunc(rs, func(r *alertRule) bool { return r.Labels["severity"] == "critical" }) {
			t.Errorf("critical kind %s: no paging rule", k)
		}
		for _, sev := range detector.SeveritiesOf(k) {
			if !slices.Contains(bySeverity[k], sev) {
				t.Errorf("kind %s: no rule for its %s findings", k, sev)
			}
		}
	}
}

// TestAnnotationTemplates renders every rule's annotations the way Grafana
// does (Go text/template, with $labels, $values and $value defined in front)
// on labels of the rule's own: they must parse, execute, and print the
// values.
func TestAnnotationTemplates(t *testing.T) {
	p := loadProvisioning(t)
	for _, r := range p.rules {
		q, err := decodeRule(r)
		if err != nil {
			t.Fatalf("%s: %v", r.UID, err)
		}
		labels := map[string]string{}
		for _, l := range exprLabels(q) {
			labels[l] = "L-" + l
		}
		for key, text := range r.Annotations {
			out, err := renderAnnotation(text, labels, 3)
			if err != nil {
				t.Errorf("%s: annotation %s: %v", r.UID, key, err)
				continue
			}
			for _, m := range labelRef.FindAllStringSubmatch(text, -1) {
				if _, ok := labels[m[1]]; !ok {
					t.Errorf("%s: annotation %s uses $labels.%s, which the query does not return (it returns %v)", r.UID, key, m[1], exprLabels(q))
				}
			}
			if strings.Contains(out, "<no value>") {
				t.Errorf("%s: annotation %s renders <no value>: %s", r.UID, key, out)
			}
		}
	}
}

// exprLabels are the labels a rule's instances carry from its query: a
// ClickHouse query's string columns (read from its SELECT list, checked
// against the real result in TestClickHouseAlertQueries), or the labels a
// PromQL expression keeps.
func exprLabels(q *ruleQueries) []string {
	if q.clickhouse != nil {
		return sqlLabelColumns(q.clickhouse.RawSQL)
	}
	var out []string
	for _, m := range regexp.MustCompile(`by \(([^)]*)\)`).FindAllStringSubmatch(q.prometheus.Expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	if m := regexp.MustCompile(`^(?:absent\()?up\{([^}]*)\}`).FindStringSubmatch(q.prometheus.Expr); m != nil {
		// up keeps its target labels; absent() keeps the equality matchers.
		out = append(out, "job")
		if !strings.HasPrefix(q.prometheus.Expr, "absent(") {
			out = append(out, "instance")
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sqlLabelColumns reads the output column names of a rule's SELECT that are
// not its value: every column but the last (the rules put their one numeric
// column last).
func sqlLabelColumns(sql string) []string {
	sel := regexp.MustCompile(`(?s)^SELECT (.*?)\nFROM `).FindStringSubmatch(sql)
	if sel == nil {
		return nil
	}
	var cols []string
	depth, start := 0, 0
	s := sel[1]
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				cols = append(cols, s[start:i])
				start = i + 1
			}
		}
	}
	cols = append(cols, s[start:])
	var names []string
	for _, c := range cols[:len(cols)-1] {
		f := strings.Fields(c)
		names = append(names, f[len(f)-1])
	}
	return names
}

// TestContactPoints: PagerDuty, Opsgenie and a webhook, every key from an
// environment variable, nothing secret in the files, every variable
// documented in rules/README.md.
func TestContactPoints(t *testing.T) {
	p := loadProvisioning(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	secretKeys := map[string][]string{
		"pagerduty": {"integrationKey"},
		"opsgenie":  {"apiKey"},
		"webhook":   {"url", "authorization_credentials"},
	}
	types := map[string]bool{}
	for _, cp := range p.contacts {
		if cp.OrgID != 1 || len(cp.Receivers) == 0 {
			t.Errorf("contact point %q: want orgId 1 and a receiver", cp.Name)
		}
		for _, r := range cp.Receivers {
			types[r.Type] = true
			secrets, ok := secretKeys[r.Type]
			if !ok {
				t.Errorf("contact point %s: receiver type %q", cp.Name, r.Type)
				continue
			}
			for _, k := range secrets {
				v, _ := r.Settings[k].(string)
				if !envRef.MatchString(v) {
					t.Errorf("contact point %s: %s = %q, want ${ENV_VARIABLE}: keys are never committed", cp.Name, k, v)
				}
			}
			for k, v := range r.Settings {
				s, ok := v.(string)
				if !ok {
					continue
				}
				// Settings are interpolated: a "$" other than ${NAME}
				// would be eaten by provisioning.
				if strings.Contains(anyEnvRef.ReplaceAllString(s, ""), "$") {
					t.Errorf("contact point %s: %s has a $ that is not ${NAME}: %q", cp.Name, k, s)
				}
				for _, m := range anyEnvRef.FindAllStringSubmatch(s, -1) {
					if !bytes.Contains(readme, []byte(m[1])) {
						t.Errorf("contact point %s: %s uses $%s, which rules/README.md does not document", cp.Name, k, m[1])
					}
				}
			}
		}
	}
	for _, want := range []string{"pagerduty", "opsgenie", "webhook"} {
		if !types[want] {
			t.Errorf("no %s contact point", want)
		}
	}
}

// TestNotificationPolicy routes each severity through the policy tree, with
// Alertmanager's semantics (first matching child wins unless it says
// continue), and requires: critical pages (PagerDuty), warning warns
// (Opsgenie), every severity reaches the webhook, and none is left to the
// root's default.
func TestNotificationPolicy(t *testing.T) {
	p := loadProvisioning(t)
	if len(p.policies) != 1 {
		t.Fatalf("%d policy trees, want 1", len(p.policies))
	}
	root := p.policies[0]
	if root.OrgID != 1 || root.Receiver == "" || len(root.ObjectMatchers) != 0 {
		t.Fatalf("root policy: want orgId 1, a default receiver, no matchers")
	}
	contacts := map[string]string{}
	for _, cp := range p.contacts {
		contacts[cp.Name] = cp.Receivers[0].Type
	}
	var check func(r *route)
	check = func(r *route) {
		if _, ok := contacts[r.Receiver]; r.Receiver != "" && !ok {
			t.Errorf("route to %q: no such contact point", r.Receiver)
		}
		for _, m := range r.ObjectMatchers {
			if len(m) != 3 || !slices.Contains([]string{"=", "!=", "=~", "!~"}, m[1]) {
				t.Errorf("matcher %v: want [label, op, value]", m)
			}
		}
		for i := range r.Routes {
			check(&r.Routes[i])
		}
	}
	check(&root.route)

	want := map[string][]string{
		"critical": {"pagerduty", "webhook"},
		"warning":  {"opsgenie", "webhook"},
		"info":     {"webhook"},
	}
	for _, sev := range severities {
		got, matched := routeLabels(&root.route, map[string]string{"severity": sev, "alertname": "x"})
		if !matched {
			t.Errorf("severity %s: no route matches it (only the root's default)", sev)
		}
		var types []string
		for _, rcv := range got {
			types = append(types, contacts[rcv])
		}
		slices.Sort(types)
		if !slices.Equal(types, want[sev]) {
			t.Errorf("severity %s goes to %v (%v), want %v", sev, got, types, want[sev])
		}
	}
	// Every severity a rule uses (Grafana's and Prometheus') is routed.
	used := map[string]bool{}
	for _, r := range p.rules {
		used[r.Labels["severity"]] = true
	}
	for _, r := range loadPrometheusRules(t) {
		used[r.Labels["severity"]] = true
	}
	for sev := range used {
		if !slices.Contains(severities, sev) {
			t.Errorf("a rule uses severity %q, which the policy does not route", sev)
		}
	}
}

// routeLabels returns the receivers an alert with labels reaches, and
// whether any child route matched it.
func routeLabels(r *route, labels map[string]string) ([]string, bool) {
	var out []string
	matched := false
	for i := range r.Routes {
		c := &r.Routes[i]
		if !matches(c.ObjectMatchers, labels) {
			continue
		}
		matched = true
		sub, _ := routeLabels(c, labels)
		if len(sub) == 0 {
			sub = []string{c.Receiver}
		}
		out = append(out, sub...)
		if !c.Continue {
			break
		}
	}
	if !matched {
		return []string{r.Receiver}, false
	}
	return out, true
}

func matches(ms [][]string, labels map[string]string) bool {
	for _, m := range ms {
		if len(m) != 3 {
			return false
		}
		v := labels[m[0]]
		switch m[1] {
		case "=":
			if v != m[2] {
				return false
			}
		case "!=":
			if v == m[2] {
				return false
			}
		case "=~", "!~":
			ok := regexp.MustCompile("^(?:" + m[2] + ")$").MatchString(v)
			if ok != (m[1] == "=~") {
				return false
			}
		}
	}
	return true
}
