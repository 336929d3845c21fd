package capture

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/decode"
)

// TestLinkTypes reads the same conversation framed every supported way, in
// pcap and in pcapng, and expects the same bytes out.
func TestLinkTypes(t *testing.T) {
	links := []link{
		ethernetLink,
		{"vlan", layers.LinkTypeEthernet, ethernet(0x8100)},
		{"qinq", layers.LinkTypeEthernet, ethernet(0x88a8, 0x8100)},
		{"linux-sll", layers.LinkTypeLinuxSLL, sll},
		{"linux-sll2", layers.LinkTypeLinuxSLL2, sll2},
		{"null-little-endian", layers.LinkTypeNull, null(binary.LittleEndian, 30)},
		{"null-big-endian", layers.LinkTypeNull, null(binary.BigEndian, 24)},
		{"loop", layers.LinkTypeLoop, null(binary.BigEndian, 28)},
		{"raw", layers.LinkTypeRaw, raw},
		{"raw-ipv4", layers.LinkTypeIPv4, raw},
		{"raw-ipv6", layers.LinkTypeIPv6, raw},
		{"raw-ipv6-hop-by-hop", layers.LinkTypeIPv6, hopByHop},
	}
	plain := len(links)
	links = append(links, tunnelLinks...)
	writers := []struct {
		name  string
		write func(testing.TB, layers.LinkType, []packet) []byte
	}{{"pcap", pcapBytes}, {"pcapng", pcapngBytes}, {"pcap.gz", func(t testing.TB, lt layers.LinkType, pkts []packet) []byte {
		return gzipped(pcapBytes(t, lt, pkts))
	}}}
	for i, l := range links {
		var tunnelled uint64 // packets
		for _, ipv := range []string{"ipv4", "ipv6"} {
			if (l.type_ == layers.LinkTypeIPv4 && ipv == "ipv6") || (l.type_ == layers.LinkTypeIPv6 && ipv == "ipv4") {
				continue
			}
			c, s := client, server
			if ipv == "ipv6" {
				c, s = client6, server6
			}
			for _, wr := range writers {
				t.Run(l.name+"/"+ipv+"/"+wr.name, func(t *testing.T) {
					pkts := frames(t, l, conversation(c, s, 0, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n"))
					if i >= plain {
						tunnelled = uint64(len(pkts))
					}
					path := writeTemp(t, "c."+wr.name, wr.write(t, l.type_, pkts))
					rec, st, err := run(t, Config{Workers: 1}, path)
					if err != nil {
						t.Fatal(err)
					}
					got := rec.streams()
					if len(got) != 1 {
						t.Fatalf("got %d streams, want 1 (stats %+v)", len(got), st)
					}
					g := got[0]
					if g.meta.A != c || g.meta.B != s || !g.meta.SawSYN {
						t.Errorf("meta = %+v, want A=%v B=%v SawSYN", g.meta, c, s)
					}
					if g.fromA() != "GET / HTTP/1.1\r\n\r\n" || g.fromB() != "HTTP/1.1 200 OK\r\n\r\n" {
						t.Errorf("data A=%q B=%q", g.fromA(), g.fromB())
					}
					if g.reason != 0 /* CloseFIN */ || st.TCP != uint64(len(pkts)) || st.Undecodable != 0 || st.Tunnelled != tunnelled {
						t.Errorf("close %v, stats %+v", g.reason, st)
					}
				})
			}
		}
	}
}

// TestNonTCPCounted checks that packets without TCP are counted by kind and
// never stop the run.
func TestNonTCPCounted(t *testing.T) {
	udp := func() []byte { // IPv4/UDP, hand made
		ip := []byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
			0x13, 0x88, 0x13, 0x89, 0, 8, 0, 0}
		return ip
	}
	fragment := func() []byte { // IPv4 with "more fragments", protocol TCP
		return []byte{0x45, 0, 0, 28, 0, 1, 0x20, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
			1, 2, 3, 4, 5, 6, 7, 8}
	}
	arp := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 0x08, 0x06}, make([]byte, 28)...)
	tests := []struct {
		name  string
		frame []byte
		check func(Stats) bool
	}{
		{"udp", ethernet()(udp()), func(s Stats) bool { return s.NonTCP == 1 }},
		{"arp", arp, func(s Stats) bool { return s.NonTCP == 1 }},
		{"fragment", ethernet()(fragment()), func(s Stats) bool { return s.Fragments == 1 }},
		{"short-ip", ethernet()([]byte{0x45, 0, 0}), func(s Stats) bool { return s.Undecodable == 1 }},
		{"empty", nil, func(s Stats) bool { return s.Undecodable == 1 }},
		{"bad-tcp-header", ethernet()(append(udp()[:20:20], 0, 80)), func(s Stats) bool { return s.NonTCP+s.Undecodable == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkts := append(frames(t, ethernetLink, conversation(client, server, 0, "hi")), packet{t0, tt.frame})
			path := writeTemp(t, "c.pcap", pcapBytes(t, layers.LinkTypeEthernet, pkts))
			rec, st, err := run(t, Config{Workers: 1}, path)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(st) || st.Packets != uint64(len(pkts)) || len(rec.streams()) != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
	t.Run("unknown-link-type", func(t *testing.T) {
		pkts := frames(t, ethernetLink, conversation(client, server, 0, "hi"))
		path := writeTemp(t, "c.pcap", pcapBytes(t, layers.LinkType(147), pkts)) // a user link type
		_, st, err := run(t, Config{Workers: 1}, path)
		if err != nil || st.Undecodable != uint64(len(pkts)) || st.Connections != 0 {
			t.Errorf("err %v, stats %+v", err, st)
		}
	})
}

// TestSeveralFiles checks that files are one capture: a connection cut by a
// file rotation is reassembled whole.
func TestSeveralFiles(t *testing.T) {
	segs := conversation(client, server, 0, "first half, ", "reply", "second half")
	first := writeTemp(t, "a.pcap", pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs[:4])))
	// The second file is pcapng with another link type: formats mix too.
	second := writeTemp(t, "b.pcapng", pcapngBytes(t, layers.LinkTypeLinuxSLL, frames(t, link{"sll", layers.LinkTypeLinuxSLL, sll}, segs[4:])))
	rec, st, err := run(t, Config{Workers: 1}, first, second)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.streams()
	if st.Files != 2 || len(got) != 1 {
		t.Fatalf("files %d, streams %d", st.Files, len(got))
	}
	if got[0].fromA() != "first half, second half" || got[0].fromB() != "reply" || got[0].reason != 0 {
		t.Errorf("streams %v", got[0].calls)
	}
}

func TestStdin(t *testing.T) {
	data := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conversation(client, server, 0, "ping", "pong")))
	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = bytes.NewReader(data)
	var lastTotal int64
	rec := &recorder{}
	cfg := Config{Workers: 1, Progress: func(read, total int64) { lastTotal = total }}
	st, err := ReadFiles(context.Background(), []string{Stdin}, cfg, rec.newFactory)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.streams()
	if len(got) != 1 || got[0].fromA() != "ping" || got[0].fromB() != "pong" || st.Files != 1 {
		t.Fatalf("streams %d, stats %+v", len(got), st)
	}
	if lastTotal != -1 {
		t.Errorf("progress total %d, want -1 for stdin", lastTotal)
	}
}

// TestStdinStopsWhileBlocked: a pipe that stays open (a capture tool still
// writing) blocks the read of standard input; cancelling (SIGTERM, SIGINT)
// still stops reading at once, with what was read delivered and the input
// not called damaged.
func TestStdinStopsWhileBlocked(t *testing.T) {
	data := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conversation(client, server, 0, "ping", "pong")))
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = pr
	go pw.Write(data) // and nothing more, never EOF
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	rec := &recorder{}
	done := make(chan struct{})
	var st Stats
	var err error
	go func() {
		st, err = ReadFiles(ctx, []string{Stdin}, Config{Workers: 1}, rec.newFactory)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFiles still blocked on standard input 5s after cancellation")
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated) || st.CorruptFiles+st.TruncatedFiles != 0 {
		t.Fatalf("err %v, stats %+v: want cancelled, not damaged", err, st)
	}
	if got := rec.streams(); len(got) != 1 || got[0].fromA() != "ping" || got[0].fromB() != "pong" {
		t.Fatalf("what was read before the cancellation is lost: %d streams", len(got))
	}
}

func TestProgress(t *testing.T) {
	data := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conversation(client, server, 0, "ping", "pong")))
	path := writeTemp(t, "c.pcap", data)
	var calls, read, total int64
	cfg := Config{Workers: 1, Progress: func(r, tot int64) { calls++; read, total = r, tot }}
	if _, err := ReadFiles(context.Background(), []string{path}, cfg, (&recorder{}).newFactory); err != nil {
		t.Fatal(err)
	}
	if calls == 0 || read != int64(len(data)) || total != int64(len(data)) {
		t.Errorf("progress calls %d, last %d/%d, file %d bytes", calls, read, total, len(data))
	}
}

// TestTruncatedFile cuts a capture at every byte inside its last record: the
// packets before the cut are delivered, the file is counted, and the error
// says what happened.
func TestTruncatedFile(t *testing.T) {
	segs := conversation(client, server, 0, "hello", "world")
	for _, format := range []string{"pcap", "pcapng"} {
		write := pcapBytes
		if format == "pcapng" {
			write = pcapngBytes
		}
		full := write(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs))
		without := write(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs[:len(segs)-1]))
		for cut := len(without) + 1; cut < len(full); cut += 7 {
			data := full[:cut]
			t.Run(format, func(t *testing.T) {
				path := writeTemp(t, "cut."+format, data)
				rec, st, err := run(t, Config{Workers: 1}, path)
				if !errors.Is(err, ErrTruncated) {
					t.Fatalf("cut at %d of %d: err = %v, want ErrTruncated", cut, len(full), err)
				}
				if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
					t.Errorf("error %q does not name the file and the problem", err)
				}
				got := rec.streams()
				if st.TruncatedFiles != 1 || len(got) != 1 || got[0].fromA() != "hello" || got[0].fromB() != "world" {
					t.Errorf("stats %+v, calls %v", st, got)
				}
			})
		}
	}
}

// TestTruncatedGzipFile: a gzip-compressed capture cut short is truncated
// like a plain one: what decompressed before the cut is read.
func TestTruncatedGzipFile(t *testing.T) {
	segs := conversation(client, server, 0, "hello", "world")
	plain := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs))
	half := len(pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs[:4])))
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(plain[:half])
	zw.Flush() // a sync point: what comes before it decompresses without the rest
	synced := b.Len()
	zw.Write(plain[half:])
	zw.Close()
	for _, cut := range []int{synced + 1, (synced + b.Len()) / 2, b.Len() - 1} {
		path := writeTemp(t, "cut.pcap.gz", b.Bytes()[:cut])
		_, st, err := run(t, Config{Workers: 1}, path)
		if !errors.Is(err, ErrTruncated) || st.TruncatedFiles != 1 || st.Packets < 4 {
			t.Errorf("cut at %d of %d: err %v, stats %+v; want ErrTruncated after at least 4 packets", cut, b.Len(), err, st)
		}
	}
	path := writeTemp(t, "head.pcap.gz", b.Bytes()[:12])
	if _, _, err := run(t, Config{Workers: 1}, path); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("cut inside the first block: err %v, want ErrTruncated naming gzip", err)
	}
}

// TestTruncatedFileThenNext: reading goes on with the next file.
func TestTruncatedFileThenNext(t *testing.T) {
	a := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conversation(client, server, 0, "one")))
	b := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conversation(client6, server6, 0, "two")))
	pa := writeTemp(t, "a.pcap", a[:len(a)-3])
	pb := writeTemp(t, "b.pcap", b)
	rec, st, err := run(t, Config{Workers: 1}, pa, pb)
	if !errors.Is(err, ErrTruncated) || st.TruncatedFiles != 1 || st.Files != 2 || len(rec.streams()) != 2 {
		t.Errorf("err %v, stats %+v", err, st)
	}
}

func TestNotACapture(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		what  string // said before the error, after the path
		after string // said after the error
	}{
		{"text", []byte("this is not a capture\n"), "", ""},
		{"empty", nil, "empty file, ", ""},
		{"short", []byte{0xd4, 0xc3}, "", ""},
		{"damaged gzip", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}, "", ": gzip: unexpected EOF"},
		{"gzip of text", gzipped([]byte("this is not a capture\n")), "", " inside its gzip compression"},
		{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0}, "", ": it is zstd-compressed; decompress it on the way in, e.g. replaywatch analyze <(zstdcat FILE) or zstdcat FILE | replaywatch analyze -"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeTemp(t, "x.pcap", tt.data)
			rec := &recorder{}
			_, err := ReadFiles(context.Background(), []string{path}, Config{}, rec.newFactory)
			if !errors.Is(err, ErrNotCapture) || err.Error() != path+": "+tt.what+"not a pcap or pcapng file"+tt.after {
				t.Errorf("err = %v", err)
			}
			if len(rec.factories) != 0 {
				t.Errorf("factories were created for a run that could not start")
			}
		})
	}
	t.Run("stdin", func(t *testing.T) {
		old := stdin
		t.Cleanup(func() { stdin = old })
		stdin = strings.NewReader("garbage")
		_, err := ReadFiles(context.Background(), []string{Stdin}, Config{Workers: 2}, (&recorder{}).newFactory)
		if !errors.Is(err, ErrNotCapture) || !strings.HasPrefix(err.Error(), "stdin: ") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := ReadFiles(context.Background(), []string{"/nonexistent/x.pcap"}, Config{}, (&recorder{}).newFactory)
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/x.pcap") {
			t.Errorf("err = %v", err)
		}
	})
}

// TestDamagedRecords: impossible lengths in headers are refused without
// allocating what they claim.
func TestDamagedRecords(t *testing.T) {
	good := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conversation(client, server, 0, "x")))
	huge := append([]byte(nil), good...)
	// First record's captured and original length: 4 GiB - 1.
	binary.LittleEndian.PutUint32(huge[24+8:], 0xffffffff)
	binary.LittleEndian.PutUint32(huge[24+12:], 0xffffffff)

	ng := pcapngBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conversation(client, server, 0, "x")))
	ngHuge := append([]byte(nil), ng...)
	epb := bytes.Index(ngHuge, []byte{6, 0, 0, 0}) // first enhanced packet block (little endian)
	binary.LittleEndian.PutUint32(ngHuge[epb+20:], 0xfffffff0)

	for _, tt := range []struct {
		name string
		data []byte
	}{{"pcap", huge}, {"pcapng", ngHuge}} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeTemp(t, "bad", tt.data)
			_, st, err := run(t, Config{Workers: 1}, path)
			if !errors.Is(err, ErrCorrupt) || st.CorruptFiles != 1 {
				t.Errorf("err %v, stats %+v", err, st)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	path := capFile(t, conversation(client, server, 0, "a", "b"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, workers := range []int{1, 2} {
		rec := &recorder{}
		_, err := ReadFiles(ctx, []string{path}, Config{Workers: workers}, rec.newFactory)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("workers %d: err %v", workers, err)
		}
		rec.checkContract(t)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{IdleTimeout: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "IdleTimeout") {
		t.Errorf("negative IdleTimeout: %v", err)
	}
	if _, err := ReadFiles(context.Background(), []string{"x"}, Config{Workers: -1}, nil); err == nil {
		t.Error("negative Workers accepted")
	}
	if _, err := ReadFiles(context.Background(), nil, Config{}, nil); err == nil {
		t.Error("no files accepted")
	}
	if got := (Config{Workers: 1000}).WithDefaults().Workers; got != MaxWorkers {
		t.Errorf("workers capped to %d", got)
	}
}

// TestNoPanicOnShortEpbFlagsOption: pcapgo reads an epb_flags option as four
// bytes whatever its length says (found by FuzzReadFile). The file is
// reported damaged after the packets before it.
func TestNoPanicOnShortEpbFlagsOption(t *testing.T) {
	pkts := frames(t, ethernetLink, conversation(client, server, 0, "ok"))
	file := pcapngBytes(t, layers.LinkTypeEthernet, pkts)
	frame := pkts[0].data
	padded := (len(frame) + 3) &^ 3
	total := 28 + padded + 8 + 4 + 4
	epb := binary.LittleEndian.AppendUint32(nil, 6)
	epb = binary.LittleEndian.AppendUint32(epb, uint32(total))
	epb = binary.LittleEndian.AppendUint32(epb, 0) // interface
	epb = binary.LittleEndian.AppendUint64(epb, 0) // timestamp
	epb = binary.LittleEndian.AppendUint32(epb, uint32(len(frame)))
	epb = binary.LittleEndian.AppendUint32(epb, uint32(len(frame)))
	epb = append(epb, frame...)
	epb = append(epb, make([]byte, padded-len(frame))...)
	epb = append(epb, 2, 0, 1, 0, 0xff, 0, 0, 0) // epb_flags, length 1
	epb = append(epb, 0, 0, 0, 0)                // end of options
	epb = binary.LittleEndian.AppendUint32(epb, uint32(total))
	path := writeTemp(t, "short-option.pcapng", append(file, epb...))
	rec, st, err := run(t, Config{Workers: 1}, path)
	if !errors.Is(err, ErrCorrupt) || st.CorruptFiles != 1 || len(rec.streams()) != 1 || rec.streams()[0].fromA() != "ok" {
		t.Errorf("err %v, stats %+v", err, st)
	}
}

// TestFactoryPerWorker: newFactory is called once for each worker index of
// WithDefaults().Workers, so callers can size per-worker state from it.
func TestFactoryPerWorker(t *testing.T) {
	path := capFile(t, conversation(client, server, 0, "a"))
	for _, workers := range []int{0, 1, 2, MaxWorkers + 5} {
		cfg := Config{Workers: workers}
		var got []int
		_, err := ReadFiles(context.Background(), []string{path}, cfg, func(i int) decode.StreamFactory {
			got = append(got, i)
			return &recFactory{}
		})
		if err != nil {
			t.Fatal(err)
		}
		want := cfg.WithDefaults().Workers
		if len(got) != want || got[0] != 0 || got[len(got)-1] != want-1 {
			t.Errorf("Workers %d: factories %v, want 0..%d", workers, got, want-1)
		}
	}
}

// TestHugeSnapLength: an interface that claims a 4 GiB snap length is read
// normally, without allocating what it claims.
func TestHugeSnapLength(t *testing.T) {
	segs := conversation(client, server, 0, "ping", "pong")
	pcap := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs))
	binary.LittleEndian.PutUint32(pcap[16:], 0xffffffff) // pcap header snaplen
	ng := pcapngBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs))
	idb := int(binary.LittleEndian.Uint32(ng[4:])) // the interface block follows the section header
	if binary.LittleEndian.Uint32(ng[idb:]) != 1 {
		t.Fatal("no interface block after the section header")
	}
	binary.LittleEndian.PutUint32(ng[idb+12:], 0xffffffff)
	for name, data := range map[string][]byte{"pcap": pcap, "pcapng": ng} {
		t.Run(name, func(t *testing.T) {
			path := writeTemp(t, "huge-snap", data)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rec, st, err := run(t, Config{Workers: 1}, path)
			runtime.ReadMemStats(&after)
			if err != nil || len(rec.streams()) != 1 || rec.streams()[0].fromB() != "pong" {
				t.Fatalf("err %v, stats %+v", err, st)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Errorf("allocated %d MiB", grew>>20)
			}
		})
	}
}
