package capture

import (
	"reflect"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// sameDecoding fails the test when decodeCommon takes a frame and decodes it
// otherwise than the parser.
func sameDecoding(t *testing.T, data []byte, lt layers.LinkType) {
	t.Helper()
	first, ok := firstLayer(lt, data)
	if !ok {
		return
	}
	fast, parsed := newPacketDecoder(), newPacketDecoder()
	net, v, ok := fast.decodeCommon(data, first)
	if !ok {
		return
	}
	wantNet, wantV := parsed.decodeLayers(data, first)
	if v != wantV || net != wantNet {
		t.Fatalf("%x: verdict %v flow %v, the parser's %v %v", data, v, net, wantV, wantNet)
	}
	if v != verdictTCP {
		return
	}
	if string(fast.src) != string(parsed.src) || string(fast.dst) != string(parsed.dst) || !reflect.DeepEqual(fast.tcp, parsed.tcp) {
		t.Fatalf("%x: decoded otherwise than the parser:\n%+v %x %x\n%+v %x %x", data, fast.tcp, fast.src, fast.dst, parsed.tcp, parsed.src, parsed.dst)
	}
}

// TestDecodeCommonMatchesParser: real segments, and the same with every
// field decodeCommon looks at (and the bytes around them) damaged.
func TestDecodeCommonMatchesParser(t *testing.T) {
	segs := append(conversation(client, server, 0, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n"),
		conversation(client6, server6, 0, "a", "b")...)
	var taken int
	for _, s := range segs {
		ip := ipPacket(t, s)
		for _, f := range []struct {
			lt    layers.LinkType
			frame []byte
		}{{layers.LinkTypeEthernet, ethernet()(ip)}, {layers.LinkTypeEthernet, ethernet(0x8100)(ip)},
			{layers.LinkTypeRaw, ip}, {layers.LinkTypeIPv4, ip}, {layers.LinkTypeEthernet, append(ethernet()(ip), 0, 0, 0)}} {
			if first, ok := firstLayer(f.lt, f.frame); ok {
				if _, _, ok := newPacketDecoder().decodeCommon(f.frame, first); ok {
					taken++
				}
			}
			for cut := range len(f.frame) + 1 {
				sameDecoding(t, f.frame[:cut], f.lt)
			}
			for i := range min(len(f.frame), 14+20+20) {
				for _, b := range []byte{0, 1, 5, 6, 20, 0x20, 0x28, 0x3f, 0x40, 0x45, 0x46, 0x50, 0xff} {
					bad := append([]byte(nil), f.frame...)
					bad[i] = b
					sameDecoding(t, bad, f.lt)
				}
			}
		}
	}
	if taken == 0 {
		t.Fatal("decodeCommon took none of the frames")
	}
}

// FuzzPacketDecoder: decodeCommon decodes any frame it takes as the parser.
func FuzzPacketDecoder(f *testing.F) {
	for _, s := range conversation(client, server, 0, "x", "y") {
		ip := ipPacket(f, s)
		f.Add(ethernet()(ip), uint16(layers.LinkTypeEthernet))
		f.Add(ip, uint16(layers.LinkTypeRaw))
		for _, l := range tunnelLinks {
			f.Add(l.frame(ip), uint16(l.type_))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, lt uint16) {
		sameDecoding(t, data, layers.LinkType(lt))
	})
}

// TestTunnelVerdicts: a tunnel's inner TCP is the flow; UDP that only uses a
// tunnel's port, or any other UDP, stays non-TCP.
func TestTunnelVerdicts(t *testing.T) {
	ip := ipPacket(t, conversation(client, server, 0, "x", "y")[0])
	for _, tt := range []struct {
		name      string
		frame     []byte
		verdict   packetVerdict
		tunnelled bool
	}{
		{"plain", ethernet()(ip), verdictTCP, false},
		{"vxlan", udpTunnel(4789, 0x08, 0, 0, 0, 0, 0, 42, 0)(ip), verdictTCP, true},
		{"vxlan port without the I flag", udpTunnel(4789, 0, 0, 0, 0, 0, 0, 42, 0)(ip), verdictNonTCP, false},
		{"other udp", udpTunnel(53, 0x08, 0, 0, 0, 0, 0, 42, 0)(ip), verdictNonTCP, false},
	} {
		d := newPacketDecoder()
		net, v := d.decode(tt.frame, layers.LinkTypeEthernet)
		if v != tt.verdict || d.tunnelled != tt.tunnelled {
			t.Errorf("%s: verdict %v, tunnelled %v; want %v, %v", tt.name, v, d.tunnelled, tt.verdict, tt.tunnelled)
		}
		if v == verdictTCP && (net.Src().String() != client.Addr().String() || net.Dst().String() != server.Addr().String()) {
			t.Errorf("%s: flow %v, want the inner %v -> %v", tt.name, net, client.Addr(), server.Addr())
		}
	}
}
