package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/replaywatch/replaywatch/detector"
)

// fakeServer is an inserter that keeps what it is sent and can be made to
// fail: the unit-test seam (the real server is exercised in server_test.go).
type fakeServer struct {
	mu      sync.Mutex
	down    bool
	batches []*batch
	calls   int
}

func (f *fakeServer) insert(_ context.Context, b *batch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return errors.New("connection refused")
	}
	f.batches = append(f.batches, b)
	return nil
}

func (f *fakeServer) setDown(v bool) { f.mu.Lock(); f.down = v; f.mu.Unlock() }

// ids is every stream event id the server got, in order.
func (f *fakeServer) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.batches {
		if b.table == streamEventsTable {
			out = append(out, b.column(0).([]string)...)
		}
	}
	return out
}

func testConfig(t *testing.T) Config {
	return Config{SpoolDir: t.TempDir(), RetryBackoff: time.Millisecond, MaxRetryBackoff: 5 * time.Millisecond,
		FlushInterval: time.Hour, CloseTimeout: time.Second, MaxRetries: 2}
}

func event(i int) *detector.StreamEvent {
	return &detector.StreamEvent{ID: fmt.Sprintf("e%05d", i), Time: time.Unix(1764460800, int64(i)), SessionID: "S", Position: int32(i), Delivery: 1}
}

func TestBatchesBySize(t *testing.T) {
	srv := &fakeServer{}
	cfg := testConfig(t)
	cfg.BatchRows = 10
	s, err := newSink(srv, SchemaVersion, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		s.StreamEvent(event(i))
	}
	r := s.Close(context.Background())
	if len(srv.batches) != 3 || srv.batches[0].rows != 10 || srv.batches[2].rows != 5 || r.Written != 25 {
		t.Fatalf("batches %d, report %+v", len(srv.batches), r)
	}
}

func TestFlushesOnInterval(t *testing.T) {
	srv := &fakeServer{}
	cfg := testConfig(t)
	cfg.FlushInterval = 20 * time.Millisecond
	s, _ := newSink(srv, SchemaVersion, cfg)
	defer s.Close(context.Background())
	s.Violation(sampleRecords("S", time.Now())[0].(*detector.Violation))
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv.mu.Lock()
		n := len(srv.batches)
		srv.mu.Unlock()
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a pending row was not sent by the flush interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOutageSpoolsAndReplaysInOrder: the server goes away mid-stream; the
// sink retries, spools, and when the server returns sends everything once,
// in the order accepted.
func TestOutageSpoolsAndReplaysInOrder(t *testing.T) {
	srv := &fakeServer{}
	cfg := testConfig(t)
	cfg.BatchRows = 10
	s, _ := newSink(srv, SchemaVersion, cfg)
	for i := range 30 {
		s.StreamEvent(event(i))
	}
	waitFor(t, func() bool { return len(srv.ids()) == 30 })
	srv.setDown(true)
	for i := 30; i < 70; i++ {
		s.StreamEvent(event(i))
	}
	waitFor(t, func() bool { return s.sp.stats().rows == 40 })
	srv.setDown(false)
	for i := 70; i < 100; i++ {
		s.StreamEvent(event(i))
	}
	r := s.Close(context.Background())
	got := srv.ids()
	if len(got) != 100 || r.LeftRows != 0 || r.Written != 100 || r.Replayed < 40 {
		t.Fatalf("got %d rows, report %+v", len(got), r)
	}
	for i, id := range got {
		if id != fmt.Sprintf("e%05d", i) {
			t.Fatalf("row %d is %s: order not kept", i, id)
		}
	}
}

// TestSpoolFileNotOpenedIsTriedAgain: a spool file that cannot be opened for
// a while (too many open files, an I/O hiccup) is not set aside as corrupt:
// it is replayed once it opens, in order, and nothing is reported corrupt.
func TestSpoolFileNotOpenedIsTriedAgain(t *testing.T) {
	var fail atomic.Int32
	fail.Store(3)
	openSpoolFile = func(path string) (*os.File, error) {
		if fail.Add(-1) >= 0 {
			return nil, syscall.EMFILE
		}
		return os.Open(path)
	}
	t.Cleanup(func() { openSpoolFile = os.Open })
	srv := &fakeServer{down: true}
	cfg := testConfig(t)
	cfg.BatchRows = 10
	s, _ := newSink(srv, SchemaVersion, cfg)
	for i := range 20 {
		s.StreamEvent(event(i))
	}
	waitFor(t, func() bool { return s.sp.stats().rows == 20 })
	srv.setDown(false)
	r := s.Close(context.Background())
	if got := srv.ids(); len(got) != 20 || len(r.CorruptFiles) != 0 || r.LeftRows != 0 {
		t.Fatalf("%d rows delivered, report %+v: want all 20, none set aside", len(got), r)
	}
	if fail.Load() >= 0 {
		t.Fatal("the spool file never failed to open: the test tested nothing")
	}
}

// TestSpoolDiskFailsThenServerBack: while the server is down the spool's
// disk fails (full); when the server comes back the rows waiting in memory
// and in the spool are delivered, in order, instead of the sender retrying
// the disk until shutdown counts them lost.
func TestSpoolDiskFailsThenServerBack(t *testing.T) {
	srv := &fakeServer{down: true}
	cfg := testConfig(t)
	cfg.BatchRows = 1
	s, _ := newSink(srv, SchemaVersion, cfg)
	s.StreamEvent(event(0)) // spooled while the disk is fine
	waitFor(t, func() bool { return s.sp.stats().batches == 1 })
	create := createSpoolFile
	t.Cleanup(func() { createSpoolFile = create })
	createSpoolFile = func(string) (*os.File, error) { return nil, syscall.ENOSPC }
	s.StreamEvent(event(1)) // the spool's disk now fails
	time.Sleep(100 * time.Millisecond)
	srv.setDown(false)
	waitFor(t, func() bool { return len(srv.ids()) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if r := s.Close(ctx); r.Lost != 0 || r.LeftRows != 0 {
		t.Errorf("report %+v: want both rows written, none lost or left", r)
	}
	if got := srv.ids(); len(got) != 2 || got[0] != "e00000" {
		t.Errorf("delivered %v, want e00000 then e00001", got)
	}
}

// TestRestartWithSpool: a run ends while the server is down; its rows stay
// on disk and the next run (a new process: a new sink on the same
// directory) sends them first.
func TestRestartWithSpool(t *testing.T) {
	srv := &fakeServer{down: true}
	cfg := testConfig(t)
	cfg.CloseTimeout = 10 * time.Millisecond
	s, _ := newSink(srv, SchemaVersion, cfg)
	for i := range 5 {
		s.StreamEvent(event(i))
	}
	r := s.Close(context.Background())
	if r.LeftRows != 5 || r.Written != 0 {
		t.Fatalf("first run: %+v", r)
	}
	srv.setDown(false)
	s2, _ := newSink(srv, SchemaVersion, cfg)
	s2.StreamEvent(event(5))
	r = s2.Close(context.Background())
	if got := srv.ids(); len(got) != 6 || got[0] != "e00000" || got[5] != "e00005" || r.LeftRows != 0 || r.Replayed != 5 {
		t.Fatalf("second run: %v %+v", got, r)
	}
}

// fullSpoolProducer starts a sink whose server is down and whose spool
// holds one batch, and a producer of 10 one-row batches, which the spool's
// bound soon blocks; done closes when the producer is through.
func fullSpoolProducer(t *testing.T) (s *Sink, srv *fakeServer, done chan struct{}) {
	srv = &fakeServer{down: true}
	cfg := testConfig(t)
	cfg.BatchRows, cfg.QueueBatches, cfg.MaxSpoolBytes = 1, 1, 1
	s, _ = newSink(srv, SchemaVersion, cfg)
	done = make(chan struct{})
	go func() {
		for i := range 10 {
			s.StreamEvent(event(i))
		}
		close(done)
	}()
	return s, srv, done
}

// TestSpoolFullIsBackPressure: with the server down and the spool full,
// the sink makes the caller wait instead of dropping; rows flow again when
// the server returns.
func TestSpoolFullIsBackPressure(t *testing.T) {
	s, srv, done := fullSpoolProducer(t)
	select {
	case <-done:
		t.Fatal("10 batches accepted with room for ~3 (spool, queue, sender)")
	case <-time.After(100 * time.Millisecond):
	}
	srv.setDown(false)
	<-done
	s.Close(context.Background())
	if got := srv.ids(); len(got) != 10 {
		t.Fatalf("%d rows delivered, want 10", len(got))
	}
}

// TestShutdownWithFullSpoolKeepsItsDeadline: the server down, the spool
// full and a producer blocked on it (back-pressure), a shutdown announced
// with ShutdownBy (as analyze and the agent do on SIGTERM) releases the
// producer, and Close returns by its deadline with every row spooled: the
// bound gives way once the budget hurries, instead of waiting for a server
// that is not coming while Close cannot begin.
func TestShutdownWithFullSpoolKeepsItsDeadline(t *testing.T) {
	s, _, produced := fullSpoolProducer(t)
	time.Sleep(100 * time.Millisecond) // the producer is blocked
	deadline := time.Now().Add(time.Second)
	s.ShutdownBy(deadline)
	select {
	case <-produced:
	case <-time.After(3 * time.Second):
		t.Fatal("the producer is still blocked 2 s past the shutdown deadline")
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	r := s.Close(ctx)
	if late := time.Since(deadline); late > 500*time.Millisecond {
		t.Errorf("Close returned %v past its deadline", late)
	}
	if r.Lost != 0 || r.LeftRows != 10 {
		t.Errorf("report %+v: want all 10 rows left in the spool, none lost", r)
	}
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	srv := &fakeServer{}
	cfg := testConfig(t)
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.BatchRows = 2
	s, _ := newSink(srv, SchemaVersion, cfg)
	s.StreamEvent(event(0))
	s.StreamEvent(event(1))
	waitFor(t, func() bool { return len(srv.ids()) == 2 })
	srv.setDown(true)
	s.StreamEvent(event(2))
	s.StreamEvent(event(3))
	collect := func() map[string]float64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						key := m.Name
						if r, ok := p.Attributes.Value("result"); ok {
							key += "/" + r.AsString()
						}
						got[key] += float64(p.Value)
					}
				case metricdata.Gauge[int64]:
					for _, p := range d.DataPoints {
						got[m.Name] = float64(p.Value)
					}
				case metricdata.Gauge[float64]:
					for _, p := range d.DataPoints {
						got[m.Name] = p.Value
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						got[m.Name] += float64(p.Count)
					}
				}
			}
		}
		return got
	}
	// The spool holds the rows a moment before the sink counts them: wait
	// for the count (on a loaded machine the gap was seen).
	waitFor(t, func() bool { return s.sp.stats().rows == 2 && collect()["replaywatch.sink.rows/spooled"] == 2 })
	got := collect()
	want := map[string]float64{
		"replaywatch.sink.rows/written": 2, "replaywatch.sink.rows/spooled": 2, "replaywatch.sink.batches/ok": 1,
		"replaywatch.sink.retries": 2, "replaywatch.sink.insert.duration": 1,
		"replaywatch.sink.spool.rows": 2, "replaywatch.sink.spool.batches": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	// Three attempts of the batch (two retries), and maybe already a
	// first replay attempt from the spool.
	if f := got["replaywatch.sink.batches/failed"]; f < 3 {
		t.Errorf("failed batches %v, want at least 3", f)
	}
	if got["replaywatch.sink.spool.bytes"] <= 0 || got["replaywatch.sink.spool.oldest_age"] <= 0 {
		t.Errorf("spool gauges: %v", got)
	}
	srv.setDown(false)
	s.Close(context.Background())
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCloseWhileTimerFlushes: a regression test for a deadlock: Close held
// the lock while waiting for the flush timer, which was waiting for the
// lock.
func TestCloseWhileTimerFlushes(t *testing.T) {
	for range 200 {
		cfg := testConfig(t)
		cfg.FlushInterval = time.Microsecond
		s, _ := newSink(&fakeServer{}, SchemaVersion, cfg)
		s.StreamEvent(event(1))
		done := make(chan struct{})
		go func() { s.Close(context.Background()); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Close deadlocked with the flush timer")
		}
	}
}

// TestRowsLostOnlyWhenTheSpoolFails: the server is down and the spool's
// disk is gone; Close keeps trying until its deadline, then counts the rows
// it could place nowhere (the caller exits non-zero naming the spool)
// instead of hanging or saying nothing.
func TestRowsLostOnlyWhenTheSpoolFails(t *testing.T) {
	f := &fakeServer{down: true}
	s, err := newSink(f, SchemaVersion, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.sp.dir); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.StreamEvent(event(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := s.Close(ctx)
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v past its 600ms deadline", took)
	}
	if r.Lost != 10 || r.Written != 0 || r.LeftRows != 0 || !strings.Contains(r.String(), "10 rows LOST") || !strings.Contains(r.String(), s.sp.dir) {
		t.Fatalf("report %+v: %s", r, r)
	}
}

// TestCloseCutsAHungInsert: an insert that never returns (a paused server)
// is cut when the budget's spool reserve begins, and its batch is spooled.
func TestCloseCutsAHungInsert(t *testing.T) {
	h := &hungServer{release: make(chan struct{})}
	s, err := newSink(h, SchemaVersion, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.StreamEvent(event(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	r := s.Close(ctx)
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v past its 1s deadline", took)
	}
	if r.LeftRows != 10 || r.Written != 0 || r.Lost != 0 || !h.aborted.Load() {
		t.Fatalf("report %+v, inserter aborted %v: want the hung batch cut and spooled", r, h.aborted.Load())
	}
}

// hungServer blocks every insert until abort, as a paused server's socket
// does (its context's cancellation does not reach a blocked read).
type hungServer struct {
	release chan struct{}
	once    sync.Once
	aborted atomic.Bool
}

func (h *hungServer) insert(context.Context, *batch) error {
	<-h.release
	return errors.New("connection closed")
}

func (h *hungServer) abort() {
	h.aborted.Store(true)
	h.once.Do(func() { close(h.release) })
}
