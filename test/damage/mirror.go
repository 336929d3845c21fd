package damage

import (
	"encoding/binary"

	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/test/inetsum"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// Mirror is a way traffic mirroring delivers a copy of each frame to a
// collector.
type Mirror int

const (
	// MirrorVXLAN is AWS VPC Traffic Mirroring's and Azure vTAP's: the frame
	// in a VXLAN datagram (UDP port 4789).
	MirrorVXLAN Mirror = iota
	// MirrorERSPAN is a switch's remote SPAN session: the frame behind an
	// ERSPAN type II header in GRE.
	MirrorERSPAN
)

// Mirrored is the capture as a collector of mirrored traffic records it:
// every Ethernet frame whole inside an outer Ethernet and IPv4 packet from
// the mirror (192.0.2.1) to the collector (192.0.2.2). Frames of another
// link type are kept as they are.
func (c Capture) Mirrored(how Mirror) []pcaprec.Packet {
	out := make([]pcaprec.Packet, 0, len(c.Packets))
	for i, p := range c.Packets {
		if len(p.Data) < 14 {
			out = append(out, p)
			continue
		}
		var proto layers.IPProtocol
		var encap []byte
		switch how {
		case MirrorVXLAN:
			proto = layers.IPProtocolUDP
			encap = binary.BigEndian.AppendUint16(nil, 49152+uint16(i%1024)) // source port: a flow hash
			encap = binary.BigEndian.AppendUint16(encap, 4789)
			encap = binary.BigEndian.AppendUint16(encap, uint16(8+8+len(p.Data)))
			encap = append(encap, 0, 0)                      // no UDP checksum, as IPv4 allows
			encap = append(encap, 0x08, 0, 0, 0, 0, 0, 7, 0) // the I flag, VNI 7
		case MirrorERSPAN:
			proto = layers.IPProtocolGRE
			encap = []byte{0x10, 0, 0x88, 0xbe} // GRE with a sequence number, ERSPAN II
			encap = binary.BigEndian.AppendUint32(encap, uint32(i))
			encap = append(encap, 0x10, 7, 0, 1, 0, 0, 0, 0) // ERSPAN version 1, VLAN 7, session 1
		}
		data := TunnelFrame(proto, append(encap, p.Data...))
		ci := p.CI
		grow := len(data) - len(p.Data)
		ci.CaptureLength, ci.Length = ci.CaptureLength+grow, ci.Length+grow
		out = append(out, pcaprec.Packet{CI: ci, Data: data})
	}
	return out
}

// TunnelFrame is an Ethernet frame holding an IPv4 packet of protocol proto
// from a tunnel's or mirror's end (192.0.2.1) to the other (192.0.2.2),
// carrying payload: the outside of every tunnel the decoder opens.
func TunnelFrame(proto layers.IPProtocol, payload []byte) []byte {
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, byte(proto), 0, 0, 192, 0, 2, 1, 192, 0, 2, 2}
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(payload)))
	binary.BigEndian.PutUint16(ip[10:], inetsum.Checksum(0, ip))
	eth := []byte{0, 0x16, 0x3e, 0, 0, 2, 0, 0x16, 0x3e, 0, 0, 1, 0x08, 0x00}
	return append(append(eth, ip...), payload...)
}
