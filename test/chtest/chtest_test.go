package chtest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/replaywatch/replaywatch/test/chtest"
)

func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestServerAnswers(t *testing.T) {
	t.Parallel()
	srv := chtest.Start(t, chtest.Options{})

	conn := chtest.Conn(t, srv, "")
	v, err := conn.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	var version string
	if err := conn.QueryRow(ctx(t), "SELECT version()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("server %s, version() %s", v, version)
	if version == "" || !strings.HasPrefix(version, fmt.Sprint(v.Version.Major)) {
		t.Errorf("version() = %q, hello said %s", version, v)
	}

	out, err := srv.Client(ctx(t), "SELECT version()", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != version {
		t.Errorf("clickhouse-client: version() = %q, clickhouse-go said %q", got, version)
	}

	// Client with stdin: the way a benchmark inserts a file.
	if _, err := srv.Client(ctx(t), "CREATE TABLE default.lines (n UInt32, s String) ENGINE = Memory", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client(ctx(t), "INSERT INTO default.lines FORMAT JSONEachRow",
		strings.NewReader("{\"n\":1,\"s\":\"a\"}\n{\"n\":2,\"s\":\"b\"}\n")); err != nil {
		t.Fatal(err)
	}
	out, err = srv.Client(ctx(t), "SELECT sum(n), groupArray(s) FROM default.lines", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "3\t['a','b']" {
		t.Errorf("after inserting through stdin: %q", got)
	}

	if _, err := srv.Client(ctx(t), "SELECT no_such_function()", nil); err == nil || !strings.Contains(err.Error(), "no_such_function") {
		t.Errorf("bad query: error %v, want the server's message", err)
	}
	if want := "clickhouse://" + srv.Addr + "/db1"; srv.DSN("db1") != want {
		t.Errorf("DSN = %q, want %q", srv.DSN("db1"), want)
	}
	if opts, err := clickhouse.ParseDSN(srv.DSN("default")); err != nil || opts.Addr[0] != srv.Addr || opts.Auth.Database != "default" {
		t.Errorf("ParseDSN(%q) = %+v, %v", srv.DSN("default"), opts, err)
	}
}

func count(t *testing.T, srv *chtest.Server, query string) uint64 {
	t.Helper()
	conn := chtest.Conn(t, srv, "")
	var n uint64
	if err := conn.QueryRow(ctx(t), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	srv := chtest.Start(t, chtest.Options{})
	addr := srv.Addr
	if err := srv.Exec(ctx(t),
		"CREATE TABLE default.events (id UInt64, s String) ENGINE = MergeTree ORDER BY id",
		"INSERT INTO default.events SELECT number, toString(number) FROM system.numbers LIMIT 1000",
	); err != nil {
		t.Fatal(err)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if srv.Running() {
		t.Fatal("running after Stop")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if srv.Addr != addr {
		t.Errorf("address changed across restart: %s -> %s", addr, srv.Addr)
	}
	if n := count(t, srv, "SELECT count() FROM default.events"); n != 1000 {
		t.Errorf("after stop and start: %d rows, want 1000", n)
	}

	// A crash (SIGKILL) loses nothing that was acknowledged.
	if err := srv.Exec(ctx(t), "INSERT INTO default.events SELECT number + 1000, '' FROM system.numbers LIMIT 10"); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, srv, "SELECT count() FROM default.events"); n != 1010 {
		t.Errorf("after kill and start: %d rows, want 1010", n)
	}
	if err := srv.Start(); err == nil {
		t.Error("Start of a running server succeeded")
	}
}

func TestStartFailureShowsErrLog(t *testing.T) {
	t.Parallel()
	srv := chtest.Start(t, chtest.Options{})
	// A second server on the same native port cannot bind it.
	_, err := chtest.NewServer(t.TempDir(), chtest.Options{TCPPort: srv.TCPPort, StartTimeout: 20 * time.Second})
	if err == nil {
		t.Fatal("second server on a taken port started")
	}
	t.Logf("expected error: %v", err)
	if !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
		t.Errorf("error does not show the server's log: %v", err)
	}
}

func TestSharedServerDatabases(t *testing.T) {
	t.Parallel()
	for i := range 2 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			srv := chtest.Shared(t)
			db := chtest.NewDatabase(t, srv)
			conn := chtest.Conn(t, srv, db)
			// Same table name in each test's own database.
			if err := conn.Exec(ctx(t), "CREATE TABLE t (x UInt8) ENGINE = Memory"); err != nil {
				t.Fatal(err)
			}
			// Not Exec("INSERT ... VALUES (...)"): an 18.16 server waits
			// for data blocks after inline VALUES and the call hangs.
			if err := conn.Exec(ctx(t), fmt.Sprintf("INSERT INTO t SELECT %d", i)); err != nil {
				t.Fatal(err)
			}
			if n := count(t, srv, "SELECT count() FROM `"+db+"`.t"); n != 1 {
				t.Errorf("%s.t: %d rows, want 1", db, n)
			}
		})
	}
	first := chtest.Shared(t)
	if again := chtest.Shared(t); again != first {
		t.Error("Shared started two servers")
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := chtest.StartCluster(t, "c", 2)
	srv := c.Servers[0]
	conn := chtest.Conn(t, srv, "")
	for _, q := range []string{
		"CREATE DATABASE d ON CLUSTER c",
		`CREATE TABLE d.events_local ON CLUSTER c (
			session_id String,
			ts DateTime,
			version UInt64
		) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/d/events', '{replica}', version)
		ORDER BY (session_id, ts)`,
		"CREATE TABLE d.events ON CLUSTER c AS d.events_local ENGINE = Distributed(c, d, events_local, sipHash64(session_id))",
	} {
		if err := conn.Exec(ctx(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// Through the Distributed table with clickhouse-go's batch insert;
	// insert_distributed_sync makes the insert reach the shards before
	// it returns. With 18.16 the batch needs the column list: without one
	// the driver sees a header block with no columns ("expected 0
	// arguments").
	ictx := clickhouse.Context(ctx(t), clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	batch, err := conn.PrepareBatch(ictx, "INSERT INTO d.events (session_id, ts, version)")
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 100 {
		if err := batch.Append(fmt.Sprintf("session-%03d", i), ts, uint64(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}

	var total uint64
	for i, s := range c.Servers {
		n := count(t, s, "SELECT count() FROM d.events_local")
		t.Logf("shard %d: %d rows", i+1, n)
		if n == 0 {
			t.Errorf("shard %d got no rows", i+1)
		}
		total += n
	}
	if total != 100 {
		t.Errorf("shards hold %d rows, want 100", total)
	}
	for i, s := range c.Servers {
		if n := count(t, s, "SELECT count() FROM d.events"); n != 100 {
			t.Errorf("Distributed table read on shard %d: %d rows, want 100", i+1, n)
		}
	}
	// Both servers really use the one ZooKeeper.
	if n := count(t, c.Servers[1], "SELECT count() FROM system.zookeeper WHERE path = '/clickhouse/tables'"); n != 2 {
		t.Errorf("system.zookeeper /clickhouse/tables has %d children, want 2 (one per shard)", n)
	}
}
