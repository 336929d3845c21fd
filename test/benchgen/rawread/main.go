// Command rawread times the stages under `replaywatch analyze` on one
// capture, for scripts/bench.sh and for finding where time goes:
//
//	rawread -stage raw FILE      capture.RawRead: pcap records and layer decoding only (the baseline)
//	rawread -stage capture FILE  + TCP reassembly, streams discarded
//	rawread -stage decode FILE   + HTTP/SSE/JSON-RPC decoding and the time-ordered merge
//	rawread -stage detect FILE   + the detector, findings counted (analyze without its output)
//
// It prints one line, "stage=... bytes=... packets=... seconds=...", and
// with -cpuprofile writes a CPU profile of the run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/pipeline"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rawread:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("rawread", flag.ContinueOnError)
	stage := fs.String("stage", "raw", "how far to go: raw, capture, decode or detect")
	workers := fs.Int("workers", 0, "capture and decode workers (0: one per core)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile to this file once the capture is read (before the detector is closed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("want one capture file, got %d arguments", fs.NArg())
	}
	path := fs.Arg(0)
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg := capture.DefaultConfig()
	if *workers > 0 {
		cfg.Workers = *workers
	}
	ctx := context.Background()
	began := time.Now()
	var st capture.Stats
	var extra string
	tcp := "known"
	switch *stage {
	case "raw":
		st, err = capture.RawRead(ctx, []string{path})
	case "capture":
		st, err = capture.ReadFiles(ctx, []string{path}, cfg, func(int) decode.StreamFactory { return discard{} })
	case "decode":
		var observations int64
		dcfg := decode.DefaultConfig()
		dcfg.ReuseObservations = true // as analyze runs it: the counter keeps nothing
		p := decode.NewPipeline(dcfg, cfg.Workers, func(*decode.Observation) { observations++ })
		st, err = capture.ReadFiles(ctx, []string{path}, cfg, p.Factory)
		if perr := writeHeapProfile(*memProfile); perr != nil {
			return perr
		}
		p.Close()
		extra = fmt.Sprintf(" observations=%d", observations)
	case "detect":
		// The whole offline pipeline, as analyze runs it, with a sink
		// that only counts.
		var sink countingSink
		pcfg := pipeline.DefaultConfig()
		pcfg.Capture, pcfg.MemProfile = cfg, *memProfile
		summary, perr := pipeline.Files(ctx, []string{path}, pcfg, &sink)
		if perr != nil {
			return perr
		}
		st.Packets, st.Connections = summary.Packets, summary.TCPConnections
		tcp = "" // the summary does not count TCP packets
		extra = fmt.Sprintf(" violations=%d resumes=%d sessions=%d", sink.violations, sink.resumes, sink.sessions)
	default:
		return fmt.Errorf("unknown -stage %q (raw, capture, decode, detect)", *stage)
	}
	if err != nil {
		return err
	}
	if tcp != "" {
		tcp = fmt.Sprintf(" tcp=%d", st.TCP)
	}
	fmt.Fprintf(stdout, "stage=%s bytes=%d packets=%d%s connections=%d%s seconds=%.3f\n",
		*stage, fi.Size(), st.Packets, tcp, st.Connections, extra, time.Since(began).Seconds())
	return nil
}

// writeHeapProfile writes the live heap to path ("" writes nothing).
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC() // the profile shows live objects as of the last GC
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// discard is a StreamFactory whose streams drop their bytes, so the capture
// stage is timed without decoding.
type discard struct{}

func (discard) NewStream(decode.ConnMeta) decode.TCPStream { return discard{} }
func (discard) Tick(time.Time)                             {}
func (discard) Done()                                      {}
func (discard) Data(bool, []byte, time.Time)               {}
func (discard) Gap(bool, int, time.Time)                   {}
func (discard) Fin(bool, time.Time)                        {}
func (discard) Close(decode.CloseReason, time.Time)        {}

// countingSink counts the detector's output and drops it.
type countingSink struct{ violations, resumes, sessions, other int }

func (s *countingSink) Violation(*detector.Violation)           { s.violations++ }
func (s *countingSink) Resume(*detector.ResumeAttempt)          { s.resumes++ }
func (s *countingSink) Session(*detector.SessionSummary)        { s.sessions++ }
func (s *countingSink) UnknownOutcome(*detector.UnknownOutcome) { s.other++ }
func (s *countingSink) Unverifiable(*detector.Unverifiable)     { s.other++ }
