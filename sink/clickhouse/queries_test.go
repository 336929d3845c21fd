package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/chdbtest"
	"github.com/replaywatch/replaywatch/test/chtest"
)

// rowsText runs a query and renders every value with fmt.Sprint, whatever
// its type.
type rowsText func(ctx context.Context, query string, args ...any) ([][]string, error)

func nativeRowsText(c *Conn) rowsText {
	return func(ctx context.Context, query string, args ...any) ([][]string, error) {
		rows, err := c.native.Query(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out [][]string
		for rows.Next() {
			ptrs := make([]any, len(rows.ColumnTypes()))
			for i, ct := range rows.ColumnTypes() {
				ptrs[i] = reflect.New(ct.ScanType()).Interface()
			}
			if err := rows.Scan(ptrs...); err != nil {
				return nil, err
			}
			row := make([]string, len(ptrs))
			for i, p := range ptrs {
				row[i] = fmt.Sprint(reflect.ValueOf(p).Elem().Interface())
			}
			out = append(out, row)
		}
		return out, rows.Err()
	}
}

// seedForQueries is three sessions with one record of each kind, ten
// minutes ago, written twice (the queries must read the collapsed view).
func seedForQueries(now time.Time) []any {
	var recs []any
	for range 2 {
		for _, s := range []string{"S1", "S2", "S3"} {
			recs = append(recs, sampleRecords(s, now.Add(-10*time.Minute).Truncate(time.Minute))...)
		}
	}
	return recs
}

// checkReadQueries runs every ReadQueries entry and compares the columns
// that do not depend on the server's time type.
func checkReadQueries(t *testing.T, q rowsText, database string, now time.Time) {
	t.Helper()
	ctx := context.Background()
	since := now.Add(-time.Hour)
	cases := []struct {
		name string
		args []any
		skip int // leading time column to ignore
		want [][]string
	}{
		{"violations_by_kind", []any{since}, 0, [][]string{{"session_swap", "critical", "3"}}},
		{"top_servers", []any{since}, 0, [][]string{{"10.0.0.2:8080", "3", "3"}}},
		{"resume_outcomes", []any{since}, 1, [][]string{{"violated", "3"}}},
		{"unknown_outcomes", []any{since}, 0, [][]string{{"10.0.0.2:8080", "slow_write", "3"}}},
		{"session_timeline", []any{"S2", "S2", "S2"}, 1, [][]string{
			{"event", "0", "0_5 #5 delivery 2"}, {"resume violated", "0", "Last-Event-ID 0_4"}, {"violation session_swap", "0", "swapped"}}},
	}
	if len(cases) != len(ReadQueries) {
		t.Fatalf("%d queries tested, %d defined", len(cases), len(ReadQueries))
	}
	for _, c := range cases {
		rows, err := q(ctx, ReadQuery(c.name, database), c.args...)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got [][]string
		for _, r := range rows {
			got = append(got, r[c.skip:])
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// TestReadQueriesOnDebianServer runs the dashboards' kind of queries on
// 18.16 over rows written through the sink.
func TestReadQueriesOnDebianServer(t *testing.T) {
	srv := chtest.Shared(t)
	c := connect(t, srv, chtest.NewDatabase(t, srv), "")
	ctx := context.Background()
	if _, err := Apply(ctx, c, c.Dialect(), 0, "test"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	s, err := New(ctx, c, fastConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	feed(s, seedForQueries(now))
	s.Close(context.Background())
	checkReadQueries(t, nativeRowsText(c), c.Dialect().Database, now)
}

// TestReadQueriesOnCurrentClickHouse runs them on 26.x.
func TestReadQueriesOnCurrentClickHouse(t *testing.T) {
	ctx := context.Background()
	sess := chdbtest.Open(t)
	e := chdbExecer{sess}
	d := modernDialect(t, sess)
	if _, err := Apply(ctx, e, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	batches := map[*table]*batch{}
	for _, rec := range seedForQueries(now) {
		appendRecord(batches, SchemaVersion, rec, false)
	}
	for _, tb := range tables {
		if err := insertViaSQL(ctx, e, d, batches[tb]); err != nil {
			t.Fatal(err)
		}
	}
	checkReadQueries(t, e.QueryStrings, d.Database, now)
}
