package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/chtest"
	"github.com/replaywatch/replaywatch/test/pcaprec"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// The tests here hold the ClickHouse path to "nothing lost": whatever the
// server does (down, paused, slow) and however many processes share a
// spool directory, every row produced is in the database or in the spool,
// and a later run sends the spool's rows, once.

var chTables = []string{"violations", "resumes", "sessions", "unknown_outcomes", "unverifiable", "stream_events"}

// rowsBySource counts rows (raw, before any merge) and distinct ids per
// source over every table.
func rowsBySource(t *testing.T, srv *chtest.Server, db string) (raw, distinct map[string]int) {
	t.Helper()
	raw, distinct = map[string]int{}, map[string]int{}
	for _, table := range chTables {
		key := "id"
		if table == "sessions" { // one row per session summary
			key = "session_id, server, last_seen"
		}
		out, err := srv.Client(t.Context(), fmt.Sprintf("SELECT source, count(), uniqExact(%s) FROM %s.%s GROUP BY source FORMAT TSV", key, db, table), nil)
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, "\t")
			if len(f) != 3 {
				continue
			}
			n, _ := strconv.Atoi(f[1])
			d, _ := strconv.Atoi(f[2])
			raw[f[0]] += n
			distinct[f[0]] += d
		}
	}
	return raw, distinct
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// agentOnClickHouse starts the real agent on lo writing to dsn with spool
// as its spool directory; nil when not root (a failure in CI).
func agentOnClickHouse(t *testing.T, bin, dsn, spool string, extra ...string) *liveAgent {
	t.Helper()
	if os.Geteuid() != 0 {
		if testenv.InCI() {
			t.Fatal("the live agent tests need root (AF_PACKET); CI runs as root")
		}
		t.Skip("live capture needs root")
	}
	args := append([]string{"agent", "--interface", "lo", "--filter", "host " + agentProxyHost, "--listen", "127.0.0.1:0",
		"--clickhouse", dsn, "--spool-dir", spool, "--flush-interval", "200ms"}, extra...)
	a := &liveAgent{cmd: exec.Command(bin, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cmd.Process.Kill() })
	waitForLog(t, a.stderr, `"msg":"capturing"`)
	return a
}

// rollingDeployTraffic runs a real go-sdk rolling deploy (a session swap)
// through the fixture proxy on agentProxyHost, where the agent listens.
func rollingDeployTraffic(t *testing.T) {
	t.Helper()
	gen := exec.Command("go", "run", "./test/fixturegen", "-out", t.TempDir(), "-sample", "", "-only", "go-rolling-deploy-swap")
	gen.Dir = filepath.Join("..", "..")
	gen.Env = append(os.Environ(), pcaprec.ProxyHostEnv+"="+agentProxyHost)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("fixturegen: %v\n%s", err, out)
	}
}

// sinkClosed is the agent's last report of its sink.
type sinkClosed struct {
	Written  int64  `json:"written"`
	Replayed int64  `json:"replayed"`
	Left     int64  `json:"left_in_spool"`
	Lost     int64  `json:"lost"`
	Corrupt  int    `json:"corrupt_files"`
	Spool    string `json:"spool"`
}

// terminate sends SIGTERM and waits for the exit, returning its code, the
// time it took and the sink's report.
func (a *liveAgent) terminate(t *testing.T) (int, time.Duration, sinkClosed) {
	t.Helper()
	start := time.Now()
	a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("agent did not stop within 60s of SIGTERM:\n%s", a.stderr)
	}
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var r sinkClosed
	sc := bufio.NewScanner(strings.NewReader(a.stderr.String()))
	found := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"msg":"sink closed"`) {
			found = json.Unmarshal(sc.Bytes(), &r) == nil
		}
	}
	if !found {
		t.Fatalf("no sink report (exit %d after %v):\n%s", code, took, a.stderr)
	}
	return code, took, r
}

var (
	keptInSpool = regexp.MustCompile(`(\d+) rows in \d+ batches kept in the spool`)
	fromSpool   = regexp.MustCompile(`\((\d+) of them from the spool`)
)

// analyzeOutage runs analyze on pcap while ClickHouse is down and returns
// the rows it says it left in the spool.
func analyzeOutage(t *testing.T, bin, dsn, spool, pcap string) int {
	code, _, errOut := runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", spool, "--spool-drain-timeout", "100ms", pcap)
	m := keptInSpool.FindStringSubmatch(errOut)
	if (code != exitViolations && code != exitUndelivered) || m == nil {
		t.Errorf("analyze %s during the outage: exit %d\n%s", pcap, code, errOut)
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestSpoolSharedByTwoRunsAndAnAgent: with ClickHouse down, two analyze
// runs and an agent write to one spool directory at once (they used to
// number their files alike and overwrite each other's: half the rows were
// lost). ClickHouse comes back; the agent, still running, takes over the
// ended runs' files and sends them with its own. Every row of each run is
// in the database exactly once: as many as the same analysis stores on a
// healthy server.
func TestSpoolSharedByTwoRunsAndAnAgent(t *testing.T) {
	srv, bin, db, dsn := serverWithSchema(t)
	pcaps := []string{
		filepath.Join(fixtureDir, "ts-crowd-double-charge.pcap"),
		filepath.Join(fixtureDir, "go-crowd-double-charge.pcap"),
	}
	// What each analysis produces, stored on a healthy server first.
	ref := chtest.NewDatabase(t, srv)
	if code, out, errOut := runBin(t, bin, "schema", "apply", "--clickhouse", srv.DSN(ref)); code != 0 {
		t.Fatalf("schema apply: %s%s", out, errOut)
	}
	for _, p := range pcaps {
		if code, _, errOut := runBin(t, bin, "analyze", "--clickhouse", srv.DSN(ref), p); code != exitViolations {
			t.Fatalf("reference analysis of %s: exit %d\n%s", p, code, errOut)
		}
	}
	want, _ := rowsBySource(t, srv, ref)

	spool := t.TempDir()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	a := agentOnClickHouse(t, bin, dsn, spool)
	var wg sync.WaitGroup
	left := make([]int, len(pcaps))
	for i, p := range pcaps {
		wg.Add(1)
		go func() { defer wg.Done(); left[i] = analyzeOutage(t, bin, dsn, spool, p) }()
	}
	rollingDeployTraffic(t)
	wg.Wait()
	for i, p := range pcaps {
		if left[i] != want[p] {
			t.Errorf("%s: %d rows left in the spool, the analysis produces %d", p, left[i], want[p])
		}
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The agent retries with backoff (at most 10s) and looks for ended
	// runs every few seconds.
	deadline := time.Now().Add(90 * time.Second)
	for {
		got, _ := rowsBySource(t, srv, db)
		if got[pcaps[0]] >= want[pcaps[0]] && got[pcaps[1]] >= want[pcaps[1]] && len(got) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s the database holds %v, want %v and the agent's rows\nagent log:\n%s", got, want, a.stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // the agent's last events past its reorder window
	code, _, r := a.terminate(t)
	if code != exitOK || r.Left != 0 || r.Lost != 0 {
		t.Fatalf("agent: exit %d, report %+v\n%s", code, r, a.stderr)
	}
	if !strings.Contains(a.stderr.String(), "took over the spool of an ended run") {
		t.Errorf("the agent did not say it took over the ended runs' spool:\n%s", a.stderr)
	}
	raw, distinct := rowsBySource(t, srv, db)
	for _, p := range pcaps {
		if raw[p] != want[p] || distinct[p] != want[p] {
			t.Errorf("%s: %d rows stored (%d distinct), want %d once each", p, raw[p], distinct[p], want[p])
		}
	}
	agentRows := sum(raw) - want[pcaps[0]] - want[pcaps[1]]
	if agentRows == 0 || sum(raw) != sum(distinct) || int64(sum(raw)) != r.Written {
		t.Errorf("agent wrote %d rows (the others' included), the database holds %d (%d distinct)", r.Written, sum(raw), sum(distinct))
	}
	if entries, _ := os.ReadDir(spool); len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("spool directory not emptied: %v", names)
	}
	t.Logf("rows produced: %s %d, %s %d, agent %d; stored %d, each once; left 0, lost 0",
		filepath.Base(pcaps[0]), want[pcaps[0]], filepath.Base(pcaps[1]), want[pcaps[1]], agentRows, sum(raw))
}

// emptyPcap is a capture file with no packets: a run that only sends the
// spool.
var emptyPcap = []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0}

// slowProxy forwards TCP to target, holding each chunk the server sends for
// delay: a server that answers, slowly.
func slowProxy(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go io.Copy(s, c)
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestAgentShutdownWithinBudget: the agent gets SIGTERM while ClickHouse
// is paused (SIGSTOP: connections open, nothing answers), refusing (down),
// or slow (every answer delayed). It exits before --shutdown-timeout (it
// used to run past it when paused and exit with 0 rows stored and 0
// spooled), having written or spooled every row: after the server is back
// a later run sends the spool, and the database holds as many distinct
// rows as the agent accepted, the session swap among them.
func TestAgentShutdownWithinBudget(t *testing.T) {
	const budget = 5 * time.Second
	for _, tc := range []struct {
		name    string
		degrade func(*chtest.Server)
		restore func(*chtest.Server)
		slow    bool
	}{
		{name: "paused", degrade: (*chtest.Server).Pause, restore: (*chtest.Server).Resume},
		{name: "refusing", degrade: func(s *chtest.Server) { s.Stop() }, restore: func(s *chtest.Server) { s.Start() }},
		{name: "slow", slow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, bin, db, dsn := serverWithSchema(t)
			agentDSN := dsn
			if tc.slow {
				agentDSN = "clickhouse://" + slowProxy(t, srv.Addr, 1500*time.Millisecond) + "/" + db
			}
			spool := t.TempDir()
			a := agentOnClickHouse(t, bin, agentDSN, spool, "--shutdown-timeout", budget.String(), "--clickhouse-dial-timeout", "30s")
			if tc.degrade != nil {
				tc.degrade(srv)
				t.Cleanup(func() { tc.restore(srv) }) // before the database is dropped
			}
			rollingDeployTraffic(t)
			time.Sleep(3 * time.Second) // past the reorder window; inserts are in flight
			code, took, r := a.terminate(t)
			wantCode := exitOK
			if r.Left > 0 {
				wantCode = exitUndelivered
			}
			if code != wantCode || took >= budget || r.Lost != 0 || r.Corrupt != 0 {
				t.Fatalf("agent: exit %d after %v (budget %v), report %+v\n%s", code, took.Round(time.Millisecond), budget, r, a.stderr)
			}
			if tc.restore != nil {
				tc.restore(srv)
			}
			stored, _ := rowsBySource(t, srv, db)
			empty := filepath.Join(t.TempDir(), "empty.pcap")
			os.WriteFile(empty, emptyPcap, 0o600)
			next, _, errOut := runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", spool, empty)
			if next != exitOK {
				t.Fatalf("the run after: exit %d\n%s", next, errOut)
			}
			raw, distinct := rowsBySource(t, srv, db)
			accepted := int(r.Written + r.Left)
			replayed := 0
			if m := fromSpool.FindStringSubmatch(errOut); m != nil {
				replayed, _ = strconv.Atoi(m[1])
			}
			// An insert cut at the deadline may still have been stored:
			// its rows are then stored twice (the table collapses them),
			// so the check counts distinct ids.
			if sum(distinct) != accepted || sum(stored) < int(r.Written) || replayed != int(r.Left) {
				t.Fatalf("agent accepted %d rows (%d written, %d spooled); stored before the next run %d, after %d (%d distinct); the next run sent %d from the spool\n%s",
					accepted, r.Written, r.Left, sum(stored), sum(raw), sum(distinct), replayed, errOut)
			}
			if n := chCount(t, srv, "SELECT count() FROM "+db+".violations FINAL WHERE kind = 'session_swap'"); n != 1 {
				t.Errorf("%d session_swap rows, want 1", n)
			}
			t.Logf("exit %d after %v of %v; rows produced %d = %d in ClickHouse + %d in the spool, lost 0",
				code, took.Round(time.Millisecond), budget, accepted, r.Written, r.Left)
		})
	}
}

// TestAnalyzeStopsOnSIGTERM: analyze reading a capture from a pipe gets
// SIGTERM (timeout, docker stop, a CI runner) while ClickHouse is paused.
// It used to ignore SIGTERM: killed, it cut its last JSON line and lost its
// unsent rows. Now it stops reading, writes a whole report with its
// summary, spools what ClickHouse does not take within --shutdown-timeout,
// and exits 2 saying it was stopped; a later run sends the spool, and the
// database then holds every record the report printed, once.
func TestAnalyzeStopsOnSIGTERM(t *testing.T) {
	srv, bin, db, dsn := serverWithSchema(t)
	pcap, err := os.ReadFile(filepath.Join(fixtureDir, "ts-crowd-double-charge.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	spool := t.TempDir()
	const budget = 4 * time.Second
	cmd := exec.Command(bin, "analyze", "--format", "json", "--clickhouse", dsn, "--spool-dir", spool, "--shutdown-timeout", budget.String(), "--flush-interval", "100ms", "-")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	stdin.Write(pcap[:len(pcap)*2/3]) // the rest never comes: the pipe stays open
	time.Sleep(2 * time.Second)
	srv.Pause()
	t.Cleanup(srv.Resume)
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	took := time.Since(start)
	stdin.Close()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitError || took >= budget+time.Second || !strings.Contains(stderr.String(), "stopped by terminated signal received") {
		t.Fatalf("analyze after SIGTERM: %v after %v (budget %v)\n%s", err, took, budget, stderr.String())
	}
	printed := map[string]int{}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for _, l := range lines {
		var r struct{ Type string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("cut JSON line %q: %v", l, err)
		}
		printed[r.Type]++
	}
	if !strings.Contains(lines[len(lines)-1], `"type":"summary"`) || printed["session"] == 0 {
		t.Fatalf("no summary at the end, or no sessions: %v", printed)
	}
	srv.Resume()
	empty := filepath.Join(t.TempDir(), "empty.pcap")
	os.WriteFile(empty, emptyPcap, 0o600)
	if code, _, errOut := runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", spool, empty); code != exitOK {
		t.Fatalf("the run after: exit %d\n%s", code, errOut)
	}
	for typ, table := range map[string]string{"violation": "violations", "resume": "resumes", "session": "sessions", "unknown_outcome": "unknown_outcomes", "unverifiable": "unverifiable"} {
		if n := chCount(t, srv, "SELECT count() FROM "+db+"."+table+" FINAL"); n != printed[typ] {
			t.Errorf("%s: %d rows stored, the report printed %d", table, n, printed[typ])
		}
	}
	raw, distinct := rowsBySource(t, srv, db)
	if sum(distinct) != raw["-"] {
		t.Errorf("rows stored %v, distinct %v", raw, distinct)
	}
	t.Logf("exit %d after %v of %v; report %v; %d rows stored (after the next run sent the spool), lost 0", ee.ExitCode(), took.Round(time.Millisecond), budget, printed, raw["-"])
}
