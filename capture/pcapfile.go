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
	br        *bufio.Reader
	bigEndian bool   // not a binary.ByteOrder: its calls through the interface showed in profiles
	nsFactor  uint32 // the header's time fraction in nanoseconds (with pcapgo's uint32 overflow)
	linkType  layers.LinkType
	peeked    int // length of the record handed out last with its header, still in br
}

func (r *pcapReader) uint32(b []byte) uint32 {
	if r.bigEndian {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
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
		r.nsFactor = 1
	case 0x4d3cb2a1:
		r.bigEndian, r.nsFactor = true, 1
	case 0xa1b2c3d4:
		r.nsFactor = 1000
	case 0xd4c3b2a1:
		r.bigEndian, r.nsFactor = true, 1000
	default:
		//lint:ignore ST1005 pcapgo's wording, which TestPcapReaderMatchesPcapgo holds us to
		return nil, fmt.Errorf("Unknown magic %x", magic)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if r.bigEndian {
		order = binary.BigEndian
	}
	if v := order.Uint16(h[4:6]); v != pcapVersionMajor {
		//lint:ignore ST1005 pcapgo's wording, which TestPcapReaderMatchesPcapgo holds us to
		return nil, fmt.Errorf("Unknown major version %d", v)
	}
	if v := order.Uint16(h[6:8]); v != pcapVersionMinor {
		//lint:ignore ST1005 pcapgo's wording, which TestPcapReaderMatchesPcapgo holds us to
		return nil, fmt.Errorf("Unknown minor version %d", v)
	}
	r.linkType = layers.LinkType(order.Uint32(h[20:24]))
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
	const hdr = 16
	h, err := r.br.Peek(hdr)
	if err != nil {
		return nil, ci, fullReadError(len(h), err)
	}
	ci.Timestamp = time.Unix(int64(r.uint32(h[0:4])), int64(r.uint32(h[4:8])*r.nsFactor)).UTC()
	ci.CaptureLength = int(r.uint32(h[8:12]))
	ci.Length = int(r.uint32(h[12:16]))
	if ci.CaptureLength > MaxPacketBytes {
		return nil, ci, fmt.Errorf("capture length exceeds snap length: %d > %d", ci.CaptureLength, MaxPacketBytes)
	}
	if ci.CaptureLength > ci.Length {
		return nil, ci, fmt.Errorf("capture length exceeds original packet length: %d > %d", ci.CaptureLength, ci.Length)
	}
	// The record is peeked with its header, and both are discarded at
	// the next call: one Discard per record. The buffer holds
	// MaxPacketBytes and a header (readBufferBytes).
	rec, err := r.br.Peek(hdr + ci.CaptureLength)
	if err != nil {
		return nil, ci, fullReadError(len(rec)-hdr, err)
	}
	r.peeked = len(rec)
	return rec[hdr:], ci, nil
}

// fullReadError is the error io.ReadFull gives for a read that got n bytes
// before err.
func fullReadError(n int, err error) error {
	if n > 0 && err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
