package kubernetes_test

import (
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// What the manifests assume of `replaywatch agent` (deploy/README.md,
// "What the agent must honour"), and the names the bases share.
const (
	namespace         = "replaywatch"
	agentDaemonSet    = "replaywatch-agent"
	agentContainer    = "agent"
	agentConfigMap    = "replaywatch-agent"
	agentPort         = 9464
	healthPath        = "/healthz"
	readyPath         = "/readyz"
	metricsPath       = "/metrics"
	configDir         = "/etc/replaywatch"
	configKey         = "agent.yaml"
	spoolDir          = "/var/lib/replaywatch/spool"
	passwordEnv       = "REPLAYWATCH_CLICKHOUSE_PASSWORD"
	agentWorkers      = 2 // the memory budget in daemonset.yaml assumes it
	clickhouseService = "clickhouse"
	schemaJob         = "replaywatch-schema"
	grafanaDeployment = "grafana"
	clickhousePlugin  = "grafana-clickhouse-datasource"
	// replaywatch's own data source plugin (dashboards/plugin), unsigned,
	// and its provisioned data source.
	sessionsPlugin     = "replaywatch-sessions-datasource"
	sessionsDataSource = "replaywatch-sessions"
	grafanaDataDir     = "/var/lib/grafana" // the official image's GF_PATHS_DATA
	// The Dockerfile's target that makes the plugin's image, where that
	// image holds the plugin folder, and the image's repository.
	dockerfile        = "../../Dockerfile"
	dockerignore      = "../../.dockerignore"
	pluginTarget      = "grafana-plugin"
	pluginImageDir    = "/plugin/" + sessionsPlugin
	pluginImageRepo   = "ghcr.io/replaywatch/replaywatch-grafana-plugin"
	agentImageRepo    = "ghcr.io/replaywatch/replaywatch"
	unsignedPluginEnv = "GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS"
)

// sessionsSettings are the jsonData keys the replaywatch plugin reads
// (dashboards/plugin/README.md, "Settings").
var sessionsSettings = []string{"address", "database", "user", "maxRows", "maxRangeDays"}

// Capabilities a container may add; every other container adds none.
var capabilityGrants = map[string][]corev1.Capability{
	"DaemonSet/replaywatch-agent/agent":       {"NET_RAW"}, // AF_PACKET
	"DaemonSet/replaywatch-agent/spool-owner": {"CHOWN"},   // gives the hostPath spool to uid 65532
	"Job/replaywatch-schema/schema":           {"NET_RAW"}, // exec of the cap_net_raw+ep binary
}

// Containers that may run as root, and why; every other runs as non-root.
var rootAllowed = map[string]string{
	"DaemonSet/replaywatch-agent/spool-owner": "chowns the hostPath spool directory, with CAP_CHOWN alone",
}

// agentConfig holds the agent.yaml keys these manifests may use, named as
// cmd/replaywatch's agent reads them (agentconfig.go). Decoding is strict
// on both sides: a key missing here fails this test; add it here when the
// agent has it.
type agentConfig struct {
	Interfaces  []string `json:"interfaces"`
	Ports       []int    `json:"ports,omitempty"`
	Filter      string   `json:"filter,omitempty"`
	Workers     *int     `json:"workers,omitempty"`
	Listen      string   `json:"listen,omitempty"`
	OTLPGRPC    string   `json:"otlp_grpc,omitempty"`
	OTLPHTTP    string   `json:"otlp_http,omitempty"`
	Node        string   `json:"node,omitempty"`
	HashKeyFile string   `json:"hash_key_file,omitempty"`
	ClickHouse  struct {
		DSN           string `json:"dsn"`
		ApplySchema   *bool  `json:"apply_schema,omitempty"`
		SpoolDir      string `json:"spool_dir,omitempty"`
		MaxSpoolBytes *int64 `json:"max_spool_bytes,omitempty"`
	} `json:"clickhouse"`
	Limits struct {
		MaxConnections *int `json:"max_connections,omitempty"`
		MaxPagesTotal  *int `json:"max_pages_total,omitempty"`
		MaxSessions    *int `json:"max_sessions,omitempty"`
	} `json:"limits"`
}

// check is one named check of a table.
type check struct {
	name string
	run  func() error
}

func runChecks(t *testing.T, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := c.run(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestStrictDecoding proves the decoder the other tests rely on refuses
// what the API server would refuse or silently drop.
func TestStrictDecoding(t *testing.T) {
	const head = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\n"
	for _, tc := range []struct {
		name, doc, wantErr string
	}{
		{"valid", head + "spec:\n  template:\n    spec:\n      hostNetwork: true\n", ""},
		{"unknown field", head + "spec:\n  template:\n    spec:\n      hostNetwrok: true\n", "unknown field"},
		{"wrong case", head + "spec:\n  template:\n    spec:\n      hostnetwork: true\n", "mind the case"},
		{"duplicate key", head + "spec:\n  minReadySeconds: 1\n  minReadySeconds: 2\n", "already set"},
		{"wrong type", head + "spec:\n  minReadySeconds: soon\n", "cannot unmarshal"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n", "not a kind this test knows"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\n", "without metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeObject([]byte(tc.doc))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("decoding failed: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("decoded without error, want one containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("error %q, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestKustomizations: `kubectl apply -k deploy/kubernetes` deploys every
// manifest here, into the replaywatch namespace, and nothing is missing.
func TestKustomizations(t *testing.T) {
	m := loadManifests(t)
	top, ok := m.kustomizations["."]
	if !ok {
		t.Fatal("deploy/kubernetes/kustomization.yaml is missing: `kubectl apply -k deploy/kubernetes` needs it")
	}
	yamlFiles := map[string]bool{}
	for _, f := range m.yamlFiles {
		yamlFiles[f] = true
	}
	dirs := make([]string, 0, len(m.kustomizations))
	for d := range m.kustomizations {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)

	checks := []check{
		{"top level sets namespace " + namespace, func() error {
			if top.Namespace != namespace {
				return fmt.Errorf("kustomization.yaml: namespace %q, want %q", top.Namespace, namespace)
			}
			ns, ok := m.byKey["Namespace/"+namespace]
			if !ok {
				return fmt.Errorf("no Namespace %q: the first apply would fail", namespace)
			}
			if ns.file != "namespace.yaml" || !slices.Contains(top.Resources, "namespace.yaml") {
				return fmt.Errorf("Namespace %q should be namespace.yaml, listed by the top-level kustomization", namespace)
			}
			return nil
		}},
		{"bases leave the namespace to the top level", func() error {
			var errs []error
			for _, d := range dirs {
				if k := m.kustomizations[d]; d != "." && k.Namespace != "" {
					errs = append(errs, fmt.Errorf("%s/kustomization.yaml sets namespace %q", d, k.Namespace))
				}
			}
			for _, o := range m.objects {
				if o.meta.GetNamespace() != "" {
					errs = append(errs, fmt.Errorf("%s sets metadata.namespace %q: leave it to the kustomization", o, o.meta.GetNamespace()))
				}
			}
			return errors.Join(errs...)
		}},
		{"every manifest is listed in its directory's kustomization", func() error {
			var errs []error
			for _, f := range m.yamlFiles {
				k, ok := m.kustomizations[path.Dir(f)]
				if !ok {
					errs = append(errs, fmt.Errorf("%s: no kustomization.yaml in %s", f, path.Dir(f)))
				} else if !slices.Contains(k.Resources, path.Base(f)) {
					errs = append(errs, fmt.Errorf("%s is not in %s/kustomization.yaml resources: it would never be applied", f, path.Dir(f)))
				}
			}
			return errors.Join(errs...)
		}},
		{"every kustomization is reached from the top level", func() error {
			reached := map[string]bool{}
			var walk func(string)
			walk = func(d string) {
				if reached[d] {
					return
				}
				reached[d] = true
				for _, r := range m.kustomizations[d].Resources {
					if p := path.Join(d, r); m.kustomizations[p] != nil {
						walk(p)
					}
				}
			}
			walk(".")
			var errs []error
			for _, d := range dirs {
				if !reached[d] {
					errs = append(errs, fmt.Errorf("%s/kustomization.yaml is not reached from deploy/kubernetes/kustomization.yaml", d))
				}
			}
			return errors.Join(errs...)
		}},
	}
	for _, d := range dirs {
		k := m.kustomizations[d]
		checks = append(checks, check{d + "/kustomization.yaml lists only what exists", func() error {
			var errs []error
			if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
				errs = append(errs, fmt.Errorf("apiVersion %q kind %q, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind))
			}
			for _, r := range k.Resources {
				p := path.Join(d, r)
				switch {
				case path.IsAbs(r) || strings.HasPrefix(p, ".."):
					errs = append(errs, fmt.Errorf("resource %q is outside deploy/kubernetes", r))
				case !yamlFiles[p] && m.kustomizations[p] == nil:
					errs = append(errs, fmt.Errorf("resource %q is neither a YAML file nor a directory with a kustomization.yaml", r))
				}
			}
			for _, g := range k.ConfigMapGenerator {
				for _, f := range g.Files {
					_, file, ok := strings.Cut(f, "=")
					if !ok {
						file = f
					}
					if !fileExists(path.Join(d, file)) {
						errs = append(errs, fmt.Errorf("configMapGenerator %s: file %q does not exist", g.Name, file))
					}
				}
			}
			return errors.Join(errs...)
		}})
	}
	runChecks(t, checks)
}

// TestAgentDaemonSet checks what the agent needs from its pod.
func TestAgentDaemonSet(t *testing.T) {
	m := loadManifests(t)
	runChecks(t, agentDaemonSetChecks(t, m, kustomizeAgent(m)))
}

// agentExpect is what the agent checks expect of one rendering of the
// agent: the kustomize base as it is (kustomizeAgent), or the Helm chart
// with a set of values (helm_test.go).
type agentExpect struct {
	port     int32     // --listen: containerPort, hostPort, probes, scrape annotation
	spool    string    // clickhouse.spool_dir: the hostPath and its mount
	workers  int       // agent.yaml workers: the resources are sized for them
	requests [2]string // CPU, memory
	limits   [2]string // CPU, memory
	// dsn checks clickhouse.dsn; dsnWhat says what it checks.
	dsn     func(dsn string) error
	dsnWhat string
}

// kustomizeAgent is what deploy/kubernetes/agent must be.
func kustomizeAgent(m *manifests) agentExpect {
	return agentExpect{
		port: agentPort, spool: spoolDir, workers: agentWorkers,
		requests: [2]string{"100m", "256Mi"}, limits: [2]string{"1", "768Mi"},
		dsn:     func(dsn string) error { return checkDSN(m, dsn) },
		dsnWhat: "names the ClickHouse Service, without a password",
	}
}

// agentDaemonSetChecks checks the agent DaemonSet of m and what it names
// (its ServiceAccount, the ConfigMap).
func agentDaemonSetChecks(t *testing.T, m *manifests, want agentExpect) []check {
	t.Helper()
	ds := get[*appsv1.DaemonSet](t, m, "DaemonSet", agentDaemonSet)
	pod := &ds.Spec.Template.Spec
	c := findContainer(pod.Containers, agentContainer)
	if c == nil {
		t.Fatalf("DaemonSet %s has no container %q", agentDaemonSet, agentContainer)
	}
	env := envByName(c)
	return []check{
		{"runs `replaywatch agent`", func() error {
			if len(c.Args) == 0 || c.Args[0] != "agent" || len(c.Command) != 0 {
				return fmt.Errorf("command %q args %q: want the image's entrypoint with args starting with \"agent\"", c.Command, c.Args)
			}
			return nil
		}},
		{"hostNetwork with cluster DNS", func() error {
			if !pod.HostNetwork {
				return errors.New("hostNetwork is false: the agent would see only its own pod's traffic")
			}
			if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
				return fmt.Errorf("dnsPolicy %q, want ClusterFirstWithHostNet: with hostNetwork anything else loses cluster DNS (the DSN's host %q)", pod.DNSPolicy, clickhouseService)
			}
			return nil
		}},
		{"capabilities: drop ALL, add exactly NET_RAW", func() error {
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil {
				return errors.New("no securityContext.capabilities")
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				return fmt.Errorf("drop %q, want [ALL]", sc.Capabilities.Drop)
			}
			if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_RAW"}) {
				return fmt.Errorf("add %q, want exactly [NET_RAW] (AF_PACKET; NET_ADMIN only for promiscuous mode, which is off)", sc.Capabilities.Add)
			}
			return nil
		}},
		{"not privileged, no privilege escalation, read-only root", func() error {
			return lockedDown(c)
		}},
		{"non-root user", func() error {
			if nonRoot, uid := runsAsNonRoot(pod, c); !nonRoot || uid == nil || *uid == 0 {
				return fmt.Errorf("runAsNonRoot %v, runAsUser %s: the agent runs as uid 65532 with the file capability", nonRoot, fmtUID(uid))
			}
			return nil
		}},
		{fmt.Sprintf("port %d on the host", want.port), func() error {
			for _, p := range c.Ports {
				if p.ContainerPort == want.port {
					if p.HostPort != 0 && p.HostPort != want.port {
						return fmt.Errorf("hostPort %d: with hostNetwork it must equal the containerPort %d", p.HostPort, want.port)
					}
					return nil
				}
			}
			return fmt.Errorf("no containerPort %d (--listen)", want.port)
		}},
		{"liveness probe GET " + healthPath, func() error { return httpProbe(c, c.LivenessProbe, healthPath, want.port) }},
		{"readiness probe GET " + readyPath, func() error { return httpProbe(c, c.ReadinessProbe, readyPath, want.port) }},
		{"Prometheus scrape annotations", func() error {
			annotations := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(int(want.port)), "prometheus.io/path": metricsPath}
			var errs []error
			for k, v := range annotations {
				if got := ds.Spec.Template.Annotations[k]; got != v {
					errs = append(errs, fmt.Errorf("pod annotation %s: %q, want %q", k, got, v))
				}
			}
			return errors.Join(errs...)
		}},
		{fmt.Sprintf("resources: requests %s/%s, limits %s/%s", want.requests[0], want.requests[1], want.limits[0], want.limits[1]), func() error {
			return errors.Join(
				quantity(c.Resources.Requests, corev1.ResourceCPU, want.requests[0]),
				quantity(c.Resources.Requests, corev1.ResourceMemory, want.requests[1]),
				quantity(c.Resources.Limits, corev1.ResourceCPU, want.limits[0]),
				quantity(c.Resources.Limits, corev1.ResourceMemory, want.limits[1]),
			)
		}},
		{"tolerates every taint (control-plane included)", func() error {
			for _, tol := range pod.Tolerations {
				if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "" {
					return nil
				}
			}
			return fmt.Errorf("tolerations %+v: want one with operator Exists and no key or effect", pod.Tolerations)
		}},
		{"downward API: NODE_NAME, POD_NAME, POD_NAMESPACE", func() error {
			var errs []error
			for name, field := range map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
				e, ok := env[name]
				if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
					errs = append(errs, fmt.Errorf("env %s: want valueFrom.fieldRef.fieldPath %s", name, field))
				}
			}
			if !slices.Contains(c.Args, "--node=$(NODE_NAME)") {
				errs = append(errs, fmt.Errorf("args %q: want --node=$(NODE_NAME), the node column of every row", c.Args))
			}
			return errors.Join(errs...)
		}},
		{"ClickHouse password from a Secret", func() error {
			e, ok := env[passwordEnv]
			if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				return fmt.Errorf("env %s: want valueFrom.secretKeyRef", passwordEnv)
			}
			return nil
		}},
		{"config file " + configDir + "/" + configKey + " from the ConfigMap, read-only", func() error {
			vm := mountAt(c, configDir)
			if vm == nil || !vm.ReadOnly {
				return fmt.Errorf("no read-only volumeMount at %s", configDir)
			}
			v := volumeNamed(pod, vm.Name)
			if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != agentConfigMap {
				return fmt.Errorf("volume %q at %s: want ConfigMap %s", vm.Name, configDir, agentConfigMap)
			}
			if keys, _ := m.keysOf("ConfigMap", agentConfigMap); !slices.Contains(keys, configKey) {
				return fmt.Errorf("ConfigMap %s has no key %s", agentConfigMap, configKey)
			}
			if want := "--config=" + configDir + "/" + configKey; !slices.Contains(c.Args, want) {
				return fmt.Errorf("args %q: want %s", c.Args, want)
			}
			return nil
		}},
		{"spool on the node (hostPath " + want.spool + ")", func() error {
			vm := mountAt(c, want.spool)
			if vm == nil || vm.ReadOnly {
				return fmt.Errorf("no writable volumeMount at %s", want.spool)
			}
			v := volumeNamed(pod, vm.Name)
			if v == nil || v.HostPath == nil || v.HostPath.Path != want.spool {
				return fmt.Errorf("volume %q: want hostPath %s, so a restarted pod resumes the spool", vm.Name, want.spool)
			}
			if v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
				return fmt.Errorf("hostPath type %v, want DirectoryOrCreate", v.HostPath.Type)
			}
			return nil
		}},
		{"30 s to flush on SIGTERM", func() error {
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 30 {
				return fmt.Errorf("terminationGracePeriodSeconds %v, want 30", g)
			}
			return nil
		}},
		{"own ServiceAccount, no API token", func() error {
			if pod.ServiceAccountName == "" || pod.ServiceAccountName == "default" {
				return errors.New("serviceAccountName not set")
			}
			o, ok := m.byKey["ServiceAccount/"+pod.ServiceAccountName]
			if !ok {
				return fmt.Errorf("no ServiceAccount %q", pod.ServiceAccountName)
			}
			sa := o.meta.(*corev1.ServiceAccount)
			if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
				return fmt.Errorf("ServiceAccount %s: automountServiceAccountToken should be false (the agent needs no API access)", sa.Name)
			}
			return nil
		}},
		{"rolling update without surge (hostPort, spool)", func() error {
			ru := ds.Spec.UpdateStrategy.RollingUpdate
			if ru != nil && ru.MaxSurge != nil && ru.MaxSurge.IntValue() != 0 {
				return fmt.Errorf("maxSurge %s: two agents on a node would fight for hostPort %d and the spool", ru.MaxSurge, want.port)
			}
			return nil
		}},
	}
}

// TestAgentConfig checks agent.yaml and that it agrees with the DaemonSet
// and the ClickHouse Service.
func TestAgentConfig(t *testing.T) {
	m := loadManifests(t)
	runChecks(t, agentConfigChecks(t, m, kustomizeAgent(m)))
}

// agentConfigChecks checks the agent.yaml of m (decoded strictly with the
// agent's keys) against its DaemonSet and want.
func agentConfigChecks(t *testing.T, m *manifests, want agentExpect) []check {
	t.Helper()
	cfg := agentConfigFile(t, m)
	ds := get[*appsv1.DaemonSet](t, m, "DaemonSet", agentDaemonSet)
	c := findContainer(ds.Spec.Template.Spec.Containers, agentContainer)
	if c == nil {
		t.Fatalf("DaemonSet %s has no container %q", agentDaemonSet, agentContainer)
	}
	return []check{
		{"interfaces", func() error {
			if len(cfg.Interfaces) == 0 || slices.Contains(cfg.Interfaces, "") {
				return fmt.Errorf("interfaces %q: want at least one name (\"any\" for all)", cfg.Interfaces)
			}
			return nil
		}},
		{"ports", func() error {
			if len(cfg.Ports) == 0 {
				return errors.New("no ports: the capture filter would take every TCP packet")
			}
			seen := map[int]bool{}
			for _, p := range cfg.Ports {
				if p < 1 || p > 65535 || seen[p] {
					return fmt.Errorf("ports %v: %d is out of range or repeated", cfg.Ports, p)
				}
				seen[p] = true
			}
			return nil
		}},
		{fmt.Sprintf("workers: %d (the memory budget)", want.workers), func() error {
			if cfg.Workers == nil || *cfg.Workers != want.workers {
				return fmt.Errorf("workers %v: the resources in daemonset.yaml are sized for %d workers; change both together", cfg.Workers, want.workers)
			}
			return nil
		}},
		{"listen on the container's port", func() error {
			_, port, err := net.SplitHostPort(cfg.Listen)
			if err != nil || port != strconv.Itoa(int(want.port)) {
				return fmt.Errorf("listen %q: want \":%d\", the port the probes and Prometheus use", cfg.Listen, want.port)
			}
			return nil
		}},
		{"spool_dir is the hostPath mount", func() error {
			if cfg.ClickHouse.SpoolDir != want.spool || mountAt(c, want.spool) == nil {
				return fmt.Errorf("clickhouse.spool_dir %q: want %s, mounted from the node", cfg.ClickHouse.SpoolDir, want.spool)
			}
			return nil
		}},
		{"clickhouse.dsn " + want.dsnWhat, func() error {
			return want.dsn(cfg.ClickHouse.DSN)
		}},
		{"node comes from the command line", func() error {
			if cfg.Node != "" {
				return fmt.Errorf("node %q in the file would name every node alike; it is --node=$(NODE_NAME)", cfg.Node)
			}
			return nil
		}},
		{"OTLP listeners are the container ports otlp-grpc and otlp-http", func() error {
			return errors.Join(otlpPort(c, "otlp-grpc", cfg.OTLPGRPC), otlpPort(c, "otlp-http", cfg.OTLPHTTP))
		}},
	}
}

// otlpPort: an OTLP listen address of agent.yaml is the container's port
// of that name, on the host (hostPort = containerPort, as the metrics
// port); without the address, the container has no port of that name.
func otlpPort(c *corev1.Container, name, addr string) error {
	var found *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == name {
			found = &c.Ports[i]
		}
	}
	if addr == "" {
		if found != nil {
			return fmt.Errorf("container port %s (%d) without its agent.yaml key", name, found.ContainerPort)
		}
		return nil
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s address %q: %v", name, addr, err)
	}
	port, err := strconv.ParseInt(p, 10, 32)
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("%s address %q: want a port 1 to 65535", name, addr)
	}
	switch {
	case found == nil:
		return fmt.Errorf("agent.yaml listens on %s, the container has no port %s", addr, name)
	case found.ContainerPort != int32(port) || found.HostPort != found.ContainerPort || found.Protocol != corev1.ProtocolTCP:
		return fmt.Errorf("port %s: containerPort %d hostPort %d %s, want %d on the host, TCP", name, found.ContainerPort, found.HostPort, found.Protocol, port)
	}
	return nil
}

// TestAgentConfigOTLPExample: the commented-out otlp_grpc and otlp_http of
// agent/configmap.yaml, uncommented, are keys the agent reads, with ports
// off the metrics port and off 4317/4318 (a node-local Collector's).
func TestAgentConfigOTLPExample(t *testing.T) {
	cm := get[*corev1.ConfigMap](t, loadManifests(t), "ConfigMap", agentConfigMap)
	text := otlpExampleRE.ReplaceAllString(cm.Data[configKey], "$1")
	var cfg agentConfig
	if err := yaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
		t.Fatalf("agent.yaml with the OTLP keys uncommented: %v", err)
	}
	_, metrics, _ := net.SplitHostPort(cfg.Listen)
	seen := map[string]string{metrics: "listen"}
	for key, addr := range map[string]string{"otlp_grpc": cfg.OTLPGRPC, "otlp_http": cfg.OTLPHTTP} {
		_, port, err := net.SplitHostPort(addr)
		switch {
		case addr == "":
			t.Errorf("no commented-out %s example", key)
		case err != nil:
			t.Errorf("%s %q: %v", key, addr, err)
		case port == "4317" || port == "4318":
			t.Errorf("%s %q: a node-local OpenTelemetry Collector often holds that port", key, addr)
		case seen[port] != "":
			t.Errorf("%s %q: port %s is already %s's", key, addr, port, seen[port])
		default:
			seen[port] = key
		}
	}
}

var otlpExampleRE = regexp.MustCompile(`(?m)^# (otlp_(grpc|http): )`)

// TestPodSecurity checks every container of every workload: locked down,
// non-root unless listed in rootAllowed, capabilities only as listed in
// capabilityGrants, seccomp, resources and probes.
func TestPodSecurity(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		for _, c := range containers(&w.template.Spec) {
			t.Run(w.String()+"/"+c.Name, func(t *testing.T) { runChecks(t, podSecurityChecks(w, c)) })
		}
	}
}

// podSecurityChecks checks one container of a workload: locked down,
// non-root unless listed in rootAllowed, capabilities only as listed in
// capabilityGrants, seccomp, resources and probes.
func podSecurityChecks(w workload, c *corev1.Container) []check {
	pod := &w.template.Spec
	id := w.String() + "/" + c.Name
	checks := []check{
		{"locked down", func() error { return lockedDown(c) }},
		{"capabilities", func() error {
			sc := c.SecurityContext
			if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				return errors.New("capabilities.drop should contain ALL")
			}
			if want := capabilityGrants[id]; !slices.Equal(sc.Capabilities.Add, want) {
				return fmt.Errorf("adds %q, allowed %q (capabilityGrants)", sc.Capabilities.Add, want)
			}
			return nil
		}},
		{"user", func() error {
			if _, ok := rootAllowed[id]; ok {
				return nil
			}
			if nonRoot, uid := runsAsNonRoot(pod, c); !nonRoot || uid == nil || *uid == 0 {
				return fmt.Errorf("runAsNonRoot %v, runAsUser %s: want non-root with an explicit uid", nonRoot, fmtUID(uid))
			}
			return nil
		}},
		{"seccomp RuntimeDefault", func() error {
			var profile *corev1.SeccompProfile
			if pod.SecurityContext != nil {
				profile = pod.SecurityContext.SeccompProfile
			}
			if c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
				profile = c.SecurityContext.SeccompProfile
			}
			if profile == nil || profile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				return fmt.Errorf("seccompProfile %v, want RuntimeDefault", profile)
			}
			return nil
		}},
		{"resources with limits", func() error {
			var errs []error
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
					errs = append(errs, fmt.Errorf("no %s request", r))
				}
				if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
					errs = append(errs, fmt.Errorf("no %s limit", r))
				}
			}
			return errors.Join(errs...)
		}},
		{"image pinned", func() error { return pinned(c.Image) }},
	}
	isInit := slices.ContainsFunc(pod.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name })
	if !isInit && !w.runsToEnd {
		checks = append(checks, check{"liveness and readiness probes on its own ports", func() error {
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				return errors.New("no liveness or readiness probe")
			}
			var errs []error
			for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
				if p != nil && p.HTTPGet != nil {
					if _, err := resolvePort(c, p.HTTPGet.Port); err != nil {
						errs = append(errs, err)
					}
				}
			}
			return errors.Join(errs...)
		}})
	}
	return checks
}

// TestReferences: every ServiceAccount, ConfigMap, Secret (and key),
// PersistentVolumeClaim and volume a pod names exists in the bases.
func TestReferences(t *testing.T) {
	m := loadManifests(t)
	for _, w := range m.workloads() {
		pod := &w.template.Spec
		t.Run(w.String(), func(t *testing.T) {
			runChecks(t, []check{
				{"selector matches the pod labels", func() error {
					sel, err := metav1.LabelSelectorAsSelector(w.selector)
					if err != nil {
						return err
					}
					if w.obj.kind == "Job" && w.selector == nil {
						return nil // the Job controller sets it
					}
					if sel.Empty() || !sel.Matches(labels.Set(w.template.Labels)) {
						return fmt.Errorf("selector %v does not select the pod labels %v", w.selector, w.template.Labels)
					}
					return nil
				}},
				{"ServiceAccount", func() error {
					sa := pod.ServiceAccountName
					if sa != "" && sa != "default" {
						if _, ok := m.byKey["ServiceAccount/"+sa]; !ok {
							return fmt.Errorf("serviceAccountName %q: no such ServiceAccount", sa)
						}
						return nil
					}
					if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
						return errors.New("default ServiceAccount with its token mounted: set automountServiceAccountToken: false (nothing here calls the API)")
					}
					return nil
				}},
				{"volumes", func() error { return checkVolumes(m, w) }},
				{"env", func() error {
					var errs []error
					for _, c := range containers(pod) {
						for _, e := range c.Env {
							if e.ValueFrom == nil {
								continue
							}
							if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
								errs = append(errs, m.hasKey("ConfigMap", r.Name, r.Key, r.Optional, c.Name+" env "+e.Name))
							}
							if r := e.ValueFrom.SecretKeyRef; r != nil {
								errs = append(errs, m.hasKey("Secret", r.Name, r.Key, r.Optional, c.Name+" env "+e.Name))
							}
						}
						for _, ef := range c.EnvFrom {
							if r := ef.ConfigMapRef; r != nil {
								errs = append(errs, m.hasKey("ConfigMap", r.Name, "", r.Optional, c.Name+" envFrom"))
							}
							if r := ef.SecretRef; r != nil {
								errs = append(errs, m.hasKey("Secret", r.Name, "", r.Optional, c.Name+" envFrom"))
							}
						}
					}
					return errors.Join(errs...)
				}},
			})
		})
	}
}

// TestServices: each Service selects a workload, its target ports are that
// workload's container ports, and each StatefulSet's governing Service is
// headless.
func TestServices(t *testing.T) {
	m := loadManifests(t)
	workloads := m.workloads()
	for _, o := range m.objects {
		svc, ok := o.meta.(*corev1.Service)
		if !ok {
			continue
		}
		t.Run(svc.Name, func(t *testing.T) {
			if len(svc.Spec.Selector) == 0 {
				t.Fatal("no selector")
			}
			var selected []workload
			for _, w := range workloads {
				if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
					selected = append(selected, w)
				}
			}
			if len(selected) == 0 {
				t.Fatalf("selector %v matches no workload's pod labels", svc.Spec.Selector)
			}
			for _, p := range svc.Spec.Ports {
				target := p.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(p.Port)
				}
				for _, w := range selected {
					if !slices.ContainsFunc(w.template.Spec.Containers, func(c corev1.Container) bool {
						_, err := resolvePort(&c, target)
						return err == nil
					}) {
						t.Errorf("port %s: targetPort %s is not a container port of %s", p.Name, target.String(), w)
					}
				}
			}
		})
	}
	for _, w := range workloads {
		if w.obj.kind != "StatefulSet" {
			continue
		}
		t.Run(w.String()+" serviceName", func(t *testing.T) {
			svc := get[*corev1.Service](t, m, "Service", w.serviceName)
			if svc.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("Service %s governs %s but is not headless (clusterIP: None)", svc.Name, w)
			}
		})
	}
}

// TestClickHouse checks the ClickHouse base against what the agent, the
// schema Job and Grafana expect of it.
func TestClickHouse(t *testing.T) {
	m := loadManifests(t)
	sts := get[*appsv1.StatefulSet](t, m, "StatefulSet", "clickhouse")
	c := findContainer(sts.Spec.Template.Spec.Containers, "clickhouse")
	if c == nil {
		t.Fatal("StatefulSet clickhouse has no container clickhouse")
	}
	job := get[*batchv1.Job](t, m, "Job", schemaJob)
	agent := findContainer(get[*appsv1.DaemonSet](t, m, "DaemonSet", agentDaemonSet).Spec.Template.Spec.Containers, agentContainer)
	dsn := agentConfigFile(t, m).ClickHouse.DSN
	grafanaUser, _ := provisionedDataSource(t, m).JSONData["username"].(string)
	sessionsUser, _ := oneDataSource(t, m, sessionsPlugin).JSONData["user"].(string)
	fromEnv := fromEnvNames(t, m, sts)
	users := clickhouseUsers(t, m, sts)
	runChecks(t, []check{
		{"image clickhouse/clickhouse-server:25.8", imageIs(c, "clickhouse/clickhouse-server:25.8")},
		{"data on a PersistentVolumeClaim", func() error {
			vm := mountAt(c, "/var/lib/clickhouse")
			if vm == nil {
				return errors.New("nothing mounted at /var/lib/clickhouse")
			}
			for _, pvc := range sts.Spec.VolumeClaimTemplates {
				if pvc.Name == vm.Name {
					if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.IsZero() {
						return fmt.Errorf("volumeClaimTemplate %s requests no storage", pvc.Name)
					}
					return nil
				}
			}
			return fmt.Errorf("/var/lib/clickhouse is volume %q, not a volumeClaimTemplate", vm.Name)
		}},
		{"every from_env variable is set", func() error {
			env := envByName(c)
			var errs []error
			for _, name := range fromEnv {
				if _, ok := env[name]; !ok {
					errs = append(errs, fmt.Errorf("the server configuration reads %s, which the container does not set", name))
				}
			}
			return errors.Join(errs...)
		}},
		{"users of the DSN and of Grafana's data sources exist", func() error {
			parsed, err := url.Parse(dsn)
			if err != nil || parsed.User == nil {
				return fmt.Errorf("agent DSN %q: no user", dsn)
			}
			var errs []error
			for _, u := range []string{parsed.User.Username(), grafanaUser, sessionsUser} {
				if !slices.Contains(users, u) {
					errs = append(errs, fmt.Errorf("user %q is not defined in the ClickHouse configuration (users: %v)", u, users))
				}
			}
			return errors.Join(errs...)
		}},
		{"schema Job: `replaywatch schema apply` on the agents' DSN", func() error {
			jc := job.Spec.Template.Spec.Containers[0]
			if len(jc.Args) < 2 || jc.Args[0] != "schema" || jc.Args[1] != "apply" {
				return fmt.Errorf("args %q: want schema apply", jc.Args)
			}
			want := "--clickhouse=" + dsn
			if !slices.Contains(jc.Args, want) {
				return fmt.Errorf("args %q: want %s, the agents' DSN", jc.Args, want)
			}
			if _, ok := envByName(&jc)[passwordEnv]; !ok {
				return fmt.Errorf("no %s", passwordEnv)
			}
			if agent == nil || jc.Image != agent.Image {
				return fmt.Errorf("image %q: want the agent's image", jc.Image)
			}
			return nil
		}},
	})
}

// TestGrafana checks the data sources, the plugins and the provisioning
// directories.
func TestGrafana(t *testing.T) {
	m := loadManifests(t)
	dep := get[*appsv1.Deployment](t, m, "Deployment", grafanaDeployment)
	pod := &dep.Spec.Template.Spec
	c := findContainer(pod.Containers, "grafana")
	if c == nil {
		t.Fatal("Deployment grafana has no container grafana")
	}
	env := envByName(c)
	ds := provisionedDataSource(t, m)
	sessions := oneDataSource(t, m, sessionsPlugin)
	providerPaths := dashboardProviderPaths(t, m)
	agentDSN := agentConfigFile(t, m).ClickHouse.DSN
	runChecks(t, []check{
		{"image grafana/grafana", imageIs(c, "grafana/grafana:")},
		{"ClickHouse plugin installed", func() error {
			for _, name := range []string{"GF_PLUGINS_PREINSTALL_SYNC", "GF_PLUGINS_PREINSTALL", "GF_INSTALL_PLUGINS"} {
				if e, ok := env[name]; ok && slices.ContainsFunc(strings.Split(e.Value, ","), func(p string) bool {
					return strings.HasPrefix(strings.TrimSpace(p), clickhousePlugin)
				}) {
					return nil
				}
			}
			return fmt.Errorf("no GF_PLUGINS_PREINSTALL_SYNC (or GF_INSTALL_PLUGINS) naming %s", clickhousePlugin)
		}},
		{"data source points at the ClickHouse Service", func() error {
			if ds.Type != clickhousePlugin {
				return fmt.Errorf("type %q, want %s", ds.Type, clickhousePlugin)
			}
			host, _ := ds.JSONData["host"].(string)
			port, _ := ds.JSONData["port"].(float64)
			if ds.JSONData["protocol"] != "native" {
				return fmt.Errorf("protocol %v, want native (port 9000)", ds.JSONData["protocol"])
			}
			return servicePort(m, host, int32(port))
		}},
		{"data source password from the environment", func() error {
			return passwordFromSecret(ds, env)
		}},
		{sessionsPlugin + " allowed unsigned, by its id only", func() error {
			e, ok := env[unsignedPluginEnv]
			if !ok || e.ValueFrom != nil {
				return fmt.Errorf("no %s value: Grafana skips the unsigned %s", unsignedPluginEnv, sessionsPlugin)
			}
			ids := strings.Split(e.Value, ",")
			var errs []error
			for i, id := range ids {
				ids[i] = strings.TrimSpace(id)
				if strings.ContainsAny(ids[i], "*?[") || ids[i] == "" {
					errs = append(errs, fmt.Errorf("%s=%q: %q is not a plugin id; allow unsigned plugins by id only", unsignedPluginEnv, e.Value, ids[i]))
				}
			}
			if !slices.Contains(ids, sessionsPlugin) {
				errs = append(errs, fmt.Errorf("%s=%q does not name %s", unsignedPluginEnv, e.Value, sessionsPlugin))
			}
			return errors.Join(errs...)
		}},
		{sessionsPlugin + " copied by an initContainer into Grafana's plugins directory", func() error {
			ic, target, err := pluginInitContainer(pod, c)
			if err != nil {
				return err
			}
			// cp [-options] SOURCE TARGET, SOURCE the folder in the image.
			cp := regexp.MustCompile(`(^|[\s;&|])cp(\s+-[a-zA-Z]+)*\s+` + regexp.QuoteMeta(pluginImageDir) + `/?\s+` + regexp.QuoteMeta(target) + `(/|/` + regexp.QuoteMeta(sessionsPlugin) + `/?)?(\s|;|&|$)`)
			if cmd := strings.Join(append(slices.Clone(ic.Command), ic.Args...), " "); !cp.MatchString(cmd) {
				return fmt.Errorf("initContainer %s runs %q: want cp -R %s %s/", ic.Name, cmd, pluginImageDir, target)
			}
			return nil
		}},
		{sessionsPlugin + " initContainer: the pod security checks, Grafana's user and securityContext", func() error {
			ic, _, err := pluginInitContainer(pod, c)
			if err != nil {
				return err
			}
			var errs []error
			// TestPodSecurity runs these on every container, init containers
			// included (containers()); they are run here too so that this
			// container cannot slip out of them.
			w := workload{obj: m.byKey["Deployment/"+grafanaDeployment], selector: dep.Spec.Selector, template: &dep.Spec.Template}
			for _, pc := range podSecurityChecks(w, ic) {
				if err := pc.run(); err != nil {
					errs = append(errs, fmt.Errorf("%s: %v", pc.name, err))
				}
			}
			_, uid := runsAsNonRoot(pod, ic)
			_, grafanaUID := runsAsNonRoot(pod, c)
			if uid == nil || grafanaUID == nil || *uid != *grafanaUID {
				errs = append(errs, fmt.Errorf("runs as uid %s, Grafana as %s: the copied files must be Grafana's user's", fmtUID(uid), fmtUID(grafanaUID)))
			}
			if !reflect.DeepEqual(ic.SecurityContext, c.SecurityContext) {
				errs = append(errs, fmt.Errorf("securityContext %+v differs from the grafana container's %+v", ic.SecurityContext, c.SecurityContext))
			}
			return errors.Join(errs...)
		}},
		{sessionsPlugin + " image: the Dockerfile's target " + pluginTarget + ", the agent's version", func() error {
			ic, _, err := pluginInitContainer(pod, c)
			if err != nil {
				return err
			}
			agent := findContainer(get[*appsv1.DaemonSet](t, m, "DaemonSet", agentDaemonSet).Spec.Template.Spec.Containers, agentContainer)
			ref, _, _ := strings.Cut(ic.Image, "@")
			repo, tag, _ := strings.Cut(ref, ":")
			agentRepo, agentTag, _ := strings.Cut(agent.Image, ":")
			switch {
			case repo != pluginImageRepo:
				return fmt.Errorf("image %q, want %s:TAG (docker build --target %s)", ic.Image, pluginImageRepo, pluginTarget)
			case agentRepo != agentImageRepo || tag != agentTag:
				return fmt.Errorf("image %q, agent image %q: want the same version of both (the plugin reads the schema the agent's version writes)", ic.Image, agent.Image)
			}
			return checkDockerfile(ic.Image)
		}},
		{"replaywatch sessions data source", func() error {
			var errs []error
			if sessions.UID != sessionsDataSource || sessions.Editable || sessions.IsDefault {
				errs = append(errs, fmt.Errorf("uid %q editable %v isDefault %v: want uid %s, not editable, not the default", sessions.UID, sessions.Editable, sessions.IsDefault, sessionsDataSource))
			}
			for _, k := range slices.Sorted(maps.Keys(sessions.JSONData)) {
				if !slices.Contains(sessionsSettings, k) {
					errs = append(errs, fmt.Errorf("jsonData.%s: not a setting of %s (%v)", k, sessionsPlugin, sessionsSettings))
				}
			}
			if db, _ := sessions.JSONData["database"].(string); db != ds.JSONData["defaultDatabase"] || !strings.HasSuffix(agentDSN, "/"+db) {
				errs = append(errs, fmt.Errorf("database %q: want the one the agents write (%s) and the ClickHouse data source reads (%v)", db, agentDSN, ds.JSONData["defaultDatabase"]))
			}
			if user, _ := sessions.JSONData["user"].(string); user != ds.JSONData["username"] {
				errs = append(errs, fmt.Errorf("user %q: want the ClickHouse data source's read-only %v", user, ds.JSONData["username"]))
			}
			return errors.Join(errs...)
		}},
		{"replaywatch sessions data source: address is the ClickHouse Service's native port", func() error {
			addr, _ := sessions.JSONData["address"].(string)
			host, p, err := net.SplitHostPort(addr)
			if err != nil {
				return fmt.Errorf("jsonData.address %q: want host:port (%v)", addr, err)
			}
			port, err := strconv.ParseInt(p, 10, 32)
			if err != nil {
				return fmt.Errorf("jsonData.address %q: port %q", addr, p)
			}
			if host != clickhouseService {
				return fmt.Errorf("jsonData.address %q: want the Service %q", addr, clickhouseService)
			}
			if native, _ := ds.JSONData["port"].(float64); int32(port) != int32(native) {
				return fmt.Errorf("jsonData.address %q: port %d, want the native protocol's %v (the ClickHouse data source's)", addr, port, native)
			}
			return servicePort(m, host, int32(port))
		}},
		{"replaywatch sessions data source: password from the environment", func() error {
			return passwordFromSecret(sessions, env)
		}},
		{"provisioning directories from ConfigMaps", func() error {
			var errs []error
			for _, dir := range []string{"datasources", "dashboards", "alerting"} {
				p := "/etc/grafana/provisioning/" + dir
				if vm := mountAt(c, p); vm == nil || configMapVolume(pod, vm.Name) == "" {
					errs = append(errs, fmt.Errorf("%s is not mounted from a ConfigMap", p))
				}
			}
			return errors.Join(errs...)
		}},
		{"dashboard provider reads a mounted ConfigMap", func() error {
			for _, p := range providerPaths {
				if vm := mountAt(c, p); vm == nil || configMapVolume(pod, vm.Name) == "" {
					return fmt.Errorf("dashboard provider path %s is not mounted from a ConfigMap", p)
				}
			}
			return nil
		}},
	})
}

// grafanaDataSourceFile is Grafana's data source provisioning format, as
// far as used here.
type grafanaDataSourceFile struct {
	APIVersion  int                 `json:"apiVersion"`
	Datasources []grafanaDataSource `json:"datasources"`
}

type grafanaDataSource struct {
	Name           string            `json:"name"`
	UID            string            `json:"uid"`
	Type           string            `json:"type"`
	Access         string            `json:"access"`
	URL            string            `json:"url"`
	IsDefault      bool              `json:"isDefault"`
	Editable       bool              `json:"editable"`
	JSONData       map[string]any    `json:"jsonData"`
	SecureJSONData map[string]string `json:"secureJsonData"`
}

// provisionedDataSource returns the one ClickHouse data source provisioned.
func provisionedDataSource(t *testing.T, m *manifests) grafanaDataSource {
	t.Helper()
	return oneDataSource(t, m, clickhousePlugin)
}

// oneDataSource returns the one data source of a type (a plugin id)
// provisioned.
func oneDataSource(t *testing.T, m *manifests, typ string) grafanaDataSource {
	t.Helper()
	var found []grafanaDataSource
	for _, text := range configMapFilesMountedAt(t, m, grafanaDeployment, "grafana", "/etc/grafana/provisioning/datasources") {
		var f grafanaDataSourceFile
		if err := yaml.UnmarshalStrict([]byte(text), &f); err != nil {
			t.Fatalf("Grafana data source provisioning: %v", err)
		}
		for _, ds := range f.Datasources {
			if ds.Type == typ {
				found = append(found, ds)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s data sources provisioned, want 1", len(found), typ)
	}
	return found[0]
}

// passwordFromSecret: a data source's secureJsonData.password is
// ${VARIABLE}, which Grafana's provisioning replaces, and the container
// sets VARIABLE from a Secret.
func passwordFromSecret(ds grafanaDataSource, env map[string]corev1.EnvVar) error {
	pw := ds.SecureJSONData["password"]
	name, ok := strings.CutPrefix(pw, "${")
	name, ok2 := strings.CutSuffix(name, "}")
	if !ok || !ok2 || name == "" {
		return fmt.Errorf("%s: secureJsonData.password %q: want ${VARIABLE}, never the password itself", ds.Name, pw)
	}
	if e, ok := env[name]; !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		return fmt.Errorf("%s: %s is not set from a Secret in the container", ds.Name, name)
	}
	return nil
}

// pluginInitContainer returns the init container that mounts the volume
// Grafana has at /var/lib/grafana, writable, and the path of Grafana's
// plugins directory ($GF_PATHS_PLUGINS, by default
// /var/lib/grafana/plugins) in that init container.
func pluginInitContainer(pod *corev1.PodSpec, grafana *corev1.Container) (*corev1.Container, string, error) {
	data := mountAt(grafana, grafanaDataDir)
	if data == nil || data.ReadOnly {
		return nil, "", fmt.Errorf("the grafana container has no writable volume at %s", grafanaDataDir)
	}
	plugins := path.Join(grafanaDataDir, "plugins")
	if e, ok := envByName(grafana)["GF_PATHS_PLUGINS"]; ok {
		plugins = path.Clean(e.Value)
	}
	rel, ok := strings.CutPrefix(plugins, grafanaDataDir+"/")
	if !ok {
		return nil, "", fmt.Errorf("plugins directory %s is not on the volume at %s", plugins, grafanaDataDir)
	}
	var names []string
	for i := range pod.InitContainers {
		ic := &pod.InitContainers[i]
		names = append(names, ic.Name)
		for _, vm := range ic.VolumeMounts {
			if vm.Name == data.Name && vm.SubPath == data.SubPath && vm.SubPathExpr == data.SubPathExpr && !vm.ReadOnly {
				return ic, path.Join(vm.MountPath, rel), nil
			}
		}
	}
	return nil, "", fmt.Errorf("no initContainer (of %q) mounts volume %q, Grafana's %s, writable: nothing installs %s into %s", names, data.Name, grafanaDataDir, sessionsPlugin, plugins)
}

// dockerfileStage is one stage of the Dockerfile: its FROM line's image and
// the lines after it, up to the next FROM.
type dockerfileStage struct {
	name, from string
	lines      []string
}

// dockerfileStages splits the Dockerfile into stages, joining continued
// lines and dropping comments.
func dockerfileStages(text string) []dockerfileStage {
	var stages []dockerfileStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		f := strings.Fields(line)
		if strings.EqualFold(f[0], "FROM") {
			st := dockerfileStage{}
			for i := 1; i < len(f); i++ {
				switch {
				case strings.HasPrefix(f[i], "--"):
				case strings.EqualFold(f[i], "AS") && i+1 < len(f):
					st.name = f[i+1]
					i++
				default:
					st.from = f[i]
				}
			}
			stages = append(stages, st)
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	for _, l := range strings.Split(text, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	flush()
	return stages
}

// checkDockerfile: the Dockerfile's target grafana-plugin holds the plugin
// folder where the initContainer copies it from (pluginImageDir): its
// frontend from a stage that runs the npm build, its backend from one that
// builds ./dashboards/plugin/pkg as gpx_replaywatch_linux_$TARGETARCH; it
// documents the build of image; the replaywatch image stays the last stage
// (what a build without --target makes); and .dockerignore sends the
// plugin's sources.
func checkDockerfile(image string) error {
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		return err
	}
	text := string(b)
	stages := dockerfileStages(text)
	byName := map[string]dockerfileStage{}
	for _, st := range stages {
		byName[st.name] = st
	}
	var errs []error
	if build := "docker build --target " + pluginTarget + " -t " + image + " ."; !strings.Contains(text, build) {
		errs = append(errs, fmt.Errorf("Dockerfile does not say how to build the initContainer's image (%s)", build))
	}
	if len(stages) == 0 || stages[len(stages)-1].name == pluginTarget || !strings.HasPrefix(stages[len(stages)-1].from, "gcr.io/distroless/") {
		errs = append(errs, fmt.Errorf("the Dockerfile's last stage should stay the replaywatch image (distroless), what `docker build .` makes"))
	}
	target, ok := byName[pluginTarget]
	if !ok {
		return errors.Join(append(errs, fmt.Errorf("Dockerfile has no stage %q", pluginTarget))...)
	}
	var frontend, backend bool
	for _, l := range target.lines {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.EqualFold(f[0], "COPY") || strings.TrimSuffix(f[len(f)-1], "/") != pluginImageDir {
			continue
		}
		var from string
		for _, a := range f[1:] {
			if v, ok := strings.CutPrefix(a, "--from="); ok {
				from = v
			}
		}
		src := byName[from]
		all := strings.Join(src.lines, "\n")
		if strings.Contains(all, "npm ci") && strings.Contains(all, "npm run build") {
			frontend = true
		}
		for _, bl := range src.lines {
			if strings.Contains(bl, "go build") && strings.Contains(bl, "./dashboards/plugin/pkg") &&
				strings.Contains(bl, "CGO_ENABLED=0") && strings.Contains(bl, "gpx_replaywatch_linux_$TARGETARCH ") {
				backend = true
			}
		}
	}
	if !frontend {
		errs = append(errs, fmt.Errorf("Dockerfile stage %s copies no frontend (a stage running npm ci and npm run build) to %s", pluginTarget, pluginImageDir))
	}
	if !backend {
		errs = append(errs, fmt.Errorf("Dockerfile stage %s copies no backend (CGO_ENABLED=0 go build ./dashboards/plugin/pkg into gpx_replaywatch_linux_$TARGETARCH) to %s", pluginTarget, pluginImageDir))
	}
	ignore, err := os.ReadFile(dockerignore)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	lines := strings.Split(string(ignore), "\n")
	include := slices.Index(lines, "!dashboards/plugin")
	if include < 0 {
		errs = append(errs, errors.New(".dockerignore does not send dashboards/plugin (!dashboards/plugin) to the build"))
	}
	for _, dir := range []string{"dashboards/plugin/node_modules", "dashboards/plugin/dist"} {
		if i := slices.Index(lines, dir); i < include {
			errs = append(errs, fmt.Errorf(".dockerignore: %s should be excluded after !dashboards/plugin, which would re-include it", dir))
		}
	}
	return errors.Join(errs...)
}

// dashboardProviderPaths returns the options.path of each file provider.
func dashboardProviderPaths(t *testing.T, m *manifests) []string {
	t.Helper()
	var paths []string
	for _, text := range configMapFilesMountedAt(t, m, grafanaDeployment, "grafana", "/etc/grafana/provisioning/dashboards") {
		var f struct {
			APIVersion int `json:"apiVersion"`
			Providers  []struct {
				Name                  string `json:"name"`
				OrgID                 int    `json:"orgId"`
				Folder                string `json:"folder"`
				Type                  string `json:"type"`
				DisableDeletion       bool   `json:"disableDeletion"`
				AllowUIUpdates        bool   `json:"allowUiUpdates"`
				UpdateIntervalSeconds int    `json:"updateIntervalSeconds"`
				Options               struct {
					Path                      string `json:"path"`
					FoldersFromFilesStructure bool   `json:"foldersFromFilesStructure"`
				} `json:"options"`
			} `json:"providers"`
		}
		if err := yaml.UnmarshalStrict([]byte(text), &f); err != nil {
			t.Fatalf("Grafana dashboard provisioning: %v", err)
		}
		for _, p := range f.Providers {
			paths = append(paths, p.Options.Path)
		}
	}
	if len(paths) == 0 {
		t.Fatal("no dashboard provider")
	}
	return paths
}

// configMapFilesMountedAt returns the contents of the ConfigMap files a
// Deployment's container sees in a directory.
func configMapFilesMountedAt(t *testing.T, m *manifests, deployment, container, dir string) []string {
	t.Helper()
	dep := get[*appsv1.Deployment](t, m, "Deployment", deployment)
	c := findContainer(dep.Spec.Template.Spec.Containers, container)
	if c == nil {
		t.Fatalf("Deployment %s has no container %s", deployment, container)
	}
	vm := mountAt(c, dir)
	if vm == nil {
		t.Fatalf("nothing mounted at %s", dir)
	}
	name := configMapVolume(&dep.Spec.Template.Spec, vm.Name)
	cm := get[*corev1.ConfigMap](t, m, "ConfigMap", name)
	var texts []string
	for _, k := range sortedKeys(cm.Data) {
		texts = append(texts, cm.Data[k])
	}
	return texts
}

// agentConfigFile decodes agent.yaml from the agent's ConfigMap.
func agentConfigFile(t *testing.T, m *manifests) *agentConfig {
	t.Helper()
	cm := get[*corev1.ConfigMap](t, m, "ConfigMap", agentConfigMap)
	text, ok := cm.Data[configKey]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", agentConfigMap, configKey)
	}
	var cfg agentConfig
	if err := yaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
		t.Fatalf("ConfigMap %s, %s: %v (the keys: agentConfig here, cmd/replaywatch/agentconfig.go in the agent)", agentConfigMap, configKey, err)
	}
	return &cfg
}

// checkDSN: clickhouse://user@host:port/database, the host and port a
// Service of these bases, and no password in it.
func checkDSN(m *manifests, dsn string) error {
	u, port, err := parseDSN(dsn)
	if err != nil {
		return err
	}
	if u.Hostname() != clickhouseService {
		return fmt.Errorf("dsn host %q, want the Service %q", u.Hostname(), clickhouseService)
	}
	return servicePort(m, u.Hostname(), port)
}

// parseDSN checks the form clickhouse://user@host:port/database, with no
// password in it, and returns the URL and the port.
func parseDSN(dsn string) (*url.URL, int32, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, 0, fmt.Errorf("dsn %q: %v", dsn, err)
	}
	if u.Scheme != "clickhouse" || u.User == nil || u.User.Username() == "" || strings.Trim(u.Path, "/") == "" {
		return nil, 0, fmt.Errorf("dsn %q: want clickhouse://USER@HOST:9000/DATABASE", dsn)
	}
	if _, set := u.User.Password(); set {
		return nil, 0, fmt.Errorf("dsn has a password: it belongs in the Secret (%s)", passwordEnv)
	}
	port, err := strconv.ParseInt(u.Port(), 10, 32)
	if err != nil {
		return nil, 0, fmt.Errorf("dsn %q: no port", dsn)
	}
	return u, int32(port), nil
}

// servicePort checks that a Service of that name exposes that port.
func servicePort(m *manifests, name string, port int32) error {
	o, ok := m.byKey["Service/"+name]
	if !ok {
		return fmt.Errorf("no Service %q", name)
	}
	svc := o.meta.(*corev1.Service)
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return nil
		}
	}
	return fmt.Errorf("Service %s has no port %d", name, port)
}

var fromEnvRE = regexp.MustCompile(`from_env="([^"]+)"`)

// clickhouseConfigTexts returns the ClickHouse configuration files the
// StatefulSet mounts from ConfigMaps.
func clickhouseConfigTexts(t *testing.T, m *manifests, sts *appsv1.StatefulSet) []string {
	t.Helper()
	var texts []string
	c := findContainer(sts.Spec.Template.Spec.Containers, "clickhouse")
	for _, vm := range c.VolumeMounts {
		name := configMapVolume(&sts.Spec.Template.Spec, vm.Name)
		if name == "" || !strings.HasPrefix(vm.MountPath, "/etc/clickhouse-server/") {
			continue
		}
		cm := get[*corev1.ConfigMap](t, m, "ConfigMap", name)
		if vm.SubPath != "" {
			texts = append(texts, cm.Data[vm.SubPath])
			continue
		}
		for _, k := range sortedKeys(cm.Data) {
			texts = append(texts, cm.Data[k])
		}
	}
	return texts
}

func fromEnvNames(t *testing.T, m *manifests, sts *appsv1.StatefulSet) []string {
	var names []string
	for _, text := range clickhouseConfigTexts(t, m, sts) {
		for _, match := range fromEnvRE.FindAllStringSubmatch(text, -1) {
			names = append(names, match[1])
		}
	}
	return names
}

// clickhouseUsers returns the users the mounted configuration defines.
func clickhouseUsers(t *testing.T, m *manifests, sts *appsv1.StatefulSet) []string {
	t.Helper()
	var users []string
	for _, text := range clickhouseConfigTexts(t, m, sts) {
		var doc struct {
			Users struct {
				Users []struct {
					XMLName xml.Name
				} `xml:",any"`
			} `xml:"users"`
		}
		if err := xml.Unmarshal([]byte(text), &doc); err != nil {
			t.Fatalf("ClickHouse configuration: %v", err)
		}
		for _, u := range doc.Users.Users {
			users = append(users, u.XMLName.Local)
		}
	}
	return users
}

// checkVolumes: each volume's source exists, each mount names a volume.
func checkVolumes(m *manifests, w workload) error {
	pod := &w.template.Spec
	var errs []error
	names := map[string]*corev1.Volume{}
	for i := range pod.Volumes {
		v := &pod.Volumes[i]
		names[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			for _, it := range v.ConfigMap.Items {
				errs = append(errs, m.hasKey("ConfigMap", v.ConfigMap.Name, it.Key, v.ConfigMap.Optional, "volume "+v.Name))
			}
			errs = append(errs, m.hasKey("ConfigMap", v.ConfigMap.Name, "", v.ConfigMap.Optional, "volume "+v.Name))
		case v.Secret != nil:
			errs = append(errs, m.hasKey("Secret", v.Secret.SecretName, "", v.Secret.Optional, "volume "+v.Name))
		case v.PersistentVolumeClaim != nil:
			if _, ok := m.byKey["PersistentVolumeClaim/"+v.PersistentVolumeClaim.ClaimName]; !ok {
				errs = append(errs, fmt.Errorf("volume %s: no PersistentVolumeClaim %q", v.Name, v.PersistentVolumeClaim.ClaimName))
			}
		}
	}
	for _, ct := range w.claimTemplates {
		names[ct.Name] = nil
	}
	for _, c := range containers(pod) {
		for _, vm := range c.VolumeMounts {
			v, ok := names[vm.Name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s mounts volume %q, which the pod does not define", c.Name, vm.Name))
				continue
			}
			if v != nil && v.ConfigMap != nil && vm.SubPath != "" {
				errs = append(errs, m.hasKey("ConfigMap", v.ConfigMap.Name, vm.SubPath, v.ConfigMap.Optional, c.Name+" subPath"))
			}
		}
	}
	return errors.Join(errs...)
}

// hasKey checks that a ConfigMap or Secret exists, with that key if one is
// named, unless the reference is optional.
func (m *manifests) hasKey(kind, name, key string, optional *bool, what string) error {
	if optional != nil && *optional {
		return nil
	}
	keys, ok := m.keysOf(kind, name)
	if !ok {
		return fmt.Errorf("%s: no %s %q in the bases", what, kind, name)
	}
	if key != "" && !slices.Contains(keys, key) {
		return fmt.Errorf("%s: %s %s has no key %q (keys: %v)", what, kind, name, key, keys)
	}
	return nil
}

// lockedDown: not privileged, no privilege escalation, read-only root.
func lockedDown(c *corev1.Container) error {
	sc := c.SecurityContext
	if sc == nil {
		return errors.New("no securityContext")
	}
	var errs []error
	if sc.Privileged != nil && *sc.Privileged {
		errs = append(errs, errors.New("privileged"))
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		errs = append(errs, errors.New("allowPrivilegeEscalation should be false"))
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		errs = append(errs, errors.New("readOnlyRootFilesystem should be true"))
	}
	return errors.Join(errs...)
}

// runsAsNonRoot returns the effective runAsNonRoot and runAsUser: the
// container's, else the pod's.
func runsAsNonRoot(pod *corev1.PodSpec, c *corev1.Container) (bool, *int64) {
	var nonRoot *bool
	var uid *int64
	if p := pod.SecurityContext; p != nil {
		nonRoot, uid = p.RunAsNonRoot, p.RunAsUser
	}
	if s := c.SecurityContext; s != nil {
		if s.RunAsNonRoot != nil {
			nonRoot = s.RunAsNonRoot
		}
		if s.RunAsUser != nil {
			uid = s.RunAsUser
		}
	}
	return nonRoot != nil && *nonRoot, uid
}

func fmtUID(uid *int64) string {
	if uid == nil {
		return "unset"
	}
	return strconv.FormatInt(*uid, 10)
}

// httpProbe checks an HTTP GET probe of that path on that port.
func httpProbe(c *corev1.Container, p *corev1.Probe, wantPath string, wantPort int32) error {
	if p == nil || p.HTTPGet == nil {
		return errors.New("no HTTP GET probe")
	}
	if p.HTTPGet.Path != wantPath {
		return fmt.Errorf("path %q, want %q", p.HTTPGet.Path, wantPath)
	}
	port, err := resolvePort(c, p.HTTPGet.Port)
	if err != nil {
		return err
	}
	if port != wantPort {
		return fmt.Errorf("port %s is %d, want %d", p.HTTPGet.Port.String(), port, wantPort)
	}
	return nil
}

// resolvePort turns a port number or name into one of the container's
// ports.
func resolvePort(c *corev1.Container, port intstr.IntOrString) (int32, error) {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return p.ContainerPort, nil
		}
	}
	return 0, fmt.Errorf("port %s is not a port of container %s", port.String(), c.Name)
}

// pinned: a tag that is not "latest", or a digest.
func pinned(image string) error {
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || tag == "" || tag == "latest" {
		return fmt.Errorf("image %q: pin a tag (not latest) or a digest", image)
	}
	return nil
}

// imageIs checks that a container's image starts with prefix.
func imageIs(c *corev1.Container, prefix string) func() error {
	return func() error {
		if !strings.HasPrefix(c.Image, prefix) {
			return fmt.Errorf("image %q, want %s...", c.Image, prefix)
		}
		return nil
	}
}

// quantity checks one resource value.
func quantity(list corev1.ResourceList, name corev1.ResourceName, want string) error {
	got, ok := list[name]
	if !ok {
		return fmt.Errorf("%s not set, want %s", name, want)
	}
	if got.Cmp(resource.MustParse(want)) != 0 {
		return fmt.Errorf("%s %s, want %s", name, got.String(), want)
	}
	return nil
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func envByName(c *corev1.Container) map[string]corev1.EnvVar {
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	return env
}

func mountAt(c *corev1.Container, p string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == p {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volumeNamed(pod *corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

// configMapVolume returns the ConfigMap behind a volume, or "".
func configMapVolume(pod *corev1.PodSpec, volume string) string {
	if v := volumeNamed(pod, volume); v != nil && v.ConfigMap != nil {
		return v.ConfigMap.Name
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
