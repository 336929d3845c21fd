package capture

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// pcapReader reads classic pcap records straight out of the file's read
// buffer. pcapgo.Reader puts a 4 KiB bufio.Reader of its own in front of the
// one it is given and copies every record twice (into that buffer, then into
// its packet buffer), which was most of the cost of reading a file. It accepts
// and refuses what pcapgo.Reader does, with the same errors
// (TestPcapReaderMatchesPcapgo, FuzzPcapReader), except that records may be
// MaxPacketBytes long whatever the header's snap length says: tcpdump and
// Wireshark ignore it the same way.
type pcapReader struct {
	br       *bufio.Reader
	order    binary.ByteOrder
	nsFactor uint32 // the header's time fraction in nanoseconds (with pcapgo's uint32 overflow)
	linkType layers.LinkType
	peeked   int // length of the record handed out last, still in br
}

// The pcap file header's fields, as pcapgo checks them.
const (
	pcapVersionMajor = 2
	pcapVersionMinor = 4
)

// newPcapReader reads the file header; its errors are pcapgo.NewReader's.
func newPcapReader(br *bufio.Reader) (*pcapReader, error) {
	var h [24]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, err
	}
	r := &pcapReader{br: br}
	switch magic := binary.LittleEndian.Uint32(h[0:4]); magic {
	case 0xa1b23c4d:
		r.order, r.nsFactor = binary.LittleEndian, 1
	case 0x4d3cb2a1:
		r.order, r.nsFactor = binary.BigEndian, 1
	case 0xa1b2c3d4:
		r.order, r.nsFactor = binary.LittleEndian, 1000
	case 0xd4c3b2a1:
		r.order, r.nsFactor = binary.BigEndian, 1000
	default:
		return nil, fmt.Errorf("Unknown magic %x", magic)
	}
	if v := r.order.Uint16(h[4:6]); v != pcapVersionMajor {
		return nil, fmt.Errorf("Unknown major version %d", v)
	}
	if v := r.order.Uint16(h[6:8]); v != pcapVersionMinor {
		return nil, fmt.Errorf("Unknown minor version %d", v)
	}
	r.linkType = layers.LinkType(r.order.Uint32(h[20:24]))
	return r, nil
}

// ZeroCopyReadPacketData returns the next record. data is valid until the
// next call. A clean end is io.EOF with a zero ci; a record cut short is
// io.ErrUnexpectedEOF, or io.EOF with ci set when none of its data is there
// (as io.ReadFull reports it to pcapgo).
func (r *pcapReader) ZeroCopyReadPacketData() (data []byte, ci gopacket.CaptureInfo, err error) {
	if r.peeked > 0 {
		// Peeked bytes are buffered, so discarding them cannot fail.
		_, _ = r.br.Discard(r.peeked)
		r.peeked = 0
	}
	h, err := r.br.Peek(16)
	if err != nil {
		return nil, ci, fullReadError(len(h), err)
	}
	ci.Timestamp = time.Unix(int64(r.order.Uint32(h[0:4])), int64(r.order.Uint32(h[4:8])*r.nsFactor)).UTC()
	ci.CaptureLength = int(r.order.Uint32(h[8:12]))
	ci.Length = int(r.order.Uint32(h[12:16]))
	_, _ = r.br.Discard(16)
	if ci.CaptureLength > MaxPacketBytes {
		return nil, ci, fmt.Errorf("capture length exceeds snap length: %d > %d", ci.CaptureLength, MaxPacketBytes)
	}
	if ci.CaptureLength > ci.Length {
		return nil, ci, fmt.Errorf("capture length exceeds original packet length: %d > %d", ci.CaptureLength, ci.Length)
	}
	data, err = r.br.Peek(ci.CaptureLength)
	if err != nil {
		return nil, ci, fullReadError(len(data), err)
	}
	r.peeked = len(data)
	return data, ci, nil
}

// fullReadError is the error io.ReadFull gives for a read that got n bytes
// before err.
func fullReadError(n int, err error) error {
	if n > 0 && err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
