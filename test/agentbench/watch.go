package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/test/procmem"
)

// watched are the counters whose movement means the agent is still working.
var watched = []string{
	"replaywatch_capture_packets_total",
	"replaywatch_capture_kernel_drops_total",
	"replaywatch_decode_observations_total",
	"replaywatch_detector_observations_total",
}

func runWatch(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	url := fs.String("url", "", "the agent's /metrics URL (required)")
	pid := fs.Int("pid", 0, "the agent's process id (required)")
	done := fs.String("done", "", "file whose existence says the sender has finished (required)")
	out := fs.String("out", "", "where to write the last scrape (required)")
	interval := fs.Duration("interval", 100*time.Millisecond, "time between scrapes")
	settle := fs.Duration("settle", time.Second, "how long the counters must stay still after the sender is done")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	clkTck := fs.Int("clk-tck", 100, "clock ticks per second of /proc/PID/stat (getconf CLK_TCK)")
	series := fs.String("series", "", "also write every scrape's time, CPU seconds and counters to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *pid == 0 || *done == "" || *out == "" {
		return errors.New("watch: -url, -pid, -done and -out are required")
	}
	// cpu returns the agent's user + system and system CPU seconds.
	cpu := func() (float64, float64, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", *pid))
		if err != nil {
			return 0, 0, err
		}
		// Fields after "pid (comm) ": state is the first, utime the 12th.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", *pid)
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", *pid, len(f))
		}
		u, err1 := strconv.ParseFloat(f[11], 64)
		s, err2 := strconv.ParseFloat(f[12], 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, err
		}
		tck := float64(*clkTck)
		return (u + s) / tck, s / tck, nil
	}
	client := &http.Client{Timeout: 5 * time.Second}
	scrape := func() ([]byte, []float64, error) {
		resp, err := client.Get(*url)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, nil, fmt.Errorf("%s: %s", *url, resp.Status)
		}
		return body, parseCounters(body, watched), nil
	}

	cpuStart, sysStart, err := cpu()
	if err != nil {
		return err
	}
	var ser *bufio.Writer
	if *series != "" {
		f, err := os.Create(*series)
		if err != nil {
			return err
		}
		defer f.Close()
		ser = bufio.NewWriter(f)
		defer ser.Flush()
		fmt.Fprintf(ser, "# seconds cpu_seconds %s\n", strings.Join(watched, " "))
	}
	start := time.Now()
	_, prev, err := scrape()
	if err != nil {
		return err
	}
	var body []byte
	var first, last time.Time
	var maxGap time.Duration // the longest time between two scrapes: how long this poller was kept from running
	prevAt := time.Now()
	var still time.Time // when the counters were last seen moving (or the sender finished)
	senderDone := false
	for {
		time.Sleep(*interval)
		now := time.Now()
		if now.Sub(start) > *timeout {
			return fmt.Errorf("watch: still moving after %s", *timeout)
		}
		b, cur, err := scrape()
		if err != nil {
			return err
		}
		if g := time.Since(prevAt); g > maxGap && !senderDone {
			maxGap = g
		}
		prevAt = time.Now()
		body = b
		if ser != nil {
			c, _, _ := cpu()
			fmt.Fprintf(ser, "%.3f %.2f", now.Sub(start).Seconds(), c)
			for _, v := range cur {
				fmt.Fprintf(ser, " %.0f", v)
			}
			fmt.Fprintln(ser)
		}
		moved := false
		for i := range cur {
			if cur[i] != prev[i] {
				moved = true
			}
		}
		if cur[0] != prev[0] {
			mid := now.Add(-*interval / 2)
			if first.IsZero() {
				first = mid
			}
			last = mid
		}
		prev = cur
		if !senderDone {
			if _, err := os.Stat(*done); err == nil {
				senderDone = true
				still = now
			}
		}
		if moved {
			still = now
		}
		if senderDone && now.Sub(still) >= *settle {
			break
		}
	}
	cpuEnd, sysEnd, err := cpu()
	if err != nil {
		return err
	}
	hwm := ""
	if n := procmem.PeakRSS(*pid); n > 0 {
		hwm = strconv.FormatInt(n>>10, 10)
	}
	if err := os.WriteFile(*out, body, 0o644); err != nil {
		return err
	}
	unix := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.3f", float64(t.UnixNano())/1e9)
	}
	fmt.Fprintf(stdout, "t_first %s\nt_last %s\ncpu_start %.2f\ncpu_end %.2f\nsys_start %.2f\nsys_end %.2f\nhwm_kib %s\nmax_gap %.3f\n",
		unix(first), unix(last), cpuStart, cpuEnd, sysStart, sysEnd, hwm, (maxGap - *interval).Seconds())
	return nil
}

// parseCounters sums each named family's samples (over their labels) in a
// Prometheus text exposition.
func parseCounters(body []byte, names []string) []float64 {
	out := make([]float64, len(names))
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		for i, n := range names {
			rest, ok := strings.CutPrefix(line, n)
			if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
				continue
			}
			f := strings.Fields(rest)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[i] += v
			}
		}
	}
	return out
}
