package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/test/chtest"
)

func TestMain(m *testing.M) {
	// The binaries the tests run keep their state (the hash key, default
	// spools) here, not in the home of whoever runs the suite; all of them
	// share one hash key, as one deployment's agents do.
	dir, err := os.MkdirTemp("", "replaywatch-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", dir)
	code := chtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBin runs the real binary and returns its exit code, stdout and stderr.
func runBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func chCount(t *testing.T, srv *chtest.Server, query string) int {
	t.Helper()
	out, err := srv.Client(context.Background(), query, nil)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	var n int
	if _, err := fmt.Sscan(string(out), &n); err != nil {
		t.Fatalf("%s: %q", query, out)
	}
	return n
}

// jsonIDs is the ids of the records of one type in analyze's JSON output.
func jsonIDs(t *testing.T, out, typ string) map[string]bool {
	ids := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		if rec["type"] == typ {
			ids[fmt.Sprint(rec["id"])] = true
		}
	}
	return ids
}

// TestClickHouseFromTheREADME does what the README tells a user: schema
// apply, then analyze --clickhouse, on every fixture capture, twice. The
// database holds exactly what analyze printed, once.
func TestClickHouseFromTheREADME(t *testing.T) {
	srv := chtest.Shared(t)
	bin := buildBinary(t)
	db := chtest.NewDatabase(t, srv)
	dsn := srv.DSN(db)
	spool := t.TempDir()

	code, out, errOut := runBin(t, bin, "schema", "apply", "--clickhouse", dsn)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("applied %d", chsink.SchemaVersion)) {
		t.Fatalf("schema apply: %d\n%s%s", code, out, errOut)
	}
	if code, out, _ = runBin(t, bin, "schema", "apply", "--clickhouse", dsn); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second schema apply: %d %s", code, out)
	}
	if code, out, _ = runBin(t, bin, "schema", "status", "--clickhouse", dsn); code != 0 || !strings.Contains(out, fmt.Sprintf("schema version %d", chsink.SchemaVersion)) {
		t.Fatalf("schema status: %d %s", code, out)
	}

	fixtures, _ := filepath.Glob(filepath.Join(fixtureDir, "*.pcap"))
	if len(fixtures) < 20 {
		t.Fatalf("only %d fixtures", len(fixtures))
	}
	want := map[string]map[string]bool{"violation": {}, "resume": {}, "unknown_outcome": {}, "unverifiable": {}}
	for run := range 2 {
		for _, f := range fixtures {
			code, out, errOut := runBin(t, bin, "analyze", "--format", "json", "--clickhouse", dsn, "--spool-dir", spool, f)
			if code == 2 || !strings.Contains(errOut, "rows written to ClickHouse") || strings.Contains(errOut, "spool") && strings.Contains(errOut, "kept") {
				t.Fatalf("run %d %s: exit %d\n%s", run, f, code, errOut)
			}
			for typ := range want {
				for id := range jsonIDs(t, out, typ) {
					want[typ][id] = true
				}
			}
		}
	}
	tables := map[string]string{"violation": "violations", "resume": "resumes", "unknown_outcome": "unknown_outcomes", "unverifiable": "unverifiable"}
	for typ, ids := range want {
		table := db + "." + tables[typ]
		// Each row was written twice; background merges may already have
		// collapsed some copies, FINAL collapses all.
		final, raw := chCount(t, srv, "SELECT count() FROM "+table+" FINAL"), chCount(t, srv, "SELECT count() FROM "+table)
		if final != len(ids) || raw < final || raw > 2*final {
			t.Errorf("%s: %d rows after FINAL and %d stored, want %d after FINAL (analyze printed %d distinct)", table, final, raw, len(ids), len(ids))
		}
	}
	if len(want["violation"]) < 12 {
		t.Errorf("only %d violations over all fixtures", len(want["violation"]))
	}
	if n := chCount(t, srv, "SELECT count() FROM "+db+".stream_events FINAL"); n < 100 || n != chCount(t, srv, "SELECT uniqExact(id) FROM "+db+".stream_events") {
		t.Errorf("stream_events: %d rows after FINAL", n)
	}
	// Tool arguments are not stored without --store-arguments.
	if n := chCount(t, srv, "SELECT count() FROM "+db+".unknown_outcomes WHERE arguments != ''"); n != 0 {
		t.Errorf("%d unknown outcomes with arguments in clear without --store-arguments", n)
	}
}

// TestAnalyzeWithoutSchemaOrServer: a database without the schema is a
// clear error; a bad password never shows in messages.
func TestAnalyzeWithoutSchemaOrServer(t *testing.T) {
	srv := chtest.Shared(t)
	bin := buildBinary(t)
	db := chtest.NewDatabase(t, srv)
	code, _, errOut := runBin(t, bin, "analyze", "--clickhouse", srv.DSN(db), "--spool-dir", t.TempDir(), samplePcap)
	if code != 2 || !strings.Contains(errOut, "schema apply") {
		t.Fatalf("no schema: exit %d\n%s", code, errOut)
	}
	dsn := strings.Replace(srv.DSN(db), "clickhouse://", "clickhouse://default:s3cr3t-value@", 1)
	code, out, errOut := runBin(t, bin, "schema", "apply", "--clickhouse", dsn)
	if code != 2 || strings.Contains(out+errOut, "s3cr3t-value") {
		t.Fatalf("wrong password: exit %d, output shows the password or succeeded:\n%s%s", code, out, errOut)
	}
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("from-a-file\n"), 0o600)
	code, out, errOut = runBin(t, bin, "schema", "apply", "--clickhouse", srv.DSN(db), "--clickhouse-password-file", pw)
	if code != 2 || strings.Contains(out+errOut, "from-a-file") {
		t.Fatalf("password file: exit %d\n%s%s", code, out, errOut)
	}
}

// serverWithSchema starts a ClickHouse server with a fresh database that
// replaywatch's own binary has applied its schema to.
func serverWithSchema(t *testing.T) (srv *chtest.Server, bin, db, dsn string) {
	t.Helper()
	srv = chtest.Start(t, chtest.Options{})
	bin = buildBinary(t)
	db = chtest.NewDatabase(t, srv)
	dsn = srv.DSN(db)
	if code, out, errOut := runBin(t, bin, "schema", "apply", "--clickhouse", dsn); code != 0 {
		t.Fatalf("schema apply: %s%s", out, errOut)
	}
	return srv, bin, db, dsn
}

// TestAnalyzeDuringOutageThenNextRun: analyze runs while ClickHouse is
// down (its findings go to the spool), then a later run, with the server
// back, sends the earlier run's rows first: both runs' findings are in the
// database, once.
func TestAnalyzeDuringOutageThenNextRun(t *testing.T) {
	srv, bin, db, dsn := serverWithSchema(t)
	spool := t.TempDir()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	code, out1, errOut := runBin(t, bin, "analyze", "--format", "json", "--clickhouse", dsn, "--spool-dir", spool, "--spool-drain-timeout", "100ms", samplePcap)
	if code != 1 || !strings.Contains(errOut, "kept in the spool") {
		t.Fatalf("analyze during the outage: exit %d\n%s", code, errOut)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(fixtureDir, "go-replayed-event.pcap")
	code, out2, errOut := runBin(t, bin, "analyze", "--format", "json", "--clickhouse", dsn, "--spool-dir", spool, other)
	if code == 2 || !strings.Contains(errOut, "from the spool") || strings.Contains(errOut, "kept in the spool") {
		t.Fatalf("analyze after the outage: exit %d\n%s", code, errOut)
	}
	want := jsonIDs(t, out1, "violation")
	for id := range jsonIDs(t, out2, "violation") {
		want[id] = true
	}
	if len(want) < 2 {
		t.Fatalf("fixtures give %d violations", len(want))
	}
	if n, raw := chCount(t, srv, "SELECT count() FROM "+db+".violations FINAL"), chCount(t, srv, "SELECT count() FROM "+db+".violations"); n != len(want) || raw != len(want) {
		t.Fatalf("violations: %d (stored %d), want %d of both runs", n, raw, len(want))
	}
}

// TestAnalyzeExitsOnARefusedBatch: rows ClickHouse refuses for good (a
// table whose schema was changed under the sink) are set aside, named on
// stderr, and the run exits 2: they were not delivered.
func TestAnalyzeExitsOnARefusedBatch(t *testing.T) {
	srv, bin, db, dsn := serverWithSchema(t)
	if _, err := srv.Client(context.Background(), "ALTER TABLE "+db+".violations DROP COLUMN explanation", nil); err != nil {
		t.Fatal(err)
	}
	spool := t.TempDir()
	code, _, errOut := runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", spool, samplePcap)
	aside, _ := filepath.Glob(filepath.Join(spool, "*.rejected"))
	if code != exitError || len(aside) == 0 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, aside[0]) {
		t.Fatalf("analyze with a refused batch: exit %d, want %d naming the batch set aside (%v)\n%s", code, exitError, aside, errOut)
	}
}

// TestAnalyzeExitSaysWhereTheRowsAre: a run whose spool cannot be written
// while ClickHouse is down exits 2 before reading; a run that leaves rows in the spool
// (ClickHouse down) and finds nothing exits 3 naming the spool; a run that
// meets a spool file it cannot read sets it aside, delivers the rest, and
// exits 2 naming the file (it used to exit 0).
func TestAnalyzeExitSaysWhereTheRowsAre(t *testing.T) {
	srv, bin, _, dsn := serverWithSchema(t)
	spool := t.TempDir()
	clean := filepath.Join(fixtureDir, "go-correct-resume.pcap")

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// A spool that cannot be written is an error before anything is read.
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o600)
	code, _, errOut := runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", filepath.Join(notDir, "spool"), clean)
	if code != exitError || !strings.Contains(errOut, "spool cannot hold the findings") || !strings.Contains(errOut, notDir) {
		t.Fatalf("analyze with an unusable spool during an outage: exit %d, want %d naming it\n%s", code, exitError, errOut)
	}
	code, _, errOut = runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", spool, "--spool-drain-timeout", "100ms", clean)
	if code != exitUndelivered || !strings.Contains(errOut, "safe in the spool "+spool) {
		t.Fatalf("analyze during an outage, no violation: exit %d, want %d naming the spool\n%s", code, exitUndelivered, errOut)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}

	// An unreadable file ahead of the outage's rows.
	bad := filepath.Join(spool, fmt.Sprintf("%020d.batch", 0))
	if err := os.WriteFile(bad, []byte("replaywatch-spool-1\ngarbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runBin(t, bin, "analyze", "--clickhouse", dsn, "--spool-dir", spool, clean)
	aside, _ := filepath.Glob(filepath.Join(spool, "*.corrupt"))
	if len(aside) != 1 {
		t.Fatalf("the corrupt file is not kept for inspection in %s: %v\n%s", spool, aside, errOut)
	}
	if code != exitError || !strings.Contains(errOut, aside[0]) || !strings.Contains(errOut, "from the spool") {
		t.Fatalf("analyze with a corrupt spool file: exit %d, want %d naming %s and delivering the rest\n%s", code, exitError, aside[0], errOut)
	}
}
