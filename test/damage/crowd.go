package damage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// Crowd merges captures of loopback traffic (Ethernet, IPv4, TCP, every
// client and server on 127.0.0.1) into one busy capture: every client on one
// address, every capture's first server on one port (one logical MCP
// endpoint per server implementation: the Host headers are rewritten to it
// too), other servers and client ports moved apart so no two captures share
// a TCP connection, and each capture's time shifted to start stagger after
// the previous one, so they overlap. It is the test of "many clients behind
// one address": the merged capture must give exactly the findings of its
// parts.
//
// Captures of different Implementations get different Hosts (127.0.0.1,
// 127.0.0.2, ... with the shared port; a Host spelled localhost stays
// localhost with the shared port for all) on the one server address, as
// virtual hosts of one ingress: an endpoint is one server's, and its event
// id scheme is one. Under one Host, go-sdk's per-session counters (every
// standalone stream numbered from _0) would tell the detector that the
// endpoint's ids repeat across sessions, and a TypeScript shared store's
// leak beside them could not be told by its ids.
func Crowd(captures []Capture, stagger time.Duration) ([]pcaprec.Packet, error) {
	// Five-digit ports, so Host headers are rewritten in place: the shared
	// server, then each capture's other servers (20 each), then each
	// capture's clients, never overlapping: the client ports are shared out
	// evenly (the busiest fixture, ts-crowd-pooling-proxy, uses 238; a
	// 16-client probe over a thousand).
	const (
		sharedServer = 10000
		otherServers = 10001
		firstClient  = 12000
		minClients   = 500
	)
	n := max(1, len(captures))
	clientsPerCapture := (65536 - firstClient) / n
	if clientsPerCapture < minClients || otherServers+n*20 > firstClient {
		return nil, fmt.Errorf("%d captures: more than the port plan holds", n)
	}
	var out []pcaprec.Packet
	var t0 time.Time
	hosts := map[string]int{} // implementation -> its Host's last octet
	for i, c := range captures {
		if c.LinkType != layers.LinkTypeEthernet {
			return nil, fmt.Errorf("capture %d: link type %v, want Ethernet", i, c.LinkType)
		}
		if len(c.Packets) == 0 {
			continue
		}
		servers := serverPorts(c.Packets)
		ports := map[uint16]uint16{}
		if len(servers) > 20 {
			return nil, fmt.Errorf("capture %d: %d server ports, the port plan holds 20", i, len(servers))
		}
		for j, p := range servers {
			ports[p] = uint16(otherServers + i*20 + j)
		}
		if len(servers) > 0 {
			ports[servers[0]] = sharedServer
		}
		if _, ok := hosts[c.Implementation]; !ok {
			hosts[c.Implementation] = 1 + len(hosts)
			if len(hosts) > 9 {
				return nil, fmt.Errorf("more than 9 implementations: their Hosts no longer fit in place")
			}
		}
		sharedHost := fmt.Sprintf("127.0.0.%d:%d", hosts[c.Implementation], sharedServer)
		clientBase := firstClient + i*clientsPerCapture
		nextClient := 0
		if t0.IsZero() {
			t0 = c.Packets[0].CI.Timestamp
		}
		shift := t0.Add(time.Duration(i) * stagger).Sub(c.Packets[0].CI.Timestamp)
		for _, p := range c.Packets {
			data := slices.Clone(p.Data)
			if len(data) < 14+20+20 || data[12] != 0x08 || data[13] != 0x00 {
				continue
			}
			ip := data[14:]
			tcp := ip[int(ip[0]&0x0f)*4:]
			for _, off := range []int{0, 2} {
				port := binary.BigEndian.Uint16(tcp[off:])
				np, ok := ports[port]
				if !ok {
					if nextClient == clientsPerCapture {
						return nil, fmt.Errorf("capture %d: more than %d client ports", i, clientsPerCapture)
					}
					np = uint16(clientBase + nextClient)
					nextClient++
					ports[port] = np
				}
				binary.BigEndian.PutUint16(tcp[off:], np)
			}
			payload := tcp[int(tcp[12]>>4)*4:]
			for old, np := range ports {
				for _, host := range []string{"127.0.0.1:", "localhost:"} {
					from, to := fmt.Sprintf("%s%d", host, old), fmt.Sprintf("%s%d", host, np)
					if host == "127.0.0.1:" && np == sharedServer {
						to = sharedHost
					}
					if from != to && len(from) == len(to) {
						copy(payload, bytes.ReplaceAll(payload, []byte(from), []byte(to)))
					}
				}
			}
			ci := p.CI
			ci.Timestamp = ci.Timestamp.Add(shift)
			out = append(out, pcaprec.Packet{CI: ci, Data: data})
		}
	}
	slices.SortStableFunc(out, func(a, b pcaprec.Packet) int { return a.CI.Timestamp.Compare(b.CI.Timestamp) })
	return out, nil
}

// serverPorts lists the ports SYNs go to, the most used first.
func serverPorts(pkts []pcaprec.Packet) []uint16 {
	count := map[uint16]int{}
	var order []uint16
	for _, p := range pkts {
		d := p.Data
		if len(d) < 14+20+20 {
			continue
		}
		ip := d[14:]
		tcp := ip[int(ip[0]&0x0f)*4:]
		if len(tcp) < 14 || tcp[13]&0x12 != 0x02 { // SYN without ACK
			continue
		}
		port := binary.BigEndian.Uint16(tcp[2:])
		if count[port] == 0 {
			order = append(order, port)
		}
		count[port]++
	}
	slices.SortStableFunc(order, func(a, b uint16) int { return count[b] - count[a] })
	return order
}
