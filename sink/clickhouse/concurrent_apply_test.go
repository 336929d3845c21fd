package clickhouse

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/replaywatch/replaywatch/test/chtest"
)

// TestConcurrentApply (18.16): every agent of a DaemonSet with
// apply_schema applies the schema at an upgrade, at the same moment. Each
// apply succeeds, though 18.16 has no ADD COLUMN IF NOT EXISTS and the
// others add the same columns meanwhile.
func TestConcurrentApply(t *testing.T) {
	srv := chtest.Shared(t)
	ctx := context.Background()
	const appliers = 4
	for round := range 5 {
		db := chtest.NewDatabase(t, srv)
		conns := make([]*Conn, appliers)
		for i := range conns {
			conns[i] = connect(t, srv, db, "")
		}
		if _, err := Apply(ctx, conns[0], conns[0].Dialect(), 2, "test"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, appliers)
		start := make(chan struct{})
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = Apply(ctx, c, c.Dialect(), 0, fmt.Sprint("applier", i))
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, apply %d: %v", round, i, err)
			}
		}
		if err := CheckSchema(ctx, conns[0], conns[0].Dialect()); err != nil {
			t.Fatal(err)
		}
		checkColumns(ctx, t, conns[0], conns[0].Dialect(), conns[0].Dialect().storageTable)
	}
}

// TestPrintedScriptRuns (18.16): what `schema print` prints runs as
// printed in clickhouse-client --multiquery (LowCardinality needs a setting
// there) and leaves a database the sink accepts (the migrations are
// recorded).
func TestPrintedScriptRuns(t *testing.T) {
	srv := chtest.Shared(t)
	db := chtest.NewDatabase(t, srv)
	c := connect(t, srv, db, "")
	d := c.Dialect()
	var script strings.Builder
	for _, s := range d.Script("test") {
		script.WriteString(s + ";\n\n")
	}
	bin, err := chtest.ClientBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--host", "127.0.0.1", "--port", strconv.Itoa(srv.TCPPort), "--multiquery")
	cmd.Stdin = strings.NewReader(script.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the printed script: %v: %s", err, out)
	}
	ctx := context.Background()
	if err := CheckSchema(ctx, c, d); err != nil {
		t.Fatal(err)
	}
	checkColumns(ctx, t, c, d, d.storageTable)
	if again, err := Apply(ctx, c, d, 0, "test"); err != nil || len(again) != 0 {
		t.Fatalf("apply after the script: %v %v", again, err)
	}
}
