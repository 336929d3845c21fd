package clickhouse

import (
	"context"
	"testing"
)

// nopInserter is a connection that takes every batch at once: what is left
// to measure is the conversion of records into columns and the batching.
type nopInserter struct{}

func (nopInserter) insert(context.Context, *batch) error { return nil }

// BenchmarkConvertStreamEvents is the sink's own cost per row: records
// appended column-wise into batches and handed to a no-op connection.
func BenchmarkConvertStreamEvents(b *testing.B) {
	evs := manyEvents(100_000)
	s, err := newSink(nopInserter{}, SchemaVersion, Config{SpoolDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.StreamEvent(evs[i%len(evs)])
	}
	s.Close(context.Background())
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkConvertViolations: the widest rows (evidence as JSON).
func BenchmarkConvertViolations(b *testing.B) {
	recs := sampleRecords("S1", manyEvents(1)[0].Time)
	s, err := newSink(nopInserter{}, SchemaVersion, Config{SpoolDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		feed(s, recs[:1])
	}
	s.Close(context.Background())
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
