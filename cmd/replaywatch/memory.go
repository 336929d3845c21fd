package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/internal/membudget"
	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
)

// memoryBudget is --memory-limit: one limit in bytes for the whole
// process, divided among what grows with traffic (internal/membudget).
type memoryBudget struct {
	spec string
	plan membudget.Plan
}

func (m *memoryBudget) register(fs *flag.FlagSet) {
	fs.StringVar(&m.spec, "memory-limit", "auto", "memory the process may use, e.g. 768MiB or 2GiB; auto: the cgroup's memory limit, else "+
		membudget.Format(membudget.DefaultLimit)+". It sets the Go heap's soft limit (unless GOMEMLIMIT is set) and, unless set by their own flags, "+
		"--max-pages-total, --batch-bytes and the detector's and the merger's bounds in bytes (docs/performance.md, \"Memory budget\")")
}

// apply divides the limit, fixed bytes of which lie outside the Go heap
// (packet rings), and sets every bound the operator did not set (fs.Visit
// sees the flags set on the command line, by the config file and the
// environment) from its share. sc is the ClickHouse sink's configuration,
// used only when a sink is opened.
func (m *memoryBudget) apply(fs *flag.FlagSet, fixed int64, cp *capture.Config, dc *decode.Config, dt *detector.Config, sc *chsink.Config) error {
	limit, from := int64(0), "--memory-limit"
	if m.spec == "auto" {
		limit, from = membudget.Detect()
	} else {
		n, err := membudget.Parse(m.spec)
		if err != nil {
			return fmt.Errorf("--memory-limit: %v", err)
		}
		limit = n
	}
	plan, err := membudget.NewPlan(limit, fixed, from)
	if err != nil {
		return fmt.Errorf("--memory-limit: %v", err)
	}
	m.plan = plan
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["max-pages-total"] {
		cp.MaxBufferedPagesTotal = int(max(plan.Reassembly/capture.PageBytes, 1))
	}
	dc.MaxBufferedObservations = int(max(plan.Merger/decode.ObservationBytes, 1024))
	dc.MaxBufferedBytes = plan.Decoder
	dt.MaxStateBytes = plan.Detector
	if !set["batch-bytes"] {
		// One batch per table fills while the queue holds the ones being
		// sent.
		sc.BatchBytes = int(max(plan.Sink/int64(len(chsink.TableNames())*(max(sc.QueueBatches, 1)+1)), 1<<20))
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(plan.HeapLimit)
	}
	return nil
}
