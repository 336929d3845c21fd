package capture

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// TestHolesProvenBySequenceNumbers: a lost segment with no data after it is
// still a gap when the traffic proves it was sent: the receiver's ACK, a FIN
// or RST past the bytes seen, or a snap length that cut the segment. Each
// case is a conversation with one segment lost or cut, on both paths (the
// in-order path and the assembler after a reordered segment).
func TestHolesProvenBySequenceNumbers(t *testing.T) {
	conv := conversation(client, server, 0, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\nbody", "GET /2 HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\nlast")
	// conv: 0-2 handshake, 3-6 messages, 7 client FIN, 8 server FIN, 9 ACK.
	without := func(i ...int) []seg {
		var out []seg
		for j, s := range conv {
			if !slices.Contains(i, j) {
				out = append(out, s)
			}
		}
		return out
	}
	// The client's FIN before the server's last segment reached it, so
	// only the ACK of the server's FIN proves the segment lost; packets of
	// another connection after it make the proof's wait end before the
	// connection is closed.
	finFirst := without(6)
	finFirst[6].ack -= uint32(len("HTTP/1.1 200 OK\r\n\r\nlast"))
	other := netip.MustParseAddrPort("10.0.0.3:40001")
	for i := range 2 * tickEvery {
		finFirst = append(finFirst, seg{src: other, dst: server, seq: 1, ack: 1, flags: "A", at: 20*time.Millisecond + time.Duration(i)*time.Microsecond})
	}
	tests := []struct {
		name string
		segs []seg
		want []string // the gap calls expected, in the stream's calls
	}{
		{"last segment before FIN", without(6), []string{"gap B 23"}},
		{"last segment before FIN, proven after the client's FIN", finFirst, []string{"gap B 23"}},
		{"response lost, proven by the next request's ACK", without(4), []string{"gap B 23"}},
		{"first request lost, proven by the response's ACK", without(3), []string{"gap A 18"}},
		// A lost FIN's sequence number is one more byte the ACK proves
		// sent: nothing tells it from a byte of data.
		{"last segment and FIN lost, ACKs prove them", without(6, 8), []string{"gap B 23", "gap B 1"}},
		{"last segment lost, no ACK after it captured: the FIN proves it at close", without(6, 7, 9), []string{"gap A 1", "gap B 23"}},
	}
	for _, tc := range tests {
		for _, workers := range []int{1, 2} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Workers = workers
				rec, st, err := run(t, cfg, capFile(t, tc.segs))
				if err != nil {
					t.Fatal(err)
				}
				ss := rec.streams()
				if len(ss) != 1 {
					t.Fatalf("%d streams", len(ss))
				}
				// Exactly the lost bytes: a FIN seen after them is no
				// lost byte.
				var gaps []string
				for _, c := range ss[0].calls {
					if strings.HasPrefix(c, "gap ") {
						gaps = append(gaps, c)
					}
				}
				if !slices.Equal(gaps, tc.want) {
					t.Errorf("gaps %q, want %q, in %q", gaps, tc.want, ss[0].calls)
				}
				if st.Gaps == 0 {
					t.Errorf("stats count no gap: %+v", st)
				}
			})
		}
	}
}

// TestProofAtCloseWorkersAgree: holes proven as their connection closes are
// reported at the same times with one worker or two. The capture is 10 ms of
// a probe capture (mcpgo-hono-chaos) whose packets were reordered (5% within
// 4, test/damage): a connection's FINs, one of them lost, close it while the
// proof's wait is not over, and another connection's later packets were read
// before. The report used to wait until the worker's latest time, which with
// two workers is only its share's: the gap came earlier than with one.
func TestProofAtCloseWorkersAgree(t *testing.T) {
	path := filepath.Join("testdata", "reordered-fin-proof.pcap")
	var got [2][]string
	for i, workers := range []int{1, 2} {
		cfg := DefaultConfig()
		cfg.Workers = workers
		rec, _, err := run(t, cfg, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rec.streams() {
			for _, at := range s.gapAt {
				got[i] = append(got[i], fmt.Sprintf("%v %s", s.meta.A, at.Format(time.RFC3339Nano)))
			}
		}
	}
	if len(got[0]) == 0 || !slices.Equal(got[0], got[1]) {
		t.Errorf("gaps with one worker:\n%s\nwith two:\n%s", strings.Join(got[0], "\n"), strings.Join(got[1], "\n"))
	}
}

// TestSnaplenIsAGap: a segment cut by the snap length loses its bytes as a
// gap; nothing of it is delivered as if it were whole.
func TestSnaplenIsAGap(t *testing.T) {
	body := strings.Repeat("x", 200)
	conv := conversation(client, server, 0, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n"+body)
	pkts := frames(t, ethernetLink, conv)
	const snap = 100
	for i := range pkts {
		if len(pkts[i].data) > snap {
			pkts[i].data = pkts[i].data[:snap]
		}
	}
	rec, st, err := run(t, DefaultConfig(), writeTemp(t, "snap.pcap", pcapBytes(t, layers.LinkTypeEthernet, pkts)))
	if err != nil {
		t.Fatal(err)
	}
	calls := rec.streams()[0].calls
	if want := "gap B 219"; !slices.Contains(calls, want) {
		t.Errorf("no %q in %q", want, calls)
	}
	if st.SnaplenBytes != 219 {
		t.Errorf("SnaplenBytes = %d, want 219", st.SnaplenBytes)
	}
	if got := rec.streams()[0].fromB(); got != "" {
		t.Errorf("delivered %q of a cut segment", got)
	}
}

// TestSameFileTwice: the same capture given twice is merged packet by
// packet; every byte reaches the stream once, and the duplicates and the
// overlap are counted.
func TestSameFileTwice(t *testing.T) {
	conv := conversation(client, server, 0, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\nbody")
	path := capFile(t, conv)
	once, _, err := run(t, DefaultConfig(), path)
	if err != nil {
		t.Fatal(err)
	}
	twice, st, err := run(t, DefaultConfig(), path, path)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := once.streams(), twice.streams(); len(a) != 1 || len(b) != 1 || !slices.Equal(a[0].calls, b[0].calls) {
		t.Fatalf("twice differs from once:\n%q\n%q", a[0].calls, b[0].calls)
	}
	if st.DuplicatePackets != uint64(len(conv)) || st.OverlappingFiles != 2 {
		t.Errorf("DuplicatePackets %d (want %d), OverlappingFiles %d (want 2)", st.DuplicatePackets, len(conv), st.OverlappingFiles)
	}
	if w := st.Warnings(); len(w) != 1 {
		t.Errorf("warnings %q", w)
	}
}

// TestProvenHoleReleasesHeldData: data that arrived after a lost segment
// waits in the assembler for the hole; once the receiver's ACK proves the
// hole was capture loss, the hole is reported and the held data delivered
// right after (LossProofDelay), not at the reorder timeout: a resume on
// another connection must already know of the gap.
func TestProvenHoleReleasesHeldData(t *testing.T) {
	ms := time.Millisecond
	segs := []seg{
		{src: client, dst: server, seq: 1000, flags: "S", at: 1 * ms},
		{src: server, dst: client, seq: 5000, ack: 1001, flags: "SA", at: 2 * ms},
		{src: client, dst: server, seq: 1001, ack: 5001, flags: "A", at: 3 * ms},
		{src: client, dst: server, seq: 1001, ack: 5001, flags: "PA", payload: "GET / HTTP/1.1\r\n\r\n", at: 4 * ms},
		// 5001 "part1" lost by the capture
		{src: server, dst: client, seq: 5006, ack: 1019, flags: "PA", payload: "part2", at: 6 * ms},
		{src: client, dst: server, seq: 1019, ack: 5011, flags: "A", at: 7 * ms},
		{src: client, dst: server, seq: 1019, ack: 5011, flags: "FA", at: 5000 * ms},
		{src: server, dst: client, seq: 5011, ack: 1020, flags: "FA", at: 5001 * ms},
		{src: client, dst: server, seq: 1020, ack: 5012, flags: "A", at: 5002 * ms},
	}
	for _, workers := range []int{1, 2} {
		rec, _, err := run(t, Config{Workers: workers}.WithDefaults(), capFile(t, segs))
		if err != nil {
			t.Fatal(err)
		}
		s := rec.streams()[0]
		want := []string{`data A "GET / HTTP/1.1\r\n\r\n"`, "gap B 5", `data B "part2"`, "fin A", "fin B", "close fin"}
		if !slices.Equal(s.calls, want) {
			t.Fatalf("workers %d: calls %q, want %q", workers, s.calls, want)
		}
		if got, limit := s.times[1], t0.Add(100*ms); got.After(limit) {
			t.Errorf("workers %d: data after the hole delivered at %v, want by %v", workers, got, limit)
		}
	}
}

// TestSnaplenCutOfTotalLengthZero: a TSO segment captured on the sending host
// carries an IPv4 total length of 0 (an IPv6 BIG TCP one is a jumbogram, a
// payload length of 0 and its length in a hop-by-hop option), so only the
// capture record's original length shows that the snap length cut it. It
// was delivered short, as if whole; now its bytes are a gap, as for any cut
// segment.
func TestSnaplenCutOfTotalLengthZero(t *testing.T) {
	for _, ipv := range []string{"ipv4", "ipv6"} {
		t.Run(ipv, func(t *testing.T) { snaplenCutOfLengthZero(t, ipv) })
	}
}

func snaplenCutOfLengthZero(t *testing.T, ipv string) {
	ms := time.Millisecond
	body := strings.Repeat("y", 3000)
	c, s := client, server
	if ipv == "ipv6" {
		c, s = client6, server6
	}
	segs := []seg{
		{src: c, dst: s, seq: 1000, flags: "S"}, {src: s, dst: c, seq: 5000, ack: 1001, flags: "SA"},
		{src: c, dst: s, seq: 1001, ack: 5001, flags: "PA", payload: "GET", at: ms},
		{src: s, dst: c, seq: 5001, ack: 1004, flags: "PA", payload: body, at: 2 * ms},
		{src: s, dst: c, seq: 8001, ack: 1004, flags: "PA", payload: "tail", at: 3 * ms},
	}
	const snap = 200
	var b bytes.Buffer
	w := pcapgo.NewWriterNanos(&b)
	if err := w.WriteFileHeader(snap, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		ip := ipPacket(t, s)
		if len(s.payload) == len(body) {
			if ipv == "ipv4" {
				ip[2], ip[3] = 0, 0 // TSO: total length 0
			} else {
				ip = jumbogram(ip)
			}
		}
		frame := ethernet()(ip)
		n := min(len(frame), snap)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: t0.Add(s.at), CaptureLength: n, Length: len(frame)}, frame[:n]); err != nil {
			t.Fatal(err)
		}
	}
	rec, st, err := run(t, Config{Workers: 1}, writeTemp(t, "tso.pcap", b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	got := rec.streams()
	want := []string{`data A "GET"`, "gap B 3000", `data B "tail"`, "close eof"}
	if len(got) != 1 || !slices.Equal(got[0].calls, want) {
		for _, g := range got {
			t.Logf("calls %.300q", g.calls)
		}
		t.Fatalf("want one stream with %q", want)
	}
	// gopacket cannot decode a jumbogram (it reads the hop-by-hop header
	// as TCP): the packet is undecodable, its bytes a gap all the same.
	if ipv == "ipv4" && st.SnaplenBytes != uint64(len(body)) || ipv == "ipv6" && st.Undecodable != 1 {
		t.Errorf("stats %+v: want the cut counted (IPv4) or the jumbogram undecodable (IPv6)", st)
	}
}
