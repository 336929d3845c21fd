package clickhouse

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/test/chdbtest"
	"github.com/replaywatch/replaywatch/test/chtest"
)

// rejectedCount is replaywatch.sink.spool.rejected summed over tables.
func rejectedCount(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "replaywatch.sink.spool.rejected" {
				for _, p := range d.DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}

// TestRefusedBatchIsSetAside (18.16): a batch the server refuses for good
// (its table lost a column) is set aside as *.rejected, reported and
// counted; it holds back neither the other tables nor the next run. A
// table that is missing (a set-up problem, not the batch's) keeps its
// batches waiting in the spool, while the other tables' rows go on.
func TestRefusedBatchIsSetAside(t *testing.T) {
	srv := chtest.Shared(t)
	db := chtest.NewDatabase(t, srv)
	c := connect(t, srv, db, "")
	ctx := context.Background()
	if _, err := Apply(ctx, c, c.Dialect(), 0, "test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "ALTER TABLE "+db+".stream_events DROP COLUMN data_hash"); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(t)
	cfg.CloseTimeout = 3 * time.Second
	reader := sdkmetric.NewManualReader()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	run := func(session string) Report {
		t.Helper()
		s, err := New(ctx, c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		feed(s, sampleRecords(session, time.Now()))
		return s.Close(ctx)
	}
	r1 := run("RUN1")
	if len(r1.RejectedFiles) != 1 || r1.Rejected != 1 || r1.LeftRows != 0 || !strings.Contains(r1.String(), "REFUSED") {
		t.Fatalf("first run: %s (%+v): want the stream event's batch set aside", r1, r1)
	}
	if _, err := os.Stat(r1.RejectedFiles[0]); err != nil || !strings.HasSuffix(r1.RejectedFiles[0], ".rejected") {
		t.Fatalf("set-aside file %q: %v", r1.RejectedFiles[0], err)
	}
	if n := rejectedCount(t, reader); n != 1 {
		t.Errorf("replaywatch.sink.spool.rejected = %d, want 1", n)
	}
	r2 := run("RUN2")
	for _, session := range []string{"RUN1", "RUN2"} {
		if n := count(t, c, "SELECT count() FROM "+db+".violations WHERE session_id = '"+session+"'"); n != 1 {
			t.Errorf("violations of %s: %d, want 1 (first run %s; second %s)", session, n, r1, r2)
		}
	}

	// A table that is missing: its batches wait (the set-up is wrong, not
	// the data), and the other tables are written meanwhile.
	if err := c.Exec(ctx, "DROP TABLE "+db+".stream_events"); err != nil {
		t.Fatal(err)
	}
	r3 := run("RUN3")
	if r3.LeftBatches != 1 || len(r3.RejectedFiles) != 0 {
		t.Fatalf("missing table: %s: want its batch kept in the spool", r3)
	}
	if n := count(t, c, "SELECT count() FROM "+db+".violations WHERE session_id = 'RUN3'"); n != 1 {
		t.Fatalf("violations of RUN3: %d while another table is missing (%s)", n, r3)
	}
	if err := c.Exec(withDDLSettings(ctx, c.Dialect()), c.Dialect().createTable(streamEventsTable, SchemaVersion)[0]); err != nil {
		t.Fatal(err)
	}
	if r4 := run("RUN4"); r4.LeftRows != 0 || r4.Replayed == 0 {
		t.Fatalf("after the table is back: %s", r4)
	}
	if n := count(t, c, "SELECT count() FROM "+db+".stream_events WHERE session_id IN ('RUN3', 'RUN4')"); n != 2 {
		t.Fatalf("stream events after the table is back: %d, want 2", n)
	}
}

// chdbInserter inserts into embedded current ClickHouse, its errors as the
// driver's exceptions.
type chdbInserter struct {
	e chdbExecer
	d Dialect
}

func (i chdbInserter) insert(ctx context.Context, b *batch) error {
	err := insertViaSQL(ctx, i.e, i.d, b)
	var ce *chdbtest.Error
	if errors.As(err, &ce) && ce.Code != 0 {
		return &ch.Exception{Code: int32(ce.Code), Message: ce.Message}
	}
	return err
}

// TestBatchOfManyDaysIsSplit (current ClickHouse): a batch over more days
// than one INSERT may touch partitions (100 by default) is refused with
// code 252; the sink inserts it in parts instead of retrying it forever.
func TestBatchOfManyDaysIsSplit(t *testing.T) {
	ctx := context.Background()
	s := chdbtest.Open(t)
	e := chdbExecer{s}
	d := modernDialect(t, s)
	d.RetentionDays = 0
	if _, err := Apply(ctx, e, d, 0, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(t)
	cfg.CloseTimeout = 3 * time.Second
	sk, err := newSink(chdbInserter{e, d}, SchemaVersion, cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const days = 130
	for i := range days {
		sk.Violation(sampleRecords("S"+time.Duration(i).String(), start.AddDate(0, 0, i))[0].(*detector.Violation))
	}
	r := sk.Close(ctx)
	if r.LeftRows != 0 || r.Written != days {
		t.Fatalf("%s: want every row written", r)
	}
	rows, err := e.QueryStrings(ctx, "SELECT toString(count()), toString(uniqExact(toYYYYMMDD(time))) FROM "+d.Database+".violations")
	if err != nil {
		t.Fatal(err)
	}
	if rows[0][0] != "130" || rows[0][1] != "130" {
		t.Fatalf("rows, days in the table: %v", rows)
	}
}
