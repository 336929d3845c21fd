package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
"Output format"). Exit code 0: no violations; 1: violations; 2: error, a
capture that could not be analysed, a run stopped by SIGINT or SIGTERM (the
report covers what was read), an unreadable spool file or rows neither
stored nor spooled; 3: no violations, but rows wait in the ClickHouse spool.

A capture could not be analysed when less than half of its TCP payload bytes
reached the decoder (the rest cut by the snap length, lost in capture gaps or
in the unreadable part of a damaged file) or when most of its packets could
not be decoded. The report is still printed, its summary says why, and the
reason is on standard error; with --allow-partial the exit code is 0 or 1 as
usual and the reason is a warning. A capture with no packets, or no TCP
payload at all, lost nothing: it exits 0 with a warning. TCP payload that is
not HTTP counts as analysed. The unread part of a damaged standard input is
not known and not counted.

Flags:
`

// analyzeConfig is everything analyze can be told.
type analyzeConfig struct {
	format       string
	allowPartial bool
	progress     string
	cpuProfile   string
	memProfile   string
	// shutdownTimeout bounds the end of a run once reading stopped (the
	// input ended or a signal came): writing what is left to ClickHouse,
	// else to the spool.
	shutdownTimeout time.Duration
	hashKeyFile     string
	capture         capture.Config
	decode          decode.Config
	detect          detector.Config
	clickhouse      clickhouseFlags
}

func (c *analyzeConfig) register(fs *flag.FlagSet) {
	c.capture = capture.DefaultConfig()
	c.decode = decode.DefaultConfig()
	c.detect = detector.DefaultConfig()
	fs.StringVar(&c.format, "format", "text", "output format: text or json (JSON Lines)")
	fs.BoolVar(&c.allowPartial, "allow-partial", false, "report a capture that could not be analysed (less than half of its TCP payload analysed, or most packets undecodable) with exit 0 or 1 and a warning, instead of exit 2")
	fs.StringVar(&c.progress, "progress", "auto", "progress bar on standard error: auto (when it is a terminal), always or never")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the analysis to this file (for performance work)")
	fs.StringVar(&c.memProfile, "memprofile", "", "write a heap profile taken at the end of the analysis to this file")
	fs.IntVar(&c.capture.Workers, "workers", c.capture.Workers, "reassembly and decode workers, connections sharded by flow hash (0: one per core)")
	c.clickhouse.registerConnect(fs)
	c.clickhouse.registerSink(fs)
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "once reading stops (end of input, SIGINT or SIGTERM), how long sending the last rows to ClickHouse may take; what is not sent by then is spooled")
	registerHashKey(fs, &c.hashKeyFile)
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
	fs.IntVar(&dt.MaxEventsIndexedPerServer, "max-server-events", dt.MaxEventsIndexedPerServer, "event ids indexed over all sessions (which session first sent each, about 80 B each), for cross-session replays; beyond it that check is unverifiable")
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
	hk, err := loadHashKey(cfg.hashKeyFile)
	if err != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: %v\n", err)
		return exitError
	}
	if hk.warning != "" {
		fmt.Fprintf(stderr, "replaywatch analyze: warning: %s\n", hk.warning)
	}
	cfg.decode.HashKey = hk.key

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

	// SIGINT (a terminal) and SIGTERM (timeout, docker stop, a CI runner)
	// alike: stop reading, report what was read, deliver or spool it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var store *chsink.Sink
	if cfg.clickhouse.enabled() {
		var conn *chsink.Conn
		var err error
		store, conn, err = cfg.clickhouse.openSink(ctx, strings.Join(fs.Args(), ","), stderr, nil)
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
		if interrupted != nil && strings.Contains(e, context.Canceled.Error()) {
			continue // said below
		}
		fmt.Fprintf(stderr, "replaywatch analyze: warning: %s\n", e)
	}
	if interrupted != nil {
		fmt.Fprintf(stderr, "replaywatch analyze: stopped by %v: the report covers the %d packets read before it\n", interrupted, summary.Packets)
		return exitError
	}
	switch {
	case summary.PartialReason != nil && !cfg.allowPartial:
		fmt.Fprintf(stderr, "replaywatch analyze: %s\n", partialMessage(summary))
		return exitError
	case summary.PartialReason != nil:
		fmt.Fprintf(stderr, "replaywatch analyze: warning: %s (reported anyway: --allow-partial)\n", *summary.PartialReason)
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
	// last is the detector's clock (every observation); first and end span
	// the HTTP messages and events decoded, the summary's capture times: a
	// gap alone is not traffic analysed.
	var first, end, last time.Time
	pipe := decode.NewPipeline(cfg.decode, cfg.capture.Workers, func(o *decode.Observation) {
		if o.Time.After(last) {
			last = o.Time
		}
		if o.Kind != decode.KindGap {
			if first.IsZero() || o.Time.Before(first) {
				first = o.Time
			}
			if o.Time.After(end) {
				end = o.Time
			}
		}
		det.Observe(o)
	})
	cstats, err := capture.ReadFiles(ctx, files, cfg.capture, func(worker int) decode.StreamFactory {
		return pipe.Factory(worker)
	})
	pipe.Close()
	var problems []string
	var damaged []error
	if err != nil {
		if cstats.Packets == 0 {
			return nil, err
		}
		// Some packets were read before the problem (a truncated file): report
		// what they show and say what went wrong, file by file.
		for _, e := range splitErrors(err) {
			problems = append(problems, e.Error())
			if errors.Is(e, capture.ErrTruncated) || errors.Is(e, capture.ErrCorrupt) {
				damaged = append(damaged, e)
			}
		}
	}
	if cfg.memProfile != "" {
		// Taken before Close so it shows the state held for open sessions.
		if err := writeHeapProfile(cfg.memProfile); err != nil {
			problems = append(problems, err.Error())
		}
	}
	det.Close(last)
	s := buildSummary(cstats, pipe.Stats(), det.Stats(), problems)
	var damagedNames []string
	s.UnreadFileBytes, damagedNames = unreadBytes(ctx, files, damaged)
	assessCoverage(s, snapLength(files), damagedNames)
	if !first.IsZero() {
		first, end = first.UTC(), end.UTC()
		s.CaptureStart, s.CaptureEnd = &first, &end
	}
	s.Elapsed = time.Since(start)
	s.ElapsedSeconds = s.Elapsed.Seconds()
	return s, nil
}

// splitErrors undoes errors.Join: capture joins one error per damaged file.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// buildSummary gathers the three stages' counters into the report's
// summary. Limits are prefixed by the stage that owns them.
func buildSummary(c capture.Stats, d decode.Stats, det detector.Stats, problems []string) *sink.Summary {
	s := &sink.Summary{
		Files: c.Files, Packets: c.Packets, Bytes: c.Bytes, TCPConnections: c.Connections,
		HTTPExchanges: uint64(d.HTTPExchanges), MCPExchanges: uint64(det.MCPExchanges),
		NonMCPExchanges: uint64(det.NonMCPExchanges), SSEEvents: uint64(d.SSEEvents),
		MCPSessions: uint64(det.SessionsSeen), CaptureGaps: c.Gaps, CaptureGapBytes: c.GapBytes,
		PayloadBytes: c.PayloadBytes, SnaplenBytes: c.SnaplenBytes, UndecodablePackets: c.Undecodable,
		UnknownOutcomes: int(det.UnknownOutcomes), HeaderMismatches: int(det.HeaderMismatches),
		Resumes: map[string]int{}, Findings: map[string]int{}, LimitsHit: map[string]int{}, Revisions: map[string]int{},
		Errors: problems,
	}
	for k, n := range det.Resumes {
		s.Resumes[string(k)] = int(n)
	}
	for k, n := range det.Revisions {
		s.Revisions[k] = int(n)
	}
	s.RevisionsByPair = make(map[string]map[string]int, len(det.PairRevisions))
	for pair, revs := range det.PairRevisions {
		m := make(map[string]int, len(revs))
		for k, n := range revs {
			m[k] = int(n)
		}
		s.RevisionsByPair[pair] = m
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
	s.Errors = append(s.Errors, c.Warnings()...)
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

// minAnalysedShare is the share of a capture's TCP payload bytes that must
// reach the decoder for the capture to count as analysed. Below it, most of
// the traffic is gone (cut by the snap length, lost in gaps, in the unread
// part of a damaged file): "no violations" would speak for a minority of
// it, so analyze exits 2 unless --allow-partial. The same half applies to
// packets whose headers could not be decoded.
const minAnalysedShare = 0.5

// fullSnapLength is the snap length from which a capture is taken to keep
// whole packets (tcpdump -s 0 writes 262144, older versions 65535). A
// shorter one is named as a likely cause when bytes were lost.
const fullSnapLength = 65535

// assessCoverage sets the summary's analysed share and, when the capture
// could not be analysed, the reason and what to do. snap is the smallest
// snap length the input files declare (0: unknown); damaged names the
// files whose unread part is in s.UnreadFileBytes.
func assessCoverage(s *sink.Summary, snap int, damaged []string) {
	// Snap-length cuts are counted in the gap bytes too; max guards a
	// capture that counted them only as cuts.
	lostGaps := max(s.CaptureGapBytes, s.SnaplenBytes)
	if total := s.PayloadBytes + lostGaps + s.UnreadFileBytes; total > 0 {
		share := float64(s.PayloadBytes) / float64(total)
		s.AnalysedShare = &share
	}
	shortSnap := snap > 0 && snap < fullSnapLength
	snapNote := fmt.Sprintf("the capture's snap length is %d bytes, so longer packets were cut", snap)
	var why, advice []string
	if s.AnalysedShare != nil && *s.AnalysedShare < minAnalysedShare {
		var causes []string
		if s.SnaplenBytes > 0 {
			cut := fmt.Sprintf("%s bytes were cut by the capture's snap length", grouped(s.SnaplenBytes))
			if snap > 0 {
				cut += fmt.Sprintf(" (%d bytes)", snap)
			}
			causes = append(causes, cut)
			advice = append(advice, "recapture with -s 0")
		}
		if g := lostGaps - s.SnaplenBytes; g > 0 {
			lost := fmt.Sprintf("%s bytes were lost in capture gaps", grouped(g))
			switch {
			case s.SnaplenBytes == 0 && shortSnap:
				lost += " (" + snapNote + ")"
				advice = append(advice, "recapture with -s 0")
			case s.LimitsHit["capture.MaxBufferedPages"] > 0:
				lost += " (some forced by the reassembly page limits)"
				advice = append(advice, "raise --max-pages-per-connection and --max-pages-total")
			default:
				advice = append(advice, "recapture without dropped packets (tcpdump -B for a larger buffer)")
			}
			causes = append(causes, lost)
		}
		if s.UnreadFileBytes > 0 {
			causes = append(causes, fmt.Sprintf("%s bytes of %s could not be read past the damage",
				grouped(s.UnreadFileBytes), strings.Join(damaged, ", ")))
			advice = append(advice, "copy or repair the damaged file")
		}
		only := "only " + sink.Percent(*s.AnalysedShare)
		if *s.AnalysedShare > 0 && *s.AnalysedShare < 0.01 {
			only = sink.Percent(*s.AnalysedShare)
		}
		why = append(why, fmt.Sprintf("%s of TCP payload bytes could be analysed: %s", only, strings.Join(causes, ", ")))
	}
	if s.Packets > 0 && float64(s.UndecodablePackets) > float64(s.Packets)*(1-minAnalysedShare) {
		bad := fmt.Sprintf("%s of %s packets could not be decoded (headers damaged or cut, or a link type not supported)",
			grouped(s.UndecodablePackets), grouped(s.Packets))
		if shortSnap && s.SnaplenBytes == 0 {
			bad += "; " + snapNote
		}
		if shortSnap {
			advice = append(advice, "recapture with -s 0")
		}
		why = append(why, bad)
	}
	if len(why) == 0 {
		return
	}
	if s.MCPExchanges == 0 {
		why = append(why, "no MCP traffic was recognised in what remained")
	}
	reason := strings.Join(why, "; ")
	s.PartialReason = &reason
	slices.Sort(advice)
	s.PartialAdvice = strings.Join(slices.Compact(advice), " and ")
}

// grouped prints n with thousands separators: 12,345.
func grouped(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// snapLength is the smallest snap length the input files declare in their
// headers (pcap file header, first pcapng interface), 0 when none is known
// (standard input is not read twice).
func snapLength(files []string) int {
	least := 0
	for _, path := range files {
		if path == capture.Stdin {
			continue
		}
		if n := fileSnapLength(path); n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	return least
}

const (
	ngSectionHeader   = 0x0a0d0d0a
	ngInterface       = 1
	ngByteOrderMagic  = 0x1a2b3c4d
	pcapHeaderBytes   = 24
	pcapRecordHeader  = 16
	ngBlockHeaderSize = 12 // type, length, and the trailing length
)

// ngOrder reads the byte order of a pcapng section from its header block.
func ngOrder(shb []byte) binary.ByteOrder {
	if binary.LittleEndian.Uint32(shb[8:12]) == ngByteOrderMagic {
		return binary.LittleEndian
	}
	return binary.BigEndian
}

func fileSnapLength(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var h [pcapHeaderBytes]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0
	}
	switch binary.LittleEndian.Uint32(h[0:4]) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		return int(binary.LittleEndian.Uint32(h[16:20]))
	case 0xd4c3b2a1, 0x4d3cb2a1:
		return int(binary.BigEndian.Uint32(h[16:20]))
	case ngSectionHeader:
		order := ngOrder(h[:])
		var idb [16]byte
		if _, err := f.ReadAt(idb[:], int64(order.Uint32(h[4:8]))); err != nil || order.Uint32(idb[0:4]) != ngInterface {
			return 0
		}
		return int(order.Uint32(idb[12:16]))
	}
	return 0
}

// unreadBytes is how many bytes of the damaged input files were never read,
// and those files' names. Each damaged file is read again up to its damage
// (capture.RawRead) to learn where reading stopped; standard input cannot
// be read again and is not counted.
func unreadBytes(ctx context.Context, files []string, damaged []error) (uint64, []string) {
	var total uint64
	var names []string
	for _, e := range damaged {
		for _, path := range files {
			if path == capture.Stdin || !strings.HasPrefix(e.Error(), path+": ") {
				continue
			}
			fi, err := os.Stat(path)
			if err != nil {
				break
			}
			st, _ := capture.RawRead(ctx, []string{path})
			size := uint64(fi.Size())
			if read := readOffset(path, st.Packets, st.Bytes); read < size {
				total += size - read
				if !slices.Contains(names, path) {
					names = append(names, path)
				}
			}
			break
		}
	}
	return total, names
}

// readOffset is where a reader stopped in a capture file after packets
// records holding bytes captured bytes: exact for pcap; for pcapng the
// blocks are walked to the one after the last packet read.
func readOffset(path string, packets, bytes uint64) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	size := uint64(fi.Size())
	var h [ngBlockHeaderSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0
	}
	if binary.LittleEndian.Uint32(h[0:4]) != ngSectionHeader {
		return pcapHeaderBytes + pcapRecordHeader*packets + bytes
	}
	var off, seen uint64
	order := ngOrder(h[:])
	for {
		if _, err := f.ReadAt(h[:], int64(off)); err != nil {
			return off
		}
		typ := binary.LittleEndian.Uint32(h[0:4]) // the section header's type reads the same in both orders
		if typ == ngSectionHeader {
			order = ngOrder(h[:])
		} else {
			typ = order.Uint32(h[0:4])
		}
		n := uint64(order.Uint32(h[4:8]))
		if n < ngBlockHeaderSize || n%4 != 0 || off+n > size {
			return off
		}
		switch typ {
		case 2, 3, 6: // packet, simple packet and enhanced packet blocks
			if seen == packets {
				return off
			}
			seen++
		}
		off += n
	}
}
