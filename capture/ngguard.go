package capture

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// pcapng block types the guard looks into.
const (
	ngSectionHeader       = 0x0A0D0D0A
	ngInterfaceDescriptor = 1
	ngPacketObsolete      = 2
	ngSimplePacket        = 3
	ngEnhancedPacket      = 6
	ngByteOrderMagic      = 0x1A2B3C4D
)

// ngGuard sits between a file and pcapgo's pcapng reader. pcapgo sizes its
// packet buffer from header fields (an interface's snap length, a packet's
// captured length) before it reads the data, so a damaged or hostile file
// could make it allocate gigabytes. ngGuard walks the block structure as the
// bytes pass, clamps interface snap lengths to MaxPacketBytes and refuses
// packet blocks whose lengths cannot be right.
type ngGuard struct {
	r     *bufio.Reader
	order binary.ByteOrder
	left  uint32 // bytes of the current block not yet passed on
	snap0 uint32 // the section's first interface's snap length, after clamping
	ifs   int    // interfaces seen in this section
}

func newNgGuard(r *bufio.Reader) *ngGuard {
	return &ngGuard{r: r}
}

func (g *ngGuard) Read(p []byte) (int, error) {
	if g.left == 0 {
		if err := g.startBlock(); err != nil {
			return 0, err
		}
	}
	if uint32(len(p)) > g.left {
		p = p[:g.left]
	}
	n, err := g.r.Read(p)
	g.left -= uint32(n)
	return n, err
}

// peek returns the next n bytes; when fewer remain it passes on what there
// is (so pcapgo reports the truncation) and reports ok=false.
func (g *ngGuard) peek(n int) ([]byte, bool, error) {
	b, err := g.r.Peek(n)
	if len(b) == n {
		return b, true, nil
	}
	if len(b) == 0 {
		return nil, false, err
	}
	g.left = uint32(len(b))
	return b, false, nil
}

func (g *ngGuard) startBlock() error {
	h, ok, err := g.peek(12)
	if !ok {
		return err
	}
	typ := binary.LittleEndian.Uint32(h[0:4]) // the section magic reads the same both ways
	if typ == ngSectionHeader {
		switch {
		case binary.BigEndian.Uint32(h[8:12]) == ngByteOrderMagic:
			g.order = binary.BigEndian
		case binary.LittleEndian.Uint32(h[8:12]) == ngByteOrderMagic:
			g.order = binary.LittleEndian
		default:
			return fmt.Errorf("pcapng section header with a bad byte-order magic")
		}
		g.ifs, g.snap0 = 0, 0
	}
	if g.order == nil {
		return fmt.Errorf("pcapng data before a section header")
	}
	typ = g.order.Uint32(h[0:4])
	total := g.order.Uint32(h[4:8])
	if total < 12 || total%4 != 0 {
		return fmt.Errorf("pcapng block of impossible length %d", total)
	}
	switch typ {
	case ngInterfaceDescriptor:
		h, ok, err := g.peek(16)
		if !ok {
			return err
		}
		// Modifying the peeked bytes changes what pcapgo will read.
		snap := g.order.Uint32(h[12:16])
		if snap == 0 || snap > MaxPacketBytes {
			snap = MaxPacketBytes
			g.order.PutUint32(h[12:16], snap)
		}
		if g.ifs == 0 {
			g.snap0 = snap
		}
		g.ifs++
	case ngEnhancedPacket, ngPacketObsolete:
		h, ok, err := g.peek(24)
		if !ok {
			return err
		}
		caplen := g.order.Uint32(h[20:24])
		if caplen > MaxPacketBytes || total < 32 || caplen > total-32 {
			return fmt.Errorf("pcapng packet of %d bytes in a block of %d", caplen, total)
		}
	case ngSimplePacket:
		if g.ifs == 0 {
			break // pcapgo refuses it
		}
		caplen := min(g.order.Uint32(h[8:12]), g.snap0)
		if total < 16 || caplen > total-16 {
			return fmt.Errorf("pcapng packet of %d bytes in a block of %d", caplen, total)
		}
	}
	g.left = total
	return nil
}

var _ io.Reader = (*ngGuard)(nil)
