package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/chdbtest"
)

// chdbExecer runs the schema code on embedded ClickHouse 26.x. chDB takes
// no bound parameters, so this test seam binds them itself, with the same
// escaping rules as clickhouse-go's binder; production never does this.
type chdbExecer struct{ s *chdbtest.Session }

func (e chdbExecer) Exec(ctx context.Context, query string, args ...any) error {
	return e.s.Exec(ctx, bindLiterals(query, args))
}

func (e chdbExecer) QueryStrings(ctx context.Context, query string, args ...any) ([][]string, error) {
	res, err := e.s.Query(ctx, bindLiterals(query, args))
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(res.Rows))
	for i, r := range res.Rows {
		for _, v := range r {
			out[i] = append(out[i], fmt.Sprint(v))
		}
	}
	return out, nil
}

func bindLiterals(query string, args []any) string {
	var b strings.Builder
	for _, c := range query {
		if c == '?' && len(args) > 0 {
			b.WriteString(literal(args[0]))
			args = args[1:]
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func literal(v any) string {
	switch x := v.(type) {
	case string:
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\x00", `\0`).Replace(x) + "'"
	case time.Time:
		return fmt.Sprintf("toDateTime64('%s', 9, 'UTC')", x.UTC().Format("2006-01-02 15:04:05.000000000"))
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = literal(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	default:
		return fmt.Sprint(x)
	}
}

// insertViaSQL inserts a batch as INSERT ... VALUES literals: the embedded
// engine has no native-protocol batch.
func insertViaSQL(ctx context.Context, e chdbExecer, d Dialect, b *batch) error {
	var rows []string
	for r := 0; r < b.rows; r++ {
		vals := make([]string, len(b.cols))
		for c, col := range b.values() {
			vals[c] = literal(reflect.ValueOf(col).Index(r).Interface())
		}
		rows = append(rows, "("+strings.Join(vals, ", ")+")")
	}
	return e.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", d.InsertTable(b.table.name), b.table.columnList(b.version), strings.Join(rows, ", ")))
}

func modernDialect(t *testing.T, s *chdbtest.Session) Dialect {
	v, err := ParseVersion(s.Version())
	if err != nil {
		t.Fatal(err)
	}
	if v.Major < 24 {
		t.Fatalf("chDB reports ClickHouse %s; the modern path wants 24+", v)
	}
	return Dialect{Version: v, Database: s.Database(), RetentionDays: 30}
}

// TestModernSchemaOnCurrentClickHouse applies the migrations on ClickHouse
// 26.x, from empty and from every earlier version, and checks that every
// table has exactly the columns and types the sink inserts, TTL included.
func TestModernSchemaOnCurrentClickHouse(t *testing.T) {
	ctx := context.Background()
	for from := 0; from < SchemaVersion; from++ {
		t.Run(fmt.Sprintf("from_v%d", from), func(t *testing.T) {
			s := chdbtest.Open(t)
			e := chdbExecer{s}
			d := modernDialect(t, s)
			if from > 0 {
				if _, err := Apply(ctx, e, d, from, "test"); err != nil {
					t.Fatal(err)
				}
				// Rows written at the old version must survive.
				b := newBatch(violationsTable, from, 1)
				appendRecord(map[*table]*batch{violationsTable: b}, from, sampleRecords("OLD", time.Now())[0], false)
				if err := insertViaSQL(ctx, e, d, b); err != nil {
					t.Fatal(err)
				}
			}
			applied, err := Apply(ctx, e, d, 0, "test")
			if err != nil {
				t.Fatal(err)
			}
			if len(applied) != SchemaVersion-from {
				t.Fatalf("applied %v from v%d", applied, from)
			}
			again, err := Apply(ctx, e, d, 0, "test")
			if err != nil || len(again) != 0 {
				t.Fatalf("second apply: %v %v", again, err)
			}
			if err := CheckSchema(ctx, e, d); err != nil {
				t.Fatal(err)
			}
			checkColumns(ctx, t, e, d, d.storageTable)
			if from > 0 {
				// The old row reads back with the columns added since
				// empty: before version 4 no row said which input it came
				// from.
				rows, err := e.QueryStrings(ctx, "SELECT session_id, source_kind FROM "+d.Database+".violations")
				if err != nil || len(rows) != 1 || rows[0][0] != "OLD" || rows[0][1] != "" {
					t.Fatalf("row from v%d: %q %v", from, rows, err)
				}
			}
			ddl, err := e.QueryStrings(ctx, "SELECT create_table_query FROM system.tables WHERE database = ? AND name = 'stream_events'", d.Database)
			if err != nil || len(ddl) != 1 || !strings.Contains(ddl[0][0], "TTL") || !strings.Contains(ddl[0][0], "LowCardinality") || !strings.Contains(ddl[0][0], "DateTime64(9") {
				t.Fatalf("stream_events DDL lacks TTL, LowCardinality or DateTime64: %v %v", ddl, err)
			}
		})
	}
}

// checkColumns compares system.columns with what the sink inserts.
func checkColumns(ctx context.Context, t *testing.T, e Execer, d Dialect, name func(string) string) {
	t.Helper()
	for _, tb := range tables {
		// 18.16's system.columns has no position: compare by name.
		rows, err := e.QueryStrings(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ? AND name != 'inserted_at'", d.Database, name(tb.name))
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]string{}
		for _, r := range rows {
			have[r[0]] = r[1]
		}
		cols := tb.insertColumns(SchemaVersion)
		if len(have) != len(cols) {
			t.Fatalf("%s: server has %v, sink inserts %d columns", tb.name, rows, len(cols))
		}
		for _, c := range cols {
			if have[c.name] != d.sqlType(c.typ) {
				t.Errorf("%s.%s: server has %q, sink wants %s", tb.name, c.name, have[c.name], d.sqlType(c.typ))
			}
		}
	}
}

// TestModernRoundTripAndCollapse writes every record type twice on 26.x and
// reads the collapsed view (FINAL) back: one row each, values intact.
func TestModernRoundTripAndCollapse(t *testing.T) {
	ctx := context.Background()
	s := chdbtest.Open(t)
	e := chdbExecer{s}
	d := modernDialect(t, s)
	if _, err := Apply(ctx, e, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	for range 2 {
		batches := map[*table]*batch{}
		for _, rec := range sampleRecords("S'1\n", at) {
			appendRecord(batches, SchemaVersion, rec, true)
		}
		for _, tb := range tables {
			if err := insertViaSQL(ctx, e, d, batches[tb]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tb := range tables {
		rows, err := e.QueryStrings(ctx, fmt.Sprintf("SELECT toString(count()), toString(uniqExact(session_id)) FROM %s.%s FINAL", d.Database, tb.name))
		if err != nil || rows[0][0] != "1" {
			t.Errorf("%s FINAL: %v %v, want one row", tb.name, rows, err)
		}
	}
	rows, err := e.QueryStrings(ctx, "SELECT session_id, toString(time), evidence FROM "+d.Database+".violations FINAL")
	if err != nil || rows[0][0] != "S'1\n" || rows[0][1] != "2026-11-30 12:00:00.123456789" || !strings.Contains(rows[0][2], `"what":"response header"`) {
		t.Fatalf("violation read back: %q %v", rows, err)
	}
	n, _ := e.QueryStrings(ctx, "SELECT toString(count()) FROM "+d.Database+".violations")
	if c, _ := strconv.Atoi(n[0][0]); c < 1 || c > 2 {
		t.Fatalf("raw rows %v", n)
	}
}
