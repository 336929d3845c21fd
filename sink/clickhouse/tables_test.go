package clickhouse

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/detector"
)

var update = flag.Bool("update", false, "rewrite the golden DDL files in testdata")

// sampleRecords is one record of every table, with every field set; the
// sources vary so that a column read back from the wrong record shows.
func sampleRecords(session string, at time.Time) []any {
	return []any{
		&detector.Violation{ID: "v-" + session, Kind: detector.KindSessionSwap, Severity: detector.SeverityCritical, Time: at,
			SessionID: session, NewSessionID: session + "-new", LastEventID: "0_4", FirstEventID: "0_5", StreamID: "0",
			ProtocolVersion: "2025-11-25", Client: "10.0.0.1:5000", Server: "10.0.0.2:8080", JSONRPCIDs: []string{"2", `"a"`},
			Tool: "slow_write", Explanation: "swapped", Confidence: "same connection", Source: detector.SourcePcap,
			Evidence: []detector.Evidence{{Time: at, Conn: "10.0.0.1:5000->10.0.0.2:8080", Exchange: 3, What: "response header", Detail: "Mcp-Session-Id: " + session}}},
		&detector.ResumeAttempt{ID: "r-" + session, Time: at, SessionID: session, ResponseSession: session, LastEventID: "0_4",
			FirstEventID: "0_5", StreamID: "0", Status: 200, Outcome: detector.ResumeViolated, Reason: "replayed", ProtocolVersion: "2025-11-25",
			Client: "10.0.0.1:5001", Server: "10.0.0.2:8080", Replayed: 3, ViolationIDs: []string{"v-" + session}, Source: detector.SourceLive},
		&detector.SessionSummary{SessionID: session, ProtocolVersion: "2025-11-25", Client: "10.0.0.1:5000", Server: "10.0.0.2:8080",
			FirstSeen: at.Add(-time.Minute), LastSeen: at, StartSeen: true, Requests: 7, Events: 12, Streams: 2, Resumes: 1, Violations: 1,
			Ended: "404", PreviousSession: "S0", LinkConfidence: "same client address", Source: detector.SourceOTLP},
		&detector.UnknownOutcome{ID: "u-" + session, Time: at, SessionID: session, JSONRPCID: "2", Method: "tools/call", Tool: "slow_write",
			ArgsHash: strings.Repeat("ab", 32), Arguments: `{"path":"/tmp/x"}`, CalledAt: at.Add(-time.Second), Client: "10.0.0.1:5000",
			Server: "10.0.0.2:8080", Reason: "session lost", ReissuedInSession: session + "-new", Source: detector.SourceLive},
		&detector.Unverifiable{ID: "x-" + session, Time: at, SessionID: session, Client: "10.0.0.1:5000", Server: "10.0.0.2:8080",
			Reason: "capture gap", Check: "resume", Source: detector.SourceOTLP},
		&detector.StreamEvent{ID: "e-" + session, Time: at, SessionID: session, StreamID: "0", EventID: "0_5", Position: 5, Delivery: 2,
			Resumed: true, Method: "notifications/progress", JSONRPCID: "", Messages: 1, DataBytes: 120, DataHash: "0123456789abcdef",
			Client: "10.0.0.1:5001", Server: "10.0.0.2:8080", Source: detector.SourcePcap},
	}
}

// appendRecord appends any record to the batch of its table.
func appendRecord(batches map[*table]*batch, version int, rec any, storeArgs bool) {
	get := func(t *table) *batch {
		if batches[t] == nil {
			batches[t] = newBatch(t, version, 4)
		}
		return batches[t]
	}
	switch r := rec.(type) {
	case *detector.Violation:
		appendViolation(get(violationsTable), r, "node1", "src.pcap")
	case *detector.ResumeAttempt:
		appendResume(get(resumesTable), r, "node1", "src.pcap")
	case *detector.SessionSummary:
		appendSession(get(sessionsTable), r, "node1", "src.pcap")
	case *detector.UnknownOutcome:
		appendUnknownOutcome(get(unknownOutcomesTable), r, storeArgs, "node1", "src.pcap")
	case *detector.Unverifiable:
		appendUnverifiable(get(unverifiableTable), r, "node1", "src.pcap")
	case *detector.StreamEvent:
		appendStreamEvent(get(streamEventsTable), r, "node1", "src.pcap")
	default:
		panic(rec)
	}
}

// TestAppendersMatchColumns checks, for every table and schema version,
// that the appender writes one value per declared column, of the declared
// type: the two lists are kept by hand.
func TestAppendersMatchColumns(t *testing.T) {
	for v := 1; v <= SchemaVersion; v++ {
		batches := map[*table]*batch{}
		for _, rec := range sampleRecords("S1", time.Now()) {
			appendRecord(batches, v, rec, true)
		}
		for _, tb := range tables {
			if tb.since > v {
				continue
			}
			b := batches[tb]
			if b == nil || b.rows != 1 {
				t.Fatalf("v%d %s: no row appended", v, tb.name)
			}
			cols := tb.insertColumns(v)
			if len(b.cols) != len(cols) {
				t.Fatalf("v%d %s: %d values, %d columns", v, tb.name, len(b.cols), len(cols))
			}
			for i, c := range cols {
				if got := reflect.TypeOf(b.column(i)).Elem(); got != c.typ.goType() {
					t.Errorf("v%d %s.%s: appended %v, column wants %v", v, tb.name, c.name, got, c.typ.goType())
				}
			}
			if err := b.check(); err != nil {
				t.Error(err)
			}
		}
	}
}

func TestArgumentsStoredOnlyOnOptIn(t *testing.T) {
	u := sampleRecords("S1", time.Now())[3].(*detector.UnknownOutcome)
	for _, store := range []bool{false, true} {
		b := newBatch(unknownOutcomesTable, SchemaVersion, 1)
		appendUnknownOutcome(b, u, store, "n", "s")
		idx := -1
		for i, c := range unknownOutcomesTable.insertColumns(SchemaVersion) {
			if c.name == "arguments" {
				idx = i
			}
		}
		got := b.column(idx).([]string)[0]
		if want := map[bool]string{false: "", true: u.Arguments}[store]; got != want {
			t.Errorf("store=%v: arguments column %q, want %q", store, got, want)
		}
	}
}

// recordSource is a sample record's table and Source.
func recordSource(rec any) (*table, string) {
	switch r := rec.(type) {
	case *detector.Violation:
		return violationsTable, r.Source
	case *detector.ResumeAttempt:
		return resumesTable, r.Source
	case *detector.SessionSummary:
		return sessionsTable, r.Source
	case *detector.UnknownOutcome:
		return unknownOutcomesTable, r.Source
	case *detector.Unverifiable:
		return unverifiableTable, r.Source
	case *detector.StreamEvent:
		return streamEventsTable, r.Source
	}
	panic(rec)
}

// TestSourceKindColumn: from schema version 4 every table stores the
// record's Source in source_kind, last of the record columns (before the
// meta columns); a batch of an older version, as an earlier build spooled
// it, has no such column.
func TestSourceKindColumn(t *testing.T) {
	for _, v := range []int{sourceKindColumn.since - 1, SchemaVersion} {
		batches := map[*table]*batch{}
		recs := sampleRecords("S1", time.Now())
		for _, rec := range recs {
			appendRecord(batches, v, rec, false)
		}
		for _, rec := range recs {
			tb, want := recordSource(rec)
			cols := tb.insertColumns(v)
			idx := slices.IndexFunc(cols, func(c column) bool { return c.name == sourceKindColumn.name })
			if v < sourceKindColumn.since {
				if idx >= 0 {
					t.Errorf("v%d %s: has source_kind", v, tb.name)
				}
				continue
			}
			if idx != len(cols)-len(metaColumns)-1 {
				t.Errorf("v%d %s: source_kind is column %d of %d, want the last before the meta columns", v, tb.name, idx, len(cols))
				continue
			}
			if got := batches[tb].column(idx).([]string)[0]; got != want || got == "" {
				t.Errorf("v%d %s: source_kind %q, want the record's %q", v, tb.name, got, want)
			}
		}
	}
}

// fakeColumns is an Execer whose system.columns holds the "table.column"
// names set, for seeing what a migration runs without a server.
type fakeColumns map[string]bool

func (f fakeColumns) Exec(context.Context, string, ...any) error { return nil }

// QueryStrings answers hasColumn's query (database, table, column).
func (f fakeColumns) QueryStrings(_ context.Context, _ string, args ...any) ([][]string, error) {
	if f[args[1].(string)+"."+args[2].(string)] {
		return [][]string{{args[2].(string)}}, nil
	}
	return nil, nil
}

// TestSourceKindMigration pins what migration 4 runs on each dialect: an
// ADD COLUMN on every table, typed as the other LowCardinality columns are
// (String on an 18.16 cluster, whose DDL worker drops the experimental
// setting), after the last record column so that node and source still
// close the table; in cluster mode the Distributed tables are made again.
// Run again after a crash, when the columns are there, it does nothing.
func TestSourceKindMigration(t *testing.T) {
	after := map[string]string{"violations": "confidence", "resumes": "violation_ids", "sessions": "link_confidence",
		"unknown_outcomes": "arguments", "unverifiable": "check_name", "stream_events": "server"}
	for _, c := range []struct {
		name    string
		d       Dialect
		typ     string
		setting bool // the DDL runs with allow_experimental_low_cardinality_type
	}{
		{"18.16", Dialect{Version: Version{18, 16, 1}, Database: "rw"}, "LowCardinality(String)", true},
		{"18.16 cluster", Dialect{Version: Version{18, 16, 1}, Database: "rw", Cluster: "c"}, "String", false},
		{"26.7", Dialect{Version: Version{26, 7, 3}, Database: "rw"}, "LowCardinality(String)", false},
		{"26.7 cluster", Dialect{Version: Version{26, 7, 3}, Database: "rw", Cluster: "c"}, "LowCardinality(String)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if typ := c.d.sqlType(sourceKindColumn.typ); typ != c.d.sqlType(tLowCard) || typ != c.typ {
				t.Errorf("source_kind is %s, want %s as every LowCardinality column here", typ, c.typ)
			}
			if got := c.d.ddlSettings() != nil; got != c.setting {
				t.Errorf("experimental LowCardinality setting: %v, want %v", got, c.setting)
			}
			stmts, err := c.d.migrationStatements(context.Background(), fakeColumns{}, sourceKindColumn.since)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, tb := range tables {
				if c.d.Cluster == "" {
					want = append(want, "ALTER TABLE rw."+tb.name+" ADD COLUMN source_kind "+c.typ+" AFTER "+after[tb.name])
					continue
				}
				want = append(want, "ALTER TABLE rw."+tb.name+"_local ON CLUSTER c ADD COLUMN source_kind "+c.typ+" AFTER "+after[tb.name],
					"DROP TABLE IF EXISTS rw."+tb.name+" ON CLUSTER c", c.d.distributedTable(tb))
			}
			if !slices.Equal(stmts, want) {
				t.Errorf("migration 4:\n%s\nwant:\n%s", strings.Join(stmts, "\n"), strings.Join(want, "\n"))
			}
			done := fakeColumns{}
			for _, tb := range tables {
				done[c.d.storageTable(tb.name)+".source_kind"] = true
				done[tb.name+".source_kind"] = true
			}
			if again, err := c.d.migrationStatements(context.Background(), done, sourceKindColumn.since); err != nil || len(again) != 0 {
				t.Errorf("with the columns there: %q %v", again, err)
			}
		})
	}
}

// TestDDLGolden pins the DDL for the server versions we support: Debian's
// 18.16, the first with each feature, a current release, and cluster mode.
// go test ./sink/clickhouse -run DDLGolden -update rewrites the files.
func TestDDLGolden(t *testing.T) {
	cases := map[string]Dialect{
		"ddl_18.16.sql":         {Version: Version{18, 16, 1}, Database: "replaywatch", RetentionDays: 30},
		"ddl_26.7.sql":          {Version: Version{26, 7, 3}, Database: "replaywatch", RetentionDays: 30},
		"ddl_26.7_cluster.sql":  {Version: Version{26, 7, 3}, Database: "replaywatch", Cluster: "rw", RetentionDays: 30},
		"ddl_18.16_cluster.sql": {Version: Version{18, 16, 1}, Database: "replaywatch", Cluster: "rw"},
	}
	for name, d := range cases {
		got := strings.Join(d.Statements(), ";\n\n") + ";\n"
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if got != string(want) {
			t.Errorf("%s differs from the generated DDL; run go test ./sink/clickhouse -run DDLGolden -update and review the diff", name)
		}
	}
}

func TestDialectFeatures(t *testing.T) {
	for _, c := range []struct {
		v                   string
		lowCard, dt64, ttl  bool
		experimentalSetting bool
	}{
		{"18.16.1", true, false, false, true},
		{"19.6.2.11", true, false, true, false},
		{"20.1.2", true, true, true, false},
		{"26.7.3.1", true, true, true, false},
	} {
		v, err := ParseVersion(c.v)
		if err != nil {
			t.Fatal(err)
		}
		d := Dialect{Version: v}
		if d.lowCardinality() != c.lowCard || d.dateTime64() != c.dt64 || d.ttl() != c.ttl || (d.ddlSettings() != nil) != c.experimentalSetting {
			t.Errorf("%s: lowcard=%v dt64=%v ttl=%v setting=%v", c.v, d.lowCardinality(), d.dateTime64(), d.ttl(), d.ddlSettings())
		}
	}
	for _, bad := range []string{"", "x.y", "18"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q): no error", bad)
		}
	}
}

func TestDialectRejectsUnsafeNames(t *testing.T) {
	for _, d := range []Dialect{
		{Database: "rw; DROP TABLE x"}, {Database: "rw`"}, {Database: ""}, {Database: "ok", Cluster: "a b"}, {Database: "ok", RetentionDays: -1},
	} {
		if err := d.Validate(); err == nil {
			t.Errorf("%+v: accepted", d)
		}
	}
}
