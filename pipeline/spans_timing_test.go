package pipeline

import (
	"context"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/test/spanproj"
)

// benchSpans is every fixture's traffic as the guard's spans, one Traces
// per fixture, and how many spans they hold.
func benchSpans(b *testing.B) ([]ptrace.Traces, int) {
	b.Helper()
	pcaps, _ := filepath.Glob(filepath.Join("testdata", "fixtures", "*.pcap"))
	var tds []ptrace.Traces
	n := 0
	for _, p := range pcaps {
		td, err := spanproj.FromPcap(context.Background(), []string{p}, spanproj.Guard)
		if err != nil {
			b.Fatal(err)
		}
		tds = append(tds, td)
		n += td.SpanCount()
	}
	return tds, n
}

// BenchmarkSpanAssembly is the receiver's work per span without the
// network: spans consumed, settled by trace, turned into observations and
// judged by the detector. Run it on one core (-cpu 1) for spans/s per core.
// B/trace is the heap a settling trace holds (one HTTP span with its
// events, as the guard exports it), measured with every trace held.
func BenchmarkSpanAssembly(b *testing.B) {
	tds, per := benchSpans(b)
	cfg := otlp.DefaultConfig()
	cfg.MaxBufferedSpans = 1 << 30
	b.Run("throughput", func(b *testing.B) {
		var copies [][]ptrace.Traces
		for i := range 16 {
			var round []ptrace.Traces
			for _, td := range tds {
				round = append(round, spanproj.Renumber(td, uint32(i)))
			}
			copies = append(copies, round)
		}
		det := detector.New(detector.DefaultConfig(), discard{})
		asm := otlp.NewAssembler(cfg, nil, det.Observe)
		now := time.Now()
		b.ResetTimer()
		for i := range b.N {
			if i > 0 && i%len(copies) == 0 {
				// Copies repeat: a new assembler, or they are duplicates.
				asm.Flush()
				asm = otlp.NewAssembler(cfg, nil, det.Observe)
			}
			for _, td := range copies[i%len(copies)] {
				if _, err := asm.Consume(td, now); err != nil {
					b.Fatal(err)
				}
			}
			now = now.Add(cfg.SettleDelay + cfg.ReorderWindow + time.Second)
			asm.Advance(now)
		}
		asm.Flush()
		det.Close(now)
		b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "spans/s")
	})
	b.Run("held", func(b *testing.B) {
		var copies []ptrace.Traces
		for i := range 50 {
			for _, td := range tds {
				copies = append(copies, spanproj.Renumber(td, uint32(i)))
			}
		}
		b.ResetTimer()
		for range b.N {
			asm := otlp.NewAssembler(cfg, nil, func(*decode.Observation) {})
			before := heapInUse()
			for _, td := range copies {
				if _, err := asm.Consume(td, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			held := heapInUse() - before
			b.ReportMetric(float64(held)/float64(asm.Stats().Buffered), "B/trace")
			runtime.KeepAlive(asm)
		}
	})
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// nullTraces answers every export and keeps nothing: the peer that shows
// how fast the exporter itself can send.
type nullTraces struct {
	ptraceotlp.UnimplementedGRPCServer
}

func (*nullTraces) Export(context.Context, ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	return ptraceotlp.NewExportResponse(), nil
}

// BenchmarkOTLPExport sends the fixtures' spans with the OpenTelemetry Go
// SDK's otlptracegrpc exporter as fast as it can, to a gRPC server that
// discards them (peer) and to replaywatch's spans pipeline (receiver,
// assembler, detector; replaywatch). spans/s of replaywatch over the
// peer's is the cost of judging spans relative to merely receiving them.
// The pipeline's time includes releasing and judging every span (Close).
func BenchmarkOTLPExport(b *testing.B) {
	tds, per := benchSpans(b)
	// Round i is every fixture's traffic from other clients (new ids, so no
	// round is taken for another's retry), made while the timer is
	// stopped, in exports of at most exportBatch spans (the SDK batch
	// processor's default).
	const exportBatch = 512
	round := func(i int) [][]sdktrace.ReadOnlySpan {
		var all []sdktrace.ReadOnlySpan
		for _, td := range tds {
			all = append(all, spanproj.SDKSpans(spanproj.Renumber(td, uint32(i)))...)
		}
		var exports [][]sdktrace.ReadOnlySpan
		for len(all) > 0 {
			n := min(exportBatch, len(all))
			exports, all = append(exports, all[:n]), all[n:]
		}
		return exports
	}
	export := func(b *testing.B, addr string) {
		ctx := context.Background()
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
		if err != nil {
			b.Fatal(err)
		}
		defer exp.Shutdown(ctx)
		for i := range b.N {
			b.StopTimer()
			exports := round(i)
			b.StartTimer()
			for _, spans := range exports {
				if err := exp.ExportSpans(ctx, spans); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("peer", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := grpc.NewServer()
		ptraceotlp.RegisterGRPCServer(srv, &nullTraces{})
		go srv.Serve(ln)
		defer srv.Stop()
		b.ResetTimer()
		export(b, ln.Addr().String())
		b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "spans/s")
	})
	b.Run("replaywatch", func(b *testing.B) {
		cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Detect: detector.DefaultConfig()}
		cfg.OTLP.GRPCAddr = "127.0.0.1:0"
		s, err := NewSpans(cfg, discard{})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		export(b, s.GRPCAddr())
		if err := s.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "spans/s")
		if st := s.AssemblerStats(); st.Refused > 0 || st.Duplicates > 0 {
			b.Logf("%d spans refused (retried by the exporter), %d duplicates", st.Refused, st.Duplicates)
		}
	})
}
