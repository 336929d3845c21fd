package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Heartbeat is one main loop's sign of life. The loop calls Beat at least
// every few seconds, also while it has nothing to do (on its ticker, or its
// read timeout); /healthz fails while any heartbeat is older than its
// timeout.
type Heartbeat struct {
	name    string
	timeout time.Duration
	now     func() time.Time
	last    atomic.Int64 // UnixNano of the last Beat (or of the Heartbeat call)
	stopped atomic.Bool
}

// Heartbeat starts watching the loop named loop (a label value of
// replaywatch_heartbeat_age_seconds): it counts as beating now, and must beat
// again within timeout (Options.HeartbeatTimeout when timeout <= 0). A
// second call with the same name replaces the first.
func (t *Telemetry) Heartbeat(loop string, timeout time.Duration) *Heartbeat {
	if timeout <= 0 {
		timeout = t.hbTimeout
	}
	h := &Heartbeat{name: loop, timeout: timeout, now: t.now}
	h.Beat()
	t.mu.Lock()
	t.heartbeats[loop] = h
	t.mu.Unlock()
	return h
}

// Beat says the loop is making progress. Safe from any goroutine; it costs
// a clock read and an atomic store.
func (h *Heartbeat) Beat() { h.last.Store(h.now().UnixNano()) }

// Stop says the loop ended on purpose: its heartbeat is no longer checked.
func (h *Heartbeat) Stop() { h.stopped.Store(true) }

func (h *Heartbeat) age(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, h.last.Load()))
}

// Ready marks condition ready (declaring it if it was not).
func (t *Telemetry) Ready(condition string) { t.setCondition(condition, "") }

// NotReady marks condition not ready, with the reason /readyz shows
// (declaring it if it was not).
func (t *Telemetry) NotReady(condition, reason string) {
	if reason == "" {
		reason = "not ready"
	}
	t.setCondition(condition, reason)
}

func (t *Telemetry) setCondition(c, reason string) {
	t.mu.Lock()
	t.conditions[c] = reason
	t.mu.Unlock()
}

// Healthy reports whether every heartbeat still watched is within its
// timeout; otherwise the reasons, one per stale loop, sorted.
func (t *Telemetry) Healthy() (bool, []string) {
	now := t.now()
	var reasons []string
	t.mu.Lock()
	for name, h := range t.heartbeats {
		if h.stopped.Load() {
			continue
		}
		if age := h.age(now); age > h.timeout {
			reasons = append(reasons, fmt.Sprintf("loop %s: no heartbeat for %s (timeout %s)", name, age.Round(time.Millisecond), h.timeout))
		}
	}
	t.mu.Unlock()
	slices.Sort(reasons)
	return len(reasons) == 0, reasons
}

// IsReady reports whether the process is ready: at least one condition was
// declared, all of them are ready, and the process is healthy. Otherwise
// the reasons, sorted.
func (t *Telemetry) IsReady() (bool, []string) {
	var reasons []string
	t.mu.Lock()
	if len(t.conditions) == 0 {
		reasons = append(reasons, "no readiness reported yet")
	}
	for c, why := range t.conditions {
		if why != "" {
			reasons = append(reasons, c+": "+why)
		}
	}
	t.mu.Unlock()
	slices.Sort(reasons)
	_, unhealthy := t.Healthy()
	reasons = append(reasons, unhealthy...)
	return len(reasons) == 0, reasons
}

// registerHealth exports replaywatch_heartbeat_age_seconds{loop} and
// replaywatch_ready{condition}.
func (t *Telemetry) registerHealth() error {
	age, err := t.meter.Float64ObservableGauge("replaywatch.heartbeat.age", metric.WithUnit("s"),
		metric.WithDescription("Time since the loop's last heartbeat; /healthz fails while one is over its timeout"))
	if err != nil {
		return err
	}
	ready, err := t.meter.Int64ObservableGauge("replaywatch.ready",
		metric.WithDescription("1 while the readiness condition holds, 0 while it does not"))
	if err != nil {
		return err
	}
	t.health, err = t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := t.now()
		t.mu.Lock()
		defer t.mu.Unlock()
		for name, h := range t.heartbeats {
			if !h.stopped.Load() {
				o.ObserveFloat64(age, h.age(now).Seconds(), metric.WithAttributes(attribute.String("loop", name)))
			}
		}
		for c, why := range t.conditions {
			v := int64(0)
			if why == "" {
				v = 1
			}
			o.ObserveInt64(ready, v, metric.WithAttributes(attribute.String("condition", c)))
		}
		return nil
	}, age, ready)
	return err
}

// healthHandler answers 200 "ok", or 503 with a first line naming the
// failure and one line per reason.
func healthHandler(check func() (bool, []string), failure string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		ok, reasons := check()
		if ok {
			w.WriteHeader(http.StatusOK)
			fmt.Fprintln(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, failure)
		fmt.Fprintln(w, strings.Join(reasons, "\n"))
	})
}
