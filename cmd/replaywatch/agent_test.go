package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/replaywatch/replaywatch/test/chtest"
	"github.com/replaywatch/replaywatch/test/netnsrig"
	"github.com/replaywatch/replaywatch/test/spanproj"
	"github.com/replaywatch/replaywatch/test/testenv"
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
// while an agent captures them: one of 127/8 drawn per test process, so
// that an agent hears only its own run's traffic. With a fixed address, a
// rolling deploy another test run on the same machine sent through it
// reached this run's agent, as three session swaps analyze of this run's
// recordings rightly did not have.
var agentProxyHost = fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(256), 1+rand.IntN(254))

type liveAgent struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
}

// syncBuffer is a bytes.Buffer the process's copier goroutine writes while
// the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startLiveAgent runs the real binary as an agent on lo with a BPF filter,
// printing JSON Lines. It returns nil when not root (and fails in CI, where
// the suite runs as root).
func startLiveAgent(t *testing.T, filter string) *liveAgent {
	t.Helper()
	if os.Geteuid() != 0 {
		if testenv.InCI() {
			t.Fatal("the live agent tests need root (AF_PACKET); CI runs as root")
		}
		return nil
	}
	bin := buildBinary(t)
	a := &liveAgent{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	a.cmd = exec.Command(bin, "agent", "--interface", "lo", "--filter", filter, "--format", "json", "--listen", "127.0.0.1:0")
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill() })
	waitForLog(t, a.stderr, `"msg":"capturing"`)
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

// TestAgentToClickHouse runs the agent as the DaemonSet does (node and pod
// from the downward API's variables, schema applied at start, findings to
// ClickHouse) while a real go-sdk rolling deploy swaps a session, and
// checks the finding is in the database with the node's and pod's names,
// once, after a SIGTERM flush.
func TestAgentToClickHouse(t *testing.T) {
	srv := chtest.Shared(t)
	if os.Geteuid() != 0 {
		if testenv.InCI() {
			t.Fatal("the live agent tests need root (AF_PACKET); CI runs as root")
		}
		t.Skip("live capture needs root")
	}
	bin := buildBinary(t)
	db := chtest.NewDatabase(t, srv)
	cmd := exec.Command(bin, "agent", "--interface", "lo", "--filter", "host "+agentProxyHost, "--listen", "127.0.0.1:0",
		"--clickhouse", srv.DSN(db), "--apply-schema", "--spool-dir", t.TempDir(), "--flush-interval", "200ms")
	cmd.Env = append(os.Environ(), "NODE_NAME=node-7", "POD_NAME=replaywatch-agent-x1", "POD_NAMESPACE=replaywatch")
	a := &liveAgent{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	stderr := a.stderr
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	waitForLog(t, stderr, `"msg":"capturing"`)
	if !strings.Contains(stderr.String(), "schema migration applied") {
		t.Fatalf("schema not applied at start:\n%s", stderr.String())
	}
	rollingDeployTraffic(t)
	a.stop(t)
	if !strings.Contains(stderr.String(), `"msg":"sink closed"`) || !strings.Contains(stderr.String(), `"left_in_spool":0`) {
		t.Fatalf("sink not flushed on SIGTERM:\n%s", stderr.String())
	}
	q := "SELECT count() FROM " + db + ".violations FINAL WHERE kind = 'session_swap' AND node = 'node-7' AND source LIKE 'replaywatch/replaywatch-agent-x1 %'"
	if n := chCount(t, srv, q); n != 1 {
		out, _ := srv.Client(context.Background(), "SELECT kind, node, source FROM "+db+".violations", nil)
		t.Fatalf("%d session_swap rows with the node and pod; table holds:\n%s\nagent log:\n%s", n, out, stderr.String())
	}
	if n := chCount(t, srv, "SELECT count() FROM "+db+".stream_events FINAL"); n == 0 {
		t.Error("no stream events stored")
	}
}

func waitForLog(t *testing.T, b *syncBuffer, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.String(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in:\n%s", what, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAgentSeesRollingDeployInNamespaces: a client, a load balancer and two
// backends as separate hosts (network namespaces on a bridge); the load
// balancer drains backend 1 in the middle of a tool call's stream, the
// client's resume lands on backend 2, which answers 200 with a new session.
// The agent, capturing on the client's interface, reports that session_swap
// and nothing else.
func TestAgentSeesRollingDeployInNamespaces(t *testing.T) {
	if err := netnsrig.Available(); err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	rig := netnsrig.Setup(t)
	bin := buildBinary(t)
	a := &liveAgent{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	a.cmd = rig.Exec(netnsrig.Client, bin, "agent", "--interface", rig.ClientIface(), "--ports", "8080", "--format", "json", "--listen", "127.0.0.1:0")
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill() })
	waitForLog(t, a.stderr, `"msg":"capturing"`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := rig.RollingDeploy(ctx)
	if err != nil {
		t.Fatalf("rolling deploy: %v\n%s", err, rig.Logs())
	}
	out := a.stop(t)
	var kinds []string
	for _, k := range findingKeys(t, out) {
		if f := strings.Fields(k); f[0] == "violation" {
			kinds = append(kinds, f[2])
		}
	}
	if len(kinds) != 1 || kinds[0] != "session_swap" {
		t.Fatalf("violations %v, want exactly one session_swap\nclient: %+v\nagent output:\n%s\nagent log:\n%s", kinds, res, out, a.stderr)
	}
	if !strings.Contains(out, `"outcome":"violated"`) || !strings.Contains(out, `"type":"unknown_outcome"`) {
		t.Errorf("the swapped resume or the unknown outcome of the tool call is missing:\n%s", out)
	}
}

// TestAgentDropsExpiredPartitions: on a server without TTL (Debian's 18.16)
// the agent enforces --retention-days itself, at start and every hour. The
// sample capture's rows, stored by analyze, are days old; an agent started
// with a retention of one day drops them (spans only: no root needed).
func TestAgentDropsExpiredPartitions(t *testing.T) {
	srv := chtest.Shared(t)
	bin := buildBinary(t)
	db := chtest.NewDatabase(t, srv)
	dsn := srv.DSN(db)
	if code, _, errOut := runBin(t, bin, "schema", "apply", "--clickhouse", dsn); code != 0 {
		t.Fatalf("schema apply: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", t.TempDir(), samplePcap); code != exitViolations {
		t.Fatalf("analyze: exit %d\n%s", code, errOut)
	}
	q := "SELECT count() FROM " + db + ".violations"
	if n := chCount(t, srv, q); n == 0 {
		t.Fatal("analyze stored no violation")
	}
	a := &liveAgent{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	a.cmd = exec.Command(bin, "agent", "--interface", "none", "--otlp-http", freeAddr(t), "--listen", "127.0.0.1:0",
		"--clickhouse", dsn, "--retention-days", "1", "--spool-dir", t.TempDir(),
		"--hash-key-file", filepath.Join(t.TempDir(), "key"))
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill() })
	waitForLog(t, a.stderr, `"msg":"receiving OTLP traces"`)
	waitForLog(t, a.stderr, `"msg":"retention: dropped expired partitions"`)
	a.stop(t)
	if n := chCount(t, srv, q); n != 0 {
		t.Errorf("%d violations left past the retention", n)
	}
}

// TestAgentShutdownBudgetRunsFromTheSignal: a SIGTERM that arrives while the
// agent still dials a ClickHouse that accepts and never answers ends the
// process within --shutdown-timeout of the signal, not after the dial and
// the start it was waiting for.
func TestAgentShutdownBudgetRunsFromTheSignal(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	bin := buildBinary(t)
	a := &liveAgent{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	a.cmd = exec.Command(bin, "agent", "--interface", "none", "--otlp-http", freeAddr(t), "--listen", "127.0.0.1:0",
		"--clickhouse", "clickhouse://"+hung.Addr().String()+"/db", "--clickhouse-dial-timeout", "20s", "--spool-dir", t.TempDir(),
		"--shutdown-timeout", "1s", "--hash-key-file", filepath.Join(t.TempDir(), "key"))
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill() })
	waitForLog(t, a.stderr, `"msg":"agent starting"`)
	time.Sleep(300 * time.Millisecond) // dialling the hung server
	signalled := time.Now()
	a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case <-done:
		if took := time.Since(signalled); took > 3*time.Second {
			t.Errorf("the agent stopped %v after SIGTERM, with --shutdown-timeout 1s", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the agent is still running 15 s after SIGTERM (--shutdown-timeout 1s):\n%s", a.stderr)
	}
}

// TestAgentStdoutWriteErrorFails: findings the agent could not write to
// standard output (a full disk, here /dev/full) make it exit 2 with the
// error, not 0 as if they had been delivered.
func TestAgentStdoutWriteErrorFails(t *testing.T) {
	td, err := spanproj.FromPcap(context.Background(), []string{filepath.Join("..", "..", "pipeline", "testdata", "fixtures", "ts-session-swap.pcap")}, spanproj.Guard)
	if err != nil {
		t.Fatal(err)
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	bin := buildBinary(t)
	addr := freeAddr(t)
	stderr := &syncBuffer{}
	cmd := exec.Command(bin, "agent", "--interface", "none", "--otlp-http", addr, "--listen", "127.0.0.1:0", "--format", "json",
		"--hash-key-file", filepath.Join(t.TempDir(), "key"))
	cmd.Stdout, cmd.Stderr = full, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	waitForLog(t, stderr, `"msg":"receiving OTLP traces"`)
	resp, err := http.Post("http://"+addr+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %v %v", resp, err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitError || !strings.Contains(stderr.String(), "writing findings to standard output") {
		t.Errorf("findings written to /dev/full: exit %v, want %d and the error in the log:\n%s", err, exitError, stderr)
	}
}
