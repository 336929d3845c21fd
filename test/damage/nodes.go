package damage

import (
	"fmt"
	"math/rand/v2"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// connections groups the indexes of the capture's TCP packets by connection
// (both directions of one address and port pair), in the order each
// connection's first packet comes. Packets that are not TCP belong to none.
func (c Capture) connections() [][]int {
	type pair struct{ net, tr gopacket.Flow }
	index := map[pair]int{}
	var out [][]int
	for i, p := range c.Packets {
		pkt := gopacket.NewPacket(p.Data, c.LinkType, gopacket.NoCopy)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || pkt.NetworkLayer() == nil {
			continue
		}
		k := pair{pkt.NetworkLayer().NetworkFlow(), tcp.TransportFlow()}
		if k.net.Dst().LessThan(k.net.Src()) || k.net.Src() == k.net.Dst() && k.tr.Dst().LessThan(k.tr.Src()) {
			k = pair{k.net.Reverse(), k.tr.Reverse()}
		}
		j, ok := index[k]
		if !ok {
			j = len(out)
			index[k] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// OnNodes is the capture as the nodes' agents would each record it when a load
// balancer spreads the connections over servers on n nodes (at random, by
// seed; a session's connections may land on different nodes): one capture
// per node, each with the connections sent to it and every packet that is
// not TCP.
func (c Capture) OnNodes(n int, seed uint64) [][]pcaprec.Packet {
	r := rand.New(rand.NewPCG(seed, 0x90de))
	node := make([]int, len(c.Packets))
	for i := range node {
		node[i] = -1
	}
	for _, conn := range c.connections() {
		to := r.IntN(n)
		for _, i := range conn {
			node[i] = to
		}
	}
	out := make([][]pcaprec.Packet, n)
	for i, p := range c.Packets {
		for k := range out {
			if node[i] < 0 || node[i] == k {
				out[k] = append(out[k], p)
			}
		}
	}
	return out
}

// ConnectionsElsewhere returns one variant per TCP connection, that
// connection missing whole (a load balancer sent it to a server on another
// node); of a capture with more than most connections, most of them,
// evenly spaced.
func (c Capture) ConnectionsElsewhere(most int) []Variant {
	conns := c.connections()
	var out []Variant
	for _, j := range evenly(len(conns), most) {
		gone := make(map[int]bool, len(conns[j]))
		for _, i := range conns[j] {
			gone[i] = true
		}
		var pkts []pcaprec.Packet
		for i, p := range c.Packets {
			if !gone[i] {
				pkts = append(pkts, p)
			}
		}
		out = append(out, Variant{Name: fmt.Sprintf("connection elsewhere:%d of %d", j+1, len(conns)), Packets: pkts})
	}
	return out
}
