package pipeline

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/sink"
)

// sourced stamps the input on every record before out sees it.
type sourced struct {
	out    detector.Sink
	source string
}

// withSource is out stamping source, an EventSink when out is one (the
// detector makes stream events only for sinks that take them).
func withSource(out detector.Sink, source string) detector.Sink {
	s := sourced{out, source}
	if _, ok := out.(detector.EventSink); ok {
		return sourcedEvents{s}
	}
	return s
}

func (s sourced) Violation(v *detector.Violation)  { v.Source = s.source; s.out.Violation(v) }
func (s sourced) Resume(r *detector.ResumeAttempt) { r.Source = s.source; s.out.Resume(r) }
func (s sourced) Session(x *detector.SessionSummary) {
	x.Source = s.source
	s.out.Session(x)
}
func (s sourced) UnknownOutcome(u *detector.UnknownOutcome) {
	u.Source = s.source
	s.out.UnknownOutcome(u)
}
func (s sourced) Unverifiable(u *detector.Unverifiable) {
	u.Source = s.source
	s.out.Unverifiable(u)
}

type sourcedEvents struct{ sourced }

func (s sourcedEvents) StreamEvent(e *detector.StreamEvent) {
	e.Source = s.source
	s.out.(detector.EventSink).StreamEvent(e)
}

// SpansConfig configures the spans pipeline.
type SpansConfig struct {
	OTLP   otlp.Config
	Decode decode.Config // its HashKey keys what spans carry
	Detect detector.Config
	// Tick, if set, is called after each clock step with the detector
	// held: flush an output that buffers.
	Tick func()
	// Lock is LiveConfig.Lock: give both the same one to share a sink.
	Lock *sync.Mutex
}

// Spans is the OTLP pipeline: spans received over gRPC and HTTP, settled
// by trace, turned into observations and judged by a detector of its own
// (records say "otlp"). Like Live, the detector is single-threaded:
// the assembler's releases and the clock take turns under mu.
type Spans struct {
	cfg  SpansConfig
	asm  *otlp.Assembler
	recv *otlp.Receiver
	det  *detector.Detector

	mu        *sync.Mutex
	detStats  atomic.Pointer[detector.Stats]
	clockStop chan struct{}
	clockDone chan struct{}
	closeOnce sync.Once
}

// SpansStep is how often the spans pipeline settles traces and moves the
// detector's clock.
const SpansStep = 250 * time.Millisecond

// NewSpans listens where cfg.OTLP says and starts answering exports.
func NewSpans(cfg SpansConfig, out detector.Sink) (*Spans, error) {
	if err := cfg.OTLP.Validate(); err != nil {
		return nil, err
	}
	cfg.Detect.PartialHistory = true // an exporter drops spans silently
	s := &Spans{cfg: cfg, det: detector.New(cfg.Detect, withSource(out, detector.SourceOTLP)), mu: lockOr(cfg.Lock),
		clockStop: make(chan struct{}), clockDone: make(chan struct{})}
	s.storeStats()
	s.asm = otlp.NewAssembler(cfg.OTLP, cfg.Decode.HashKey, s.det.Observe)
	recv, err := otlp.Listen(cfg.OTLP, s.asm)
	if err != nil {
		return nil, err
	}
	s.recv = recv
	recv.Serve()
	go s.clock()
	return s, nil
}

// GRPCAddr and HTTPAddr are where exports are received.
func (s *Spans) GRPCAddr() string { return s.recv.GRPCAddr() }
func (s *Spans) HTTPAddr() string { return s.recv.HTTPAddr() }

// AssemblerStats and DetectorStats are safe to read at any time.
func (s *Spans) AssemblerStats() otlp.Stats    { return s.asm.Stats() }
func (s *Spans) DetectorStats() detector.Stats { return *s.detStats.Load() }

func (s *Spans) storeStats() {
	st := s.det.Stats()
	s.detStats.Store(&st)
}

func (s *Spans) clock() {
	defer close(s.clockDone)
	tick := time.NewTicker(SpansStep)
	defer tick.Stop()
	for {
		select {
		case <-s.clockStop:
			return
		case now := <-tick.C:
			s.mu.Lock()
			s.asm.Advance(now)
			// Sessions expire, links time out: on quiet input nothing else
			// moves the detector's clock. It stays behind the wall by what
			// a span may still take to reach the detector, and behind the
			// oldest observation the assembler still holds (the reorder
			// window waits in the spans' time, past an exporter's batch
			// delay).
			safe := now.Add(-s.cfg.OTLP.SettleDelay - s.cfg.OTLP.ReorderWindow - 2*SpansStep)
			if held, ok := s.asm.HeldSince(); ok && held.Before(safe) {
				safe = held.Add(-time.Nanosecond)
			}
			s.det.Advance(safe)
			s.storeStats()
			if s.cfg.Tick != nil {
				s.cfg.Tick()
			}
			s.mu.Unlock()
		}
	}
}

// Close stops receiving (exports in flight are answered until ctx ends),
// releases every span held and closes the detector's sessions.
func (s *Spans) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		err = s.recv.Close(ctx)
		// An export still being read past ctx must be refused, not
		// acknowledged after the flush below and lost.
		s.asm.Stop()
		close(s.clockStop)
		<-s.clockDone
		s.mu.Lock()
		s.asm.Flush()
		s.det.Close(time.Now())
		s.storeStats()
		if s.cfg.Tick != nil {
			s.cfg.Tick()
		}
		s.mu.Unlock()
	})
	return err
}

// SpanFiles analyses files of OTLP JSON trace exports, one
// ExportTraceServiceRequest per line (the OpenTelemetry Collector's file
// exporter writes them so). Several files are merged export by export in
// order of their newest span end, as captures are merged packet by packet:
// files of several collectors cover the same hours, and a file read after
// another would reach the detector hours late. Spans settle by their own
// clock (the newest span end read so far), as if they had arrived when
// they ended.
func SpanFiles(ctx context.Context, files []string, cfg SpansConfig, out detector.Sink) (*sink.Summary, error) {
	if err := cfg.OTLP.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	cfg.Detect.PartialHistory = true // an exporter drops spans silently
	det := detector.New(cfg.Detect, withSource(out, detector.SourceOTLP))
	var times trafficTimes
	var events uint64
	asm := otlp.NewAssembler(cfg.OTLP, cfg.Decode.HashKey, func(o *decode.Observation) {
		times.observe(o)
		if o.Kind == decode.KindEvent {
			events++
		}
		det.Observe(o)
	})
	// A file that cannot be read, or is no span file at all, is an error
	// before anything is analysed, as for captures: a report of the
	// others would pass for the whole.
	var open []*spanFile
	var problems []string
	for _, path := range files {
		f, err := openSpanFile(path)
		if err != nil {
			return nil, err
		}
		defer f.close()
		if f.next(); f.err != nil {
			return nil, f.err
		}
		if !f.pending {
			problems = append(problems, path+": no OTLP JSON trace export in it")
			continue
		}
		open = append(open, f)
	}
	var clock time.Time
	for len(open) > 0 {
		if ctx.Err() != nil {
			// Stopped (a signal): the report covers what was read, as
			// for captures.
			problems = append(problems, ctx.Err().Error())
			break
		}
		i := 0
		for j, f := range open {
			if f.end.Before(open[i].end) {
				i = j
			}
		}
		f := open[i]
		clock = later(clock, f.end)
		for {
			if _, err := asm.Consume(f.traces, clock); err == nil {
				break
			}
			// Full: let the oldest traces settle, as a receiver's
			// exporter would wait and retry.
			asm.Advance(clock.Add(otlp.DefaultSettleDelay + time.Hour))
		}
		asm.Advance(clock)
		f.next()
		if !f.pending {
			problems = append(problems, f.problems()...)
			open = slices.Delete(open, i, i+1)
		}
	}
	asm.Flush()
	det.Close(times.last)
	st := asm.Stats()
	s := buildSummary(capture.Stats{Files: len(files)}, decode.Stats{}, det.Stats(), problems)
	s.Spans, s.HTTPExchanges, s.SSEEvents = st.Spans, st.HTTPSpans, events
	if st.LateAfterEarlyRelease > 0 {
		// A file's exports wait for room (never refused), so this is the
		// only assembler limit that can cost an analysis anything.
		s.LimitsHit["otlp.MaxBufferedObservations"] += int(st.LateAfterEarlyRelease)
	}
	times.report(s)
	s.Elapsed = time.Since(start)
	s.ElapsedSeconds = s.Elapsed.Seconds()
	return s, nil
}

// maxSpanLine bounds one line of a span file.
const maxSpanLine = otlp.MaxRequestBytes

// spanFile reads one file's exports one line ahead, so that files can be
// merged by time.
type spanFile struct {
	path    string
	f       *os.File
	sc      *bufio.Scanner
	u       ptrace.JSONUnmarshaler
	line    int
	read    int           // exports read
	pending bool          // traces holds the next export
	traces  ptrace.Traces // the next export
	end     time.Time     // its newest span end
	err     error         // why the file is no span file (before any export)
	bad     int           // later lines that were no export, skipped
	notes   []string      // what the summary says of them
}

// maxBadLinesNamed is how many of a file's bad lines the summary names one
// by one; the rest are counted.
const maxBadLinesNamed = 10

func openSpanFile(path string) (*spanFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if info, err := f.Stat(); err == nil && info.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: a directory, not a file of OTLP JSON exports", path)
	}
	br := bufio.NewReader(f)
	var r io.Reader = br
	switch magic, _ := br.Peek(4); {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		// Read as it is, as a gzip-compressed capture is.
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: gzip: %v", path, err)
		}
		r = zr
	case len(magic) == 4 && string(magic) == "\x28\xb5\x2f\xfd":
		// The Collector's file exporter compresses with zstd.
		f.Close()
		return nil, fmt.Errorf("%s: zstd-compressed; decompress it on the way in: replaywatch analyze --spans <(zstdcat %s)", path, path)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxSpanLine)
	return &spanFile{path: path, f: f, sc: sc}, nil
}

func (f *spanFile) close() { f.f.Close() }

// next reads the file's next export; pending is false at its end or when
// it cannot be read further. A line that is no export is skipped and
// noted (an exporter's line cut by a crash loses that line, not the rest
// of the file); one before any export makes the file no span file.
func (f *spanFile) next() {
	f.pending = false
	for f.sc.Scan() {
		f.line++
		if len(f.sc.Bytes()) == 0 {
			continue
		}
		td, err := f.u.UnmarshalTraces(f.sc.Bytes())
		if err != nil {
			switch {
			case f.read > 0:
				f.bad++
				if f.bad <= maxBadLinesNamed {
					f.notes = append(f.notes, fmt.Sprintf("%s:%d: not an OTLP JSON trace export, skipped: %v", f.path, f.line, err))
				}
				continue
			case capture.IsCaptureStart(f.sc.Bytes()):
				f.err = fmt.Errorf("%s: a packet capture, not OTLP JSON: analyse it without --spans", f.path)
			default:
				f.err = fmt.Errorf("%s:%d: not an OTLP JSON trace export (one ExportTraceServiceRequest per line): %v", f.path, f.line, err)
			}
			return
		}
		f.traces, f.end, f.pending = td, newestEnd(td), true
		f.read++
		return
	}
	if err := f.sc.Err(); err != nil {
		// A line past maxSpanLine, or a read error: the rest is unread.
		err = fmt.Errorf("%s:%d: %v", f.path, f.line+1, err)
		if f.read == 0 {
			f.err = err
		}
		f.notes = append(f.notes, err.Error()+": the rest of the file is not read")
	}
}

// problems are what the summary says of the file once it is read.
func (f *spanFile) problems() []string {
	if f.bad > maxBadLinesNamed {
		return append(f.notes, fmt.Sprintf("%s: %d more lines that were no OTLP JSON trace export, skipped", f.path, f.bad-maxBadLinesNamed))
	}
	return f.notes
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// newestEnd is the latest span end in td.
func newestEnd(td ptrace.Traces) time.Time {
	var t time.Time
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				t = later(t, spans.At(k).EndTimestamp().AsTime())
			}
		}
	}
	return t
}
