package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/internal/progress"
	"github.com/replaywatch/replaywatch/sink"
	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/sink/text"
)

const analyzeUsage = `Usage: replaywatch analyze [flags] FILE...

Reads pcap or pcapng captures (several files are read in order as one
capture; "-" reads standard input), rebuilds the HTTP/SSE exchanges of MCP
Streamable HTTP traffic and reports every resume that broke its contract.

With --clickhouse, everything found (violations, resume attempts, sessions,
unknown outcomes, unverifiable places and every SSE event) is also stored in
ClickHouse; run "replaywatch schema apply" first. Rows ClickHouse cannot take
are kept in an on-disk spool and sent first on the next run.

Output: --format text (default) prints a summary and each finding with its
explanation and evidence; --format json prints JSON Lines (see README,
"Output format"). Exit code 0: no violations; 1: violations; 2: error.

Flags:
`

// analyzeConfig is everything analyze can be told.
type analyzeConfig struct {
	format     string
	progress   string
	cpuProfile string
	memProfile string
	capture    capture.Config
	decode     decode.Config
	detect     detector.Config
	clickhouse clickhouseFlags
}

func (c *analyzeConfig) register(fs *flag.FlagSet) {
	c.capture = capture.DefaultConfig()
	c.decode = decode.DefaultConfig()
	c.detect = detector.DefaultConfig()
	fs.StringVar(&c.format, "format", "text", "output format: text or json (JSON Lines)")
	fs.StringVar(&c.progress, "progress", "auto", "progress bar on standard error: auto (when it is a terminal), always or never")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the analysis to this file (for performance work)")
	fs.StringVar(&c.memProfile, "memprofile", "", "write a heap profile taken at the end of the analysis to this file")
	fs.IntVar(&c.capture.Workers, "workers", c.capture.Workers, "reassembly and decode workers, connections sharded by flow hash (0: one per core)")
	c.clickhouse.registerConnect(fs)
	c.clickhouse.registerSink(fs)
	registerLimits(fs, &c.capture, &c.decode, &c.detect)
}

// registerLimits adds the memory bounds and timeouts shared by analyze and
// agent: every named limit of capture, decode and detector.
func registerLimits(fs *flag.FlagSet, cp *capture.Config, dc *decode.Config, dt *detector.Config) {
	fs.IntVar(&cp.MaxBufferedPagesPerConnection, "max-pages-per-connection", cp.MaxBufferedPagesPerConnection, "out-of-order reassembly pages buffered per connection before skipping ahead (counted as a gap)")
	fs.IntVar(&cp.MaxBufferedPagesTotal, "max-pages-total", cp.MaxBufferedPagesTotal, "out-of-order reassembly pages buffered over all connections")
	fs.IntVar(&cp.MaxConnections, "max-connections", cp.MaxConnections, "TCP connections followed at once; the idlest is flushed beyond it")
	fs.DurationVar(&cp.IdleTimeout, "connection-idle-timeout", cp.IdleTimeout, "flush a TCP connection after this much capture time without packets")
	fs.IntVar(&dc.MaxHeaderBytes, "max-header-bytes", dc.MaxHeaderBytes, "largest HTTP head parsed")
	fs.IntVar(&dc.MaxBodyBytes, "max-body-bytes", dc.MaxBodyBytes, "largest JSON body buffered for JSON-RPC inspection")
	fs.IntVar(&dc.MaxSSELineBytes, "max-sse-line-bytes", dc.MaxSSELineBytes, "longest SSE line buffered")
	fs.IntVar(&dc.MaxArgumentBytes, "max-argument-bytes", dc.MaxArgumentBytes, "with --store-arguments: longest tool-argument text kept (cut beyond)")
	fs.IntVar(&dc.MaxEventBytes, "max-event-bytes", dc.MaxEventBytes, "largest SSE event data buffered")
	fs.DurationVar(&dc.ReorderWindow, "reorder-window", dc.ReorderWindow, "how long observations from different connections are held to merge them in capture-time order")
	fs.DurationVar(&dt.SessionIdleTimeout, "session-idle-timeout", dt.SessionIdleTimeout, "forget a session after this much capture time without traffic (recorded as expired, never as a 404)")
	fs.DurationVar(&dt.LinkWindow, "link-window", dt.LinkWindow, "link a new session to a lost one from the same client address within this window")
	fs.IntVar(&dt.MaxSessions, "max-sessions", dt.MaxSessions, "MCP sessions tracked at once")
	fs.IntVar(&dt.MaxEventsIndexedPerSession, "max-events-per-session", dt.MaxEventsIndexedPerSession, "event ids indexed per session; beyond it checks on that session are unverifiable")
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("analyze", flag.ContinueOnError) }

func runAnalyze(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet()
	fs.SetOutput(stderr)
	var cfg analyzeConfig
	cfg.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), analyzeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if err := cfg.validate(fs.Args()); err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
		return exitError
	}

	var bar *progress.Bar
	switch cfg.progress {
	case "always":
		bar = progress.New(stderr)
	case "auto":
		if f, ok := stderr.(*os.File); ok {
			bar = progress.ForTerminal(f)
		}
	}
	cfg.capture.Progress = bar.Update

	var out detector.Sink
	var finish func(*sink.Summary) error
	switch cfg.format {
	case "json":
		w := jsonl.New(stdout)
		out = w
		finish = func(s *sink.Summary) error { w.Summary(s); return w.Flush() }
	default:
		w := text.New(stdout)
		out = w
		finish = w.Finish
	}

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
			return exitError
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
			return exitError
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var store *chsink.Sink
	if cfg.clickhouse.enabled() {
		var conn *chsink.Conn
		var err error
		store, conn, err = cfg.clickhouse.openSink(ctx, strings.Join(fs.Args(), ","), stderr)
		if err != nil {
			fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
			return exitError
		}
		if conn != nil {
			defer conn.Close()
			if dropped, err := chsink.DropExpiredPartitions(ctx, conn, conn.Dialect(), time.Now()); err != nil {
				fmt.Fprintf(stderr, "replaywatch analyze: warning: retention: %v\n", err)
			} else if len(dropped) > 0 {
				fmt.Fprintf(stderr, "replaywatch analyze: retention: dropped %d expired partitions\n", len(dropped))
			}
		}
		out = sink.Tee(out, store)
		// The decoder keeps arguments only when they are to be stored.
		cfg.decode.KeepToolArguments = cfg.clickhouse.sink.StoreArguments
	}
	summary, err := analyze(ctx, fs.Args(), &cfg, out)
	bar.Done()
	if store != nil {
		// Close even after a failed analysis: what was accepted is
		// written or spooled, never dropped.
		report := store.Close()
		fmt.Fprintf(stderr, "replaywatch analyze: %s\n", report)
		if report.LeftRows > 0 {
			fmt.Fprintf(stderr, "replaywatch analyze: warning: ClickHouse did not take every row; they are safe in the spool\n")
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
		return exitError
	}
	if err := finish(summary); err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: writing output: %v\n", err)
		return exitError
	}
	for _, e := range summary.Errors {
		fmt.Fprintf(stderr, "replaywatch analyze: warning: %s\n", e)
	}
	if summary.Violations > 0 {
		return exitViolations
	}
	return exitOK
}

func (c *analyzeConfig) validate(files []string) error {
	if len(files) == 0 {
		return errors.New("no capture file given (use - for standard input)")
	}
	stdin := 0
	for _, f := range files {
		if f == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return errors.New(`standard input ("-") can be given only once`)
	}
	switch c.format {
	case "text", "json":
	default:
		return fmt.Errorf("--format %q: want text or json", c.format)
	}
	switch c.progress {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("--progress %q: want auto, always or never", c.progress)
	}
	if err := c.clickhouse.validate(); err != nil {
		return err
	}
	return validateLimits(&c.capture, &c.decode, &c.detect)
}

// validateLimits checks the flags registerLimits added.
func validateLimits(cp *capture.Config, dc *decode.Config, dt *detector.Config) error {
	var bad []string
	for name, v := range map[string]int{
		"--max-pages-per-connection": cp.MaxBufferedPagesPerConnection,
		"--max-pages-total":          cp.MaxBufferedPagesTotal, "--max-connections": cp.MaxConnections,
		"--max-header-bytes": dc.MaxHeaderBytes, "--max-body-bytes": dc.MaxBodyBytes,
		"--max-sse-line-bytes": dc.MaxSSELineBytes, "--max-argument-bytes": dc.MaxArgumentBytes, "--max-event-bytes": dc.MaxEventBytes,
		"--max-sessions": dt.MaxSessions, "--max-events-per-session": dt.MaxEventsIndexedPerSession,
	} {
		if v <= 0 {
			bad = append(bad, name)
		}
	}
	for name, v := range map[string]time.Duration{
		"--connection-idle-timeout": cp.IdleTimeout, "--session-idle-timeout": dt.SessionIdleTimeout,
		"--link-window": dt.LinkWindow,
	} {
		if v <= 0 {
			bad = append(bad, name)
		}
	}
	if cp.Workers < 0 {
		bad = append(bad, "--workers")
	}
	if dc.ReorderWindow < 0 {
		bad = append(bad, "--reorder-window")
	}
	if len(bad) > 0 {
		return fmt.Errorf("these flags must be positive (--workers and --reorder-window: not negative): %s", strings.Join(bad, ", "))
	}
	return nil
}

// analyze wires the pipeline, capture -> decode -> detector -> out, and
// returns the summary. The order of stages is declared here and nowhere
// else.
func analyze(ctx context.Context, files []string, cfg *analyzeConfig, out detector.Sink) (*sink.Summary, error) {
	start := time.Now()
	// Size decode by the workers capture will really run (zero means one per
	// core, and there is a cap), so every worker has a factory.
	cfg.capture = cfg.capture.WithDefaults()
	det := detector.New(cfg.detect, out)
	var first, last time.Time
	pipe := decode.NewPipeline(cfg.decode, cfg.capture.Workers, func(o *decode.Observation) {
		if first.IsZero() || o.Time.Before(first) {
			first = o.Time
		}
		if o.Time.After(last) {
			last = o.Time
		}
		det.Observe(o)
	})
	cstats, err := capture.ReadFiles(ctx, files, cfg.capture, func(worker int) decode.StreamFactory {
		return pipe.Factory(worker)
	})
	pipe.Close()
	var problems []string
	if err != nil {
		if cstats.Packets == 0 {
			return nil, err
		}
		// Some packets were read before the problem (a truncated file): report
		// what they show and say what went wrong.
		problems = append(problems, err.Error())
	}
	if cfg.memProfile != "" {
		// Taken before Close so it shows the state held for open sessions.
		if err := writeHeapProfile(cfg.memProfile); err != nil {
			problems = append(problems, err.Error())
		}
	}
	det.Close(last)
	s := buildSummary(cstats, pipe.Stats(), det.Stats(), problems)
	s.CaptureStart, s.CaptureEnd = first, last
	s.Elapsed = time.Since(start)
	s.ElapsedSeconds = s.Elapsed.Seconds()
	return s, nil
}

// buildSummary gathers the three stages' counters into the report's
// summary. Limits are prefixed by the stage that owns them.
func buildSummary(c capture.Stats, d decode.Stats, det detector.Stats, problems []string) *sink.Summary {
	s := &sink.Summary{
		Files: c.Files, Packets: c.Packets, Bytes: c.Bytes, TCPConnections: c.Connections,
		HTTPExchanges: uint64(d.HTTPExchanges), MCPExchanges: uint64(det.MCPExchanges),
		NonMCPExchanges: uint64(det.NonMCPExchanges), SSEEvents: uint64(d.SSEEvents),
		MCPSessions: uint64(det.SessionsSeen), CaptureGaps: c.Gaps, CaptureGapBytes: c.GapBytes,
		UnknownOutcomes: int(det.UnknownOutcomes),
		Resumes:         map[string]int{}, Findings: map[string]int{}, LimitsHit: map[string]int{},
		Errors: problems,
	}
	for k, n := range det.Resumes {
		s.Resumes[string(k)] = int(n)
	}
	for k, n := range det.Violations {
		s.Findings[string(k)] = int(n)
		s.Violations += int(n)
	}
	for _, n := range det.Unverifiable {
		s.Unverifiable += int(n)
	}
	limit := func(name string, n uint64) {
		if n > 0 {
			s.LimitsHit[name] += int(n)
		}
	}
	limit("capture.MaxBufferedPages", c.PageLimitHits)
	limit("capture.MaxConnections", c.Evictions)
	limit("decode.MaxHeaderBytes", uint64(d.HeaderLimitHits))
	limit("decode.MaxSSELineBytes", uint64(d.LineLimitHits))
	limit("decode.MaxEventBytes", uint64(d.EventLimitHits))
	limit("decode.MaxBodyBytes", uint64(d.BodyLimitHits))
	limit("decode.MaxPipelinedRequests", uint64(d.PipelineOverflows))
	limit("decode.MaxBufferedObservations", uint64(d.EarlyReleases))
	for k, n := range det.LimitsHit {
		limit("detector."+k, uint64(n))
	}
	if c.Undecodable > 0 {
		s.Errors = append(s.Errors, fmt.Sprintf("%d packets could not be decoded", c.Undecodable))
	}
	return s
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}
