package clickhouse

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/test/chtest"
)

// These tests run against real clickhouse-server processes: Debian's 18.16,
// which scripts/test.sh installs (chtest starts them on free ports with data
// under a temporary folder).

func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) }

// connect opens a Conn to database on srv.
func connect(t *testing.T, srv *chtest.Server, database, cluster string) *Conn {
	t.Helper()
	c, err := Connect(context.Background(), ConnectOptions{DSN: srv.DSN(database), Cluster: cluster, RetentionDays: 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fastConfig retries and flushes quickly: tests wait on them.
func fastConfig(t *testing.T) Config {
	return Config{SpoolDir: t.TempDir(), Node: "node1", Source: "src.pcap", RetryBackoff: 20 * time.Millisecond,
		MaxRetryBackoff: 200 * time.Millisecond, FlushInterval: 50 * time.Millisecond, CloseTimeout: 20 * time.Second, MaxRetries: 2,
		InsertTimeout: 10 * time.Second}
}

func feed(s *Sink, recs []any) {
	for _, rec := range recs {
		switch r := rec.(type) {
		case *detector.Violation:
			s.Violation(r)
		case *detector.ResumeAttempt:
			s.Resume(r)
		case *detector.SessionSummary:
			s.Session(r)
		case *detector.UnknownOutcome:
			s.UnknownOutcome(r)
		case *detector.Unverifiable:
			s.Unverifiable(r)
		case *detector.StreamEvent:
			s.StreamEvent(r)
		}
	}
}

func count(t *testing.T, c *Conn, query string) int {
	t.Helper()
	rows, err := c.QueryStrings(context.Background(), "SELECT toString(("+query+"))")
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	var n int
	fmt.Sscan(rows[0][0], &n)
	return n
}

// TestMigrationsOnDebianServer applies the schema on 18.16 from empty and
// from every earlier version, with rows written at the old version, and
// checks the columns are exactly what the sink inserts.
func TestMigrationsOnDebianServer(t *testing.T) {
	srv := chtest.Shared(t)
	ctx := context.Background()
	for from := 0; from < SchemaVersion; from++ {
		t.Run(fmt.Sprintf("from_v%d", from), func(t *testing.T) {
			c := connect(t, srv, chtest.NewDatabase(t, srv), "")
			d := c.Dialect()
			if d.Version.Major != 18 {
				t.Logf("server is ClickHouse %s (these tests are meant for Debian's 18.16)", d.Version)
			}
			if from > 0 {
				if _, err := Apply(ctx, c, d, from, "test"); err != nil {
					t.Fatal(err)
				}
				s, err := newSink(c, from, fastConfig(t))
				if err != nil {
					t.Fatal(err)
				}
				var old []any
				for _, rec := range sampleRecords("OLD", time.Now()) {
					if _, ok := rec.(*detector.StreamEvent); !ok || from >= streamEventsTable.since {
						old = append(old, rec)
					}
				}
				feed(s, old)
				if r := s.Close(context.Background()); r.LeftRows != 0 {
					t.Fatalf("writing at v%d: %s", from, r)
				}
			}
			if err := CheckSchema(ctx, c, d); err == nil {
				t.Fatal("CheckSchema passed before the migration")
			}
			applied, err := Apply(ctx, c, d, 0, "test")
			if err != nil || len(applied) != SchemaVersion-from {
				t.Fatalf("apply from v%d: %v %v", from, applied, err)
			}
			if again, err := Apply(ctx, c, d, 0, "test"); err != nil || len(again) != 0 {
				t.Fatalf("second apply: %v %v", again, err)
			}
			if err := CheckSchema(ctx, c, d); err != nil {
				t.Fatal(err)
			}
			checkColumns(ctx, t, c, d, d.storageTable)
			if from > 0 {
				if n := count(t, c, "SELECT count() FROM "+d.Database+".unknown_outcomes WHERE session_id = 'OLD' AND arguments = ''"); n != 1 {
					t.Errorf("row written at v%d: %d after the migration", from, n)
				}
				// Before version 4 no row said which input it came from.
				for _, tb := range tables {
					if tb.since <= from {
						if n := count(t, c, "SELECT count() FROM "+d.Database+"."+tb.name+" FINAL WHERE session_id = 'OLD' AND source_kind = ''"); n != 1 {
							t.Errorf("%s: row written at v%d: %d with an empty source_kind after the migration", tb.name, from, n)
						}
					}
				}
			}
			// Rows written now carry their source_kind, in the same parts
			// as the old rows once merged (an added LowCardinality column
			// on 18.16 included).
			s, err := New(ctx, c, fastConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			recs := sampleRecords("NEW", time.Now())
			feed(s, recs)
			if r := s.Close(context.Background()); r.LeftRows != 0 {
				t.Fatalf("writing at v%d: %s", SchemaVersion, r)
			}
			for _, rec := range recs {
				tb, want := recordSource(rec)
				if err := c.Exec(ctx, "OPTIMIZE TABLE "+d.Database+"."+tb.name+" FINAL"); err != nil {
					t.Fatal(err)
				}
				rows, err := c.QueryStrings(ctx, "SELECT source_kind FROM "+d.Database+"."+tb.name+" WHERE session_id = 'NEW'")
				if err != nil || len(rows) != 1 || rows[0][0] != want {
					t.Errorf("%s: source_kind of a row written at v%d: %q %v, want %q", tb.name, SchemaVersion, rows, err, want)
				}
			}
		})
	}
}

// TestSpoolOfAnOlderSchemaAfterUpgrade: rows an earlier build spooled at
// schema version 3 (no source_kind) are sent by this build once the
// database is migrated, next to rows of its own; the old rows read back
// with an empty source_kind.
func TestSpoolOfAnOlderSchemaAfterUpgrade(t *testing.T) {
	srv := chtest.Shared(t)
	c := connect(t, srv, chtest.NewDatabase(t, srv), "")
	d := c.Dialect()
	ctx := context.Background()
	if _, err := Apply(ctx, c, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(t)
	old := sourceKindColumn.since - 1
	sp, err := openSpool(cfg.SpoolDir, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	batches := map[*table]*batch{}
	for _, rec := range sampleRecords("OLD", time.Now()) {
		appendRecord(batches, old, rec, false)
	}
	for _, tb := range tables {
		if err := sp.put(batches[tb]); err != nil {
			t.Fatal(err)
		}
	}
	sp.close() // the earlier build's run ends with its rows spooled
	s, err := New(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs := sampleRecords("NEW", time.Now())
	feed(s, recs)
	if r := s.Close(context.Background()); r.LeftRows != 0 || r.Replayed != int64(len(tables)) || r.Written != int64(len(tables)+len(recs)) {
		t.Fatalf("report: %s (%+v)", r, r)
	}
	for _, rec := range recs {
		tb, want := recordSource(rec)
		rows, err := c.QueryStrings(ctx, "SELECT session_id, source_kind FROM "+d.Database+"."+tb.name+" FINAL ORDER BY session_id")
		if err != nil || len(rows) != 2 || rows[0][0] != "NEW" || rows[0][1] != want || rows[1][0] != "OLD" || rows[1][1] != "" {
			t.Errorf("%s: %q %v; want NEW with source_kind %q and OLD (spooled at v%d) with none", tb.name, rows, err, want, old)
		}
	}
}

// hostileRecords carry quotes, newlines, backslashes, invalid UTF-8 and a
// 1 MB value in session ids and evidence.
func hostileRecords(at time.Time) []any {
	big := strings.Repeat("x'\"\n\\", 1<<20/5)
	recs := sampleRecords("S'\"\n\\\xff\xfe;DROP TABLE violations;--", at)
	v := recs[0].(*detector.Violation)
	v.Evidence[0].Detail = big + "\xff"
	v.Explanation = big
	recs = append(recs, sampleRecords(big, at.Add(time.Second))...)
	return recs
}

// TestRoundTripEveryRecordType writes every record type with hostile
// strings through the sink and reads every column back.
func TestRoundTripEveryRecordType(t *testing.T) {
	srv := chtest.Shared(t)
	c := connect(t, srv, chtest.NewDatabase(t, srv), "")
	d := c.Dialect()
	ctx := context.Background()
	if _, err := Apply(ctx, c, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	recs := hostileRecords(at)
	cfg := fastConfig(t)
	cfg.StoreArguments = true
	s, err := New(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	feed(s, recs)
	if r := s.Close(context.Background()); r.Written != int64(len(recs)) || r.LeftRows != 0 {
		t.Fatalf("report: %s (want %d rows)", r, len(recs))
	}
	want := map[*table]*batch{}
	for _, rec := range recs {
		appendRecord(want, SchemaVersion, rec, true)
	}
	conn := chtest.Conn(t, srv, d.Database)
	for _, tb := range tables {
		w := want[tb]
		cols := tb.insertColumns(SchemaVersion)
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s FROM %s.%s FINAL ORDER BY session_id", tb.columnList(SchemaVersion), d.Database, tb.name))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for rows.Next() {
			ptrs := make([]any, len(cols))
			for i, col := range cols {
				ptrs[i] = reflect.New(col.typ.goType()).Interface()
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			// The first column (id; session_id for sessions) names the row.
			row := -1
			for r := 0; r < w.rows; r++ {
				if w.column(0).([]string)[r] == *ptrs[0].(*string) {
					row = r
				}
			}
			if row < 0 {
				t.Fatalf("%s: unexpected row", tb.name)
			}
			for i, col := range cols {
				gotV := reflect.ValueOf(ptrs[i]).Elem().Interface()
				wantV := reflect.ValueOf(w.column(i)).Index(row).Interface()
				if tm, ok := wantV.(time.Time); ok && !d.dateTime64() {
					wantV = tm.Truncate(time.Second) // DateTime before 20.1 has seconds
				}
				if tm, ok := gotV.(time.Time); ok {
					gotV = tm.UTC()
				}
				if !reflect.DeepEqual(gotV, wantV) {
					g, wv := fmt.Sprint(gotV), fmt.Sprint(wantV)
					t.Errorf("%s.%s: got %.60q (%d bytes), want %.60q (%d bytes)", tb.name, col.name, g, len(g), wv, len(wv))
				}
			}
			got++
		}
		rows.Close()
		if got != w.rows {
			t.Errorf("%s: %d rows back, %d written", tb.name, got, w.rows)
		}
	}
}

// TestDuplicatesCollapse writes the same records twice, as two runs over
// one capture do: the collapsed view has each once.
func TestDuplicatesCollapse(t *testing.T) {
	srv := chtest.Shared(t)
	c := connect(t, srv, chtest.NewDatabase(t, srv), "")
	d := c.Dialect()
	ctx := context.Background()
	if _, err := Apply(ctx, c, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	recs := sampleRecords("S1", time.Now())
	for run := range 2 {
		s, err := New(ctx, c, fastConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		feed(s, recs)
		if r := s.Close(context.Background()); r.Written != int64(len(recs)) {
			t.Fatalf("run %d: %s", run, r)
		}
	}
	for _, tb := range tables {
		if raw, final := count(t, c, "SELECT count() FROM "+d.Database+"."+tb.name), count(t, c, "SELECT count() FROM "+d.Database+"."+tb.name+" FINAL"); raw != 2 || final != 1 {
			t.Errorf("%s: %d rows, %d after FINAL; want 2 and 1", tb.name, raw, final)
		}
		if err := c.Exec(ctx, "OPTIMIZE TABLE "+d.Database+"."+tb.name+" FINAL"); err != nil {
			t.Fatal(err)
		}
		if raw := count(t, c, "SELECT count() FROM "+d.Database+"."+tb.name); raw != 1 {
			t.Errorf("%s: %d rows after a merge, want 1", tb.name, raw)
		}
	}
}

// manyEvents is n stream events of 50 sessions.
func manyEvents(n int) []*detector.StreamEvent {
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	evs := make([]*detector.StreamEvent, n)
	for i := range evs {
		evs[i] = &detector.StreamEvent{ID: fmt.Sprintf("ev%07d", i), Time: base.Add(time.Duration(i) * time.Millisecond),
			SessionID: fmt.Sprintf("S%02d", i%50), StreamID: "0", EventID: fmt.Sprintf("0_%d", i/50), Position: int32(i / 50), Delivery: 1,
			Method: "notifications/progress", Messages: 1, DataBytes: 100, DataHash: "0123456789abcdef", Client: "10.0.0.1:5000", Server: "10.0.0.2:8080"}
	}
	return evs
}

// TestOutageExactlyOnce stops the server in the middle of a stream of
// writes and starts it again: every row arrives, exactly once.
func TestOutageExactlyOnce(t *testing.T) {
	srv := chtest.Start(t, chtest.Options{})
	db := chtest.NewDatabase(t, srv)
	c := connect(t, srv, db, "")
	ctx := context.Background()
	if _, err := Apply(ctx, c, c.Dialect(), 0, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(t)
	cfg.BatchRows = 500
	cfg.CloseTimeout = time.Minute
	s, err := New(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	evs := manyEvents(20000)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, e := range evs {
			s.StreamEvent(e)
			if i%1000 == 0 {
				time.Sleep(20 * time.Millisecond) // a live stream, not one burst
			}
		}
	}()
	time.Sleep(150 * time.Millisecond)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.sp.stats().rows > 0 }) // the outage was felt
	time.Sleep(200 * time.Millisecond)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	r := s.Close(context.Background())
	if r.LeftRows != 0 || r.Spooled == 0 {
		t.Fatalf("report %+v: want a spool used and emptied", r)
	}
	table := db + ".stream_events"
	final, distinct, raw := count(t, c, "SELECT count() FROM "+table+" FINAL"), count(t, c, "SELECT uniqExact(id) FROM "+table), count(t, c, "SELECT count() FROM "+table)
	if final != len(evs) || distinct != len(evs) {
		t.Fatalf("after the outage: %d rows collapsed, %d distinct ids; want %d", final, distinct, len(evs))
	}
	t.Logf("%d rows, %d spooled during the outage, %d stored copies before merging (a retry of an insert whose answer was lost stores twice)", final, r.Spooled, raw)
}

// TestRestartWithSpoolOnServer: a run ends while the server is down, leaving its
// rows in the spool; the next run (a new sink on the same spool, as a new
// process would open it) sends them, once.
func TestRestartWithSpoolOnServer(t *testing.T) {
	srv := chtest.Start(t, chtest.Options{})
	db := chtest.NewDatabase(t, srv)
	c := connect(t, srv, db, "")
	ctx := context.Background()
	if _, err := Apply(ctx, c, c.Dialect(), 0, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(t)
	cfg.CloseTimeout = 100 * time.Millisecond
	s, err := New(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	evs := manyEvents(3000)
	for _, e := range evs[:2000] {
		s.StreamEvent(e)
	}
	if r := s.Close(context.Background()); r.LeftRows != 2000 || r.Written != 0 {
		t.Fatalf("first run: %+v", r)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	c2 := connect(t, srv, db, "")
	s2, err := New(ctx, c2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs[2000:] {
		s2.StreamEvent(e)
	}
	r := s2.Close(context.Background())
	if r.LeftRows != 0 || r.Replayed != 2000 || r.Written != 3000 {
		t.Fatalf("second run: %+v", r)
	}
	table := db + ".stream_events"
	if raw, distinct := count(t, c2, "SELECT count() FROM "+table), count(t, c2, "SELECT uniqExact(id) FROM "+table); raw != 3000 || distinct != 3000 {
		t.Fatalf("%d rows, %d distinct ids; want 3000 of each", raw, distinct)
	}
}

// TestRetentionDropsOldPartitions: on a server without TTL, partitions
// older than the retention are dropped, newer ones kept.
func TestRetentionDropsOldPartitions(t *testing.T) {
	srv := chtest.Shared(t)
	c := connect(t, srv, chtest.NewDatabase(t, srv), "")
	d := c.Dialect()
	ctx := context.Background()
	if d.HasTTL() {
		t.Skipf("ClickHouse %s has TTL; partition dropping is for older servers", d.Version)
	}
	if _, err := Apply(ctx, c, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	s, _ := New(ctx, c, fastConfig(t))
	feed(s, sampleRecords("OLD", now.AddDate(0, 0, -40)))
	feed(s, sampleRecords("NEW", now.Add(-time.Hour)))
	s.Close(context.Background())
	dropped, err := DropExpiredPartitions(ctx, c, d, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) < len(tables)-1 { // sessions partition by first_seen
		t.Errorf("dropped %v", dropped)
	}
	if n := count(t, c, "SELECT count() FROM "+d.Database+".violations WHERE session_id = 'OLD'"); n != 0 {
		t.Errorf("old rows kept: %d", n)
	}
	if n := count(t, c, "SELECT count() FROM "+d.Database+".violations WHERE session_id = 'NEW'"); n != 1 {
		t.Errorf("new rows: %d", n)
	}
}

// TestDistributedPath runs the cluster schema on two shards (two servers
// and ZooKeeper): rows go in through the Distributed tables, each session's
// rows land on one shard, both shards get some, and the collapsed view over
// the cluster has every row once.
func TestDistributedPath(t *testing.T) {
	cl := chtest.StartCluster(t, "rw", 2)
	ctx := context.Background()
	c := connect(t, cl.Servers[0], "rwc", "rw")
	d := c.Dialect()
	if _, err := Apply(ctx, c, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	if again, err := Apply(ctx, c, d, 0, "test"); err != nil || len(again) != 0 {
		t.Fatalf("second apply: %v %v", again, err)
	}
	checkColumns(ctx, t, c, d, d.storageTable)
	checkColumns(ctx, t, c, d, func(n string) string { return n })
	var recs []any
	for i := range 100 {
		recs = append(recs, sampleRecords(fmt.Sprintf("S%03d", i), time.Now())...)
	}
	for range 2 { // twice: duplicates must collapse across the cluster
		s, err := New(ctx, c, fastConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		feed(s, recs)
		if r := s.Close(context.Background()); r.Written != int64(len(recs)) {
			t.Fatalf("%s", r)
		}
	}
	for _, tb := range tables {
		if n := count(t, c, "SELECT count() FROM rwc."+tb.name+" FINAL"); n != 100 {
			t.Errorf("%s over the cluster: %d rows after FINAL, want 100", tb.name, n)
		}
	}
	// Each shard's local tables: some sessions each, no session on both,
	// and a session's rows of every table on the same shard.
	shardOf := map[string]int{}
	for i, srv := range cl.Servers {
		local := connect(t, srv, "rwc", "")
		n := 0
		for _, tb := range tables {
			rows, err := local.QueryStrings(ctx, "SELECT DISTINCT session_id FROM rwc."+tb.name+"_local")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if prev, ok := shardOf[r[0]]; ok && prev != i {
					t.Errorf("session %s has rows on shards %d and %d", r[0], prev+1, i+1)
				}
				shardOf[r[0]] = i
			}
			n += len(rows)
		}
		if n == 0 {
			t.Errorf("shard %d got no rows", i+1)
		}
	}
	if len(shardOf) != 100 {
		t.Errorf("%d sessions found on the shards, want 100", len(shardOf))
	}
}
