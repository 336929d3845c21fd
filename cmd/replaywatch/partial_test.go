package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/replaywatch/replaywatch/pipeline"
	"github.com/replaywatch/replaywatch/sink"
	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// writeSnapped writes pkts as a pcap file whose header declares snaplen, as
// tcpdump -s does.
func writeSnapped(t *testing.T, path string, lt layers.LinkType, snaplen uint32, pkts []pcaprec.Packet) {
	t.Helper()
	if err := pcaprec.WritePackets(path, lt, snaplen, pkts); err != nil {
		t.Fatal(err)
	}
}

// snapped cuts every packet to n bytes and keeps its original length, as a
// capture with snap length n records it.
func snapped(pkts []pcaprec.Packet, n int) []pcaprec.Packet {
	return damage.Capture{Packets: pkts}.Snaplen(n)
}

// recordConns records TCP connections from 10.0.0.1 to 10.0.0.2:5432, each
// sending what send sends (nothing: handshake and FINs only).
func recordConns(t *testing.T, path string, send func(i int, c *pcaprec.ConnRecorder)) {
	t.Helper()
	rec, err := pcaprec.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c := rec.NewConn(netip.MustParseAddrPort(fmt.Sprintf("10.0.0.1:%d", 40000+i)), netip.MustParseAddrPort("10.0.0.2:5432"))
		if send != nil {
			send(i, c)
		}
		c.Fin(true)
		c.Fin(false)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}

// damageRecord writes pkts and then breaks record k's header (a capture
// length beyond any snap length): the reader stops there, the rest of the
// file is never read.
func damageRecord(t *testing.T, path string, lt layers.LinkType, pkts []pcaprec.Packet, k int) {
	t.Helper()
	writeSnapped(t, path, lt, 65535, pkts)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 24
	for _, p := range pkts[:k] {
		off += 16 + len(p.Data)
	}
	binary.LittleEndian.PutUint32(data[off+8:], 0xffffffff)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// nonHTTPCapture records TCP connections carrying random bytes: plenty of
// payload, none of it HTTP.
func nonHTTPCapture(t *testing.T, path string) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	recordConns(t, path, func(i int, c *pcaprec.ConnRecorder) {
		for range 5 {
			p := make([]byte, 3000)
			for j := range p {
				p[j] = byte(r.Uint32())
			}
			c.Send(i%2 == 0, p)
		}
	})
}

func summaryOf(t *testing.T, recs []map[string]any) map[string]any {
	t.Helper()
	if len(recs) == 0 || recs[len(recs)-1]["type"] != "summary" {
		t.Fatalf("no summary record last: %v", recs)
	}
	return recs[len(recs)-1]
}

// TestPartialCapture checks that a capture most of which could not be
// analysed says so: exit 2 with the reason on standard error, the normal
// report and exit code with --allow-partial and a warning, the analysed
// share and the reason in the summary, and null capture times when nothing
// was decoded. Intact captures, empty ones, ones without TCP payload and
// ones of plenty of non-HTTP TCP are not partial.
func TestPartialCapture(t *testing.T) {
	dir := t.TempDir()
	const (
		clean    = "go-correct-resume"      // exit 0
		violated = "go-rolling-deploy-swap" // exit 1
	)
	load := func(name string) ([]pcaprec.Packet, layers.LinkType) {
		pkts, lt, err := pcaprec.ReadPackets(filepath.Join(fixtureDir, name+".pcap"))
		if err != nil {
			t.Fatal(err)
		}
		return pkts, lt
	}
	type tcase struct {
		name  string
		write func(path string) // writes the capture
		// code is the exit code without --allow-partial; allowed with it
		// (-1: the fixture's intact code, 0 or 1).
		code, allowed int
		partial       bool     // partial_reason is set
		share         string   // analysed share as Percent prints it ("-": null)
		times         bool     // capture_start and capture_end are not null
		stderr        []string // in standard error without --allow-partial
		warn          string   // in standard error of an exit 0/1 run
	}
	var cases []tcase
	for _, fx := range []string{clean, violated} {
		pkts, lt := load(fx)
		intact := map[string]int{clean: exitOK, violated: exitViolations}[fx]
		cases = append(cases, tcase{
			name: fx + "/intact", code: intact, allowed: intact, share: "100%", times: true,
			write: func(path string) { writeSnapped(t, path, lt, 65535, pkts) },
		})
		for _, n := range []int{64, 200} {
			cases = append(cases, tcase{
				name: fmt.Sprintf("%s/snaplen-%d", fx, n), code: exitError, allowed: -1, partial: true,
				times: n > 64, // 64 bytes keep the headers only
				stderr: []string{"of TCP payload bytes could be analysed", "snap length", fmt.Sprintf("%d bytes", n),
					"recapture with -s 0", "or pass --allow-partial"},
				warn:  "reported anyway: --allow-partial",
				write: func(path string) { writeSnapped(t, path, lt, uint32(n), snapped(pkts, n)) },
			})
		}
		cases = append(cases, tcase{
			// Record 3 is the first after the handshake: nothing of
			// HTTP was read.
			name: fx + "/damaged-record-3", code: exitError, allowed: -1, partial: true,
			stderr: []string{"could not be read past the damage", "damaged capture file", "--allow-partial"},
			warn:   "reported anyway: --allow-partial",
			write:  func(path string) { damageRecord(t, path, lt, pkts, 3) },
		})
		cases = append(cases, tcase{
			// A file cut in its last record lost that record only.
			name: fx + "/truncated-last-record", code: intact, allowed: intact, times: true,
			warn: "truncated capture file",
			write: func(path string) {
				writeSnapped(t, path, lt, 65535, pkts)
				fi, _ := os.Stat(path)
				os.Truncate(path, fi.Size()-3)
			},
		})
	}
	pkts, lt := load(clean)
	cases = append(cases,
		tcase{
			name: "empty", code: exitOK, allowed: exitOK, share: "-",
			warn:  "the capture holds no packets",
			write: func(path string) { writeSnapped(t, path, lt, 65535, nil) },
		},
		tcase{
			// Connections opened and closed without a byte sent.
			name: "no-tcp-payload", code: exitOK, allowed: exitOK, share: "-",
			warn:  "the capture holds no TCP payload",
			write: func(path string) { recordConns(t, path, nil) },
		},
		tcase{
			name: "non-http-tcp", code: exitOK, allowed: exitOK, share: "100%",
			write: func(path string) { nonHTTPCapture(t, path) },
		},
		tcase{
			// 40 bytes cut the TCP header itself: every packet is
			// undecodable, there is no payload to count.
			name: "snaplen-40", code: exitError, allowed: exitOK, partial: true, share: "-",
			stderr: []string{"packets could not be decoded", "snap length is 40 bytes", "recapture with -s 0", "or pass --allow-partial"},
			warn:   "reported anyway: --allow-partial",
			write:  func(path string) { writeSnapped(t, path, lt, 40, snapped(pkts, 40)) },
		},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, "/", "-")+".pcap")
			tc.write(path)
			recs, code, stderr := analyzeJSON(t, nil, path)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, tc.code, stderr)
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("standard error lacks %q:\n%s", w, stderr)
				}
			}
			s := summaryOf(t, recs)
			reason, _ := s["partial_reason"].(string)
			if (reason != "") != tc.partial {
				t.Errorf("partial_reason = %v, want set: %v", s["partial_reason"], tc.partial)
			}
			if tc.partial {
				if !strings.Contains(stderr, reason) {
					t.Errorf("standard error does not give the summary's reason %q:\n%s", reason, stderr)
				}
				if sh, ok := s["analysed_share"].(float64); ok && sh >= pipeline.MinAnalysedShare && !strings.Contains(reason, "decoded") {
					t.Errorf("partial with analysed_share %v", sh)
				}
			}
			share := "-"
			if sh, ok := s["analysed_share"].(float64); ok {
				share = sink.Percent(sh)
			}
			if tc.share != "" && share != tc.share {
				t.Errorf("analysed_share %v (%s), want %s", s["analysed_share"], share, tc.share)
			}
			for _, k := range []string{"capture_start", "capture_end"} {
				if v, ok := s[k]; !ok || (v != nil) != tc.times {
					t.Errorf("%s = %v, want present and null: %v", k, v, !tc.times)
				}
			}
			if s["capture_start"] == nil && s["http_exchanges"] != float64(0) {
				t.Errorf("null capture times with %v HTTP exchanges decoded", s["http_exchanges"])
			}

			// --allow-partial: the report as usual, with the reason as a
			// warning.
			_, code, stderr = analyzeJSON(t, []string{"--allow-partial"}, path)
			switch {
			case tc.allowed >= 0 && code != tc.allowed,
				tc.allowed < 0 && code != exitOK && code != exitViolations:
				t.Errorf("--allow-partial: exit %d, want %d (-1: 0 or 1)\nstderr: %s", code, tc.allowed, stderr)
			}
			if tc.warn != "" && (!strings.Contains(stderr, "warning: ") || !strings.Contains(stderr, tc.warn)) {
				t.Errorf("--allow-partial: standard error lacks the warning %q:\n%s", tc.warn, stderr)
			}
			if tc.partial && !strings.Contains(stderr, reason) {
				t.Errorf("--allow-partial: standard error lacks the reason %q:\n%s", reason, stderr)
			}

			// The text report: never year 1, and says what it could not
			// analyse.
			var out, errOut bytes.Buffer
			run([]string{"analyze", "--progress", "never", path}, nil, &out, &errOut)
			text := out.String()
			if strings.Contains(text, "0001-01-01") {
				t.Errorf("text report prints year 1:\n%s", text)
			}
			if !tc.times && !strings.Contains(text, "capture times none") {
				t.Errorf("text report does not say the capture times are unknown:\n%s", text)
			}
			if !strings.Contains(text, "Analysed           "+tc.share) && tc.share != "" {
				t.Errorf("text report lacks the analysed share %s:\n%s", tc.share, text)
			}
			if tc.partial != strings.Contains(text, "Incomplete analysis: ") {
				t.Errorf("text report: partial %v, says so: %v\n%s", tc.partial, !tc.partial, text)
			}
			if nothing := tc.share == "-" && !tc.partial; nothing != strings.Contains(text, "\nNothing analysed: ") {
				t.Errorf("text report: nothing to analyse %v, says so: %v\n%s", nothing, !nothing, text)
			}
			if (tc.partial || tc.share == "-") && strings.Contains(text, "every resume seen kept its contract") {
				t.Errorf("text report vouches for a capture it could not analyse:\n%s", text)
			}
		})
	}
}

// TestPartialEveryFixture cuts every real SDK capture to snap lengths of 64
// and 200 bytes: each must exit 2 saying so, and report with 0 or 1 under
// --allow-partial; the intact capture reports 100% analysed.
func TestPartialEveryFixture(t *testing.T) {
	fixtures, _ := filepath.Glob(filepath.Join(fixtureDir, "*.pcap"))
	if len(fixtures) == 0 {
		t.Fatal("no fixtures")
	}
	dir := t.TempDir()
	for _, fx := range fixtures {
		name := strings.TrimSuffix(filepath.Base(fx), ".pcap")
		t.Run(name, func(t *testing.T) {
			recs, code, stderr := analyzeJSON(t, nil, fx)
			if code == exitError {
				t.Fatalf("intact capture: exit 2: %s", stderr)
			}
			if s := summaryOf(t, recs); s["analysed_share"] != float64(1) || s["partial_reason"] != nil {
				t.Errorf("intact capture: analysed_share %v, partial_reason %v", s["analysed_share"], s["partial_reason"])
			}
			pkts, lt, err := pcaprec.ReadPackets(fx)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{64, 200} {
				path := filepath.Join(dir, fmt.Sprintf("%s-snaplen-%d.pcap", name, n))
				writeSnapped(t, path, lt, uint32(n), snapped(pkts, n))
				recs, code, stderr := analyzeJSON(t, nil, path)
				if code != exitError || !strings.Contains(stderr, "could be analysed") || !strings.Contains(stderr, "--allow-partial") {
					t.Errorf("snaplen %d: exit %d, want 2 with the reason\nstderr: %s", n, code, stderr)
				}
				s := summaryOf(t, recs)
				if sh, ok := s["analysed_share"].(float64); !ok || sh >= pipeline.MinAnalysedShare {
					t.Errorf("snaplen %d: analysed_share %v, want under %v", n, s["analysed_share"], pipeline.MinAnalysedShare)
				}
				if n == 64 && (s["capture_start"] != nil || s["capture_end"] != nil) {
					t.Errorf("snaplen 64 (headers only): capture times %v .. %v, want null", s["capture_start"], s["capture_end"])
				}
				if _, code, stderr := analyzeJSON(t, []string{"--allow-partial"}, path); code == exitError {
					t.Errorf("snaplen %d --allow-partial: exit 2: %s", n, stderr)
				}
			}
		})
	}
}

// writeNg writes pkts as pcapng with an interface of snap length snaplen,
// and returns the file offset of each packet's block.
func writeNg(t *testing.T, path string, lt layers.LinkType, snaplen uint32, pkts []pcaprec.Packet) []int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	intf := pcapgo.DefaultNgInterface
	intf.LinkType, intf.SnapLength = lt, snaplen
	w, err := pcapgo.NewNgWriterInterface(f, intf, pcapgo.DefaultNgWriterOptions)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for _, p := range pkts {
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		off, _ := f.Seek(0, 1)
		offs = append(offs, off)
		if err := w.WritePacket(p.CI, p.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return offs
}

// TestPartialPcapng: the snap length and the unread part of a damaged file
// are found in pcapng captures too.
func TestPartialPcapng(t *testing.T) {
	pkts, lt, err := pcaprec.ReadPackets(filepath.Join(fixtureDir, "go-rolling-deploy-swap.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	cut := filepath.Join(dir, "snaplen-200.pcapng")
	writeNg(t, cut, lt, 200, snapped(pkts, 200))
	recs, code, stderr := analyzeJSON(t, nil, cut)
	if code != exitError || !strings.Contains(stderr, "snap length (200 bytes)") {
		t.Errorf("snaplen 200: exit %d, want 2 naming the snap length\nstderr: %s", code, stderr)
	}
	if s := summaryOf(t, recs); s["snaplen_bytes"] == float64(0) {
		t.Errorf("snaplen 200: snaplen_bytes %v", s["snaplen_bytes"])
	}

	for _, k := range []int{5, len(pkts) - 1} {
		damaged := filepath.Join(dir, fmt.Sprintf("damaged-%d.pcapng", k))
		offs := writeNg(t, damaged, lt, 0, pkts)
		data, err := os.ReadFile(damaged)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint32(data[offs[k]+8:], 99) // an interface the file does not have
		os.WriteFile(damaged, data, 0o644)
		recs, code, stderr = analyzeJSON(t, []string{"--allow-partial"}, damaged)
		if code == exitError {
			t.Fatalf("damaged at %d: exit 2: %s", k, stderr)
		}
		s := summaryOf(t, recs)
		if want := float64(len(data)) - float64(offs[k]); s["unread_file_bytes"] != want {
			t.Errorf("damaged at %d: unread_file_bytes %v, want %v", k, s["unread_file_bytes"], want)
		}
		if partial := s["partial_reason"] != nil; partial != (k == 5) {
			t.Errorf("damaged at %d of %d: partial_reason %v", k, len(pkts), s["partial_reason"])
		}
	}
}
