package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/internal/progress"
	"github.com/replaywatch/replaywatch/pipeline"
	"github.com/replaywatch/replaywatch/sink"
	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/sink/text"
)

const analyzeUsage = `Usage: replaywatch analyze [flags] FILE...

Reads pcap or pcapng captures, gzip-compressed or not (several files are
merged packet by packet in time order as one capture; "-" reads standard
input; flags may come before or after the files, and "--" ends them),
rebuilds the HTTP/SSE exchanges of MCP Streamable HTTP traffic and
reports every resume that broke its contract.
With --spans it reads OpenTelemetry traces instead: OTLP JSON files, one
export per line, as the Collector's file exporter writes them (docs/otlp.md).

With --clickhouse, everything found (violations, resume attempts, sessions,
unknown outcomes, unverifiable places and every SSE event) is also stored in
ClickHouse; run "replaywatch schema apply" first. Rows ClickHouse cannot take
are kept in an on-disk spool and sent first on the next run.

Output: --format text (default) prints a summary and each finding with its
explanation and evidence; --format json prints JSON Lines (see README,
"Output format"). Exit code 0: no violations; 1: violations; 2: error, a
capture that could not be analysed, a run stopped by SIGINT or SIGTERM (the
report covers what was read), an unreadable spool file, a batch ClickHouse
refused for good, or rows neither stored nor spooled; 3: no violations, but rows wait in the ClickHouse spool.

A capture could not be analysed when less than half of its TCP payload bytes
reached the decoder (the rest cut by the snap length, lost in capture gaps or
in the unreadable part of a damaged file) or when most of its packets could
not be decoded. The report is still printed, its summary says why, and the
reason is on standard error; with --allow-partial the exit code is 0 or 1 as
usual and the reason is a warning. A capture with no packets, or no TCP
payload at all, lost nothing: it exits 0 with a warning. TCP payload that is
not HTTP counts as analysed; HTTP/2 (h2c), recognised but not decoded, does
not. The unread part of a damaged standard input or gzip file is not
known and not counted.

Flags:
`

// analyzeConfig is everything analyze can be told.
type analyzeConfig struct {
	format       string
	allowPartial bool
	progress     string
	cpuProfile   string
	// shutdownTimeout bounds the end of a run once reading stopped (the
	// input ended or a signal came): writing what is left to ClickHouse,
	// else to the spool.
	shutdownTimeout time.Duration
	hashKeyFile     string
	// spans: the files are OTLP JSON trace exports, not captures.
	spans bool
	// run configures the pipeline's stages (pipeline.Files).
	run        pipeline.Config
	clickhouse clickhouseFlags
	mem        memoryBudget
}

func (c *analyzeConfig) register(fs *flag.FlagSet) {
	c.run.Capture = capture.DefaultConfig()
	c.run.Decode = decode.DefaultConfig()
	c.run.Detect = detector.DefaultConfig()
	fs.StringVar(&c.format, "format", "text", "output format: text or json (JSON Lines)")
	fs.BoolVar(&c.spans, "spans", false, "the files are OpenTelemetry traces, not captures: OTLP JSON, one ExportTraceServiceRequest per line (the Collector's file exporter; docs/otlp.md)")
	fs.BoolVar(&c.allowPartial, "allow-partial", false, "report a capture that could not be analysed (less than half of its TCP payload analysed, or most packets undecodable) with exit 0 or 1 and a warning, instead of exit 2")
	fs.StringVar(&c.progress, "progress", "auto", "progress bar on standard error: auto (when it is a terminal), always or never")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the analysis to this file (for performance work)")
	fs.StringVar(&c.run.MemProfile, "memprofile", "", "write a heap profile taken at the end of the analysis to this file (captures only, not --spans)")
	fs.IntVar(&c.run.Capture.Workers, "workers", c.run.Capture.Workers, "reassembly and decode workers, connections sharded by flow hash (0: one per core)")
	c.clickhouse.registerConnect(fs)
	c.clickhouse.registerSink(fs)
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "once reading stops (end of input, SIGINT or SIGTERM), how long sending the last rows to ClickHouse may take; what is not sent by then is spooled")
	registerPrivacy(fs, &c.hashKeyFile, &c.run.Decode)
	registerLimits(fs, &c.run.Capture, &c.run.Decode, &c.run.Detect)
	registerPartialHistory(fs, &c.run.Detect)
	c.mem.register(fs)
}

// registerPartialHistory adds --partial-history, shared by analyze and
// agent: a capture point that sees only some of a session's connections.
func registerPartialHistory(fs *flag.FlagSet, dt *detector.Config) {
	fs.BoolVar(&dt.PartialHistory, "partial-history", dt.PartialHistory, "this capture may miss whole connections of a session (a server's node behind a load balancer without session affinity: each connection may go to another node): checks that rest on something not being seen are unverifiable (docs/catalogue.md, \"A session may be spread over capture points\")")
}

// registerLimits adds the memory bounds and timeouts shared by analyze and
// agent: every named limit of capture, decode and detector.
func registerLimits(fs *flag.FlagSet, cp *capture.Config, dc *decode.Config, dt *detector.Config) {
	fs.IntVar(&cp.MaxBufferedPagesPerConnection, "max-pages-per-connection", cp.MaxBufferedPagesPerConnection, "out-of-order reassembly pages buffered per connection before skipping ahead (counted as a gap)")
	fs.IntVar(&cp.MaxBufferedPagesTotal, "max-pages-total", cp.MaxBufferedPagesTotal, "out-of-order reassembly pages buffered over all connections (unless set, derived from --memory-limit)")
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
	fs.IntVar(&dt.MaxEventsIndexedPerServer, "max-server-events", dt.MaxEventsIndexedPerServer, "event ids indexed over all sessions (which session first sent each, about 80 B each), for cross-session replays; beyond it that check is unverifiable")
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("analyze", flag.ContinueOnError) }

func runAnalyze(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet()
	fs.SetOutput(stderr)
	if helpWanted(args) {
		fs.SetOutput(stdout)
	}
	var cfg analyzeConfig
	cfg.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), analyzeUsage)
		fs.PrintDefaults()
	}
	files, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	if err := cfg.validate(files); err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
		return exitError
	}
	if err := cfg.mem.apply(fs, 0, &cfg.run.Capture, &cfg.run.Decode, &cfg.run.Detect, &cfg.clickhouse.sink); err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
		return exitError
	}
	hk, err := loadHashKey(cfg.hashKeyFile)
	if err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
		return exitError
	}
	if hk.warning != "" {
		fmt.Fprintf(stderr, "replaywatch analyze: warning: %s\n", hk.warning)
	}
	cfg.run.Decode.HashKey = hk.key

	var bar *progress.Bar
	switch cfg.progress {
	case "always":
		bar = progress.New(stderr)
	case "auto":
		if f, ok := stderr.(*os.File); ok {
			bar = progress.ForTerminal(f)
		}
	}
	cfg.run.Capture.Progress = bar.Update

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
	if cfg.run.MemProfile != "" {
		// Written at the end; a path that cannot be is said now, not
		// after the whole analysis.
		f, err := os.Create(cfg.run.MemProfile)
		if err != nil {
			fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
			return exitError
		}
		f.Close()
	}

	// SIGINT (a terminal) and SIGTERM (timeout, docker stop, a CI runner)
	// alike: stop reading, report what was read, deliver or spool it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var store *chsink.Sink
	if cfg.clickhouse.enabled() {
		var conn *chsink.Conn
		var err error
		store, conn, err = cfg.clickhouse.openSink(ctx, strings.Join(files, ","), stderr, nil)
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
		cfg.run.Decode.KeepToolArguments = cfg.clickhouse.sink.StoreArguments
	}
	if store != nil {
		// On a signal the budget starts now, while the pipeline still
		// drains into the sink.
		defer context.AfterFunc(ctx, func() { store.ShutdownBy(time.Now().Add(cfg.shutdownTimeout)) })()
	}
	var summary *sink.Summary
	if cfg.spans {
		summary, err = pipeline.SpanFiles(ctx, files, pipeline.SpansConfig{OTLP: otlp.DefaultConfig(), Decode: cfg.run.Decode, Detect: cfg.run.Detect}, out)
	} else {
		summary, err = pipeline.Files(ctx, files, cfg.run, out)
	}
	bar.Done()
	interrupted := context.Cause(ctx)
	stop() // a second signal now ends the process at once
	var undelivered, corrupt bool
	if store != nil {
		// Close even after a failed analysis: what was accepted is
		// written or spooled, never dropped.
		closeCtx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		report := store.Close(closeCtx)
		cancel()
		fmt.Fprintf(stderr, "replaywatch analyze: %s\n", report)
		if report.Lost > 0 {
			corrupt = true
			fmt.Fprintf(stderr, "replaywatch analyze: error: %d rows could be neither sent to ClickHouse nor written to the spool %s: %s\n", report.Lost, report.SpoolDir, report.LastError)
		}
		if report.LeftRows > 0 {
			undelivered = true
			fmt.Fprintf(stderr, "replaywatch analyze: warning: ClickHouse did not take every row; they are safe in the spool %s\n", report.SpoolDir)
		}
		if len(report.CorruptFiles) > 0 {
			corrupt = true
			fmt.Fprintf(stderr, "replaywatch analyze: error: spool file(s) that could not be read were set aside, their rows not delivered: %s\n",
				strings.Join(report.CorruptFiles, ", "))
		}
		if len(report.RejectedFiles) > 0 {
			corrupt = true
			fmt.Fprintf(stderr, "replaywatch analyze: error: ClickHouse refused %d rows for good; their batches were set aside, not delivered: %s\n",
				report.Rejected, strings.Join(report.RejectedFiles, ", "))
		}
	}
	if err != nil {
		// A decoder's message may quote the input's bytes.
		fmt.Fprintf(stderr, "replaywatch analyze: %s\n", text.Escape(err.Error()))
		return exitError
	}
	if err := finish(summary); err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: writing output: %v\n", err)
		return exitError
	}
	for _, e := range summary.Errors {
		if interrupted != nil && strings.Contains(e, context.Canceled.Error()) {
			continue // said below
		}
		fmt.Fprintf(stderr, "replaywatch analyze: warning: %s\n", text.Escape(e)) // may quote the input
	}
	if interrupted != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: stopped by %v: the report covers what was read before it\n", interrupted)
		return exitError
	}
	switch {
	case summary.PartialReason != nil && !cfg.allowPartial:
		fmt.Fprintf(stderr, "replaywatch analyze: %s\n", partialMessage(summary))
		return exitError
	case summary.PartialReason != nil:
		fmt.Fprintf(stderr, "replaywatch analyze: warning: %s (reported anyway: --allow-partial)\n", *summary.PartialReason)
	case cfg.spans:
		if summary.Spans == 0 {
			fmt.Fprintf(stderr, "replaywatch analyze: warning: the files hold no spans: nothing was analysed\n")
		}
	case summary.Packets == 0:
		fmt.Fprintf(stderr, "replaywatch analyze: warning: the capture holds no packets: nothing was analysed\n")
	case summary.AnalysedShare == nil:
		fmt.Fprintf(stderr, "replaywatch analyze: warning: the capture holds no TCP payload: nothing was analysed\n")
	}
	switch {
	case corrupt:
		return exitError
	case summary.Violations > 0:
		return exitViolations
	case undelivered:
		return exitUndelivered
	}
	return exitOK
}

// partialMessage is the error of a capture that could not be analysed: why,
// what to do, and the flag that reports it anyway.
func partialMessage(s *sink.Summary) string {
	if s.PartialAdvice != "" {
		return fmt.Sprintf("%s; %s, or pass --allow-partial", *s.PartialReason, s.PartialAdvice)
	}
	return fmt.Sprintf("%s; pass --allow-partial to report it anyway", *s.PartialReason)
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
	if stdin > 0 && c.spans {
		return errors.New(`--spans reads files, not standard input ("-")`)
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
	if c.shutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout must be positive")
	}
	if err := c.clickhouse.validate(); err != nil {
		return err
	}
	return validateLimits(&c.run.Capture, &c.run.Decode, &c.run.Detect)
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
		"--max-server-events": dt.MaxEventsIndexedPerServer,
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
	var negative []string
	if cp.Workers < 0 {
		negative = append(negative, "--workers")
	}
	if dc.ReorderWindow < 0 {
		negative = append(negative, "--reorder-window")
	}
	var problems []string
	if len(bad) > 0 {
		slices.Sort(bad) // the maps above have no order
		problems = append(problems, strings.Join(bad, ", ")+" must be positive")
	}
	if len(negative) > 0 {
		problems = append(problems, strings.Join(negative, ", ")+" must not be negative")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
