package chdbtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	v := Open(t).Version()
	if !strings.HasPrefix(v, "26.") {
		t.Fatalf("chDB version %q, want 26.x", v)
	}
	t.Logf("chDB %s (npm @chdb/lib-linux-x64-gnu %s)", v, PinnedVersion)
}

// The DDL our ClickHouse sink's tables use, on a current engine: a
// ReplacingMergeTree partitioned by day, with a TTL, LowCardinality,
// DateTime64 in nanoseconds and arrays. Rows inserted twice collapse under
// FINAL, and rows past the TTL go at the next merge.
func TestReplacingMergeTree(t *testing.T) {
	s := Open(t)
	mustExec(t, s, `CREATE TABLE findings (
		session LowCardinality(String),
		id UInt64,
		t DateTime64(9, 'UTC'),
		rule LowCardinality(String),
		tags Array(String),
		version UInt32
	) ENGINE = ReplacingMergeTree(version)
	PARTITION BY toYYYYMMDD(t)
	ORDER BY (session, id)
	TTL toDateTime(t) + INTERVAL 30 DAY`)
	// No background merge may collapse the duplicates before the plain
	// SELECT has seen them.
	mustExec(t, s, `SYSTEM STOP MERGES findings`)

	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := today.Add(-24 * time.Hour)
	old := today.Add(-40 * 24 * time.Hour) // past the TTL
	ts := func(day time.Time, ns int) string {
		return day.Add(time.Hour + time.Duration(ns)).Format("2006-01-02 15:04:05.000000000")
	}
	// One INSERT a version: separate parts, so the duplicates are real.
	mustExec(t, s, fmt.Sprintf(`INSERT INTO findings VALUES
		('s1', 1, '%s', 'replay', ['a', 'b'], 1),
		('s1', 2, '%s', 'drift', [], 1),
		('s2', 1, '%s', 'replay', ['old'], 1)`, ts(today, 123456789), ts(yesterday, 1), ts(old, 0)))
	mustExec(t, s, fmt.Sprintf(`INSERT INTO findings VALUES
		('s1', 1, '%s', 'replay', ['a', 'b', 'c'], 2)`, ts(today, 123456789)))

	count := func(query string) uint64 {
		t.Helper()
		r := mustQuery(t, s, query)
		return r.Rows[0][0].(uint64)
	}
	if n := count(`SELECT count() FROM findings`); n != 4 {
		t.Errorf("without FINAL: %d rows, want 4 (the duplicate is still there)", n)
	}
	if n := count(`SELECT count() FROM findings FINAL`); n != 3 {
		t.Errorf("FINAL: %d rows, want 3", n)
	}

	r := mustQuery(t, s, `SELECT session, id, t, tags, version FROM findings FINAL WHERE session = 's1' ORDER BY id`)
	wantCols := []Column{
		{"session", "LowCardinality(String)"},
		{"id", "UInt64"},
		{"t", "DateTime64(9, 'UTC')"},
		{"tags", "Array(String)"},
		{"version", "UInt32"},
	}
	if !reflect.DeepEqual(r.Columns, wantCols) {
		t.Errorf("columns %v, want %v", r.Columns, wantCols)
	}
	wantRows := [][]any{
		{"s1", uint64(1), ts(today, 123456789), []any{"a", "b", "c"}, uint64(2)},
		{"s1", uint64(2), ts(yesterday, 1), []any{}, uint64(1)},
	}
	if !reflect.DeepEqual(r.Rows, wantRows) {
		t.Errorf("rows\n%#v\nwant\n%#v", r.Rows, wantRows)
	}

	parts := mustQuery(t, s, `SELECT DISTINCT partition FROM system.parts
		WHERE database = currentDatabase() AND table = 'findings' AND active ORDER BY partition`)
	var got []any
	for _, row := range parts.Rows {
		got = append(got, row[0])
	}
	want := []any{old.Format("20060102"), yesterday.Format("20060102"), today.Format("20060102")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("partitions %v, want %v", got, want)
	}

	// A merge applies the TTL: the 40-day-old row goes.
	mustExec(t, s, `SYSTEM START MERGES findings`)
	mustExec(t, s, `OPTIMIZE TABLE findings FINAL`)
	if n := count(`SELECT count() FROM findings`); n != 2 {
		t.Errorf("after OPTIMIZE FINAL: %d rows, want 2 (collapsed, and the expired row gone)", n)
	}
	if n := count(`SELECT count() FROM findings WHERE session = 's2'`); n != 0 {
		t.Errorf("the row past the TTL is still there")
	}
}

func TestSyntaxErrorIsAnError(t *testing.T) {
	s := Open(t)
	ctx := context.Background()
	_, err := s.Query(ctx, "SELEC 1")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("bad SQL: error %v (%T), want *Error", err, err)
	}
	if e.Code != 62 || e.Name != "SYNTAX_ERROR" || !strings.Contains(e.Message, "Syntax error") {
		t.Errorf("bad SQL: Code %d Name %q Message %q, want 62, SYNTAX_ERROR, a syntax error", e.Code, e.Name, e.Message)
	}
	err = s.Exec(ctx, "CREATE TABLE nope (x UInt8) ENGINE = NoSuchEngine")
	if !errors.As(err, &e) || e.Name != "UNKNOWN_STORAGE" {
		t.Errorf("unknown engine: error %v, want UNKNOWN_STORAGE", err)
	}
	_, err = s.Query(ctx, "SELECT * FROM no_such_table")
	if !errors.As(err, &e) || e.Name != "UNKNOWN_TABLE" {
		t.Errorf("unknown table: error %v, want UNKNOWN_TABLE", err)
	}
	// The session goes on.
	if r := mustQuery(t, s, "SELECT 1 + 1 AS two"); r.Rows[0][0] != uint64(2) {
		t.Errorf("after the errors: SELECT 1 + 1 gave %v", r.Rows)
	}
}

// quote writes s as a ClickHouse string literal. NUL is escaped too: a query
// cannot hold one (see Session.Exec).
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`).Replace(s) + "'"
}

func TestStringRoundTrip(t *testing.T) {
	s := Open(t)
	values := []string{
		"",
		`it's "quoted"`,
		"line one\nline two\r\n",
		`back\slash \n not a newline \\ two`,
		"tab\there, NUL\x00, bell\a",
		"ünïcödé 🙂 <script>&amp;",
	}
	mustExec(t, s, `CREATE TABLE strs (i UInt8, v String, a Array(String)) ENGINE = MergeTree ORDER BY i`)
	var rows []string
	for i, v := range values {
		rows = append(rows, fmt.Sprintf("(%d, %s, [%s, 'x'])", i, quote(v), quote(v)))
	}
	mustExec(t, s, "INSERT INTO strs VALUES "+strings.Join(rows, ", "))
	r := mustQuery(t, s, `SELECT v, a, length(v) FROM strs ORDER BY i`)
	if len(r.Rows) != len(values) {
		t.Fatalf("%d rows back, want %d", len(r.Rows), len(values))
	}
	for i, v := range values {
		want := []any{v, []any{v, "x"}, uint64(len(v))}
		if !reflect.DeepEqual(r.Rows[i], want) {
			t.Errorf("value %d: got %q, want %q", i, r.Rows[i], want)
		}
	}
}

func TestExactNumbers(t *testing.T) {
	s := Open(t)
	r := mustQuery(t, s, `SELECT
		18446744073709551615::UInt64 AS u64,
		-9223372036854775808::Int64 AS i64,
		0.1::Float64 AS f,
		toDecimal128('12345678901234567890.123456789', 9) AS d,
		340282366920938463463374607431768211455::UInt128 AS u128,
		true AS b,
		NULL::Nullable(Int32) AS n,
		[1, NULL, 3]::Array(Nullable(UInt64)) AS a,
		toLowCardinality('lc') AS lc`)
	want := []any{
		uint64(18446744073709551615),
		int64(-9223372036854775808),
		0.1,
		json.Number("12345678901234567890.123456789"),
		json.Number("340282366920938463463374607431768211455"),
		true,
		nil,
		[]any{uint64(1), nil, uint64(3)},
		"lc",
	}
	if !reflect.DeepEqual(r.Rows, [][]any{want}) {
		t.Errorf("got\n%#v\nwant\n%#v", r.Rows, [][]any{want})
	}
	// Quoted 64-bit integers decode the same.
	r = mustQuery(t, s, `SELECT 18446744073709551615::UInt64 AS u64 SETTINGS output_format_json_quote_64bit_integers = 1`)
	if r.Rows[0][0] != uint64(18446744073709551615) {
		t.Errorf("quoted UInt64: got %#v", r.Rows[0][0])
	}
}

// Each Session has a database of its own: the same table name in two of them
// holds different rows, and statements without a result decode as empty.
func TestSessionsAreIndependent(t *testing.T) {
	a, b := Open(t), Open(t)
	if a.Database() == b.Database() {
		t.Fatalf("two Sessions share database %s", a.Database())
	}
	ctx := context.Background()
	for i, s := range []*Session{a, b} {
		if err := s.Exec(ctx, fmt.Sprintf("CREATE TABLE t (x UInt8) ENGINE = Memory; INSERT INTO t VALUES (%d)", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range []*Session{a, b} {
		r := mustQuery(t, s, "SELECT currentDatabase(), x FROM t")
		if want := []any{s.Database(), uint64(i)}; !reflect.DeepEqual(r.Rows, [][]any{want}) {
			t.Errorf("session %d: %v, want %v", i, r.Rows, want)
		}
	}
	// A USE lasts one call.
	if err := a.Exec(ctx, "USE system"); err != nil {
		t.Fatal(err)
	}
	if r := mustQuery(t, a, "SELECT currentDatabase()"); r.Rows[0][0] != a.Database() {
		t.Errorf("after USE system: current database %v, want %s", r.Rows[0][0], a.Database())
	}
	r, err := a.Query(ctx, "DROP TABLE t")
	if err != nil || len(r.Columns) != 0 || len(r.Rows) != 0 {
		t.Errorf("DROP TABLE through Query: %v, %v; want an empty Result", r, err)
	}
	if _, err := a.Query(ctx, "SELECT 1; SELECT 2"); err == nil {
		t.Errorf("Query of two SELECTs: no error")
	}
	if err := a.Exec(ctx, "SELECT 1\x00; DROP DATABASE "+a.Database()); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("a query with a NUL byte: error %v, want one that names the NUL", err)
	}
}

// Parallel tests queue for the one session; each sees its own database.
func TestParallel(t *testing.T) {
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			s := Open(t)
			mustExec(t, s, fmt.Sprintf("CREATE TABLE t ENGINE = MergeTree ORDER BY n AS SELECT number AS n FROM numbers(%d)", 1000*(i+1)))
			r := mustQuery(t, s, "SELECT count() FROM t")
			if r.Rows[0][0] != uint64(1000*(i+1)) {
				t.Errorf("count %v, want %d", r.Rows[0][0], 1000*(i+1))
			}
		})
	}
}

func TestContextCanceled(t *testing.T) {
	s := Open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Exec(ctx, "SELECT 1"); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: error %v, want context.Canceled", err)
	}
	// A query that outlives its deadline: Query returns; the session goes on.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Query(ctx, "SELECT sleep(0.3)"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow query: error %v, want context.DeadlineExceeded", err)
	}
	if r := mustQuery(t, s, "SELECT 7 AS x"); r.Rows[0][0] != uint64(7) {
		t.Errorf("after the timeout: %v", r.Rows)
	}
}

// fakeTB stands in for a test to see what Open does without the library.
type fakeTB struct {
	testing.TB
	mu      sync.Mutex
	skipped string
	failed  string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skip(args ...any) {
	f.mu.Lock()
	f.skipped = fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Fatal(args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestMissingLibrary(t *testing.T) {
	t.Setenv(LibEnv, "/nonexistent/libchdb.so")
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := &fakeTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Open(f)
			t.Errorf("CI=%q: Open returned without the library", ci)
		}()
		<-done
		got, other := f.skipped, f.failed
		if ci != "" {
			got, other = f.failed, f.skipped
		}
		if !strings.Contains(got, "scripts/fetch-chdb.sh") || !strings.Contains(got, "/nonexistent/libchdb.so") || other != "" {
			t.Errorf("CI=%q: skipped %q, failed %q; want one of them, naming the path and scripts/fetch-chdb.sh", ci, f.skipped, f.failed)
		}
	}
}

func TestLibPathFallsBackToCache(t *testing.T) {
	t.Setenv(LibEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/cache")
	got, err := LibPath()
	if want := "/cache/replaywatch/chdb/" + PinnedVersion + "/libchdb.so"; err != nil || got != want {
		t.Errorf("LibPath() = %q, %v; want %q", got, err, want)
	}
}

// PinnedVersion names the folder that scripts/fetch-chdb.sh fills.
func TestPinnedVersionMatchesFetchScript(t *testing.T) {
	script, err := os.ReadFile("../../scripts/fetch-chdb.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CHDB_VERSION=(\S+)$`).FindSubmatch(script)
	if m == nil || string(m[1]) != PinnedVersion {
		t.Errorf("scripts/fetch-chdb.sh pins %q, chdbtest.PinnedVersion is %q", m, PinnedVersion)
	}
}

func TestErrorParsing(t *testing.T) {
	for msg, want := range map[string]Error{
		"Code: 60. DB::Exception: Unknown table expression identifier 'x' in scope SELECT * FROM x. (UNKNOWN_TABLE)\n": {60, "UNKNOWN_TABLE", ""},
		"Code: 62. DB::Exception: Syntax error: failed at position 1. (SYNTAX_ERROR) (version 26.7.2.1)":               {62, "SYNTAX_ERROR", ""},
		"could not create a chdb connection": {0, "", ""},
	} {
		e := newError(msg)
		if e.Code != want.Code || e.Name != want.Name || e.Message != strings.TrimRight(msg, "\n") {
			t.Errorf("newError(%q) = %+v, want code %d name %q", msg, e, want.Code, want.Name)
		}
	}
}

func TestDecodeResultRejectsMismatch(t *testing.T) {
	for _, out := range []string{
		`{"meta": [{"name": "x", "type": "UInt8"}], "data": [["nope"]]}`,
		`{"meta": [{"name": "x", "type": "UInt8"}], "data": [[1, 2]]}`,
		`{"meta": [{"name": "x", "type": "Array(UInt8)"}], "data": [[1]]}`,
		`{"meta": [{"name": "x", "type": "Int8"}], "data": [[300]]}`,
		`{"meta": [`,
	} {
		if r, err := decodeResult([]byte(out)); err == nil {
			t.Errorf("decodeResult(%s) = %v, want an error", out, r)
		}
	}
}

func mustExec(t *testing.T, s *Session, query string) {
	t.Helper()
	if err := s.Exec(context.Background(), query); err != nil {
		t.Fatalf("%s\n%v", query, err)
	}
}

func mustQuery(t *testing.T, s *Session, query string) *Result {
	t.Helper()
	r, err := s.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s\n%v", query, err)
	}
	if len(r.Rows) == 0 {
		t.Fatalf("%s\nno rows", query)
	}
	return r
}
