// Package damage damages packet captures the way real captures are damaged:
// segments lost (one at a time or at random), duplicated, reordered, cut by a
// snap length, a capture that starts late or stops early, a reverse proxy's
// second hop of every exchange (ProxyHop), a load balancer's PROXY protocol
// header on every connection (BehindProxyProtocol), a session's connections
// spread over nodes (ConnectionsElsewhere, OnNodes). The suite runs every
// real SDK capture through these and requires that damage can lose a finding
// but never add a violation (cmd/replaywatch damaged_test.go).
//
// Every transformation is deterministic for a given seed, so a failing case
// can be rebuilt from its name.
package damage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// Capture is a capture held in memory: its packets in file order and link
// type.
type Capture struct {
	Packets  []pcaprec.Packet
	LinkType layers.LinkType
	// Implementation names the server implementation the capture shows,
	// for Crowd (empty: all the same).
	Implementation string
}

// Variant is one damaged copy of a capture. Its name is the kind of damage,
// then after a colon what tells the cases of a kind apart.
type Variant struct {
	Name    string
	Packets []pcaprec.Packet
}

// PayloadSegments returns the indexes of the packets that carry TCP payload.
func (c Capture) PayloadSegments() []int {
	var out []int
	for i, p := range c.Packets {
		if tcp := p.TCP(c.LinkType); tcp != nil && len(tcp.Payload) > 0 {
			out = append(out, i)
		}
	}
	return out
}

// Without returns the packets less the one at index i.
func (c Capture) Without(i int) []pcaprec.Packet {
	return slices.Concat(c.Packets[:i:i], c.Packets[i+1:])
}

// DropEach returns one variant per payload segment, that segment lost; of a
// capture with more than most segments, most of them, evenly spaced.
func (c Capture) DropEach(most int) []Variant {
	var out []Variant
	segs := c.PayloadSegments()
	for _, k := range evenly(len(segs), most) {
		out = append(out, Variant{fmt.Sprintf("drop each segment:%d", segs[k]), c.Without(segs[k])})
	}
	return out
}

// LateStarts returns the capture started late at each packet after the
// first; of a longer capture, at most of them, evenly spaced.
func (c Capture) LateStarts(most int) []Variant {
	var out []Variant
	for _, k := range evenly(len(c.Packets)-1, most) {
		out = append(out, Variant{fmt.Sprintf("late start:%d", k+1), c.Packets[k+1:]})
	}
	return out
}

// evenly picks min(n, most) of the indexes 0..n-1, evenly spaced.
func evenly(n, most int) []int {
	m := max(0, min(n, most))
	out := make([]int, 0, m)
	for i := range m {
		out = append(out, i*n/m)
	}
	return out
}

// DropRandom loses each payload segment with probability rate.
func (c Capture) DropRandom(rate float64, seed uint64) []pcaprec.Packet {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	payload := c.PayloadSegments()
	var out []pcaprec.Packet
	j := 0
	for i, p := range c.Packets {
		if j < len(payload) && payload[j] == i {
			j++
			if r.Float64() < rate {
				continue
			}
		}
		out = append(out, p)
	}
	return out
}

// Duplicate repeats each packet with probability rate, right after itself
// (a capture on two interfaces, a retransmission of the very same bytes).
func (c Capture) Duplicate(rate float64, seed uint64) []pcaprec.Packet {
	r := rand.New(rand.NewPCG(seed, 0xd0b1e))
	var out []pcaprec.Packet
	for _, p := range c.Packets {
		out = append(out, p)
		if r.Float64() < rate {
			out = append(out, p)
		}
	}
	return out
}

// Reorder moves packets later by up to window places, each with probability
// rate, keeping their timestamps (a multi-queue NIC, two interfaces merged).
func (c Capture) Reorder(rate float64, window int, seed uint64) []pcaprec.Packet {
	r := rand.New(rand.NewPCG(seed, 0x0dde))
	out := slices.Clone(c.Packets)
	for i := 0; i < len(out)-1; i++ {
		if r.Float64() >= rate {
			continue
		}
		j := min(len(out)-1, i+1+r.IntN(window))
		p := out[i]
		copy(out[i:j], out[i+1:j+1])
		out[j] = p
		i = j // a moved packet is not moved again
	}
	return out
}

// Snaplen cuts every packet to n bytes, as `tcpdump -s n` or `editcap -s n`
// would: the record keeps the original length.
func (c Capture) Snaplen(n int) []pcaprec.Packet {
	out := make([]pcaprec.Packet, len(c.Packets))
	for i, p := range c.Packets {
		if len(p.Data) > n {
			ci := p.CI
			ci.CaptureLength = n
			p = pcaprec.Packet{CI: ci, Data: p.Data[:n]}
		}
		out[i] = p
	}
	return out
}

// Window keeps the packets captured from start+skip to end-cut: a capture
// that began late, or ended early.
func (c Capture) Window(skip, cut time.Duration) []pcaprec.Packet {
	if len(c.Packets) == 0 {
		return nil
	}
	first, last := c.Packets[0].CI.Timestamp, c.Packets[0].CI.Timestamp
	for _, p := range c.Packets {
		if p.CI.Timestamp.Before(first) {
			first = p.CI.Timestamp
		}
		if p.CI.Timestamp.After(last) {
			last = p.CI.Timestamp
		}
	}
	from, to := first.Add(skip), last.Add(-cut)
	var out []pcaprec.Packet
	for _, p := range c.Packets {
		if !p.CI.Timestamp.Before(from) && !p.CI.Timestamp.After(to) {
			out = append(out, p)
		}
	}
	return out
}

// ShiftedFrom is the capture with the times of the packets from index at on
// moved by d: a quiet spell in all traffic (d > 0), or the capturing host's
// clock stepped back (d < 0).
func (c Capture) ShiftedFrom(at int, d time.Duration) []pcaprec.Packet {
	out := slices.Clone(c.Packets)
	for j := at; j < len(out); j++ {
		out[j].CI.Timestamp = out[j].CI.Timestamp.Add(d)
	}
	return out
}

// Duration is the time from the capture's first packet to its last.
func (c Capture) Duration() time.Duration {
	if len(c.Packets) == 0 {
		return 0
	}
	return c.Packets[len(c.Packets)-1].CI.Timestamp.Sub(c.Packets[0].CI.Timestamp)
}

// RandomVariants is the random damage, per seed: loss of 0.1%, 1% and 5%
// of the payload segments, 5% duplicated and 5% moved later by up to four
// places.
func (c Capture) RandomVariants(seeds int) []Variant {
	var out []Variant
	for seed := range uint64(seeds) {
		for _, rate := range []float64{0.001, 0.01, 0.05} {
			out = append(out, Variant{fmt.Sprintf("drop %g%%:seed %d", rate*100, seed), c.DropRandom(rate, seed)})
		}
		out = append(out,
			Variant{fmt.Sprintf("duplicate 5%%:seed %d", seed), c.Duplicate(0.05, seed)},
			Variant{fmt.Sprintf("reorder 5%% within 4:seed %d", seed), c.Reorder(0.05, 4, seed)},
		)
	}
	return out
}

// Variants is every kind of damage the suite applies to one capture, each
// case named so it can be rebuilt: each payload segment lost in turn and the
// capture started late at each packet (at most most of each, DropEach,
// LateStarts), the random damage of RandomVariants, snap lengths of 64, 200
// and 1000 bytes, and the first and last quarter, half of the capture's time
// cut.
func (c Capture) Variants(seeds, most int) []Variant {
	out := slices.Concat(c.DropEach(most), c.LateStarts(most), c.RandomVariants(seeds))
	for _, n := range []int{64, 200, 1000} {
		out = append(out, Variant{fmt.Sprintf("snaplen %d", n), c.Snaplen(n)})
	}
	d := c.Duration()
	for _, f := range []int{4, 2} {
		cut := d / time.Duration(f)
		out = append(out,
			Variant{fmt.Sprintf("cut first 1/%d", f), c.Window(cut, 0)},
			Variant{fmt.Sprintf("cut last 1/%d", f), c.Window(0, cut)},
		)
	}
	return out
}

// AsLinuxSLL rewrites Ethernet frames as Linux cooked (SLL) frames: the same
// packets as another interface (`any`, a tunnel) records them, with another
// link header, so a merge cannot take them for byte-identical copies.
func AsLinuxSLL(pkts []pcaprec.Packet) []pcaprec.Packet {
	out := make([]pcaprec.Packet, 0, len(pkts))
	for _, p := range pkts {
		if len(p.Data) < 14 {
			continue
		}
		sll := make([]byte, 16, 16+len(p.Data)-14)
		sll[3] = 1                      // ARPHRD_ETHER
		sll[5] = 6                      // address length
		copy(sll[6:12], p.Data[6:12])   // the source MAC
		copy(sll[14:16], p.Data[12:14]) // EtherType
		data := append(sll, p.Data[14:]...)
		ci := p.CI
		ci.CaptureLength, ci.Length = len(data), ci.Length-14+16
		out = append(out, pcaprec.Packet{CI: ci, Data: data})
	}
	return out
}

// SplitLoss makes two copies of the capture as two interfaces would record
// it, each missing some of the payload segments (each segment is lost, with
// probability rate, from one copy or the other, never both): merged, they
// hold every byte.
func (c Capture) SplitLoss(rate float64, seed uint64) (a, b []pcaprec.Packet) {
	r := rand.New(rand.NewPCG(seed, 0x5b17))
	payload := c.PayloadSegments()
	j := 0
	for i, p := range c.Packets {
		inA, inB := true, true
		if j < len(payload) && payload[j] == i {
			j++
			if r.Float64() < rate {
				if r.IntN(2) == 0 {
					inA = false
				} else {
					inB = false
				}
			}
		}
		if inA {
			a = append(a, p)
		}
		if inB {
			b = append(b, p)
		}
	}
	return a, b
}

// Addresses of ProxyHop's second hop: the proxy's own address and the
// upstream server's, in 192.0.2.0/24 (TEST-NET-1), which no fixture uses;
// and, for HopInPod and HopRelay, the clients' (TEST-NET-2).
var (
	proxyAddr    = [4]byte{192, 0, 2, 1}
	upstreamAddr = [4]byte{192, 0, 2, 2}
	clientsAddr  = [4]byte{198, 51, 100, 1}
)

// HopKind is how ProxyHop's proxy forwards: the Host it sends, the address
// it connects from.
type HopKind int

const (
	// HopKeepsHost: an ingress controller beside the server's pod, which
	// keeps the clients' Host and connects from an address of its own.
	HopKeepsHost HopKind = iota
	// HopInPod: an nginx in the server's pod, with proxy_pass's defaults:
	// it listens on the address the clients reached (the capture's server
	// address; the clients move to 198.51.100.1, since the fixtures'
	// loopback clients share it), connects to the upstream from that same
	// address, and sends it a Host of its own.
	HopInPod
	// HopRelay: a proxy on the node's own network, which clients (moved to
	// 198.51.100.1, as for HopInPod) reach at the capture's server address
	// and which connects to the upstream from an address of its own (the
	// bridge's), sending a Host of its own.
	HopRelay
	// HopOnClientHost: a proxy on the clients' own host (the fixtures'
	// clients and servers share 127.0.0.1) that keeps their Host, as nginx
	// set up for SSE does: it connects to the upstream from the address
	// the clients reached, which is theirs, and from other ports (each
	// client port with its top bit flipped), as a proxy's sockets are
	// its own.
	HopOnClientHost
	// HopOnClientHostOwnHost: the same proxy with a Host of its own
	// (proxy_pass's default).
	HopOnClientHostOwnHost
)

// ProxyHop adds what a capture on a node that also runs a reverse proxy
// (an ingress controller beside the MCP server's pod) records: every IPv4
// TCP packet a second time, as the proxy's hop to the upstream server, the
// same bytes between other addresses (the ports kept, so each connection
// has its twin), delay later. (A proxy sends the upstream its answers
// earlier than the client gets them; shifting every packet of the hop
// alike keeps each connection's order whatever the server's speed.) A Host
// of the proxy's own is every Host value in the hop's requests spelled
// with as many "u"s (the same length, so no sequence number moves; a
// header split across segments keeps its Host).
func (c Capture) ProxyHop(delay time.Duration, kind HopKind) []pcaprec.Packet {
	return c.twice(delay, func(first, second []byte, fromServer bool) []byte {
		// The server's address is the source from the server, else the
		// destination; the client's the other.
		server, client := 12+4*b2i(!fromServer), 12+4*b2i(fromServer)
		proxy := proxyAddr
		onClientHost := kind == HopOnClientHost || kind == HopOnClientHostOwnHost
		if kind == HopInPod || onClientHost {
			copy(proxy[:], first[14+server:])
		}
		if kind == HopInPod || kind == HopRelay {
			// Clients of their own: the fixtures' loopback clients share
			// the server's address, which a proxy may connect from.
			first = slices.Clone(first)
			copy(first[14+client:], clientsAddr[:])
		}
		copy(second[14+server:], upstreamAddr[:])
		copy(second[14+client:], proxy[:])
		tcp := second[14+int(second[14]&0x0f)*4:]
		if onClientHost && len(tcp) >= 4 {
			tcp[2*b2i(fromServer)] ^= 0x80
		}
		ownHost := kind != HopKeepsHost && kind != HopOnClientHost
		if ownHost && !fromServer && len(tcp) >= 20 {
			renameHosts(tcp[int(tcp[12]>>4)*4:])
		}
		return first
	})
}

// HopLegs splits what ProxyHop made into the clients' leg (with the
// packets that are no IPv4 TCP) and the proxy's leg to the upstream
// server: what a capture on the other host sees of them, the one the proxy
// does not run on.
func HopLegs(hop []pcaprec.Packet) (clients, upstream []pcaprec.Packet) {
	for _, p := range hop {
		d := p.Data
		if len(d) >= 14+20 && d[12] == 0x08 && d[13] == 0x00 && (bytes.Equal(d[14+12:14+16], upstreamAddr[:]) || bytes.Equal(d[14+16:14+20], upstreamAddr[:])) {
			upstream = append(upstream, p)
		} else {
			clients = append(clients, p)
		}
	}
	return clients, upstream
}

// serviceAddr is NATCopy's Service address, in 203.0.113.0/24 (TEST-NET-3).
var serviceAddr = [4]byte{203, 0, 113, 10}

// NATCopy adds what a capture on every interface of a node records when
// the clients reach a server on the same node through a Service address
// (kube-proxy's destination NAT): every IPv4 TCP packet a second time, as
// seen on the other side of the translation, the same socket and bytes
// with the server's address replaced by the Service's (203.0.113.10, the
// ports kept), delay later.
func (c Capture) NATCopy(delay time.Duration) []pcaprec.Packet {
	return c.twice(delay, func(first, second []byte, fromServer bool) []byte {
		copy(second[14+12+4*b2i(!fromServer):], serviceAddr[:])
		return first
	})
}

// twice is every packet of c and, for each IPv4 TCP one, a second delay
// later, in time order. edit makes the second out of a copy of the first,
// and may give the first's bytes anew (it must not write to first).
func (c Capture) twice(delay time.Duration, edit func(first, second []byte, fromServer bool) []byte) []pcaprec.Packet {
	servers := map[uint16]bool{}
	for _, p := range serverPorts(c.Packets) {
		servers[p] = true
	}
	out := make([]pcaprec.Packet, 0, 2*len(c.Packets))
	for _, p := range c.Packets {
		if len(p.Data) < 14+20+20 || p.Data[12] != 0x08 || p.Data[13] != 0x00 {
			out = append(out, p)
			continue
		}
		second := slices.Clone(p.Data)
		fromServer := servers[binary.BigEndian.Uint16(p.Data[14+int(p.Data[14]&0x0f)*4:])]
		p.Data = edit(p.Data, second, fromServer)
		out = append(out, p)
		ci := p.CI
		ci.Timestamp = ci.Timestamp.Add(delay)
		out = append(out, pcaprec.Packet{CI: ci, Data: second})
	}
	slices.SortStableFunc(out, func(a, b pcaprec.Packet) int { return a.CI.Timestamp.Compare(b.CI.Timestamp) })
	return out
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// renameHosts spells the value of every Host header line in payload with
// as many "u"s.
func renameHosts(payload []byte) {
	for i := 0; ; {
		j := bytes.Index(payload[i:], []byte("\r\n"))
		if j < 0 {
			return
		}
		line := payload[i+j+2:]
		i += j + 2
		if len(line) < 5 || !bytes.EqualFold(line[:5], []byte("host:")) {
			continue
		}
		end := bytes.Index(line, []byte("\r\n"))
		if end < 0 {
			end = len(line)
		}
		v := line[5:end]
		for k := range v {
			if v[k] != ' ' && v[k] != '\t' {
				v[k] = 'u'
			}
		}
	}
}
