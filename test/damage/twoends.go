package damage

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TwoEnds is the capture as two capture points record it, one on the
// clients' host and one on the servers', for analysis together: the server
// end's copy skew later (its clock and the link's latency; negative for a
// clock behind). On each end the packets that end sends carry a checksum
// the network card has yet to fill in (TCP checksum offload: a capture on
// the sending host sees the partial sum), so no packet of one copy is a
// byte-identical duplicate of the other's. Only Ethernet frames of IPv4 TCP
// are edited; the rest are copied as they are.
func (c Capture) TwoEnds(skew time.Duration) (clientEnd, serverEnd []pcaprec.Packet) {
	servers := map[uint16]bool{}
	for _, p := range serverPorts(c.Packets) {
		servers[p] = true
	}
	offload := func(p pcaprec.Packet, senderIsServer bool, shift time.Duration) pcaprec.Packet {
		p.CI.Timestamp = p.CI.Timestamp.Add(shift)
		if len(p.Data) < 14+20+20 || p.Data[12] != 0x08 || p.Data[13] != 0x00 || p.Data[14+9] != 6 {
			return p
		}
		tcp := 14 + int(p.Data[14]&0x0f)*4
		if len(p.Data) < tcp+20 || servers[binary.BigEndian.Uint16(p.Data[tcp:])] != senderIsServer {
			return p
		}
		p.Data = slices.Clone(p.Data)
		// Any value but the right one: the complement of it.
		sum := p.Data[tcp+16 : tcp+18]
		sum[0], sum[1] = ^sum[0], ^sum[1]
		return p
	}
	for _, p := range c.Packets {
		clientEnd = append(clientEnd, offload(p, false, 0))
		serverEnd = append(serverEnd, offload(p, true, skew))
	}
	return clientEnd, serverEnd
}
