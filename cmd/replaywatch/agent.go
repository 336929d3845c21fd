package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/internal/telemetry"
	"github.com/replaywatch/replaywatch/pipeline"
	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/sink/text"
)

const agentUsage = `Usage: replaywatch agent [flags]

Captures MCP Streamable HTTP traffic live (AF_PACKET, no cgo; needs
CAP_NET_RAW), runs the same decoder and detector as analyze continuously, and
writes what it finds to ClickHouse (--clickhouse) or, without one, prints it
on standard output (--format text|json, the analyze contract). Serves
/metrics (Prometheus), /healthz and /readyz on --listen. SIGTERM or SIGINT
flush everything (findings, the sink's batches, the spool) within
--shutdown-timeout, spooling what ClickHouse has not taken by then, and stop:
exit 0, or 3 when rows wait in the spool for the next run, or 2 on an error
(rows neither stored nor spooled, an unreadable spool file).

Configuration: defaults < --config YAML file (or REPLAYWATCH_CONFIG) <
environment REPLAYWATCH_<FLAG> (e.g. REPLAYWATCH_INTERFACE=eth0) < flags.
Kubernetes metadata comes from NODE_NAME, POD_NAME and POD_NAMESPACE.

Flags:
`

// agentConfig is everything the agent can be told.
type agentConfig struct {
	configFile      string
	interfaces      string
	ports           string
	filter          string
	listen          string
	format          string
	logLevel        string
	applySchema     bool
	shutdownTimeout time.Duration
	hashKeyFile     string
	live            capture.LiveConfig
	otlp            otlp.Config
	decode          decode.Config
	detect          detector.Config
	clickhouse      clickhouseFlags
	mem             memoryBudget
}

func (c *agentConfig) register(fs *flag.FlagSet) {
	c.live.Config = capture.DefaultConfig()
	c.decode = decode.DefaultConfig()
	c.detect = detector.DefaultConfig()
	fs.StringVar(&c.configFile, "config", "", "YAML configuration file: its keys are the flags' names in snake_case, the ClickHouse and limit flags under clickhouse: and limits: (interfaces sets --interface, clickhouse.dsn --clickhouse); flags and REPLAYWATCH_* variables win; deploy/kubernetes/agent/configmap.yaml is an example")
	fs.StringVar(&c.interfaces, "interface", "any", `interfaces to capture on, comma-separated; "any" for all; "none" for no packet capture (spans only)`)
	fs.StringVar(&c.ports, "ports", "", "capture TCP traffic on these ports only (comma-separated; compiled to BPF here)")
	fs.StringVar(&c.filter, "filter", "", "capture filter as a BPF expression instead of --ports (compiled with tcpdump -ddd)")
	fs.IntVar(&c.live.Workers, "workers", 0, "capture and decode workers, connections sharded by the kernel's flow hash (0: one per core)")
	fs.IntVar(&c.live.BlockSize, "ring-block-size", capture.DefaultBlockSize, "bytes per block of each packet ring (TPACKET_V3; 0: the default)")
	fs.IntVar(&c.live.NumBlocks, "ring-blocks", capture.DefaultNumBlocks, "blocks per packet ring (0: the default); a ring per worker and interface holds ring-blocks x ring-block-size bytes")
	fs.StringVar(&c.listen, "listen", ":9464", "address of /metrics, /healthz and /readyz")
	c.otlp = otlp.DefaultConfig()
	fs.StringVar(&c.otlp.GRPCAddr, "otlp-grpc", "", "receive OpenTelemetry traces over OTLP/gRPC on this address (e.g. :4317; docs/otlp.md)")
	fs.StringVar(&c.otlp.HTTPAddr, "otlp-http", "", "receive OpenTelemetry traces over OTLP/HTTP (POST /v1/traces) on this address (e.g. :4318)")
	fs.StringVar(&c.format, "format", "json", "without --clickhouse: print findings on standard output as json (JSON Lines) or text")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error (structured logs on standard error)")
	fs.BoolVar(&c.applySchema, "apply-schema", false, "create or migrate the ClickHouse schema at start")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 25*time.Second, "on SIGTERM, how long flushing may take (keep below the pod's grace period)")
	c.clickhouse.registerConnect(fs)
	c.clickhouse.registerSink(fs)
	registerPrivacy(fs, &c.hashKeyFile, &c.decode)
	if n := os.Getenv("NODE_NAME"); n != "" {
		fs.Set("node", n)
	}
	registerLimits(fs, &c.live.Config, &c.decode, &c.detect)
	registerPartialHistory(fs, &c.detect)
	c.mem.register(fs)
}

func (c *agentConfig) validate() error {
	switch c.format {
	case "text", "json":
	default:
		return fmt.Errorf("--format %q: want text or json", c.format)
	}
	if _, err := parseLogLevel(c.logLevel); err != nil {
		return err
	}
	c.live.Interfaces = splitList(c.interfaces)
	if c.capturesNothing() {
		if !c.receivesSpans() {
			return errors.New(`--interface none needs --otlp-grpc or --otlp-http: the agent would watch nothing`)
		}
		c.live.Interfaces = nil
	}
	c.live.Filter = c.filter
	c.live.Ports = nil
	for _, p := range splitList(c.ports) {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("--ports: %q is not a port", p)
		}
		c.live.Ports = append(c.live.Ports, uint16(n))
	}
	if c.shutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout must be positive")
	}
	if err := c.clickhouse.validate(); err != nil {
		return err
	}
	if err := validateLimits(&c.live.Config, &c.decode, &c.detect); err != nil {
		return err
	}
	if c.capturesNothing() {
		return c.otlp.Validate()
	}
	if err := c.otlp.Validate(); err != nil {
		return err
	}
	return c.live.Validate()
}

// ringBytes is the memory the packet rings take outside the Go heap: one
// ring per worker and interface.
func (c *agentConfig) ringBytes() int64 {
	if c.capturesNothing() {
		return 0
	}
	l := c.live.WithDefaults() // 0 blocks or block size: the defaults, as Live takes them
	return int64(l.Workers) * int64(max(len(c.live.Interfaces), 1)) * int64(l.BlockSize) * int64(l.NumBlocks)
}

// capturesNothing: --interface none, spans only.
func (c *agentConfig) capturesNothing() bool { return strings.TrimSpace(c.interfaces) == "none" }

func (c *agentConfig) receivesSpans() bool { return c.otlp.GRPCAddr != "" || c.otlp.HTTPAddr != "" }

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if helpWanted(args) {
		fs.SetOutput(stdout)
	}
	var cfg agentConfig
	cfg.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), agentUsage)
		fs.PrintDefaults()
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "replaywatch agent: %v\n", err)
		return exitError
	}
	var file *agentFile
	if path := configPath(args); path != "" {
		f, err := loadAgentFile(path)
		if err != nil {
			return fail(err)
		}
		file = f
	}
	if err := applyFile(fs, file); err != nil {
		return fail(err)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected arguments %q (the agent reads interfaces, not files: use analyze for captures)", fs.Args()))
	}
	if err := cfg.validate(); err != nil {
		return fail(err)
	}
	if err := cfg.mem.apply(fs, cfg.ringBytes(), &cfg.live.Config, &cfg.decode, &cfg.detect, &cfg.clickhouse.sink); err != nil {
		return fail(err)
	}
	level, _ := parseLogLevel(cfg.logLevel)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Once the first signal came, a second one ends the process at once
	// (the default disposition), as it does for analyze.
	defer context.AfterFunc(ctx, stop)()
	if err := agent(ctx, &cfg, stdout, stderr, log); err != nil {
		var left errUndelivered
		if errors.As(err, &left) {
			log.Warn("agent stopped with rows left in the spool for the next run", "rows", left.LeftRows, "spool", left.SpoolDir)
			return exitUndelivered
		}
		log.Error("agent stopped", "err", err.Error())
		return exitError
	}
	return exitOK
}

// agent runs until ctx is cancelled: capture -> decode -> detector -> out,
// the same order as analyze, fed continuously.
func agent(ctx context.Context, cfg *agentConfig, stdout, stderr io.Writer, log *slog.Logger) error {
	// The shutdown budget runs from the signal, whatever the agent is doing
	// then (still dialling ClickHouse, say), or from the capture's own end.
	// Its disarming is deferred first, so it runs last: after the metrics
	// server and everything else have stopped.
	sd := &shutdownClock{budget: cfg.shutdownTimeout, log: log}
	defer sd.disarm()
	defer context.AfterFunc(ctx, func() { sd.arm() })()
	tel, err := telemetry.New(telemetry.Options{
		Node: cfg.clickhouse.sink.Node, ServiceVersion: version(), PodName: os.Getenv("POD_NAME"), Namespace: os.Getenv("POD_NAMESPACE"),
		ReadyConditions: []string{"capture", "output"}, Logger: log,
	})
	if err != nil {
		return err
	}
	defer tel.Close(context.Background())
	if err := tel.RegisterMemoryPlan(cfg.mem.plan); err != nil {
		return err
	}
	log.Info("memory budget", "plan", cfg.mem.plan.String())
	hk, err := loadHashKey(cfg.hashKeyFile)
	if err != nil {
		return err
	}
	if hk.warning != "" {
		log.Warn(hk.warning)
	}
	log.Info("hash key", "from", hk.origin)
	cfg.decode.HashKey = hk.key
	ln, err := telemetry.Listen(cfg.listen)
	if err != nil {
		return err
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- tel.ServeListener(serveCtx, ln) }()
	defer func() { stopServe(); <-served }()
	log.Info("agent starting", "interfaces", cfg.live.Interfaces, "ports", cfg.live.Ports, "filter", cfg.live.Filter,
		"listen", ln.Addr().String(), "node", cfg.clickhouse.sink.Node, "clickhouse", chsink.Redact(cfg.clickhouse.connect.DSN))
	if cfg.capturesNothing() && (len(cfg.live.Ports) > 0 || cfg.live.Filter != "") {
		log.Warn("--ports and --filter capture nothing with --interface none (spans only): ignored")
	}

	// Output: ClickHouse, or standard output.
	var out detector.Sink
	var store *chsink.Sink
	var jw *jsonl.Writer // JSON Lines on standard output
	var flushOut func()
	if cfg.clickhouse.enabled() {
		cfg.clickhouse.sink.MeterProvider = tel.MeterProvider()
		if cfg.applySchema {
			if err := applySchemaAtStart(ctx, cfg, log); err != nil {
				return err
			}
		}
		source := fmt.Sprintf("agent %s", strings.Join(cfg.live.Interfaces, ","))
		if pod := os.Getenv("POD_NAME"); pod != "" {
			source = fmt.Sprintf("%s/%s %s", os.Getenv("POD_NAMESPACE"), pod, source)
		}
		s, conn, err := cfg.clickhouse.openSink(ctx, source, stderr, log)
		if err != nil {
			return err
		}
		if conn != nil {
			defer conn.Close()
			go keepRetention(ctx, conn, log)
		}
		store = s
		out = s
		cfg.decode.KeepToolArguments = cfg.clickhouse.sink.StoreArguments
	} else if cfg.format == "json" {
		jw = jsonl.New(stdout)
		out, flushOut = jw, func() { jw.Flush() }
	} else {
		out = text.NewStream(stdout)
	}
	tel.Ready("output")

	beat := tel.Heartbeat("detector", 30*time.Second)
	in, err := startInputs(cfg, out, func() {
		if flushOut != nil {
			flushOut()
		}
		beat.Beat()
	}, tel)
	if err != nil {
		beat.Stop()
		return err
	}
	defer in.unregister()
	tel.Ready("capture")
	if in.live != nil {
		log.Info("capturing", "workers", in.live.Workers())
	}
	if in.spans != nil {
		log.Info("receiving OTLP traces", "grpc", in.spans.GRPCAddr(), "http", in.spans.HTTPAddr())
	}

	runErr := make(chan error, 1)
	go func() { runErr <- in.run(ctx) }()
	var capErr error
	select {
	case capErr = <-runErr:
	case <-ctx.Done():
		log.Info("stopping: flushing findings", "timeout", cfg.shutdownTimeout.String())
		capErr = <-runErr
	}
	// Shut down in pipeline order (pipeline.Live.Close), then the sink,
	// within the shutdown timeout: the sink gets what is left of it (less a
	// tenth for the last words), sends what it can and spools the rest
	// before then.
	shutdownBy := sd.arm()
	tel.NotReady("capture", "stopping")
	sinkBy := shutdownBy.Add(-cfg.shutdownTimeout / 10)
	if store != nil {
		// Before the pipeline drains into it: a hung server's insert must
		// not hold the detector's last records past the budget.
		store.ShutdownBy(sinkBy)
	}
	if err := in.close(time.Now().Add(time.Until(sinkBy) / 4)); err != nil {
		log.Warn("OTLP receiver stopped with exports unanswered", "err", err.Error())
	}
	beat.Stop()
	if jw != nil {
		// A write that failed (a closed pipe, a full disk) lost findings:
		// say so, and exit non-zero, as analyze does.
		if err := jw.Flush(); err != nil {
			return fmt.Errorf("writing findings to standard output: %w", err)
		}
	}
	var undelivered error
	if store != nil {
		closeCtx, cancel := context.WithDeadline(context.Background(), sinkBy)
		r := store.Close(closeCtx)
		cancel()
		log.Info("sink closed", "written", r.Written, "replayed", r.Replayed, "left_in_spool", r.LeftRows, "lost", r.Lost,
			"corrupt_files", len(r.CorruptFiles), "rejected", r.Rejected, "spool", r.SpoolDir)
		switch {
		case r.Lost > 0 || len(r.CorruptFiles) > 0 || len(r.RejectedFiles) > 0:
			return fmt.Errorf("clickhouse sink: %s", r)
		case r.LeftRows > 0:
			undelivered = errUndelivered{r}
		}
	}
	if capErr != nil && !errors.Is(capErr, context.Canceled) {
		return capErr
	}
	if undelivered != nil {
		return undelivered
	}
	log.Info("agent stopped")
	return nil
}

// inputs are the agent's pipelines, packets and spans, sharing one sink
// (and therefore one lock).
type inputs struct {
	mu    sync.Mutex
	live  *pipeline.Live
	spans *pipeline.Spans
	reg   metric.Registration
}

// startInputs starts the inputs cfg asks for, writing to out, and exports
// their metrics.
func startInputs(cfg *agentConfig, out detector.Sink, tick func(), tel *telemetry.Telemetry) (*inputs, error) {
	in := &inputs{}
	var err error
	if !cfg.capturesNothing() {
		in.live, err = pipeline.NewLive(pipeline.LiveConfig{Capture: cfg.live, Decode: cfg.decode, Detect: cfg.detect, Tick: tick, Lock: &in.mu}, out)
		if err != nil {
			return nil, err // capture says which capability is missing
		}
	}
	if cfg.receivesSpans() {
		in.spans, err = pipeline.NewSpans(pipeline.SpansConfig{OTLP: cfg.otlp, Decode: cfg.decode, Detect: cfg.detect, Tick: tick, Lock: &in.mu}, out)
		if err != nil {
			in.close(time.Now())
			return nil, err
		}
	}
	var src telemetry.PipelineSources
	switch {
	case in.live != nil && in.spans != nil:
		src.Detector = func() detector.Stats { return in.live.DetectorStats().Plus(in.spans.DetectorStats()) }
	case in.live != nil:
		src.Detector = in.live.DetectorStats
	default:
		src.Detector = in.spans.DetectorStats
	}
	if l := in.live; l != nil {
		src.Capture = func() capture.Stats { return l.CaptureStats().Stats }
		src.Kernel = func() telemetry.KernelStats {
			s := l.CaptureStats()
			return telemetry.KernelStats{Packets: s.Kernel.Packets, Drops: s.Kernel.Drops, Duplicates: s.Duplicates}
		}
		src.Levels = func() telemetry.CaptureLevels {
			return telemetry.CaptureLevels{Connections: int64(l.CaptureStats().OpenConnections)}
		}
		src.Decode = l.DecodeStats
	}
	if in.spans != nil {
		src.Spans = in.spans.AssemblerStats
	}
	if in.reg, err = tel.RegisterPipeline(src); err != nil {
		in.close(time.Now())
		return nil, err
	}
	return in, nil
}

// run captures until ctx ends or the capture fails; spans are received
// in the background meanwhile.
func (in *inputs) run(ctx context.Context) error {
	if in.live != nil {
		return in.live.Run(ctx)
	}
	<-ctx.Done()
	return ctx.Err()
}

// close shuts the inputs down in pipeline order, answering exports in
// flight until by.
func (in *inputs) close(by time.Time) error {
	if in.live != nil {
		in.live.Close()
	}
	if in.spans == nil {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	return in.spans.Close(ctx)
}

func (in *inputs) unregister() {
	if in.reg != nil {
		in.reg.Unregister()
	}
}

// errUndelivered ends an agent whose last rows wait in the spool: not an
// error of the agent, but not a clean stop either (exit 3, as analyze).
type errUndelivered struct{ chsink.Report }

func (e errUndelivered) Error() string { return e.String() }

// applySchemaAtStart migrates the schema when the server is reachable; an
// unreachable server is not an error (the sink spools until it returns).
func applySchemaAtStart(ctx context.Context, cfg *agentConfig, log *slog.Logger) error {
	conn, err := chsink.Connect(ctx, cfg.clickhouse.connect)
	if err != nil {
		if chsink.Unreachable(err) {
			log.Warn("clickhouse unreachable: schema not applied now; findings are spooled", "err", err.Error())
			return nil
		}
		return err
	}
	defer conn.Close()
	applied, err := chsink.Apply(ctx, conn, conn.Dialect(), 0, "replaywatch "+version())
	for _, a := range applied {
		log.Info("schema migration applied", "version", a.Version, "name", a.Name)
	}
	return err
}

// retentionEvery is how often the agent enforces --retention-days on a
// server without TTL (before 19.6) by dropping expired daily partitions; on
// newer servers the tables' TTL does it and the check costs nothing.
const retentionEvery = time.Hour

// keepRetention drops expired partitions now and every retentionEvery until
// ctx ends. Agents on several nodes may race to drop the same partition: the
// loser's error is a warning, and the next round finds nothing to drop.
func keepRetention(ctx context.Context, conn *chsink.Conn, log *slog.Logger) {
	for {
		dropped, err := chsink.DropExpiredPartitions(ctx, conn, conn.Dialect(), time.Now())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("retention: dropping expired partitions", "err", err)
		case len(dropped) > 0:
			log.Info("retention: dropped expired partitions", "partitions", len(dropped), "retention_days", conn.Dialect().RetentionDays)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retentionEvery):
		}
	}
}

// shutdownClock is the agent's shutdown budget: armed by the first signal
// (or by the capture's end), it ends the process past --shutdown-timeout,
// the backstop of a stage that hangs.
type shutdownClock struct {
	budget time.Duration
	log    *slog.Logger

	mu    sync.Mutex
	by    time.Time
	timer *time.Timer
}

// arm starts the budget unless it runs already, and says when it ends.
func (c *shutdownClock) arm() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil {
		c.by = time.Now().Add(c.budget)
		c.timer = time.AfterFunc(c.budget, func() {
			c.log.Error("shutdown took longer than --shutdown-timeout; exiting with what was flushed")
			os.Exit(exitError)
		})
	}
	return c.by
}

func (c *shutdownClock) disarm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
}
