package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/replaywatch/replaywatch/test/inetsum"
)

// TestWeave: the fixtures of cmd/replaywatch/testdata get their own
// addresses with valid checksums, keep their packets and their order in
// time, and a duplicate file is skipped.
func TestWeave(t *testing.T) {
	fixtures, err := filepath.Glob("../../pipeline/testdata/fixtures/*.pcap")
	if err != nil || len(fixtures) < 2 {
		t.Fatalf("fixtures: %v (%d)", err, len(fixtures))
	}
	fixtures = fixtures[:3]
	args := append([]string{}, fixtures...)
	args = append(args, fixtures[0]) // the same bytes again: skipped
	want := 0
	for _, f := range fixtures {
		p, err := readAll(f)
		if err != nil {
			t.Fatal(err)
		}
		want += len(p)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "woven.pcap")
	var msg bytes.Buffer
	if err := runWeave(append([]string{"-out", out}, args...), &msg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg.String(), "skipped") {
		t.Errorf("duplicate not reported as skipped: %s", msg.String())
	}
	got, err := readAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != want {
		t.Fatalf("%d packets, want %d", len(got), want)
	}
	addrs := map[string]bool{}
	for i, p := range got {
		if i > 0 && p.ci.Timestamp.Before(got[i-1].ci.Timestamp) {
			t.Fatalf("packet %d goes back in time", i+1)
		}
		pkt := gopacket.NewPacket(p.data, layers.LayerTypeEthernet, gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			t.Fatalf("packet %d: not IPv4/TCP", i+1)
		}
		if !ip.SrcIP.Equal(ip.DstIP) || ip.SrcIP[0] != 172 || ip.SrcIP[1] != 31 {
			t.Fatalf("packet %d: %s -> %s, want 172.31.0.K on both sides", i+1, ip.SrcIP, ip.DstIP)
		}
		addrs[ip.SrcIP.String()] = true
		hdr := p.data[ethHeaderLen : ethHeaderLen+int(ip.IHL)*4]
		if inetsum.Checksum(0, hdr) != 0 {
			t.Fatalf("packet %d: bad IPv4 checksum", i+1)
		}
		seg := p.data[ethHeaderLen+int(ip.IHL)*4 : ethHeaderLen+int(ip.Length)]
		var sum uint32
		for j := 12; j < 20; j += 2 {
			sum += uint32(hdr[j])<<8 | uint32(hdr[j+1])
		}
		sum += ipProtoTCP + uint32(len(seg))
		if inetsum.Checksum(sum, seg) != 0 {
			t.Fatalf("packet %d: bad TCP checksum", i+1)
		}
	}
	if len(addrs) != 3 {
		t.Errorf("addresses %v, want one per fixture", addrs)
	}
}

// TestWeaveBase: with -base, the base's packets are kept as they are and
// the fixtures land inside its time span.
func TestWeaveBase(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.pcap")
	f, err := os.Create(base)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	frame := make([]byte, 60)
	binary.BigEndian.PutUint16(frame[12:14], 0x86dd) // not IPv4: left alone
	for i := range 100 {
		frame[59] = byte(i)
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(time.Duration(i) * time.Second), CaptureLength: 60, Length: 60}
		if err := w.WritePacket(ci, frame); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	fixture := "../../pipeline/testdata/fixtures/go-correct-resume.pcap"
	fp, err := readAll(fixture)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "woven.pcap")
	if err := runWeave([]string{"-base", base, "-out", out, fixture}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100+len(fp) {
		t.Fatalf("%d packets, want %d", len(got), 100+len(fp))
	}
	n := 0
	for i, p := range got {
		if i > 0 && p.ci.Timestamp.Before(got[i-1].ci.Timestamp) {
			t.Fatalf("packet %d goes back in time", i+1)
		}
		if binary.BigEndian.Uint16(p.data[12:14]) == 0x86dd {
			if p.data[59] != byte(n) {
				t.Fatalf("base packet %d out of order", n)
			}
			n++
			continue
		}
		if p.ci.Timestamp.Before(t0.Add(49*time.Second)) || p.ci.Timestamp.After(t0.Add(55*time.Second)) {
			t.Fatalf("fixture packet at %s, want from the middle of the base (49.5 s)", p.ci.Timestamp.Sub(t0))
		}
	}
}

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "out.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompare(t *testing.T) {
	analyze := writeLines(t,
		`{"type":"violation","id":"v1","kind":"session_swap","severity":"critical","session_id":"S1"}`,
		`{"type":"violation","id":"v2","kind":"replayed_event","severity":"critical","session_id":"S2"}`,
		`{"type":"resume","id":"r1","outcome":"resumed","status":200,"replayed":1,"violation_ids":null}`,
		`{"type":"session","session_id":"S1","ended":"deleted","requests":3}`,
		`{"type":"unknown_outcome","id":"u1","reason":"x"}`,
		`{"type":"summary","packets":10}`,
	)
	same := writeLines(t,
		`{"type":"unknown_outcome","id":"u1","reason":"x"}`,
		`{"type":"session","session_id":"S1","ended":"deleted","requests":3}`,
		`{"type":"resume","id":"r1","outcome":"resumed","status":200,"replayed":1,"violation_ids":null}`,
		`{"type":"violation","id":"v2","kind":"replayed_event","severity":"critical","session_id":"S2"}`,
		`{"type":"violation","id":"v1","kind":"session_swap","severity":"critical","session_id":"S1"}`,
	)
	var out bytes.Buffer
	if err := runCompare([]string{"-analyze", analyze, "-agent", same}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"findings (violations, unknown outcomes): MATCH", "all records (+ resumes, sessions, unverifiable): MATCH"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	other := writeLines(t,
		`{"type":"violation","id":"v1","kind":"session_swap","severity":"critical","session_id":"S1"}`,
		`{"type":"violation","id":"v3","kind":"event_id_reset","severity":"high","session_id":"S3"}`,
		`{"type":"resume","id":"r1","outcome":"unverifiable","status":200,"replayed":0,"violation_ids":null}`,
		`{"type":"session","session_id":"S1","ended":"deleted","requests":3}`,
		`{"type":"unknown_outcome","id":"u1","reason":"x"}`,
	)
	out.Reset()
	if err := runCompare([]string{"-analyze", analyze, "-agent", other}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"only in analyze: violation v2 kind=replayed_event",
		"only in agent:   violation v3 kind=event_id_reset",
		"differs: resume r1 outcome=resumed",
		"agent:   outcome=unverifiable status=200 replayed=0",
		"findings (violations, unknown outcomes): DIFF",
		"all records (+ resumes, sessions, unverifiable): DIFF",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// Resumes alone differing: findings still match.
	onlyResume := writeLines(t,
		`{"type":"violation","id":"v1","kind":"session_swap","severity":"critical","session_id":"S1"}`,
		`{"type":"violation","id":"v2","kind":"replayed_event","severity":"critical","session_id":"S2"}`,
		`{"type":"session","session_id":"S1","ended":"deleted","requests":3}`,
		`{"type":"unknown_outcome","id":"u1","reason":"x"}`,
	)
	out.Reset()
	if err := runCompare([]string{"-analyze", analyze, "-agent", onlyResume}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "findings (violations, unknown outcomes): MATCH") ||
		!strings.Contains(out.String(), "all records (+ resumes, sessions, unverifiable): DIFF") {
		t.Errorf("want findings MATCH, all DIFF:\n%s", out.String())
	}
}

func TestParseCounters(t *testing.T) {
	body := []byte(`# HELP replaywatch_capture_packets_total x
# TYPE replaywatch_capture_packets_total counter
replaywatch_capture_packets_total{node="vm"} 1.161818e+06
replaywatch_capture_packets_total_other{node="vm"} 5
replaywatch_detector_unverifiable_total{node="vm",reason="capture gap in the evidence"} 3
replaywatch_detector_unverifiable_total{node="vm",reason="limit hit: MaxSessions"} 4
`)
	got := parseCounters(body, []string{"replaywatch_capture_packets_total", "replaywatch_detector_unverifiable_total", "absent"})
	if got[0] != 1161818 || got[1] != 7 || got[2] != 0 {
		t.Errorf("got %v, want [1161818 7 0]", got)
	}
}
