package clickhouse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/chtest"
)

// TestSpoolKeepsItsDestination: two runs share a --spool-dir but write to
// different databases. What the first spooled during an outage is not
// sent to the second's database: the second leaves it (and says so), a
// later run writing where the first did sends it.
func TestSpoolKeepsItsDestination(t *testing.T) {
	srv := chtest.Start(t, chtest.Options{})
	dbA, dbB := chtest.NewDatabase(t, srv), chtest.NewDatabase(t, srv)
	ctx := context.Background()
	for _, db := range []string{dbA, dbB} {
		c := connect(t, srv, db, "")
		if _, err := Apply(ctx, c, c.Dialect(), 0, "test"); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fastConfig(t)
	cfg.CloseTimeout = 100 * time.Millisecond
	run := func(db, session string) Report {
		t.Helper()
		s, err := New(ctx, connect(t, srv, db, ""), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if session == "RUN1" {
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
		}
		feed(s, sampleRecords(session, time.Now()))
		return s.Close(ctx)
	}
	r1 := run(dbA, "RUN1")
	if r1.LeftRows == 0 {
		t.Fatalf("first run (server down): %s", r1)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	r2 := run(dbB, "RUN2")
	if r2.Replayed != 0 || r2.ForeignBatches != r1.LeftBatches || !strings.Contains(r2.String(), "/"+dbA) {
		t.Errorf("second run, another database: %s (%+v)", r2, r2)
	}
	c := connect(t, srv, dbB, "")
	if n := count(t, c, "SELECT count() FROM "+dbB+".violations WHERE session_id = 'RUN1'"); n != 0 {
		t.Fatalf("%d rows of the run writing to %s went to %s", n, dbA, dbB)
	}
	r3 := run(dbA, "RUN3")
	if r3.Replayed != r1.LeftRows || r3.LeftRows != 0 || r3.ForeignBatches != 0 {
		t.Fatalf("third run, the first's database: %s", r3)
	}
	if n := count(t, c, "SELECT count() FROM "+dbA+".violations WHERE session_id IN ('RUN1', 'RUN3')"); n != 2 {
		t.Fatalf("violations in %s: %d, want 2", dbA, n)
	}
}
