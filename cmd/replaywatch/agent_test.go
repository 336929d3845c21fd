package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rewritesClientBytes names the fixtures whose proxy rewrites what the
// client sent (a Last-Event-ID the client never had, a request cut short)
// and records the rewritten bytes: the story the capture tells. On the
// client-side wire the agent sees the client's original bytes, so these
// cannot match and are left out of the live comparison.
var rewritesClientBytes = map[string]bool{
	"go-unknown-id-rejected": true, "ts-truncated-resume": true, "ts-unknown-id-accepted": true,
}

// agentProxyHost is the loopback address the fixture proxies listen on
// while an agent captures them.
const agentProxyHost = "127.0.0.2"

type liveAgent struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	stderr *bytes.Buffer
}

// startLiveAgent runs the real binary as an agent on lo with a BPF filter,
// printing JSON Lines. It returns nil when not root (and fails in CI, where
// the suite runs as root).
func startLiveAgent(t *testing.T, filter string) *liveAgent {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("the live agent tests need root (AF_PACKET); CI runs as root")
		}
		return nil
	}
	bin := buildBinary(t)
	a := &liveAgent{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	a.cmd = exec.Command(bin, "agent", "--interface", "lo", "--filter", filter, "--format", "json", "--listen", "127.0.0.1:0")
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill() })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(a.stderr.String(), `"msg":"capturing"`) {
		if time.Now().After(deadline) || a.cmd.ProcessState != nil {
			t.Fatalf("agent did not start:\n%s", a.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a
}

// stop sends SIGTERM, as Kubernetes does, and returns what the agent printed.
func (a *liveAgent) stop(t *testing.T) string {
	t.Helper()
	time.Sleep(3 * time.Second) // past the reorder window: the last packets are in
	a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent exited with %v:\n%s", err, a.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not stop within 30s of SIGTERM:\n%s", a.stderr)
	}
	return a.stdout.String()
}

// findingKeys turns JSON Lines into comparable keys: violations and unknown
// outcomes by their deterministic ids; resumes by session, outcome and
// status (a resume's id hashes its Last-Event-ID, and a few fixtures rewrite
// that header in the proxy, so the client-side wire and the recording
// differ there by design).
func findingKeys(t *testing.T, out string) []string {
	var keys []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		switch r["type"] {
		case "violation":
			keys = append(keys, fmt.Sprintf("violation %v %v %v", r["session_id"], r["kind"], r["id"]))
		case "unknown_outcome":
			keys = append(keys, fmt.Sprintf("unknown_outcome %v %v %v", r["session_id"], r["tool"], r["id"]))
		case "resume":
			keys = append(keys, fmt.Sprintf("resume %v %v %v", r["session_id"], r["outcome"], r["status"]))
		}
	}
	sort.Strings(keys)
	return keys
}

// sessionIDs is every session id in analyze's JSON output.
func sessionIDs(t *testing.T, out string) []string {
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil {
			if id, ok := r["session_id"].(string); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// withoutSessions drops the keys naming one of the sessions (the session
// id is each key's second field).
func withoutSessions(keys []string, sessions map[string]bool) []string {
	var out []string
	for _, k := range keys {
		if f := strings.Fields(k); len(f) > 1 && sessions[f[1]] {
			continue
		}
		out = append(out, k)
	}
	return out
}

// compareLiveWithOffline checks the agent reported, live, exactly what
// analyze reports on the recordings of the same traffic.
func compareLiveWithOffline(t *testing.T, live, dir string) {
	t.Helper()
	pcaps, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	bin := buildBinary(t)
	var offline strings.Builder
	skip := map[string]bool{} // sessions of captures whose wire differs from the recording
	for _, p := range pcaps {
		out, err := exec.Command(bin, "analyze", "--format", "json", p).Output()
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
			t.Fatalf("analyze %s: %v", p, err)
		}
		if rewritesClientBytes[strings.TrimSuffix(filepath.Base(p), ".pcap")] {
			for _, id := range sessionIDs(t, string(out)) {
				skip[id] = true
			}
			continue
		}
		offline.Write(out)
	}
	got, want := withoutSessions(findingKeys(t, live), skip), findingKeys(t, offline.String())
	violations := 0
	for _, k := range want {
		if strings.HasPrefix(k, "violation") {
			violations++
		}
	}
	if violations < 12 {
		t.Fatalf("the recordings hold only %d violations", violations)
	}
	if only, missing := difference(got, want), difference(want, got); len(only)+len(missing) > 0 {
		t.Errorf("live agent and analyze differ (%d and %d records)\nonly live:\n  %s\nonly offline:\n  %s",
			len(got), len(want), strings.Join(only, "\n  "), strings.Join(missing, "\n  "))
	}
	t.Logf("agent and analyze agree on %d records (%d violations) over %d captures", len(want), violations, len(pcaps))
}

// difference is a minus b, as multisets.
func difference(a, b []string) []string {
	n := map[string]int{}
	for _, k := range b {
		n[k]++
	}
	var out []string
	for _, k := range a {
		if n[k] > 0 {
			n[k]--
			continue
		}
		out = append(out, k)
	}
	return out
}
