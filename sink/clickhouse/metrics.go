package clickhouse

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName names the instrumentation scope of the sink's self-metrics.
const meterName = "github.com/replaywatch/replaywatch/sink/clickhouse"

// metrics are the sink's self-metrics. With a Prometheus exporter they read
// replaywatch_sink_rows_total{table,result}, ..._batches_total,
// ..._retries_total, ..._insert_duration_seconds, ..._spool_corrupt_total,
// ..._spool_rejected_total{table}, ..._spool_bytes,
// ..._spool_rows, ..._spool_batches and ..._spool_oldest_age_seconds.
type metrics struct {
	rows     metric.Int64Counter
	batches  metric.Int64Counter
	retries  metric.Int64Counter
	latency  metric.Float64Histogram
	corrupt  metric.Int64Counter
	rejected metric.Int64Counter
	reg      metric.Registration
	tableSet map[string]metric.MeasurementOption
}

func newMetrics(mp metric.MeterProvider, sp *spool) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(meterName)
	var ms metrics
	var err error
	if ms.rows, err = m.Int64Counter("replaywatch.sink.rows", metric.WithUnit("{row}"),
		metric.WithDescription("Rows handled by the ClickHouse sink, by table and result: written (confirmed by the server), spooled (written to the on-disk spool), replayed (sent from the spool), lost (neither written nor spooled by the shutdown deadline), rejected (refused by the server for good, set aside)")); err != nil {
		return nil, err
	}
	if ms.batches, err = m.Int64Counter("replaywatch.sink.batches", metric.WithUnit("{batch}"),
		metric.WithDescription("Insert attempts of whole batches, by table and result (ok, failed)")); err != nil {
		return nil, err
	}
	if ms.retries, err = m.Int64Counter("replaywatch.sink.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Inserts retried after a failure, by table")); err != nil {
		return nil, err
	}
	if ms.latency, err = m.Float64Histogram("replaywatch.sink.insert.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to send one batch and have the server confirm it"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)); err != nil {
		return nil, err
	}
	if ms.corrupt, err = m.Int64Counter("replaywatch.sink.spool.corrupt", metric.WithUnit("{file}"),
		metric.WithDescription("Spool files that could not be read back (kept as *.corrupt for inspection)")); err != nil {
		return nil, err
	}
	if ms.rejected, err = m.Int64Counter("replaywatch.sink.spool.rejected", metric.WithUnit("{batch}"),
		metric.WithDescription("Batches the server refused for good (a non-temporary error), by table: set aside as *.rejected in the spool directory, undelivered")); err != nil {
		return nil, err
	}
	spoolBytes, err := m.Int64ObservableGauge("replaywatch.sink.spool.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes in the on-disk spool (bounded by --max-spool-bytes)"))
	if err != nil {
		return nil, err
	}
	spoolRows, err := m.Int64ObservableGauge("replaywatch.sink.spool.rows", metric.WithUnit("{row}"),
		metric.WithDescription("Rows waiting in the on-disk spool"))
	if err != nil {
		return nil, err
	}
	spoolBatches, err := m.Int64ObservableGauge("replaywatch.sink.spool.batches", metric.WithUnit("{batch}"),
		metric.WithDescription("Batches waiting in the on-disk spool"))
	if err != nil {
		return nil, err
	}
	spoolAge, err := m.Float64ObservableGauge("replaywatch.sink.spool.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest batch in the spool; 0 when empty"))
	if err != nil {
		return nil, err
	}
	ms.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := sp.stats()
		o.ObserveInt64(spoolBytes, st.bytes)
		o.ObserveInt64(spoolRows, st.rows)
		o.ObserveInt64(spoolBatches, int64(st.batches))
		age := 0.0
		if !st.oldest.IsZero() {
			age = time.Since(st.oldest).Seconds()
		}
		o.ObserveFloat64(spoolAge, age)
		return nil
	}, spoolBytes, spoolRows, spoolBatches, spoolAge)
	if err != nil {
		return nil, err
	}
	ms.tableSet = map[string]metric.MeasurementOption{}
	for _, t := range tables {
		ms.tableSet[t.name] = metric.WithAttributeSet(attribute.NewSet(attribute.String("table", t.name)))
	}
	return &ms, nil
}

func (m *metrics) addRows(table, result string, n int) {
	m.rows.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("table", table), attribute.String("result", result)))
}

func (m *metrics) batch(table, result string) {
	m.batches.Add(context.Background(), 1, metric.WithAttributes(attribute.String("table", table), attribute.String("result", result)))
}

func (m *metrics) retry(table string) { m.retries.Add(context.Background(), 1, m.tableSet[table]) }

func (m *metrics) insertTook(table string, d time.Duration) {
	m.latency.Record(context.Background(), d.Seconds(), m.tableSet[table])
}
