package kubernetes_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// This file checks the Helm chart deploy/helm/replaywatch-agent with the
// Helm library (no cluster, no helm binary, no network): it lints the
// chart, renders it with several value sets, decodes every rendered
// document strictly (decodeObject, load_test.go) and runs on the result the
// checks the kustomize agent passes (agentDaemonSetChecks,
// agentConfigChecks, podSecurityChecks, checkVolumes).

const (
	chartDir = "../helm/replaywatch-agent"
	// helmRelease is the release name that gives the kustomize base's
	// object names (deploy/README.md, "Helm").
	helmRelease = "replaywatch-agent"
	// ringBytes is one packet ring (per worker per interface), and
	// runtimeBytes what the memory budget keeps for stacks and the runtime
	// (deploy/kubernetes/agent/daemonset.yaml).
	ringBytes    = 64 << 20
	runtimeBytes = 40 << 20
)

var loadChart = sync.OnceValues(func() (*chart.Chart, error) { return loader.Load(chartDir) })

// helmChart loads the chart once per run.
func helmChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loadChart()
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir, err)
	}
	return c
}

// readValues parses a values file given as YAML text.
func readValues(t *testing.T, text string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(text))
	if err != nil {
		t.Fatalf("values %q: %v", text, err)
	}
	return v.AsMap()
}

// rendering is the chart rendered with one set of values.
type rendering struct {
	*manifests
	notes string
}

// renderChart renders the chart as `helm install RELEASE -n replaywatch
// -f values` would, after values.schema.json validation, with missing
// values an error (Strict), and decodes every document strictly.
func renderChart(t *testing.T, release, values string) (*rendering, error) {
	t.Helper()
	ch := helmChart(t)
	vals, err := chartutil.ToRenderValues(ch, readValues(t, values),
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, nil)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	r := &rendering{manifests: &manifests{byKey: map[string]*object{}}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		switch base := path.Base(name); {
		case strings.HasPrefix(base, "_"):
			continue
		case base == "NOTES.txt":
			r.notes = files[name]
			continue
		}
		docs, err := splitDocuments([]byte(files[name]))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
			continue
		}
		errs = append(errs, r.add(name, docs)...)
	}
	return r, errors.Join(errs...)
}

// mustRender renders or fails the test.
func mustRender(t *testing.T, release, values string) *rendering {
	t.Helper()
	r, err := renderChart(t, release, values)
	if err != nil {
		t.Fatalf("rendering with values %q: %v", values, err)
	}
	return r
}

// helmCase is one set of values and what the rendering must be.
type helmCase struct {
	name   string
	values string // YAML over the chart's values.yaml
	want   func(t *testing.T) agentExpect
	// existing: the Secrets (name -> key) the rendering must reference
	// without rendering them; every other non-optional reference must
	// resolve in the rendering.
	existing map[string]string
	// skip: shared checks that do not apply to these values, and why.
	skip map[string]string
	// checks particular to these values.
	checks func(t *testing.T, r *rendering) []check
}

// defaultAgent is what the default values must give: the kustomize base's
// numbers, and a DSN naming the ClickHouse Service of deploy/kubernetes.
func defaultAgent(t *testing.T) agentExpect {
	kustomize := loadManifests(t)
	want := kustomizeAgent(kustomize)
	want.dsnWhat = "names the ClickHouse Service of deploy/kubernetes, without a password"
	return want
}

var helmCases = []helmCase{
	{
		name:     "defaults",
		want:     defaultAgent,
		existing: map[string]string{"replaywatch-clickhouse": "password"},
		checks: func(t *testing.T, r *rendering) []check {
			return []check{
				{"no Secret rendered", func() error { return noSecret(r) }},
				{"hash key from the optional Secret replaywatch-hash-key", func() error {
					return secretEnv(r, "REPLAYWATCH_HASH_KEY", "replaywatch-hash-key", "key", true)
				}},
				{"objects: ConfigMap, DaemonSet, ServiceAccount named " + helmRelease, func() error {
					return objectKeys(r, "ConfigMap/"+helmRelease, "DaemonSet/"+helmRelease, "ServiceAccount/"+helmRelease)
				}},
				{"no OTLP keys, only the metrics port", func() error {
					return otlpRendered(t, r, "", "", "metrics")
				}},
			}
		},
	},
	{
		name: "OTLP spans in",
		values: `
config:
  otlp:
    grpc: ":14317"
    http: "127.0.0.1:14318"
`,
		want:     defaultAgent,
		existing: map[string]string{"replaywatch-clickhouse": "password"},
		checks: func(t *testing.T, r *rendering) []check {
			return []check{
				{"otlp_grpc and otlp_http, ports otlp-grpc 14317 and otlp-http 14318", func() error {
					return otlpRendered(t, r, ":14317", "127.0.0.1:14318", "metrics", "otlp-grpc", "otlp-http")
				}},
				{"packet capture unchanged", func() error {
					cfg := agentConfigFile(t, r.manifests)
					if !slices.Equal(cfg.Interfaces, []string{"any"}) || !slices.Equal(cfg.Ports, []int{80, 3000, 8000, 8080}) {
						return fmt.Errorf("interfaces %q ports %v", cfg.Interfaces, cfg.Ports)
					}
					return nil
				}},
				{"NOTES.txt names the listeners", func() error {
					for _, s := range []string{"OTLP/gRPC  :14317", "OTLP/HTTP  127.0.0.1:14318"} {
						if !strings.Contains(r.notes, s) {
							return fmt.Errorf("NOTES.txt does not say %q:\n%s", s, r.notes)
						}
					}
					return nil
				}},
			}
		},
	},
	{
		name: "spans only",
		values: `
config:
  interfaces: [none]
  otlp:
    grpc: ":14317"
`,
		want:     defaultAgent,
		existing: map[string]string{"replaywatch-clickhouse": "password"},
		checks: func(t *testing.T, r *rendering) []check {
			return []check{
				{"interfaces [none], otlp_grpc alone", func() error {
					if cfg := agentConfigFile(t, r.manifests); !slices.Equal(cfg.Interfaces, []string{"none"}) {
						return fmt.Errorf("interfaces %q, want [none]", cfg.Interfaces)
					}
					return otlpRendered(t, r, ":14317", "", "metrics", "otlp-grpc")
				}},
				{"NOTES.txt says spans only", func() error {
					if !strings.Contains(r.notes, "without packet capture (spans only)") || strings.Contains(r.notes, "capturing TCP ports") {
						return fmt.Errorf("NOTES.txt:\n%s", r.notes)
					}
					return nil
				}},
			}
		},
	},
	{
		name: "generated secrets",
		values: `
clickhouse:
  password: not-a-real-password
hashKey:
  value: 00112233445566778899aabbccddeeff
`,
		want: defaultAgent,
		checks: func(t *testing.T, r *rendering) []check {
			return []check{
				{"Secret " + helmRelease + " holds both values", func() error {
					o, ok := r.byKey["Secret/"+helmRelease]
					if !ok {
						return errors.New("no Secret rendered")
					}
					s := o.meta.(*corev1.Secret)
					want := map[string]string{"clickhouse-password": "not-a-real-password", "hash-key": "00112233445566778899aabbccddeeff"}
					got := map[string]string{}
					for k, v := range s.Data {
						got[k] = string(v)
					}
					if !reflect.DeepEqual(got, want) || len(s.StringData) != 0 {
						return fmt.Errorf("data %q, want %q", got, want)
					}
					return nil
				}},
				{"password from the rendered Secret", func() error {
					return secretEnv(r, passwordEnv, helmRelease, "clickhouse-password", false)
				}},
				{"hash key from the rendered Secret, required", func() error {
					return secretEnv(r, "REPLAYWATCH_HASH_KEY", helmRelease, "hash-key", false)
				}},
				{"no secret value in the pod template", func() error {
					ds := get[*appsv1.DaemonSet](t, r.manifests, "DaemonSet", helmRelease)
					text := fmt.Sprintf("%+v", ds.Spec.Template)
					for _, v := range []string{"not-a-real-password", "00112233445566778899aabbccddeeff"} {
						if strings.Contains(text, v) {
							return fmt.Errorf("%q appears in the pod template", v)
						}
					}
					return nil
				}},
			}
		},
	},
	{
		name: "existing secrets of other names, no hash key",
		values: `
clickhouse:
  existingSecret: ch-credentials
  existingSecretKey: writer-password
hashKey:
  existingSecret: ""
`,
		want:     defaultAgent,
		existing: map[string]string{"ch-credentials": "writer-password"},
		checks: func(t *testing.T, r *rendering) []check {
			return []check{
				{"no Secret rendered", func() error { return noSecret(r) }},
				{"password from ch-credentials", func() error {
					return secretEnv(r, passwordEnv, "ch-credentials", "writer-password", false)
				}},
				{"no REPLAYWATCH_HASH_KEY", func() error {
					if _, ok := envByName(agentOf(t, r))["REPLAYWATCH_HASH_KEY"]; ok {
						return errors.New("REPLAYWATCH_HASH_KEY is set")
					}
					return nil
				}},
			}
		},
	},
	{
		name: "ports, interfaces, resources, DSN, spool",
		values: `
image:
  tag: 0.2.0
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
config:
  interfaces: [eth0, cni0]
  ports: [8080, 9000, 3000]
  workers: 4
  listen: ":9500"
  limits:
    maxConnections: 20000
    maxPagesTotal: 100000
    maxSessions: 50000
clickhouse:
  dsn: clickhouse://rw@clickhouse.analytics.svc:9440/mcp
  existingSecret: ch-credentials
  applySchema: true
  spoolDir: /data/replaywatch/spool
  maxSpoolBytes: 5368709120
resources:
  requests: {cpu: 250m, memory: 1Gi}
  limits: {cpu: "2", memory: 1536Mi}
goMemLimit: 960MiB
nodeSelector:
  kubernetes.io/os: linux
priorityClassName: system-node-critical
extraEnv:
  - name: REPLAYWATCH_LOG_LEVEL
    value: debug
podAnnotations:
  example.com/team: mcp
`,
		want: func(t *testing.T) agentExpect {
			return agentExpect{
				port: 9500, spool: "/data/replaywatch/spool", workers: 4,
				requests: [2]string{"250m", "1Gi"}, limits: [2]string{"2", "1536Mi"},
				dsn: func(dsn string) error {
					if dsn != "clickhouse://rw@clickhouse.analytics.svc:9440/mcp" {
						return fmt.Errorf("dsn %q, want the value's", dsn)
					}
					_, _, err := parseDSN(dsn)
					return err
				},
				dsnWhat: "is the value's, without a password",
			}
		},
		existing: map[string]string{"ch-credentials": "password"},
		checks: func(t *testing.T, r *rendering) []check {
			cfg := agentConfigFile(t, r.manifests)
			c := agentOf(t, r)
			ds := get[*appsv1.DaemonSet](t, r.manifests, "DaemonSet", helmRelease)
			return []check{
				{"agent.yaml has the values", func() error {
					var errs []error
					if !slices.Equal(cfg.Interfaces, []string{"eth0", "cni0"}) {
						errs = append(errs, fmt.Errorf("interfaces %q", cfg.Interfaces))
					}
					if !slices.Equal(cfg.Ports, []int{8080, 9000, 3000}) {
						errs = append(errs, fmt.Errorf("ports %v", cfg.Ports))
					}
					if cfg.ClickHouse.ApplySchema == nil || !*cfg.ClickHouse.ApplySchema {
						errs = append(errs, errors.New("apply_schema is not true"))
					}
					if p := cfg.ClickHouse.MaxSpoolBytes; p == nil || *p != 5368709120 {
						errs = append(errs, fmt.Errorf("max_spool_bytes %v, want 5368709120", p))
					}
					l := cfg.Limits
					if l.MaxConnections == nil || *l.MaxConnections != 20000 || l.MaxPagesTotal == nil || *l.MaxPagesTotal != 100000 || l.MaxSessions == nil || *l.MaxSessions != 50000 {
						errs = append(errs, fmt.Errorf("limits %+v", l))
					}
					if cfg.HashKeyFile != "/data/replaywatch/spool/hash.key" {
						errs = append(errs, fmt.Errorf("hash_key_file %q, want it in the spool", cfg.HashKeyFile))
					}
					return errors.Join(errs...)
				}},
				{"image by digest", func() error {
					if want := "ghcr.io/replaywatch/replaywatch:0.2.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"; c.Image != want {
						return fmt.Errorf("image %q, want %q", c.Image, want)
					}
					return nil
				}},
				{"spool-owner chowns the spool", func() error {
					ic := findContainer(ds.Spec.Template.Spec.InitContainers, "spool-owner")
					if ic == nil || !slices.Equal(ic.Command, []string{"chown", "-R", "65532:65532", "/data/replaywatch/spool"}) || mountAt(ic, "/data/replaywatch/spool") == nil {
						return fmt.Errorf("spool-owner %+v: want chown of /data/replaywatch/spool, mounted", ic)
					}
					return nil
				}},
				{"nodeSelector, priorityClassName, extra env, pod annotation", func() error {
					pod := &ds.Spec.Template.Spec
					var errs []error
					if pod.NodeSelector["kubernetes.io/os"] != "linux" || pod.PriorityClassName != "system-node-critical" {
						errs = append(errs, fmt.Errorf("nodeSelector %v priorityClassName %q", pod.NodeSelector, pod.PriorityClassName))
					}
					if e, ok := envByName(c)["REPLAYWATCH_LOG_LEVEL"]; !ok || e.Value != "debug" {
						errs = append(errs, errors.New("no REPLAYWATCH_LOG_LEVEL=debug"))
					}
					if ds.Spec.Template.Annotations["example.com/team"] != "mcp" {
						errs = append(errs, fmt.Errorf("annotations %v", ds.Spec.Template.Annotations))
					}
					return errors.Join(errs...)
				}},
			}
		},
	},
	{
		name:     "runAsRoot",
		values:   "runAsRoot: true\n",
		want:     defaultAgent,
		existing: map[string]string{"replaywatch-clickhouse": "password"},
		skip: map[string]string{
			"non-root user": "runAsRoot: uid 0 on purpose",
			"user":          "runAsRoot: uid 0 on purpose",
		},
		checks: func(t *testing.T, r *rendering) []check {
			ds := get[*appsv1.DaemonSet](t, r.manifests, "DaemonSet", helmRelease)
			c := agentOf(t, r)
			return []check{
				{"uid 0, still NET_RAW only and locked down", func() error {
					nonRoot, uid := runsAsNonRoot(&ds.Spec.Template.Spec, c)
					if nonRoot || uid == nil || *uid != 0 {
						return fmt.Errorf("runAsNonRoot %v runAsUser %s, want false and 0", nonRoot, fmtUID(uid))
					}
					if sc := c.SecurityContext; !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_RAW"}) {
						return fmt.Errorf("adds %q", sc.Capabilities.Add)
					}
					return lockedDown(c)
				}},
				{"the spool given to uid 0", func() error {
					// Root with NET_RAW alone has no DAC_OVERRIDE: a spool
					// owned by 65532 would refuse its writes.
					ic := findContainer(ds.Spec.Template.Spec.InitContainers, "spool-owner")
					if ic == nil || !slices.Equal(ic.Command, []string{"chown", "-R", "0:65532", "/var/lib/replaywatch/spool"}) {
						return fmt.Errorf("spool-owner %+v: want the spool chowned to 0:65532", ic)
					}
					return nil
				}},
			}
		},
	},
	{
		name:     "a shorter grace period",
		values:   "terminationGracePeriodSeconds: 12\n",
		want:     defaultAgent,
		existing: map[string]string{"replaywatch-clickhouse": "password"},
		skip:     map[string]string{"30 s to flush on SIGTERM": "12 s on purpose"},
		checks: func(t *testing.T, r *rendering) []check {
			c := agentOf(t, r)
			return []check{
				{"--shutdown-timeout inside the grace period", func() error {
					if !slices.Contains(c.Args, "--shutdown-timeout=7s") {
						return fmt.Errorf("args %q: want --shutdown-timeout=7s (the grace period less 5 s)", c.Args)
					}
					return nil
				}},
			}
		},
	},
}

// TestHelmLint runs `helm lint` (the Helm library's) on the chart, with
// the default values and with each value set of TestHelmRender: no error,
// no warning. Informational messages (no icon) are logged.
func TestHelmLint(t *testing.T) {
	for _, hc := range helmCases {
		t.Run(hc.name, func(t *testing.T) {
			linter := lint.All(chartDir, readValues(t, hc.values), namespace, false)
			for _, m := range linter.Messages {
				if m.Severity > support.InfoSev {
					t.Error(m)
				} else {
					t.Log(m)
				}
			}
			if len(linter.Messages) == 0 && linter.HighestSeverity != support.UnknownSev {
				t.Errorf("highest severity %d without messages", linter.HighestSeverity)
			}
		})
	}
}

// TestHelmRender renders the chart with each value set and runs on the
// result what TestAgentDaemonSet, TestAgentConfig and TestPodSecurity run
// on the kustomize base, then the value set's own checks.
func TestHelmRender(t *testing.T) {
	for _, hc := range helmCases {
		t.Run(hc.name, func(t *testing.T) {
			r := mustRender(t, helmRelease, hc.values)
			want := hc.want(t)
			keep := func(cs []check) []check {
				return slices.DeleteFunc(cs, func(c check) bool {
					if why, ok := hc.skip[c.name]; ok {
						t.Logf("skipped %q: %s", c.name, why)
						return true
					}
					return false
				})
			}
			t.Run("DaemonSet", func(t *testing.T) { runChecks(t, keep(agentDaemonSetChecks(t, r.manifests, want))) })
			t.Run("agent.yaml", func(t *testing.T) { runChecks(t, keep(agentConfigChecks(t, r.manifests, want))) })
			for _, w := range r.workloads() {
				for _, c := range containers(&w.template.Spec) {
					t.Run("security/"+w.String()+"/"+c.Name, func(t *testing.T) { runChecks(t, keep(podSecurityChecks(w, c))) })
				}
			}
			t.Run("references", func(t *testing.T) { runChecks(t, helmReferenceChecks(t, r, hc.existing)) })
			t.Run("memory", func(t *testing.T) { runChecks(t, []check{memoryBudget(t, r)}) })
			t.Run("NOTES.txt", func(t *testing.T) {
				cfg := agentConfigFile(t, r.manifests)
				if !strings.Contains(r.notes, cfg.ClickHouse.DSN) || !strings.Contains(r.notes, "does NOT install ClickHouse") {
					t.Errorf("NOTES.txt should name the DSN and say what the chart does not install:\n%s", r.notes)
				}
			})
			if hc.checks != nil {
				t.Run("values", func(t *testing.T) { runChecks(t, hc.checks(t, r)) })
			}
		})
	}
}

// helmReferenceChecks: the selector selects the pods; the ServiceAccount,
// the ConfigMap and the volumes resolve in the rendering; every Secret a
// pod names is rendered with that key, or is one of existing (which the
// chart expects to find in the namespace), or is optional.
func helmReferenceChecks(t *testing.T, r *rendering, existing map[string]string) []check {
	t.Helper()
	var checks []check
	for _, w := range r.workloads() {
		pod := &w.template.Spec
		checks = append(checks,
			check{w.String() + " selector matches the pod labels", func() error {
				sel, err := metav1.LabelSelectorAsSelector(w.selector)
				if err != nil {
					return err
				}
				if sel.Empty() || !sel.Matches(labels.Set(w.template.Labels)) {
					return fmt.Errorf("selector %v does not select the pod labels %v", w.selector, w.template.Labels)
				}
				return nil
			}},
			check{w.String() + " volumes", func() error { return checkVolumes(r.manifests, w) }},
			check{w.String() + " Secrets", func() error {
				var errs []error
				referenced := map[string]string{}
				for _, c := range containers(pod) {
					for _, e := range c.Env {
						if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
							continue
						}
						ref := e.ValueFrom.SecretKeyRef
						if _, rendered := r.byKey["Secret/"+ref.Name]; rendered || (ref.Optional != nil && *ref.Optional) {
							errs = append(errs, r.hasKey("Secret", ref.Name, ref.Key, ref.Optional, c.Name+" env "+e.Name))
							continue
						}
						if key, ok := existing[ref.Name]; !ok || key != ref.Key {
							errs = append(errs, fmt.Errorf("%s env %s: Secret %s key %s is neither rendered nor expected", c.Name, e.Name, ref.Name, ref.Key))
						}
						referenced[ref.Name] = ref.Key
					}
				}
				if !reflect.DeepEqual(referenced, existing) && (len(referenced) > 0 || len(existing) > 0) {
					errs = append(errs, fmt.Errorf("existing Secrets referenced %v, want %v", referenced, existing))
				}
				return errors.Join(errs...)
			}},
		)
	}
	return checks
}

// memoryBudget: GOMEMLIMIT, the packet rings (workers x interfaces x
// 64 MiB) and 40 MiB for the runtime fit in the memory limit, the
// arithmetic of deploy/kubernetes/agent/daemonset.yaml.
func memoryBudget(t *testing.T, r *rendering) check {
	cfg := agentConfigFile(t, r.manifests)
	c := agentOf(t, r)
	return check{"GOMEMLIMIT + rings + 40 MiB within the memory limit", func() error {
		e, ok := envByName(c)["GOMEMLIMIT"]
		if !ok {
			return errors.New("no GOMEMLIMIT")
		}
		soft, err := goMemLimitBytes(e.Value)
		if err != nil {
			return err
		}
		workers := 1
		if cfg.Workers != nil {
			workers = *cfg.Workers
		}
		rings := int64(workers * len(cfg.Interfaces) * ringBytes)
		limit := c.Resources.Limits[corev1.ResourceMemory]
		if need := soft + rings + runtimeBytes; need > limit.Value() {
			return fmt.Errorf("GOMEMLIMIT %s + rings %d MiB + 40 MiB = %d MiB, over the limit %s", e.Value, rings>>20, need>>20, limit.String())
		}
		return nil
	}}
}

var goMemLimitRE = regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`)

func goMemLimitBytes(s string) (int64, error) {
	m := goMemLimitRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q is not a Go size", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, nil
}

// TestHelmSchema: values.schema.json (or, for what a schema cannot say,
// the templates) refuses bad values before anything is rendered.
func TestHelmSchema(t *testing.T) {
	for _, tc := range []struct {
		name, values, wantErr string
	}{
		{"ports as a string", "config:\n  ports: \"80,8080\"\n", "/config/ports"},
		{"port 0", "config:\n  ports: [0, 80]\n", "/config/ports/0"},
		{"port over 65535", "config:\n  ports: [70000]\n", "/config/ports/0"},
		{"repeated port", "config:\n  ports: [80, 80]\n", "/config/ports"},
		{"no ports", "config:\n  ports: []\n", "/config/ports"},
		{"no interfaces", "config:\n  interfaces: []\n", "/config/interfaces"},
		{"interfaces joined by a comma", "config:\n  interfaces: [\"eth0,eth1\"]\n", "/config/interfaces/0"},
		{"workers 0", "config:\n  workers: 0\n", "/config/workers"},
		{"listen with a host", "config:\n  listen: \"127.0.0.1:9464\"\n", "/config/listen"},
		{"misspelt limit", "config:\n  limits:\n    maxSession: 10\n", "/config/limits"},
		{"unknown top-level key", "hostNetwork: false\n", "hostNetwork"},
		{"password in the DSN", "clickhouse:\n  dsn: clickhouse://rw:secret@clickhouse:9000/replaywatch\n", "/clickhouse/dsn"},
		{"image tag latest", "image:\n  tag: latest\n", "/image/tag"},
		{"spool-owner image with neither tag nor digest", "spoolOwner:\n  image:\n    tag: \"\"\n", "set a tag or a digest"},
		{"short hash key", "hashKey:\n  value: abc\n", "/hashKey/value"},
		{"no memory limit", "resources:\n  limits:\n    memory: null\n", "/resources/limits"},
		{"extraEnv overriding GOMEMLIMIT", "extraEnv:\n  - name: GOMEMLIMIT\n    value: 1GiB\n", "/extraEnv/0/name"},
		{"runAsRoot as a string", "runAsRoot: \"yes\"\n", "/runAsRoot"},
		{"maxUnavailable 0%", "updateStrategy:\n  maxUnavailable: 0%\n", "/updateStrategy/maxUnavailable"},
		{"port 0 in listen", "config:\n  listen: \":0\"\n", "the port must be 1 to 65535"},
		{"no ClickHouse password source", "clickhouse:\n  existingSecret: \"\"\n", "clickhouse.existingSecret or clickhouse.password"},
		{"existing ServiceAccount without a name", "serviceAccount:\n  create: false\n", "serviceAccount.name"},
		{"OTLP address without a port", "config:\n  otlp:\n    grpc: collector\n", "/config/otlp/grpc"},
		{"OTLP port 0", "config:\n  otlp:\n    http: \":0\"\n", "/config/otlp/http"},
		{"OTLP port over 65535", "config:\n  otlp:\n    grpc: \":70000\"\n", "/config/otlp/grpc"},
		{"OTLP address as a URL", "config:\n  otlp:\n    http: http://0.0.0.0:4318\n", "/config/otlp/http"},
		{"OTLP port as a number", "config:\n  otlp:\n    grpc: 14317\n", "/config/otlp/grpc"},
		{"misspelt OTLP key", "config:\n  otlp:\n    gprc: \":14317\"\n", "/config/otlp"},
		{"OTLP on the metrics port", "config:\n  otlp:\n    grpc: \":9464\"\n", "port 9464 is already config.listen's"},
		{"OTLP gRPC and HTTP on one port", "config:\n  otlp:\n    grpc: \":14317\"\n    http: \"127.0.0.1:14317\"\n", "port 14317 is already config.otlp.grpc's"},
		{"interfaces none without OTLP", "config:\n  interfaces: [none]\n", "config.interfaces [none]"},
		{"interfaces none beside another", "config:\n  interfaces: [none, eth0]\n  otlp:\n    grpc: \":14317\"\n", "config.interfaces [none]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, helmRelease, tc.values)
			switch {
			case err == nil:
				t.Errorf("values %q rendered without error, want one mentioning %q", tc.values, tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("error %q, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
	t.Run("values.yaml itself", func(t *testing.T) {
		if err := chartutil.ValidateAgainstSchema(helmChart(t), helmChart(t).Values); err != nil {
			t.Error(err)
		}
	})
}

// TestHelmMatchesKustomize: with the default values and the release name
// replaywatch-agent, the chart's DaemonSet is the kustomize base's, field
// by field for what matters to security and operation, and then whole
// (but for imagePullPolicy, which the chart sets); agent.yaml decodes to
// the same configuration; the ServiceAccount has no token either; and the
// Secret the chart expects by default is the one the base defines.
func TestHelmMatchesKustomize(t *testing.T) {
	kustomize := loadManifests(t)
	r := mustRender(t, helmRelease, "")
	kds := get[*appsv1.DaemonSet](t, kustomize, "DaemonSet", agentDaemonSet)
	hds := get[*appsv1.DaemonSet](t, r.manifests, "DaemonSet", agentDaemonSet)
	kpod, hpod := &kds.Spec.Template.Spec, &hds.Spec.Template.Spec

	same := func(name string, k, h any) check {
		return check{name, func() error {
			if !equality.Semantic.DeepEqual(k, h) {
				return fmt.Errorf("kustomize:\n%+v\nHelm:\n%+v", k, h)
			}
			return nil
		}}
	}
	checks := []check{
		same("hostNetwork", kpod.HostNetwork, hpod.HostNetwork),
		same("dnsPolicy", kpod.DNSPolicy, hpod.DNSPolicy),
		same("hostPID, hostIPC", [2]bool{kpod.HostPID, kpod.HostIPC}, [2]bool{hpod.HostPID, hpod.HostIPC}),
		same("automountServiceAccountToken", kpod.AutomountServiceAccountToken, hpod.AutomountServiceAccountToken),
		same("serviceAccountName", kpod.ServiceAccountName, hpod.ServiceAccountName),
		same("pod securityContext", kpod.SecurityContext, hpod.SecurityContext),
		same("terminationGracePeriodSeconds", kpod.TerminationGracePeriodSeconds, hpod.TerminationGracePeriodSeconds),
		same("tolerations", kpod.Tolerations, hpod.Tolerations),
		same("nodeSelector, affinity, priorityClassName", []any{kpod.NodeSelector, kpod.Affinity, kpod.PriorityClassName}, []any{hpod.NodeSelector, hpod.Affinity, hpod.PriorityClassName}),
		same("volumes", kpod.Volumes, hpod.Volumes),
		same("updateStrategy", kds.Spec.UpdateStrategy, hds.Spec.UpdateStrategy),
		same("container names", containerNames(kpod), containerNames(hpod)),
	}
	for _, kc := range containers(kpod) {
		hc := findContainer(slices.Concat(hpod.InitContainers, hpod.Containers), kc.Name)
		if hc == nil {
			t.Fatalf("the chart's DaemonSet has no container %s", kc.Name)
		}
		checks = append(checks,
			same(kc.Name+" securityContext", kc.SecurityContext, hc.SecurityContext),
			same(kc.Name+" image", kc.Image, hc.Image),
			same(kc.Name+" command and args", [2][]string{kc.Command, kc.Args}, [2][]string{hc.Command, hc.Args}),
			same(kc.Name+" env", kc.Env, hc.Env),
			same(kc.Name+" ports", kc.Ports, hc.Ports),
			same(kc.Name+" probes", []*corev1.Probe{kc.LivenessProbe, kc.ReadinessProbe, kc.StartupProbe}, []*corev1.Probe{hc.LivenessProbe, hc.ReadinessProbe, hc.StartupProbe}),
			same(kc.Name+" resources", kc.Resources, hc.Resources),
			same(kc.Name+" volumeMounts", kc.VolumeMounts, hc.VolumeMounts),
		)
	}
	checks = append(checks,
		check{"whole pod spec, but imagePullPolicy", func() error {
			k, h := kpod.DeepCopy(), hpod.DeepCopy()
			for _, c := range slices.Concat(containers(k), containers(h)) {
				c.ImagePullPolicy = ""
			}
			if !equality.Semantic.DeepEqual(k, h) {
				return fmt.Errorf("the pod specs differ:\nkustomize: %+v\nHelm:      %+v", k, h)
			}
			return nil
		}},
		check{"kustomize's pod labels and scrape annotations are on the chart's pods", func() error {
			var errs []error
			for k, v := range kds.Spec.Template.Labels {
				if hds.Spec.Template.Labels[k] != v {
					errs = append(errs, fmt.Errorf("pod label %s=%s missing", k, v))
				}
			}
			for k, v := range kds.Spec.Template.Annotations {
				if hds.Spec.Template.Annotations[k] != v {
					errs = append(errs, fmt.Errorf("pod annotation %s=%s missing", k, v))
				}
			}
			return errors.Join(errs...)
		}},
		check{"agent.yaml decodes to the same configuration", func() error {
			k, h := agentConfigFile(t, kustomize), agentConfigFile(t, r.manifests)
			if !reflect.DeepEqual(k, h) {
				return fmt.Errorf("kustomize %+v\nHelm      %+v", *k, *h)
			}
			return nil
		}},
		check{"ServiceAccount without a token", func() error {
			k := get[*corev1.ServiceAccount](t, kustomize, "ServiceAccount", kpod.ServiceAccountName)
			h := get[*corev1.ServiceAccount](t, r.manifests, "ServiceAccount", hpod.ServiceAccountName)
			if !equality.Semantic.DeepEqual(k.AutomountServiceAccountToken, h.AutomountServiceAccountToken) {
				return fmt.Errorf("automountServiceAccountToken %v, kustomize %v", h.AutomountServiceAccountToken, k.AutomountServiceAccountToken)
			}
			return nil
		}},
		check{"the default Secret reference is the base's Secret", func() error {
			var errs []error
			for _, e := range agentOf(t, r).Env {
				if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && (ref.SecretKeyRef.Optional == nil || !*ref.SecretKeyRef.Optional) {
					errs = append(errs, kustomize.hasKey("Secret", ref.SecretKeyRef.Name, ref.SecretKeyRef.Key, nil, "env "+e.Name))
				}
			}
			return errors.Join(errs...)
		}},
	)
	runChecks(t, checks)
}

// TestHelmConfigChecksum: a change to agent.yaml changes the pods'
// checksum/config annotation (so `helm upgrade` restarts the agents), and
// a change elsewhere does not.
func TestHelmConfigChecksum(t *testing.T) {
	sum := func(values string) string {
		ds := get[*appsv1.DaemonSet](t, mustRender(t, helmRelease, values).manifests, "DaemonSet", helmRelease)
		s := ds.Spec.Template.Annotations["checksum/config"]
		if b, err := hex.DecodeString(s); err != nil || len(b) != 32 {
			t.Fatalf("checksum/config %q: want a SHA-256", s)
		}
		return s
	}
	base := sum("")
	if got := sum("config:\n  ports: [8080]\n"); got == base {
		t.Error("ports changed, checksum/config did not")
	}
	if got := sum("clickhouse:\n  dsn: clickhouse://rw@ch:9000/db\n"); got == base {
		t.Error("dsn changed, checksum/config did not")
	}
	if got := sum("config:\n  otlp:\n    http: \":14318\"\n"); got == base {
		t.Error("config.otlp changed, checksum/config did not")
	}
	if got := sum("resources:\n  requests: {cpu: 200m, memory: 256Mi}\n  limits: {cpu: \"1\", memory: 768Mi}\n"); got != base {
		t.Error("resources changed checksum/config")
	}
}

// TestHelmNames: another release name prefixes every object and every
// reference follows; an existing ServiceAccount is used, not rendered.
func TestHelmNames(t *testing.T) {
	r := mustRender(t, "edge", "serviceAccount:\n  create: false\n  name: node-agents\n")
	const full = "edge-replaywatch-agent"
	ds := get[*appsv1.DaemonSet](t, r.manifests, "DaemonSet", full)
	pod := &ds.Spec.Template.Spec
	runChecks(t, []check{
		{"objects", func() error { return objectKeys(r, "ConfigMap/"+full, "DaemonSet/"+full) }},
		{"ServiceAccount node-agents, no token", func() error {
			if pod.ServiceAccountName != "node-agents" || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				return fmt.Errorf("serviceAccountName %q automount %v", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
			}
			return nil
		}},
		{"config volume names the ConfigMap", func() error {
			if name := configMapVolume(pod, "config"); name != full {
				return fmt.Errorf("config volume from ConfigMap %q, want %q", name, full)
			}
			return nil
		}},
		{"selector is instance-specific", func() error {
			if ds.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "edge" {
				return fmt.Errorf("selector %v", ds.Spec.Selector.MatchLabels)
			}
			return nil
		}},
	})
}

// otlpRendered checks agent.yaml's otlp_grpc and otlp_http ("" for
// absent) and the names of the agent container's ports, in order; the
// numbers are otlpPort's concern (agentConfigChecks).
func otlpRendered(t *testing.T, r *rendering, grpc, http string, ports ...string) error {
	cfg := agentConfigFile(t, r.manifests)
	var errs []error
	if cfg.OTLPGRPC != grpc || cfg.OTLPHTTP != http {
		errs = append(errs, fmt.Errorf("otlp_grpc %q otlp_http %q, want %q and %q", cfg.OTLPGRPC, cfg.OTLPHTTP, grpc, http))
	}
	var names []string
	for _, p := range agentOf(t, r).Ports {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, ports) {
		errs = append(errs, fmt.Errorf("container ports %q, want %q", names, ports))
	}
	return errors.Join(errs...)
}

// agentOf returns the agent container of the rendered DaemonSet.
func agentOf(t *testing.T, r *rendering) *corev1.Container {
	t.Helper()
	for _, o := range r.objects {
		if ds, ok := o.meta.(*appsv1.DaemonSet); ok {
			if c := findContainer(ds.Spec.Template.Spec.Containers, agentContainer); c != nil {
				return c
			}
		}
	}
	t.Fatal("no DaemonSet with an agent container rendered")
	return nil
}

// secretEnv checks that env name comes from that Secret key, optional or
// not.
func secretEnv(r *rendering, name, secret, key string, optional bool) error {
	var c *corev1.Container
	for _, o := range r.objects {
		if ds, ok := o.meta.(*appsv1.DaemonSet); ok {
			c = findContainer(ds.Spec.Template.Spec.Containers, agentContainer)
		}
	}
	if c == nil {
		return errors.New("no agent container")
	}
	e, ok := envByName(c)[name]
	if !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		return fmt.Errorf("env %s: want valueFrom.secretKeyRef", name)
	}
	ref := e.ValueFrom.SecretKeyRef
	isOptional := ref.Optional != nil && *ref.Optional
	if ref.Name != secret || ref.Key != key || isOptional != optional {
		return fmt.Errorf("env %s from Secret %s key %s (optional %v), want %s key %s (optional %v)", name, ref.Name, ref.Key, isOptional, secret, key, optional)
	}
	return nil
}

func noSecret(r *rendering) error {
	for _, o := range r.objects {
		if o.kind == "Secret" {
			return fmt.Errorf("%s rendered: the values ask for none", o)
		}
	}
	return nil
}

// objectKeys checks that the rendering is exactly these kind/name objects.
func objectKeys(r *rendering, want ...string) error {
	var got []string
	for k := range r.byKey {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("rendered %v, want %v", got, want)
	}
	return nil
}

func containerNames(pod *corev1.PodSpec) []string {
	var names []string
	for _, c := range containers(pod) {
		names = append(names, c.Name)
	}
	return names
}
