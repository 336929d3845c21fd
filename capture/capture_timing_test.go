package capture

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/decode"
)

// benchCapture is a generated capture: benchConns interleaved connections,
// each a handshake then benchSegments segments of benchPayload bytes each way,
// with one pair of segments in eight swapped (reordering), then FINs. The
// in-order variant swaps none, so that no connection leaves the workers'
// in-order path for the assembler.
const (
	benchConns    = 200
	benchSegments = 50
	benchPayload  = 1200
)

type benchCapture struct {
	once sync.Once
	path string
	size int64
	err  error
}

var benchFiles [2]benchCapture // reordered, in order

func benchCapturePath(b *testing.B, inOrder bool) (string, int64) {
	benchFile := &benchFiles[0]
	if inOrder {
		benchFile = &benchFiles[1]
	}
	benchFile.once.Do(func() {
		dir, err := os.MkdirTemp("", "capture-bench")
		if err != nil {
			benchFile.err = err
			return
		}
		payload := strings.Repeat("x", benchPayload)
		convs := make([][]seg, benchConns)
		for i := range convs {
			c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(30000+i))
			msgs := make([]string, 2*benchSegments)
			for j := range msgs {
				msgs[j] = payload
			}
			conv := conversation(c, server, 0, msgs...)
			for j := 3; !inOrder && j+1 < len(conv)-3; j += 8 {
				conv[j], conv[j+1] = conv[j+1], conv[j]
			}
			convs[i] = conv
		}
		// Round-robin the connections, one packet each, 10µs apart.
		var pkts []packet
		at := time.Duration(0)
		for k := 0; ; k++ {
			added := false
			for _, conv := range convs {
				if k < len(conv) {
					at += 10 * time.Microsecond
					s := conv[k]
					pkts = append(pkts, packet{t0.Add(at), ethernet()(ipPacket(b, s))})
					added = true
				}
			}
			if !added {
				break
			}
		}
		data := pcapBytes(b, layers.LinkTypeEthernet, pkts)
		benchFile.path = dir + "/bench.pcap"
		benchFile.size = int64(len(data))
		benchFile.err = os.WriteFile(benchFile.path, data, 0o600)
	})
	if benchFile.err != nil {
		b.Fatal(benchFile.err)
	}
	return benchFile.path, benchFile.size
}

// countFactory is a StreamFactory that only counts, so the benchmark
// measures capture and not a decoder.
type countFactory struct{ bytes int }

func (f *countFactory) NewStream(decode.ConnMeta) decode.TCPStream { return (*countStream)(f) }
func (f *countFactory) Tick(time.Time)                             {}
func (f *countFactory) Done()                                      {}

type countStream countFactory

func (s *countStream) Data(_ bool, p []byte, _ time.Time)  { s.bytes += len(p) }
func (s *countStream) Gap(bool, int, time.Time)            {}
func (s *countStream) Fin(bool, time.Time)                 {}
func (s *countStream) Close(decode.CloseReason, time.Time) {}

func BenchmarkRawRead(b *testing.B) {
	path, size := benchCapturePath(b, false)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RawRead(context.Background(), []string{path}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFiles(b *testing.B) {
	benchReadFiles(b, false)
}

func BenchmarkReadFilesInOrder(b *testing.B) {
	benchReadFiles(b, true)
}

func benchReadFiles(b *testing.B, inOrder bool) {
	path, size := benchCapturePath(b, inOrder)
	want := uint64(benchConns * benchSegments * 2 * benchPayload)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				st, err := ReadFiles(context.Background(), []string{path}, Config{Workers: workers},
					func(int) decode.StreamFactory { return &countFactory{} })
				if err != nil {
					b.Fatal(err)
				}
				if st.PayloadBytes != want || st.Gaps != 0 {
					b.Fatalf("delivered %d bytes with %d gaps, want %d", st.PayloadBytes, st.Gaps, want)
				}
			}
		})
	}
}

// BenchmarkDupWindow: Live's duplicate check on a window kept full, one
// segment in eight a copy (the rate of a pod watched on its veth and the
// node's bridge is one in two; most segments are first copies).
func BenchmarkDupWindow(b *testing.B) {
	d := newDupWindow(DuplicateWindow)
	k, _ := makeFlowKey([]byte{10, 0, 0, 1}, []byte{10, 0, 0, 2}, 40000, 8080)
	b.ReportAllocs()
	i := uint32(0)
	for b.Loop() {
		i++
		seq := i
		if i%8 == 0 {
			seq = i - 4 // a copy of a segment still in the window
		}
		d.check(dupKey{key: k, fromLo: true, ipID: uint16(seq), seq: seq * 1448, ack: 7, length: 1448, rest: uint64(seq)})
	}
}
