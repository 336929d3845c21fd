package pcaprec

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"os"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Packet is one record of a capture file.
type Packet struct {
	CI   gopacket.CaptureInfo
	Data []byte
}

// ReadPackets reads a whole (small) pcap file back, gzip-compressed or
// not, for tests that check what a recording holds or damage it on
// purpose. Large captures should be streamed instead.
func ReadPackets(path string) ([]Packet, layers.LinkType, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	in := bufio.NewReader(f)
	var src io.Reader = in
	if magic, _ := in.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(in)
		if err != nil {
			return nil, 0, err
		}
		src = zr
	}
	r, err := pcapgo.NewReader(src)
	if err != nil {
		return nil, 0, err
	}
	var pkts []Packet
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return pkts, r.LinkType(), nil
		}
		if err != nil {
			return pkts, r.LinkType(), err
		}
		pkts = append(pkts, Packet{CI: ci, Data: data})
	}
}

// TCP decodes a recorded packet's TCP layer (nil when it has none).
func (p Packet) TCP(lt layers.LinkType) *layers.TCP {
	pkt := gopacket.NewPacket(p.Data, lt, gopacket.NoCopy)
	tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
	return tcp
}

// WritePackets writes pkts as a nanosecond pcap file whose header declares
// snaplen (as tcpdump -s does; 65535 for whole packets): the way back for
// packets read and damaged.
func WritePackets(path string, lt layers.LinkType, snaplen uint32, pkts []Packet) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pcapgo.NewWriterNanos(f)
	err = w.WriteFileHeader(snaplen, lt)
	for _, p := range pkts {
		if err != nil {
			break
		}
		err = w.WritePacket(p.CI, p.Data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
