package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/inetsum"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"200MB", 200 << 20, false},
		{"1.5GB", 3 << 29, false},
		{"512kb", 512 << 10, false},
		{" 64 MB ", 64 << 20, false},
		{"4096", 4096, false},
		{"10B", 10, false},
		{"", 0, true},
		{"MB", 0, true},
		{"-5MB", 0, true},
		{"0", 0, true},
		{"2TB", 0, true},
		{"5000GB", 0, true},
	} {
		got, err := parseSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestChecksum(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want uint16
	}{
		// An IPv4 header with its checksum field zeroed; the classic
		// worked example (192.168.0.1 -> 192.168.0.199, UDP).
		{"ipv4 header", []byte{0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7}, 0xb861},
		{"odd length pads with zero", []byte{0x01}, ^uint16(0x0100)},
		{"carry folds", []byte{0xff, 0xff, 0x00, 0x01}, ^uint16(0x0001)},
		{"empty", nil, 0xffff},
	} {
		if got := inetsum.Checksum(0, tc.in); got != tc.want {
			t.Errorf("%s: checksum = %#04x, want %#04x", tc.name, got, tc.want)
		}
	}
}

func TestCopyClientPortIsABijection(t *testing.T) {
	for _, k := range []int{0, 1, 2, 8, 1000, maxCopies - 1} {
		seen := make(map[uint16]bool, 65536)
		for p := 1024; p < 65536; p++ {
			q := copyClientPort(uint16(p), k)
			if q < 1024 || seen[q] {
				t.Fatalf("copy %d: port %d maps to %d, out of range or taken", k, p, q)
			}
			seen[q] = true
		}
	}
	if got := copyClientPort(80, 7); got != 80 {
		t.Errorf("a privileged port moved: 80 -> %d", got)
	}
}

func TestCopyIDsAreUniqueAndKeepTheirShape(t *testing.T) {
	tmpl := &template{ids: []string{"WUZ2RUN3L7UY6NTTDRFMHNG3PD", "ZKPPNNL6P2G3EGQGTANPX4Q7LM"}}
	seen := map[string]int{}
	for _, k := range []int{0, 1, 31, 32, 1023, 1 << 20, maxCopies - 1} {
		for i, id := range tmpl.copyIDs(k) {
			s := string(id)
			if len(s) != len(tmpl.ids[i]) {
				t.Errorf("copy %d: %q has length %d, want %d", k, s, len(s), len(tmpl.ids[i]))
			}
			if strings.Trim(s, idAlphabet) != "" {
				t.Errorf("copy %d: %q leaves go-sdk's alphabet", k, s)
			}
			if prev, dup := seen[s]; dup {
				t.Errorf("copy %d: %q already made by copy %d", k, s, prev)
			}
			seen[s] = k
		}
	}
}

// recordSplitID writes a pcaprec capture of one exchange whose response
// carries the session id across a segment boundary, and returns the id.
func recordSplitID(t *testing.T, path string) string {
	t.Helper()
	const id = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	rec, err := pcaprec.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	c := rec.NewConn(netip.MustParseAddrPort("127.0.0.1:50000"), netip.MustParseAddrPort("127.0.0.1:8080"))
	c.Send(true, []byte("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"))
	// Pad the head so the id starts 10 bytes before the 1448-byte segment
	// boundary pcaprec splits at.
	head := "HTTP/1.1 200 OK\r\nX-Pad: "
	tail := "\r\nMcp-Session-Id: "
	pad := strings.Repeat("p", 1448-10-len(head)-len(tail))
	body := head + pad + tail + id + "\r\nContent-Length: 0\r\n\r\n"
	if !strings.Contains(body[1438:1448], id[:10]) {
		t.Fatalf("test setup: the id does not straddle the boundary")
	}
	c.Send(false, []byte(body))
	// The client echoes it on a second request, in one segment.
	c.Send(true, []byte("DELETE /mcp HTTP/1.1\r\nHost: x\r\nMcp-Session-Id: "+id+"\r\n\r\n"))
	c.Fin(true)
	c.Fin(false)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	return id
}

// checkCapture reads a written capture back and checks what every copy must
// hold: valid IPv4 and TCP checksums and non-decreasing timestamps.
func checkCapture(t *testing.T, path string) (packets int) {
	t.Helper()
	pkts, _, err := pcaprec.ReadPackets(path)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, pk := range pkts {
		data, ci := pk.Data, pk.CI
		packets++
		if ci.Timestamp.Before(last) {
			t.Fatalf("packet %d: time goes back from %s to %s", packets, last, ci.Timestamp)
		}
		last = ci.Timestamp
		p := tmplPacket{data: data}
		if _, _, _, err := parseTCP(&p); err != nil {
			t.Fatalf("packet %d: %v", packets, err)
		}
		ip, tcp := p.data[ethHeaderLen:p.tcpOff], p.data[p.tcpOff:]
		if c := inetsum.Checksum(0, ip); c != 0 {
			t.Fatalf("packet %d: IPv4 header checksum does not verify (%#04x)", packets, c)
		}
		var sum uint32
		for i := 12; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		sum += ipProtoTCP + uint32(len(tcp))
		if c := inetsum.Checksum(sum, tcp); c != 0 {
			t.Fatalf("packet %d: TCP checksum does not verify (%#04x)", packets, c)
		}
	}
	return packets
}

// TestReplicateRewritesSplitSessionIDs checks the rewriting where it is
// hardest: an id split over two segments, and the same id in another
// direction. Reading the output back as a template reassembles the streams,
// so every id found there is a whole one.
func TestReplicateRewritesSplitSessionIDs(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.pcap")
	id := recordSplitID(t, in)
	tmpl, err := loadTemplate(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.ids) != 1 || tmpl.ids[0] != id {
		t.Fatalf("template ids %q, want [%q]", tmpl.ids, id)
	}
	split := 0
	for _, p := range tmpl.packets {
		for _, pt := range p.patches {
			if pt.n < len(id) {
				split++
			}
		}
	}
	if split != 2 {
		t.Fatalf("%d partial patches, want 2 (one id across two segments)", split)
	}

	for _, copies := range []int{1, 3, 40} {
		out := filepath.Join(dir, "out.pcap")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		var perCopy int64
		for _, p := range tmpl.packets {
			perCopy += int64(pcapRecordHead + len(p.data))
		}
		st, err := tmpl.replicate(f, pcapFileHeader+int64(copies-1)*perCopy+1, time.Millisecond)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Copies != copies || st.Sessions != copies {
			t.Errorf("%d copies wanted: wrote %d copies, %d sessions", copies, st.Copies, st.Sessions)
		}
		if n := checkCapture(t, out); int64(n) != st.Packets || n != copies*len(tmpl.packets) {
			t.Errorf("read %d packets back, wrote %d, want %d", n, st.Packets, copies*len(tmpl.packets))
		}
		back, err := loadTemplate(out)
		if err != nil {
			t.Fatal(err)
		}
		if back.conns != copies {
			t.Errorf("%d connections, want %d (one per copy)", back.conns, copies)
		}
		want := map[string]bool{}
		for k := range copies {
			want[string(tmpl.copyIDs(k)[0])] = true
		}
		if len(back.ids) != copies {
			t.Errorf("%d distinct session ids in the output, want %d: %q", len(back.ids), copies, back.ids)
		}
		for _, got := range back.ids {
			if !want[got] {
				t.Errorf("session id %q in the output is not a rewritten copy id", got)
			}
		}
		// The template's own id is gone, even where it was split.
		var stream []byte
		for _, p := range back.packets {
			stream = append(stream, p.data[p.payOff:]...)
		}
		if bytes.Contains(stream, []byte(id[len(id)-idSuffixLen:])) {
			t.Errorf("the template id's suffix %q survived rewriting", id[len(id)-idSuffixLen:])
		}
		if n := bytes.Count(stream, []byte("Mcp-Session-Id: ")); n != 2*copies {
			t.Errorf("%d Mcp-Session-Id headers, want %d", n, 2*copies)
		}
	}
}

// TestRecordTemplateLiveSDK records a handful of real go-sdk sessions and
// replicates them: the sessions must complete, half must have their GET
// stream cut and resumed with Last-Event-ID, and the copies must be
// distinct sessions on distinct connections.
func TestRecordTemplateLiveSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("records live sessions (a few seconds: go-sdk waits 1-2 s before a resume)")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "template.pcap")
	const sessions = 8
	rs, err := recordTemplate(context.Background(), in, sessions, sessions)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Sessions != sessions || rs.Failed != 0 {
		t.Fatalf("recorded %d sessions, %d failed; want %d, 0", rs.Sessions, rs.Failed, sessions)
	}
	if rs.Deleted != sessions-sessions/4 {
		t.Errorf("%d sessions deleted, want %d", rs.Deleted, sessions-sessions/4)
	}
	tmpl, err := loadTemplate(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.ids) != sessions {
		t.Fatalf("%d session ids in the template, want %d", len(tmpl.ids), sessions)
	}
	var all []byte
	for _, p := range tmpl.packets {
		all = append(all, p.data[p.payOff:]...)
	}
	for _, want := range []string{
		`"protocolVersion":"2025-11-25"`,
		`"method":"notifications/progress"`,
		`"method":"notifications/message"`,
		"DELETE /mcp HTTP/1.1",
		"Content-Type: text/event-stream",
	} {
		if !bytes.Contains(all, []byte(want)) {
			t.Errorf("template has no %s", want)
		}
	}
	if resumes := bytes.Count(all, []byte("\r\nLast-Event-Id: ")); resumes < rs.Cut || rs.Cut == 0 {
		t.Errorf("%d resumes (Last-Event-Id) for %d cut streams; want at least one per cut and some cuts", resumes, rs.Cut)
	}

	out := filepath.Join(dir, "out.pcap")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tmpl.replicate(f, 1, time.Second)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.Copies != 1 {
		t.Errorf("%d copies for a 1-byte target, want 1", st.Copies)
	}
	checkCapture(t, out)
	back, err := loadTemplate(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.conns != tmpl.conns || len(back.ids) != sessions {
		t.Errorf("copy has %d connections and %d sessions, want %d and %d", back.conns, len(back.ids), tmpl.conns, sessions)
	}
}
