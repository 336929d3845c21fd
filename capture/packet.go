package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// packetVerdict says what a packet turned out to be.
type packetVerdict uint8

const (
	verdictTCP packetVerdict = iota
	verdictNonTCP
	verdictFragment
	verdictUndecodable
)

// packetDecoder takes link-layer frames down to TCP with
// gopacket.DecodingLayerParser: the layer structs are reused, so decoding
// allocates nothing per packet. One parser per first layer, all sharing the
// same layer structs, because a parser's first layer is fixed.
type packetDecoder struct {
	eth      layers.Ethernet
	sll      layers.LinuxSLL
	sll2     layers.LinuxSLL2
	loopback layers.Loopback
	dot1q    layers.Dot1Q
	ip4      layers.IPv4
	ip6      layers.IPv6
	tcp      layers.TCP
	payload  gopacket.Payload
	// Tunnels, as traffic mirroring (AWS VPC Traffic Mirroring and Azure
	// vTAP send VXLAN, switches' SPAN sessions ERSPAN) and overlay networks
	// (Calico's VXLAN and IP in IP, Geneve) deliver captures: the
	// inner packet is the traffic, and its IP layer, decoded into the same
	// structs after the outer one, is the flow. UDP is decoded only to reach
	// VXLAN (port 4789) and Geneve (6081); any other UDP stays non-TCP.
	udp    layers.UDP
	vxlan  layers.VXLAN
	geneve layers.Geneve
	gre    layers.GRE
	erspan layers.ERSPANII

	// parsers is indexed by the first layer's type: a slice, because a
	// map lookup per packet costs more than the rest of the lookup.
	parsers []*gopacket.DecodingLayerParser
	decoded []gopacket.LayerType
	// src and dst are the addresses of the last IP layer decoded (4 or 16
	// bytes, aliasing the packet), ipID its IPv4 identification (0 for
	// IPv6).
	src, dst []byte
	ipID     uint16
	// cut is how many bytes of the last TCP segment's payload the capture
	// did not keep (a snap length shorter than the packet): the IP header
	// says how long the packet was.
	cut int
	// recordCut is how much of the packet its capture record did not keep
	// (the record's original length less its captured one): what cut is
	// where the IP header cannot say (an IPv4 total length of 0: a TSO
	// segment captured on the sending host).
	recordCut int
	// tunnelled says the last TCP segment came out of a tunnel.
	tunnelled bool
}

func newPacketDecoder() *packetDecoder {
	d := &packetDecoder{decoded: make([]gopacket.LayerType, 0, 8)}
	firsts := []gopacket.LayerType{
		layers.LayerTypeEthernet, layers.LayerTypeLinuxSLL, layers.LayerTypeLinuxSLL2,
		layers.LayerTypeLoopback, layers.LayerTypeIPv4, layers.LayerTypeIPv6,
	}
	// DecodingLayerSparse finds the next layer's decoder by indexing a
	// slice; the parser's default container is a map, looked up once per
	// layer of every packet. The parsers share it, as they share the
	// layers.
	var dlc gopacket.DecodingLayerContainer = gopacket.DecodingLayerSparse(nil)
	for _, l := range []gopacket.DecodingLayer{
		&d.eth, &d.sll, &d.sll2, &d.loopback, &d.dot1q, &d.ip4, &d.ip6, &d.tcp, &d.payload,
		&d.udp, &d.vxlan, &d.geneve, &d.gre, &d.erspan,
	} {
		dlc = dlc.Put(l)
	}
	d.parsers = make([]*gopacket.DecodingLayerParser, slices.Max(firsts)+1)
	for _, first := range firsts {
		p := gopacket.NewDecodingLayerParser(first)
		p.SetDecodingLayerContainer(dlc)
		d.parsers[first] = p
	}
	return d
}

// firstLayer maps a capture link type to the layer its frames start with;
// ok is false for link types this package does not read.
func firstLayer(lt layers.LinkType, data []byte) (gopacket.LayerType, bool) {
	switch lt {
	case layers.LinkTypeEthernet:
		return layers.LayerTypeEthernet, true
	case layers.LinkTypeLinuxSLL:
		return layers.LayerTypeLinuxSLL, true
	case layers.LinkTypeLinuxSLL2:
		return layers.LayerTypeLinuxSLL2, true
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		// layers.Loopback reads the family word in either byte order.
		return layers.LayerTypeLoopback, true
	case layers.LinkTypeIPv4:
		return layers.LayerTypeIPv4, true
	case layers.LinkTypeIPv6:
		return layers.LayerTypeIPv6, true
	case layers.LinkTypeRaw, 12: // 12 is LINKTYPE_RAW's value on OpenBSD
		if len(data) > 0 && data[0]>>4 == 6 {
			return layers.LayerTypeIPv6, true
		}
		return layers.LayerTypeIPv4, true
	}
	return 0, false
}

// decode parses one frame. On verdictTCP, d.tcp holds the segment (its
// Payload aliases data) and net is the IP flow.
func (d *packetDecoder) decode(data []byte, lt layers.LinkType) (net gopacket.Flow, v packetVerdict) {
	d.cut, d.tunnelled = 0, false
	first, ok := firstLayer(lt, data)
	if !ok {
		return net, verdictUndecodable
	}
	if net, v, ok := d.decodeCommon(data, first); ok {
		return net, v
	}
	return d.decodeLayers(data, first)
}

// decodeCommon decodes the usual frame by hand, as the parser would: an
// Ethernet frame without VLAN tags, or a raw IP packet, holding IPv4 without
// options and not fragmented, whose length fits the frame, carrying TCP. The
// parser's Ethernet and IPv4 decoding and its per-layer calls were more than
// half of a raw read. ok is false for any other frame, which then goes to the
// parser; TestDecodeCommonMatchesParser and FuzzPacketDecoder hold the two to
// the same result.
func (d *packetDecoder) decodeCommon(data []byte, first gopacket.LayerType) (net gopacket.Flow, v packetVerdict, ok bool) {
	ip := data
	switch first {
	case layers.LayerTypeEthernet:
		if len(data) < 14 || binary.BigEndian.Uint16(data[12:14]) != uint16(layers.EthernetTypeIPv4) {
			return net, v, false
		}
		ip = data[14:]
	case layers.LayerTypeIPv4:
	default:
		return net, v, false
	}
	// The IPv4 decoder does not look at the version either.
	if len(ip) < 20 || ip[0]&0x0f != 5 || layers.IPProtocol(ip[9]) != layers.IPProtocolTCP {
		return net, v, false
	}
	// Longer than the header, because the parser stops at an empty
	// payload; 0 means "the frame's length" (TSO) to the IPv4 decoder.
	n := int(binary.BigEndian.Uint16(ip[2:4]))
	if n <= 20 || n > len(ip) {
		return net, v, false
	}
	if binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // more fragments, or an offset
		return net, v, false
	}
	d.src, d.dst = ip[12:16], ip[16:20]
	d.ipID = binary.BigEndian.Uint16(ip[4:6])
	net = gopacket.NewFlow(layers.EndpointIPv4, d.src, d.dst)
	if decodeTCP(&d.tcp, ip[20:n]) != nil {
		return net, verdictUndecodable, true
	}
	return net, verdictTCP, true
}

// decodeLayers decodes any frame with the parser for its first layer.
func (d *packetDecoder) decodeLayers(data []byte, first gopacket.LayerType) (net gopacket.Flow, v packetVerdict) {
	defer func() {
		if recover() != nil { // see decodeTCP
			net, v = gopacket.Flow{}, verdictUndecodable
		}
	}()
	err := d.parsers[first].DecodeLayers(data, &d.decoded)
	var sawIP bool
	for _, t := range d.decoded {
		switch t {
		case layers.LayerTypeVXLAN:
			if !d.vxlan.ValidIDFlag {
				// RFC 7348's I flag is always set: without it this is
				// other UDP that happens to use port 4789.
				return net, verdictNonTCP
			}
			d.tunnelled = true
		case layers.LayerTypeGeneve, layers.LayerTypeGRE, layers.LayerTypeERSPANII:
			d.tunnelled = true
		case layers.LayerTypeIPv4:
			// An IP layer after another is IP in IP (or in GRE): the
			// structs now hold the inner one, which the loop reads last.
			d.tunnelled = d.tunnelled || sawIP
			sawIP, net = true, d.ip4.NetworkFlow()
			d.src, d.dst, d.ipID = d.ip4.SrcIP, d.ip4.DstIP, d.ip4.Id
			// gopacket keeps what a snap length left of a longer
			// packet; the total length tells what is missing.
			d.cut = max(0, int(d.ip4.Length)-len(d.ip4.Contents)-len(d.ip4.Payload))
			if c := d.ip4.Contents; len(c) >= 4 && c[2] == 0 && c[3] == 0 {
				// Total length 0: gopacket took what was captured.
				d.cut = d.recordCut
			}
		case layers.LayerTypeIPv6:
			d.tunnelled = d.tunnelled || sawIP
			sawIP, net = true, d.ip6.NetworkFlow()
			d.src, d.dst, d.ipID = d.ip6.SrcIP, d.ip6.DstIP, 0
			// The payload length counts a hop-by-hop header, which
			// gopacket takes out of Payload (and leaves in Length).
			hbh := 0
			if d.ip6.HopByHop != nil {
				hbh = len(d.ip6.HopByHop.Contents)
			}
			d.cut = max(0, int(d.ip6.Length)-hbh-len(d.ip6.Payload))
		case layers.LayerTypeTCP:
			// The payload layer after TCP never fails, so a decoded TCP
			// layer is a usable segment whatever err says.
			return net, verdictTCP
		}
	}
	var unsupported gopacket.UnsupportedLayerType
	if errors.As(err, &unsupported) {
		if t := gopacket.LayerType(unsupported); t == gopacket.LayerTypeFragment || t == layers.LayerTypeIPv6Fragment {
			return net, verdictFragment
		}
		if sawIP || len(d.decoded) > 0 {
			// A protocol we do not follow (UDP, ARP, ICMP, IPv6 options...).
			return net, verdictNonTCP
		}
	}
	if err == nil {
		return net, verdictNonTCP
	}
	return net, verdictUndecodable
}

// decodeTCP is layers.TCP.DecodeFromBytes made safe: gopacket v1.7's MPTCP
// option parser indexes past the end of a short option (found by
// FuzzPacketDecoder), and one hostile packet must not stop a capture. A
// segment it chokes on is undecodable, like any other damaged header.
func decodeTCP(tcp *layers.TCP, b []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tcp header: %v", r)
		}
	}()
	return tcp.DecodeFromBytes(b, gopacket.NilDecodeFeedback)
}
