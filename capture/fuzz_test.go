package capture

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// fuzzSeeds are small captures that reach every part of the reader and the
// assembler: both formats, several link types, reordering, gaps, resets.
func fuzzSeeds(t testing.TB) map[string][]byte {
	ms := time.Millisecond
	conv := conversation(client, server, 0, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n")
	messy := []seg{syn, synAck, c2s(1006, "world", ms), c2s(1001, "hello", 2*ms), c2s(1020, "gap", 3*ms),
		c2s(1001, "hel", 4*ms), withFlags(s2c(5001, "", 5*ms), "RA"), s2c(9000, "nosyn", 6*ms)}
	v6 := conversation(client6, server6, 0, "a", "b")
	pcap := pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, conv))
	return map[string][]byte{
		"pcap-ethernet":   pcap,
		"pcap-truncated":  pcap[:len(pcap)-5],
		"pcapng-ethernet": pcapngBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, messy)),
		"pcap-sll2-ipv6":  pcapBytes(t, layers.LinkTypeLinuxSLL2, frames(t, link{"", layers.LinkTypeLinuxSLL2, sll2}, v6)),
		"pcapng-raw-ipv6": pcapngBytes(t, layers.LinkTypeRaw, frames(t, link{"", layers.LinkTypeRaw, raw}, v6)),
		"pcap-vlan":       pcapBytes(t, layers.LinkTypeEthernet, frames(t, link{"", layers.LinkTypeEthernet, ethernet(0x88a8, 0x8100)}, messy)),
	}
}

// FuzzReadFile: no input file makes ReadFiles panic, hang or break the
// stream contract (every stream closed exactly once).
func FuzzReadFile(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// Tiny limits, so that eviction, page limits and timeouts run too.
		cfg := Config{Workers: 1 + len(data)%2, MaxConnections: 4, MaxBufferedPagesPerConnection: 4,
			MaxBufferedPagesTotal: 16, IdleTimeout: time.Second, ReorderTimeout: 100 * time.Millisecond}
		rec := &recorder{}
		st, _ := ReadFiles(context.Background(), []string{path}, cfg, rec.newFactory)
		rec.checkContract(t)
		if st.Packets < st.TCP || st.Bytes > uint64(len(data)) {
			t.Errorf("impossible stats %+v for %d bytes", st, len(data))
		}
	})
}

// TestWriteFuzzSeeds rewrites testdata/fuzz/FuzzReadFile from fuzzSeeds when
// CAPTURE_WRITE_SEEDS=1, so the committed corpus follows the generators.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("CAPTURE_WRITE_SEEDS") != "1" {
		t.Skip("set CAPTURE_WRITE_SEEDS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReadFile")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
