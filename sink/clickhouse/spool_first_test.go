package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/chtest"
)

// TestFailedBatchIsSpooledBeforeItsRetries: a batch whose insert fails is
// on disk before it is retried, not only after every retry: a process
// killed (SIGKILL) during the retries loses none of it. The retries still
// happen and, once one succeeds, the spool is empty again.
func TestFailedBatchIsSpooledBeforeItsRetries(t *testing.T) {
	srv := chtest.Start(t, chtest.Options{})
	db := chtest.NewDatabase(t, srv)
	c := connect(t, srv, db, "")
	ctx := context.Background()
	if _, err := Apply(ctx, c, c.Dialect(), 0, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(t)
	cfg.FlushInterval = time.Hour
	cfg.MaxRetries = 4
	cfg.RetryBackoff = 2 * time.Second // retries take 2+4+8+10 s
	cfg.MaxRetryBackoff = 10 * time.Second
	s, err := New(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	feed(s, sampleRecords("S", time.Now()))
	start := time.Now()
	go s.Flush() // blocks while the sender retries (back-pressure), as the detector would
	for s.sp.stats().rows == 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the failed batches are not in the spool %v after the flush: they wait in memory through the retries", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.sp.stats().batches == 0 })
	r := s.Close(ctx)
	if r.LeftRows != 0 || r.Spooled == 0 || r.Written != int64(len(sampleRecords("S", time.Now()))) {
		t.Fatalf("%s", r)
	}
	if n := count(t, c, "SELECT count() FROM "+db+".violations FINAL WHERE session_id = 'S'"); n != 1 {
		t.Fatalf("violations: %d, want 1", n)
	}
}
