package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/replaywatch/replaywatch/capture"
	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
)

// configFrom loads a config file and flags into an agentConfig the way
// runAgent does, without starting anything.
func configFrom(t *testing.T, file string, args ...string) (*agentConfig, error) {
	t.Helper()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg agentConfig
	cfg.register(fs)
	f, err := loadAgentFile(file)
	if err != nil {
		return nil, err
	}
	if err := applyFile(fs, f); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return &cfg, cfg.validate()
}

func writeFile(t *testing.T, text string) string {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDeployedAgentConfigLoads: the agent.yaml the Kubernetes ConfigMap
// ships is read by the agent's own loader and passes its validation.
func TestDeployedAgentConfigLoads(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "agent", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	cfg, err := configFrom(t, writeFile(t, cm.Data["agent.yaml"]))
	if err != nil {
		t.Fatalf("the deployed agent.yaml does not load: %v", err)
	}
	if cfg.listen != ":9464" || !cfg.clickhouse.enabled() || cfg.clickhouse.sink.SpoolDir != "/var/lib/replaywatch/spool" || len(cfg.live.Ports) == 0 {
		t.Errorf("loaded %+v", cfg)
	}
}

func TestAgentConfigPrecedence(t *testing.T) {
	file := writeFile(t, "interfaces: [eth0]\nports: [8080]\nlimits:\n  max_sessions: 77\n  session_idle_timeout: 90s\nclickhouse:\n  flush_interval: 2s\n")
	t.Setenv("REPLAYWATCH_MAX_SESSIONS", "88")
	cfg, err := configFrom(t, file, "--ports", "3000,8000")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.live.Interfaces, ",") != "eth0" || len(cfg.live.Ports) != 2 || cfg.live.Ports[0] != 3000 {
		t.Errorf("file, then flags: interfaces %v ports %v", cfg.live.Interfaces, cfg.live.Ports)
	}
	if cfg.detect.PartialHistory {
		t.Error("partial_history is on by default")
	}
	if cfg, err := configFrom(t, writeFile(t, "partial_history: true\n")); err != nil || !cfg.detect.PartialHistory {
		t.Errorf("partial_history: true in the file: %v, %v", err, err == nil && cfg.detect.PartialHistory)
	}
	if cfg.detect.MaxSessions != 88 || cfg.detect.SessionIdleTimeout != 90*time.Second || cfg.clickhouse.sink.FlushInterval != 2*time.Second {
		t.Errorf("environment over file: max_sessions %d, idle %v, flush %v", cfg.detect.MaxSessions, cfg.detect.SessionIdleTimeout, cfg.clickhouse.sink.FlushInterval)
	}
}

func TestAgentConfigErrors(t *testing.T) {
	for name, c := range map[string]struct{ file, want string }{
		"unknown key":  {"interfacez: [lo]\n", "interfacez"},
		"bad type":     {"workers: many\n", "line 1: cannot unmarshal !!str `many`"},
		"bad port":     {"ports: [70000]\n", "line 1: cannot unmarshal !!int `70000`"},
		"bad duration": {"limits:\n  session_idle_timeout: soon\n", "line 2: cannot unmarshal !!str `soon`"},
		"bad limit":    {"limits:\n  max_sessions: 0\n", "--max-sessions"},
		"bad dsn":      {"clickhouse:\n  dsn: http://x\n", "clickhouse://"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := configFrom(t, writeFile(t, c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

// TestRingBytesTakeTheDefaults: a ring size of 0 means the default, for the
// memory plan as for the rings Live opens, so the plan never leaves the
// rings out of the budget.
func TestRingBytesTakeTheDefaults(t *testing.T) {
	def, err := configFrom(t, writeFile(t, "interfaces: [eth0]\nworkers: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := int64(2 * capture.DefaultBlockSize * capture.DefaultNumBlocks)
	if got := def.ringBytes(); got != want {
		t.Fatalf("default rings: %d bytes, want %d", got, want)
	}
	zero, err := configFrom(t, writeFile(t, "interfaces: [eth0]\nworkers: 2\n"), "--ring-blocks", "0", "--ring-block-size", "0")
	if err != nil {
		t.Fatal(err)
	}
	if got := zero.ringBytes(); got != want {
		t.Errorf("--ring-blocks 0 --ring-block-size 0: %d bytes in the plan, want the defaults' %d", got, want)
	}
}

// TestMaxRetriesZeroMeansNone: --max-retries 0 reaches the sink as no retry
// (the sink's own 0 means its default), and the default stays 4.
func TestMaxRetriesZeroMeansNone(t *testing.T) {
	for args, want := range map[string]int{"": chsink.DefaultMaxRetries, "0": 0, "2": 2} {
		var a []string
		if args != "" {
			a = []string{"--max-retries", args}
		}
		cfg, err := configFrom(t, writeFile(t, "interfaces: [eth0]\n"), a...)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.clickhouse.sinkConfig().WithDefaults().MaxRetries; got != want {
			t.Errorf("--max-retries %q: the sink retries %d times, want %d", args, got, want)
		}
	}
}
