package damage

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TCP flags this file reads or sets.
const (
	tcpSYN = 0x02
	tcpPSH = 0x08
	tcpACK = 0x10
)

// BehindProxyProtocol is the capture as a server behind a load balancer
// speaking the PROXY protocol (version 1 or 2) records it: every IPv4 TCP
// connection whose SYN was captured carries a header naming its client
// before the client's first byte, in a segment of its own, and the client's
// later sequence numbers (and the server's acknowledgements of them) move
// up by the header's length. The bytes, times and findings are otherwise
// the capture's own.
func (c Capture) BehindProxyProtocol(version int) []pcaprec.Packet {
	servers := map[uint16]bool{}
	for _, p := range serverPorts(c.Packets) {
		servers[p] = true
	}
	type conn struct {
		isn      uint32 // the client's initial sequence number
		shift    uint32 // the header's length, once inserted
		synSeen  bool
		inserted bool
	}
	conns := map[[12]byte]*conn{}
	out := make([]pcaprec.Packet, 0, len(c.Packets)+len(c.Packets)/8)
	for _, p := range c.Packets {
		d := p.Data
		if len(d) < 14+20+20 || d[12] != 0x08 || d[13] != 0x00 || d[14+9] != 6 {
			out = append(out, p)
			continue
		}
		ihl := int(d[14]&0x0f) * 4
		tcp := d[14+ihl:]
		fromServer := servers[binary.BigEndian.Uint16(tcp[0:])]
		// The key names the client first: its address and port, then the
		// server's.
		var key [12]byte
		src, dst := 0, 1
		if fromServer {
			src, dst = 1, 0
		}
		copy(key[4*src:], d[14+12:14+16])
		copy(key[4*dst:], d[14+16:14+20])
		copy(key[8+2*src:], tcp[0:2])
		copy(key[8+2*dst:], tcp[2:4])
		k := conns[key]
		if k == nil {
			k = &conn{}
			conns[key] = k
		}
		flags, seq, ack := tcp[13], binary.BigEndian.Uint32(tcp[4:]), binary.BigEndian.Uint32(tcp[8:])
		switch {
		case !fromServer && flags&tcpSYN != 0:
			k.isn, k.synSeen = seq, true
		case !fromServer && k.synSeen:
			doff := int(tcp[12]>>4) * 4
			payload := int(binary.BigEndian.Uint16(d[14+2:])) - ihl - doff
			if !k.inserted && payload > 0 {
				client := netip.AddrPortFrom(netip.AddrFrom4([4]byte(key[0:4])), binary.BigEndian.Uint16(key[8:]))
				server := netip.AddrPortFrom(netip.AddrFrom4([4]byte(key[4:8])), binary.BigEndian.Uint16(key[10:]))
				out = append(out, headerSegment(p, ihl, doff, proxyHeader(version, client, server)))
				k.inserted, k.shift = true, uint32(len(out[len(out)-1].Data)-14-ihl-doff)
			}
			if k.inserted {
				p.Data = slices.Clone(d)
				binary.BigEndian.PutUint32(p.Data[14+ihl+4:], seq+k.shift)
			}
		case fromServer && k.inserted && flags&tcpACK != 0:
			if rel := ack - (k.isn + 1); rel > 0 && rel < 1<<31 {
				p.Data = slices.Clone(d)
				binary.BigEndian.PutUint32(p.Data[14+ihl+8:], ack+k.shift)
			}
		}
		out = append(out, p)
	}
	return out
}

// headerSegment is a copy of the client's segment p (IP header ihl bytes,
// TCP header doff bytes) carrying header instead of its payload, at p's
// sequence number and time.
func headerSegment(p pcaprec.Packet, ihl, doff int, header []byte) pcaprec.Packet {
	d := append(slices.Clone(p.Data[:14+ihl+doff]), header...)
	binary.BigEndian.PutUint16(d[14+2:], uint16(ihl+doff+len(header)))
	d[14+ihl+13] = tcpACK | tcpPSH
	ci := p.CI
	ci.CaptureLength, ci.Length = len(d), len(d)
	return pcaprec.Packet{CI: ci, Data: d}
}

// proxyHeader is the PROXY protocol header of the given version for a TCP
// over IPv4 connection from client to server.
func proxyHeader(version int, client, server netip.AddrPort) []byte {
	if version == 1 {
		return fmt.Appendf(nil, "PROXY TCP4 %s %s %d %d\r\n", client.Addr(), server.Addr(), client.Port(), server.Port())
	}
	h := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c")
	h = append(h, client.Addr().AsSlice()...)
	h = append(h, server.Addr().AsSlice()...)
	h = binary.BigEndian.AppendUint16(h, client.Port())
	return binary.BigEndian.AppendUint16(h, server.Port())
}
