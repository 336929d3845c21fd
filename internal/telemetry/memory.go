package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/replaywatch/replaywatch/internal/membudget"
)

// RegisterMemoryPlan exports the memory limit and each part's share of it
// (--memory-limit), so a dashboard can put what each part holds beside what
// it may hold.
func (t *Telemetry) RegisterMemoryPlan(p membudget.Plan) error {
	b := &instruments{m: t.meter}
	limit := b.gauge("replaywatch.memory.limit", "By", "The process' memory limit (--memory-limit: given, the cgroup's, or the default)")
	share := b.gauge("replaywatch.memory.share", "By", "Each part's share of the memory limit, by part: reassembly, decoder, merger, detector, sink, and heap (the Go heap's soft limit)")
	if b.err != nil {
		return b.err
	}
	_, err := t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(limit, p.Limit)
		o.ObserveInt64(share, p.HeapLimit, attrs(attribute.String("part", "heap")))
		for _, part := range p.Parts() {
			o.ObserveInt64(share, part.Bytes, attrs(attribute.String("part", part.Name)))
		}
		return nil
	}, b.all...)
	return err
}
