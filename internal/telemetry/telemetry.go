// Package telemetry is the agent's self-observability: an OpenTelemetry
// MeterProvider exported in the Prometheus text format on a private registry,
// the pipeline's counters as observable instruments, and the /metrics,
// /healthz and /readyz endpoints. README.md lists every metric.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// ServiceName is the service.name resource attribute.
const ServiceName = "replaywatch"

// NodeLabel is the label every exported series carries, with Options.Node
// as its value (the same value the ClickHouse sink writes to its node
// column).
const NodeLabel = "node"

// DefaultHeartbeatTimeout is how old a heartbeat may get before /healthz
// fails, when neither Options.HeartbeatTimeout nor the Heartbeat call says.
const DefaultHeartbeatTimeout = 30 * time.Second

// meterName names the instrumentation scope of this package's instruments.
const meterName = "github.com/replaywatch/replaywatch/internal/telemetry"

// Options describe the process being observed.
type Options struct {
	// Node is the value of the node label on every series and of the
	// host.name resource attribute; os.Hostname() when empty.
	Node string
	// ServiceVersion is the service.version resource attribute (omitted
	// when empty).
	ServiceVersion string
	// PodName and Namespace are the k8s.pod.name and k8s.namespace.name
	// resource attributes, set when not empty (from the downward API).
	PodName, Namespace string
	// HeartbeatTimeout is the default age past which a heartbeat makes
	// /healthz fail (DefaultHeartbeatTimeout when zero).
	HeartbeatTimeout time.Duration
	// ReadyConditions are declared at once as not ready ("not reported
	// yet"), so /readyz fails until each is marked Ready.
	ReadyConditions []string
	// Logger gets scrape and server errors; discarded when nil.
	Logger *slog.Logger
}

// Telemetry owns the MeterProvider, the Prometheus registry it is exported
// to, the heartbeats and the readiness conditions.
type Telemetry struct {
	provider *sdkmetric.MeterProvider
	registry *prometheus.Registry
	meter    metric.Meter
	log      *slog.Logger
	health   metric.Registration

	hbTimeout time.Duration
	now       func() time.Time // time.Now; tests replace it

	mu         sync.Mutex
	heartbeats map[string]*Heartbeat
	conditions map[string]string // condition -> reason it is not ready; "" when ready
}

// New builds the MeterProvider with a Prometheus exporter on a private
// registry. Every series carries the node label; the resource
// (service.name, service.version, host.name, k8s.pod.name,
// k8s.namespace.name, and whatever OTEL_RESOURCE_ATTRIBUTES adds) is the
// target_info series.
func New(o Options) (*Telemetry, error) {
	node := o.Node
	if node == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "unknown"
		}
		node = h
	}
	res, err := newResource(o, node)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(
		otelprom.WithRegisterer(prometheus.WrapRegistererWith(prometheus.Labels{NodeLabel: node}, reg)),
		// Explicit, not left to the global model.NameValidationScheme:
		// dots become underscores, counters get _total, and units their
		// Prometheus suffix (s -> _seconds, By -> _bytes; {annotations}
		// add nothing), which the sink's documented names rely on.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// No otel_scope_* labels on every series: names are already
		// namespaced replaywatch_<stage>_.
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hb := o.HeartbeatTimeout
	if hb <= 0 {
		hb = DefaultHeartbeatTimeout
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(exp))
	t := &Telemetry{
		provider: mp, registry: reg, meter: mp.Meter(meterName), log: log,
		hbTimeout: hb, now: time.Now,
		heartbeats: map[string]*Heartbeat{},
		conditions: map[string]string{},
	}
	for _, c := range o.ReadyConditions {
		t.conditions[c] = "not reported yet"
	}
	if err := t.registerHealth(); err != nil {
		return nil, errors.Join(err, mp.Shutdown(context.Background()))
	}
	return t, nil
}

func newResource(o Options, node string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{
		attribute.String("service.name", ServiceName),
		attribute.String("host.name", node),
	}
	if o.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", o.ServiceVersion))
	}
	if o.PodName != "" {
		attrs = append(attrs, attribute.String("k8s.pod.name", o.PodName))
	}
	if o.Namespace != "" {
		attrs = append(attrs, attribute.String("k8s.namespace.name", o.Namespace))
	}
	// Later options win: the environment can add attributes, not replace
	// these.
	res, err := resource.New(context.Background(), resource.WithFromEnv(), resource.WithAttributes(attrs...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}

// MeterProvider is the provider to hand to instrumented packages, e.g.
// clickhouse.Config.MeterProvider, so their metrics reach /metrics.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.provider }

// Close shuts the MeterProvider down: callbacks stop being called and later
// scrapes carry no OpenTelemetry metrics.
func (t *Telemetry) Close(ctx context.Context) error {
	return t.provider.Shutdown(ctx)
}
