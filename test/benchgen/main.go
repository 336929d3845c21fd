// Command benchgen builds a large capture of real MCP Streamable HTTP
// traffic for benchmarking replaywatch against tshark:
//
//	go run ./test/benchgen -out /tmp/bench.pcap -size 200MB
//
// Live generation alone cannot fill 200 MB in a couple of minutes on two
// cores (go-sdk's client waits 1-2 s before every resume), so it works in
// two steps. First it records a template: a few hundred real go-sdk v1.8.0
// sessions (revision 2025-11-25) run concurrently against one go-sdk server
// through the recording proxy of test/pcaprec. Each session initializes,
// sets its log level, calls a tool that streams progress notifications over
// SSE, calls a tool that logs on the standalone GET stream (for about half
// the sessions the proxy cuts that stream after two events and the client
// resumes it with Last-Event-ID), calls a quick tool, and then sends DELETE
// (three sessions in four) or is abandoned with its stream open. Then it
// replicates the template into the output until the size is reached: every
// copy gets its own client addresses (10.x.y.z, shifted ports), its own
// session ids (same length, last characters replaced by the copy number)
// and timestamps shifted so that about -overlap copies run at once, with
// IPv4 and TCP checksums recomputed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchgen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("benchgen", flag.ContinueOnError)
	out := fs.String("out", "", "output pcap file (required)")
	sizeFlag := fs.String("size", "200MB", "size to reach: bytes, or a number with KB, MB or GB (powers of 1024)")
	sessions := fs.Int("sessions", 300, "live sessions recorded into the template")
	concurrency := fs.Int("concurrency", 100, "live sessions running at once while recording")
	overlap := fs.Int("overlap", 24, "template copies running at once in the output")
	keep := fs.String("template", "", "where to keep the template capture (default: a temporary file, removed)")
	reuse := fs.Bool("reuse", false, "replicate the existing -template file instead of recording a new one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	size, err := parseSize(*sizeFlag)
	if err != nil {
		return err
	}
	if *sessions < 1 || *concurrency < 1 || *overlap < 1 {
		return errors.New("-sessions, -concurrency and -overlap must be at least 1")
	}

	tmplPath := *keep
	if *reuse && tmplPath == "" {
		return errors.New("-reuse needs -template")
	}
	if tmplPath == "" {
		dir, err := os.MkdirTemp("", "benchgen")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		tmplPath = filepath.Join(dir, "template.pcap")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	if !*reuse {
		rs, err := recordTemplate(ctx, tmplPath, *sessions, *concurrency)
		if err != nil {
			return fmt.Errorf("recording the template: %w", err)
		}
		fmt.Fprintf(os.Stderr, "benchgen: recorded %d live sessions (%d failed, %d GET streams cut and resumed, %d deleted) in %s\n",
			rs.Sessions, rs.Failed, rs.Cut, rs.Deleted, time.Since(began).Round(time.Millisecond))
	}
	t, err := loadTemplate(tmplPath)
	if err != nil {
		return err
	}
	span := t.packets[len(t.packets)-1].ts.Sub(t.packets[0].ts)
	fmt.Fprintf(os.Stderr, "benchgen: template: %d session ids, %d connections, %d packets, %s of traffic\n",
		len(t.ids), t.conns, len(t.packets), span.Round(time.Millisecond))

	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	stride := max(span/time.Duration(*overlap), time.Millisecond)
	began = time.Now()
	st, err := t.replicate(f, size, stride)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(*out)
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	fmt.Fprintf(os.Stderr, "benchgen: wrote %s: %.1f MB, %d packets, %d copies, %d sessions, %s of capture time, in %s\n",
		*out, float64(st.Bytes)/(1<<20), st.Packets, st.Copies, st.Sessions, st.Span.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond))
	return nil
}

// parseSize reads "200MB", "1.5GB", "512KB" or a plain byte count.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}}
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*mult > 1<<40 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes up to 1TB, optionally with KB, MB or GB", s)
	}
	return int64(v * mult), nil
}
