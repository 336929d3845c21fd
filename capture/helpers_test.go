package capture

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/damage"
)

// recStream records every call a connection receives, in order.
type recStream struct {
	f      *recFactory
	meta   decode.ConnMeta
	calls  []string
	data   [2]bytes.Buffer // [0] from A, [1] from B
	times  []time.Time     // the ts of each Data call
	gapAt  []time.Time     // the time of each Gap call
	closes int
	reason decode.CloseReason
}

func side(fromA bool) string {
	if fromA {
		return "A"
	}
	return "B"
}

func (s *recStream) Data(fromA bool, p []byte, ts time.Time) {
	if s.closes > 0 {
		panic("Data after Close")
	}
	i := 1
	if fromA {
		i = 0
	}
	s.data[i].Write(p)
	s.times = append(s.times, ts)
	if ts.Before(s.f.lastTick) {
		s.f.stale++
	}
	s.calls = append(s.calls, fmt.Sprintf("data %s %q", side(fromA), p))
}

func (s *recStream) Gap(fromA bool, lost int, ts time.Time) {
	s.gapAt = append(s.gapAt, ts)
	s.calls = append(s.calls, fmt.Sprintf("gap %s %d", side(fromA), lost))
}

func (s *recStream) Fin(fromA bool, _ time.Time) {
	s.calls = append(s.calls, "fin "+side(fromA))
}

func (s *recStream) Close(reason decode.CloseReason, _ time.Time) {
	s.closes++
	s.reason = reason
	s.calls = append(s.calls, "close "+reason.String())
}

// fromA is everything A sent, fromB everything B sent.
func (s *recStream) fromA() string { return s.data[0].String() }
func (s *recStream) fromB() string { return s.data[1].String() }

// recFactory is a decode.StreamFactory that keeps its streams.
type recFactory struct {
	streams   []*recStream
	ticks     int
	lastTick  time.Time
	backwards int // ticks earlier than the one before
	// stale counts data stamped before the last Tick: against the Tick
	// contract, unless reassembly held it out of order.
	stale int
	done  int
}

func (f *recFactory) NewStream(meta decode.ConnMeta) decode.TCPStream {
	s := &recStream{f: f, meta: meta}
	f.streams = append(f.streams, s)
	return s
}
func (f *recFactory) Tick(now time.Time) {
	if now.Before(f.lastTick) {
		f.backwards++
	}
	f.ticks++
	f.lastTick = now
}
func (f *recFactory) Done() { f.done++ }

// recorder hands out one recFactory per worker.
type recorder struct {
	factories []*recFactory
}

func (r *recorder) newFactory(int) decode.StreamFactory {
	f := &recFactory{}
	r.factories = append(r.factories, f)
	return f
}

// streams returns every stream, ordered by connection ID.
func (r *recorder) streams() []*recStream {
	var all []*recStream
	for _, f := range r.factories {
		all = append(all, f.streams...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].meta.ID < all[j].meta.ID })
	return all
}

// checkContract fails the test when a stream was not closed exactly once or
// a factory was not told Done exactly once.
func (r *recorder) checkContract(t *testing.T) {
	t.Helper()
	for _, f := range r.factories {
		if f.done != 1 {
			t.Errorf("factory Done called %d times", f.done)
		}
		if f.backwards > 0 {
			t.Errorf("Tick went back in time %d times", f.backwards)
		}
	}
	ids := map[uint64]bool{}
	for _, s := range r.streams() {
		if s.closes != 1 {
			t.Errorf("conn %d: Close called %d times: %v", s.meta.ID, s.closes, s.calls)
		}
		if ids[s.meta.ID] {
			t.Errorf("conn ID %d used twice", s.meta.ID)
		}
		ids[s.meta.ID] = true
	}
}

// run reads the files with a recorder and the config.
func run(t *testing.T, cfg Config, paths ...string) (*recorder, Stats, error) {
	t.Helper()
	rec := &recorder{}
	st, err := ReadFiles(context.Background(), paths, cfg, rec.newFactory)
	rec.checkContract(t)
	return rec, st, err
}

// --- building packets ---

var (
	client  = netip.MustParseAddrPort("10.0.0.1:40000")
	server  = netip.MustParseAddrPort("10.0.0.2:8080")
	client6 = netip.MustParseAddrPort("[2001:db8::1]:40000")
	server6 = netip.MustParseAddrPort("[2001:db8::2]:8080")
	t0      = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
)

// seg describes one TCP segment.
type seg struct {
	src, dst netip.AddrPort
	seq, ack uint32
	flags    string // any of S A F R P
	payload  string
	at       time.Duration // after t0
}

// ipPacket serializes a segment as an IPv4 or IPv6 packet.
func ipPacket(t testing.TB, s seg) []byte {
	t.Helper()
	tcp := &layers.TCP{
		SrcPort: layers.TCPPort(s.src.Port()), DstPort: layers.TCPPort(s.dst.Port()),
		Seq: s.seq, Ack: s.ack, Window: 65535,
		SYN: strings.Contains(s.flags, "S"), ACK: strings.Contains(s.flags, "A"),
		FIN: strings.Contains(s.flags, "F"), RST: strings.Contains(s.flags, "R"),
		PSH: strings.Contains(s.flags, "P"),
	}
	var ip gopacket.SerializableLayer
	if s.src.Addr().Is4() {
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP,
			SrcIP: s.src.Addr().AsSlice(), DstIP: s.dst.Addr().AsSlice()}
		if err := tcp.SetNetworkLayerForChecksum(ip4); err != nil {
			t.Fatal(err)
		}
		ip = ip4
	} else {
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP,
			SrcIP: s.src.Addr().AsSlice(), DstIP: s.dst.Addr().AsSlice()}
		if err := tcp.SetNetworkLayerForChecksum(ip6); err != nil {
			t.Fatal(err)
		}
		ip = ip6
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ip, tcp, gopacket.Payload(s.payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// link is a way to frame IP packets, with the link type a file declares.
type link struct {
	name  string
	type_ layers.LinkType
	frame func(ip []byte) []byte
}

func etherType(ip []byte) uint16 {
	if ip[0]>>4 == 6 {
		return 0x86dd
	}
	return 0x0800
}

func ethernet(tags ...uint16) func([]byte) []byte {
	return func(ip []byte) []byte {
		h := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
		for _, tpid := range tags {
			h = binary.BigEndian.AppendUint16(h, tpid)
			h = binary.BigEndian.AppendUint16(h, 42) // VLAN id
		}
		h = binary.BigEndian.AppendUint16(h, etherType(ip))
		return append(h, ip...)
	}
}

func sll(ip []byte) []byte {
	h := make([]byte, 16)
	binary.BigEndian.PutUint16(h[0:], 0) // to us
	binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
	binary.BigEndian.PutUint16(h[4:], 6)
	binary.BigEndian.PutUint16(h[14:], etherType(ip))
	return append(h, ip...)
}

func sll2(ip []byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], etherType(ip))
	binary.BigEndian.PutUint32(h[4:], 2) // ifindex
	binary.BigEndian.PutUint16(h[8:], 1) // ARPHRD_ETHER
	h[11] = 6
	return append(h, ip...)
}

// null frames with the BSD loopback family word in the given byte order; the
// IPv6 family value differs between BSDs.
func null(order binary.AppendByteOrder, v6family uint32) func([]byte) []byte {
	return func(ip []byte) []byte {
		fam := uint32(2)
		if ip[0]>>4 == 6 {
			fam = v6family
		}
		return append(order.AppendUint32(nil, fam), ip...)
	}
}

func raw(ip []byte) []byte { return ip }

// jumbogram makes an IPv6 packet a jumbogram (RFC 2675), as Linux BIG TCP
// hands a capture on the sending host: payload length 0, the length in a
// hop-by-hop Jumbo Payload option.
func jumbogram(ip []byte) []byte {
	n := uint32(len(ip) - 40 + 8)
	out := append(append(append([]byte(nil), ip[:40]...), byte(layers.IPProtocolTCP), 0, 0xc2, 4, byte(n>>24), byte(n>>16), byte(n>>8), byte(n)), ip[40:]...)
	out[6] = byte(layers.IPProtocolIPv6HopByHop)
	binary.BigEndian.PutUint16(out[4:], 0)
	return out
}

// hopByHop puts an 8-byte hop-by-hop header (a PadN option) between an IPv6
// header and its TCP segment, counted in the payload length.
func hopByHop(ip []byte) []byte {
	out := append(append(append([]byte(nil), ip[:40]...), byte(layers.IPProtocolTCP), 0, 1, 4, 0, 0, 0, 0), ip[40:]...)
	out[6] = byte(layers.IPProtocolIPv6HopByHop)
	binary.BigEndian.PutUint16(out[4:], binary.BigEndian.Uint16(ip[4:])+8)
	return out
}

// tunnel frames ip as traffic mirroring or an overlay network delivers it:
// encap(ip) in an outer IPv4 packet of protocol proto between two tunnel
// ends, in an Ethernet frame.
func tunnel(proto layers.IPProtocol, encap func(ip []byte) []byte) func([]byte) []byte {
	return func(ip []byte) []byte { return damage.TunnelFrame(proto, encap(ip)) }
}

// udpTunnel is a UDP datagram to port whose payload is hdr and the packet
// in an Ethernet frame (VXLAN, Geneve).
func udpTunnel(port uint16, hdr ...byte) func([]byte) []byte {
	return tunnel(layers.IPProtocolUDP, func(ip []byte) []byte {
		payload := append(append([]byte(nil), hdr...), ethernet()(ip)...)
		u := binary.BigEndian.AppendUint16(nil, 49152)
		u = binary.BigEndian.AppendUint16(u, port)
		u = binary.BigEndian.AppendUint16(u, uint16(8+len(payload)))
		u = append(u, 0, 0) // no checksum, as IPv4 allows
		return append(u, payload...)
	})
}

// tunnelLinks frame the packets in each tunnel the decoder opens.
var tunnelLinks = []link{
	{"vxlan", layers.LinkTypeEthernet, udpTunnel(4789, 0x08, 0, 0, 0, 0, 0, 42, 0)},
	{"geneve", layers.LinkTypeEthernet, udpTunnel(6081, 0, 0, 0x65, 0x58, 0, 0, 42, 0)},
	{"gre-ethernet", layers.LinkTypeEthernet, tunnel(layers.IPProtocolGRE, func(ip []byte) []byte {
		return append([]byte{0, 0, 0x65, 0x58}, ethernet()(ip)...)
	})},
	{"gre-ip", layers.LinkTypeEthernet, tunnel(layers.IPProtocolGRE, func(ip []byte) []byte {
		return append(binary.BigEndian.AppendUint16([]byte{0, 0}, etherType(ip)), ip...)
	})},
	{"erspan-ii", layers.LinkTypeEthernet, tunnel(layers.IPProtocolGRE, func(ip []byte) []byte {
		// GRE with a sequence number, then ERSPAN's version 1 header.
		h := []byte{0x10, 0, 0x88, 0xbe, 0, 0, 0, 7, 0x10, 42, 0, 1, 0, 0, 0, 0}
		return append(h, ethernet()(ip)...)
	})},
	{"ip-in-ip", layers.LinkTypeEthernet, func(ip []byte) []byte {
		proto := layers.IPProtocolIPv4
		if ip[0]>>4 == 6 {
			proto = layers.IPProtocolIPv6
		}
		return tunnel(proto, raw)(ip)
	}},
}

var ethernetLink = link{"ethernet", layers.LinkTypeEthernet, ethernet()}

// packet is a frame and its capture time.
type packet struct {
	ts   time.Time
	data []byte
}

func frames(t testing.TB, l link, segs []seg) []packet {
	t.Helper()
	out := make([]packet, 0, len(segs))
	for _, s := range segs {
		out = append(out, packet{t0.Add(s.at), l.frame(ipPacket(t, s))})
	}
	return out
}

// gzipped is data compressed as gzip writes it.
func gzipped(data []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

// pcapBytes writes packets as a classic pcap file.
func pcapBytes(t testing.TB, lt layers.LinkType, pkts []packet) []byte {
	t.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriterNanos(&b)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		ci := gopacket.CaptureInfo{Timestamp: p.ts, CaptureLength: len(p.data), Length: len(p.data)}
		if err := w.WritePacket(ci, p.data); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// pcapngBytes writes packets as a pcapng file.
func pcapngBytes(t testing.TB, lt layers.LinkType, pkts []packet) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriter(&b, lt)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		ci := gopacket.CaptureInfo{Timestamp: p.ts, CaptureLength: len(p.data), Length: len(p.data)}
		if err := w.WritePacket(ci, p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// capFile writes segments over Ethernet as a pcap file.
func capFile(t testing.TB, segs []seg) string {
	t.Helper()
	return writeTemp(t, "c.pcap", pcapBytes(t, layers.LinkTypeEthernet, frames(t, ethernetLink, segs)))
}

// conversation builds a whole connection: handshake, the given payloads
// alternating client then server, and a FIN from each side. Client ISN 1000,
// server ISN 5000.
func conversation(c, s netip.AddrPort, start time.Duration, msgs ...string) []seg {
	cseq, sseq := uint32(1001), uint32(5001)
	at := start
	next := func() time.Duration { at += time.Millisecond; return at }
	out := []seg{
		{src: c, dst: s, seq: 1000, flags: "S", at: next()},
		{src: s, dst: c, seq: 5000, ack: 1001, flags: "SA", at: next()},
		{src: c, dst: s, seq: 1001, ack: 5001, flags: "A", at: next()},
	}
	for i, m := range msgs {
		if i%2 == 0 {
			out = append(out, seg{src: c, dst: s, seq: cseq, ack: sseq, flags: "PA", payload: m, at: next()})
			cseq += uint32(len(m))
		} else {
			out = append(out, seg{src: s, dst: c, seq: sseq, ack: cseq, flags: "PA", payload: m, at: next()})
			sseq += uint32(len(m))
		}
	}
	out = append(out,
		seg{src: c, dst: s, seq: cseq, ack: sseq, flags: "FA", at: next()},
		seg{src: s, dst: c, seq: sseq, ack: cseq + 1, flags: "FA", at: next()},
		seg{src: c, dst: s, seq: cseq + 1, ack: sseq + 1, flags: "A", at: next()},
	)
	return out
}
