package capture

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// pcapFile writes packets as a classic pcap file in a byte order, with
// nanosecond or microsecond times.
func pcapFile(order binary.AppendByteOrder, nanos bool, pkts []packet) []byte {
	magic := uint32(0xa1b2c3d4)
	if nanos {
		magic = 0xa1b23c4d
	}
	b := order.AppendUint32(nil, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = append(b, make([]byte, 8)...) // time zone, sigfigs
	b = order.AppendUint32(b, 65535)
	b = order.AppendUint32(b, uint32(layers.LinkTypeEthernet))
	for _, p := range pkts {
		frac := uint32(p.ts.Nanosecond())
		if !nanos {
			frac /= 1000
		}
		b = order.AppendUint32(b, uint32(p.ts.Unix()))
		b = order.AppendUint32(b, frac)
		b = order.AppendUint32(b, uint32(len(p.data)))
		b = order.AppendUint32(b, uint32(len(p.data)))
		b = append(b, p.data...)
	}
	return b
}

// readAll reads a pcap file to its end with either reader and describes
// every result, errors by their text and the io errors they wrap.
func readAll(data []byte, ours bool) []string {
	var rd zeroCopyReader
	var out []string
	describe := func(err error) string {
		return fmt.Sprintf("%v eof=%v unexpected=%v", err, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF))
	}
	if ours {
		r, err := newPcapReader(bufio.NewReaderSize(bytes.NewReader(data), readBufferBytes))
		if err != nil {
			return []string{"header: " + describe(err)}
		}
		rd = r
		out = append(out, fmt.Sprint("link type ", r.linkType))
	} else {
		r, err := pcapgo.NewReader(bufio.NewReaderSize(bytes.NewReader(data), readBufferBytes))
		if err != nil {
			return []string{"header: " + describe(err)}
		}
		r.SetSnaplen(MaxPacketBytes)
		rd = r
		out = append(out, fmt.Sprint("link type ", r.LinkType()))
	}
	for {
		d, ci, err := rd.ZeroCopyReadPacketData()
		if err != nil {
			return append(out, fmt.Sprintf("%+v %s", ci, describe(err)))
		}
		out = append(out, fmt.Sprintf("%+v %x", ci, d))
	}
}

// samePcapReading compares the readers on a file readOne would give them:
// one that starts with a pcap magic number.
func samePcapReading(t *testing.T, data []byte) {
	t.Helper()
	if formatOf(data) != formatPcap {
		return
	}
	if got, want := readAll(data, true), readAll(data, false); !reflect.DeepEqual(got, want) {
		t.Fatalf("pcapReader and pcapgo differ on %x:\n got %q\nwant %q", data, got, want)
	}
}

// TestPcapReaderMatchesPcapgo: every byte order and time resolution, cut at
// every byte, and with damaged lengths and versions.
func TestPcapReaderMatchesPcapgo(t *testing.T) {
	pkts := frames(t, ethernetLink, conversation(client, server, 0, "hello", "world"))
	pkts = append(pkts, packet{pkts[0].ts, nil}) // an empty record
	for _, order := range []interface {
		binary.ByteOrder
		binary.AppendByteOrder
	}{binary.LittleEndian, binary.BigEndian} {
		for _, nanos := range []bool{false, true} {
			file := pcapFile(order, nanos, pkts)
			for cut := range len(file) + 1 {
				samePcapReading(t, file[:cut])
			}
			for _, off := range []int{4, 6, 24 + 8, 24 + 12} { // version, minor version, first record's lengths
				for _, v := range []uint32{0, 1, 2, 4, 1 << 16, MaxPacketBytes + 1, 0xffffffff} {
					bad := append([]byte(nil), file...)
					if off < 8 {
						order.PutUint16(bad[off:], uint16(v))
					} else {
						order.PutUint32(bad[off:], v)
					}
					samePcapReading(t, bad)
				}
			}
		}
	}
}

// FuzzPcapReader: pcapReader reads any input as pcapgo does.
func FuzzPcapReader(f *testing.F) {
	pkts := frames(f, ethernetLink, conversation(client, server, 0, "a", "b"))
	f.Add(pcapFile(binary.LittleEndian, false, pkts))
	f.Add(pcapFile(binary.BigEndian, true, pkts))
	f.Fuzz(func(t *testing.T, data []byte) {
		samePcapReading(t, data)
	})
}

// A record of MaxPacketBytes is read whole.
func TestPcapReaderLargestRecord(t *testing.T) {
	big := packet{t0, make([]byte, MaxPacketBytes)}
	file := pcapFile(binary.LittleEndian, true, []packet{big, big})
	r, err := newPcapReader(bufio.NewReaderSize(bytes.NewReader(file), readBufferBytes))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d, _, err := r.ZeroCopyReadPacketData(); err != nil || len(d) != MaxPacketBytes {
			t.Fatalf("got %d bytes, %v", len(d), err)
		}
	}
	if _, ci, err := r.ZeroCopyReadPacketData(); err != io.EOF || !reflect.DeepEqual(ci, gopacket.CaptureInfo{}) {
		t.Fatalf("at the end: %+v %v", ci, err)
	}
}
