package damage

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/replaywatch/replaywatch/test/inetsum"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// Replica is the capture as the k-th replica (k >= 0) of one client
// application recorded it, replicas that run in step behind one service
// endpoint: the same requests (clientInfo, User-Agent, JSON-RPC ids and
// params, Host and path), from an address of the replica's own
// (10.0.k+1.1), sent by the load balancer to a backend of its own
// (10.1.k+1.1; its ports kept), shift later. What a backend mints is its
// own: every session id (Mcp-Session-Id) and every stream id in an event id
// (SSE id:, Last-Event-ID; not inside a compressed body) is spelled with its
// last three characters changed for k > 0, everywhere it appears. The
// sequence numbers and IPv4 ids move too, and the checksums are recomputed.
// Only Ethernet frames of IPv4 TCP are kept.
func (c Capture) Replica(k int, shift time.Duration) []pcaprec.Packet {
	return c.ReplicaOpts(k, shift, ReplicaOptions{})
}

// ReplicaOptions vary what Replica makes of the capture.
type ReplicaOptions struct {
	// OwnEndpoint: the replica talks to a server of a name of its own: the
	// Host header value of every request has the last character of its
	// host part (before any port) changed for k > 0, at the same length
	// (127.0.0.1:8080 becomes 127.0.0.2:8080 for k = 1).
	OwnEndpoint bool
	// Client, when set, is the replica's client address instead of
	// 10.0.k+1.1 (say another replica's backend, 10.1.j+1.1: a pod that is
	// a client and a server).
	Client *[4]byte
	// NumberedSessions: the backend numbers its sessions: every
	// Mcp-Session-Id header value is its ordinal of first appearance in the
	// capture (1, 2, ...), padded with blanks to its length (every replica's
	// backend then gives the same short ids).
	NumberedSessions bool
}

// ReplicaOpts is Replica as o varies it.
func (c Capture) ReplicaOpts(k int, shift time.Duration, o ReplicaOptions) []pcaprec.Packet {
	servers := map[uint16]bool{}
	for _, p := range serverPorts(c.Packets) {
		servers[p] = true
	}
	client := [4]byte{10, 0, byte(k + 1), 1}
	if o.Client != nil {
		client = *o.Client
	}
	server := [4]byte{10, 1, byte(k + 1), 1}
	tokens, _ := backendTokens(c.Packets)
	var numbers map[string]int
	if o.NumberedSessions {
		numbers = sessionOrdinals(c.Packets)
	}
	seqC, seqS := uint32(k)*0x10000101, uint32(k)*0x20000203
	var out []pcaprec.Packet
	for _, p := range c.Packets {
		d := p.Data
		if len(d) < 14+20+20 || d[12] != 0x08 || d[13] != 0x00 || d[14+9] != 6 {
			continue
		}
		data := slices.Clone(d)
		ip := data[14:]
		ihl := int(ip[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(ip[2:4]))
		if total > len(ip) || total < ihl+20 {
			continue // cut short: its checksum could not be recomputed
		}
		ip = ip[:total]
		tcp := ip[ihl:]
		src, dst := binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])
		toServer := servers[dst] && (!servers[src] || dst < src)
		if toServer {
			copy(ip[12:16], client[:])
			copy(ip[16:20], server[:])
			binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+seqC)
			if tcp[13]&0x10 != 0 {
				binary.BigEndian.PutUint32(tcp[8:], binary.BigEndian.Uint32(tcp[8:])+seqS)
			}
		} else {
			copy(ip[12:16], server[:])
			copy(ip[16:20], client[:])
			binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+seqS)
			if tcp[13]&0x10 != 0 {
				binary.BigEndian.PutUint32(tcp[8:], binary.BigEndian.Uint32(tcp[8:])+seqC)
			}
		}
		binary.BigEndian.PutUint16(ip[4:6], binary.BigEndian.Uint16(ip[4:6])+uint16(k*1009))
		if o.NumberedSessions {
			numberSessions(tcp[int(tcp[12]>>4)*4:], numbers)
		}
		if k > 0 && toServer && o.OwnEndpoint {
			mutateHost(tcp[int(tcp[12]>>4)*4:], k)
		}
		if k > 0 {
			payload := tcp[int(tcp[12]>>4)*4:]
			for _, tok := range tokens {
				if bytes.Contains(payload, tok) {
					copy(payload, bytes.ReplaceAll(payload, tok, mutateToken(tok, k)))
				}
			}
		}
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:12], inetsum.Checksum(0, ip[:ihl]))
		tcp[16], tcp[17] = 0, 0
		binary.BigEndian.PutUint16(tcp[16:18], inetsum.TCP(ip[:ihl], tcp))
		ci := p.CI
		ci.Timestamp = ci.Timestamp.Add(shift)
		ci.CaptureLength = len(data[:14+total])
		ci.Length = ci.CaptureLength
		out = append(out, pcaprec.Packet{CI: ci, Data: data[:14+total]})
	}
	return out
}

// Replicas merges n replicas of the capture (Replica), the k-th shifted by
// k*step, in time order.
func (c Capture) Replicas(n int, step time.Duration) []pcaprec.Packet {
	return c.WarpedReplicas(n, step, 0, time.Second)
}

// EventIDsOwn says whether Replica gives each replica's backend event ids
// of its own: not when a body of the capture is compressed, since the ids
// inside it cannot be rewritten. Replicas of such a capture show backends
// that share event ids, as no two servers' stores do.
func (c Capture) EventIDsOwn() bool {
	_, compressed := backendTokens(c.Packets)
	return !compressed
}

// backendTokens are the values a backend mints that the capture shows:
// session ids, and the parts of event ids at least 16 characters long (a
// stream id), longest first. Event ids are left alone when any body is
// compressed (those inside it could not be rewritten).
func backendTokens(pkts []pcaprec.Packet) (tokens [][]byte, compressed bool) {
	seen := map[string]bool{}
	var events [][]byte
	for _, p := range pkts {
		payload, ok := tcpPayload(p)
		if !ok {
			continue
		}
		for _, line := range bytes.Split(payload, []byte("\n")) {
			line = bytes.TrimRight(line, "\r")
			name, value, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				continue
			}
			value = bytes.TrimSpace(value)
			switch string(bytes.ToLower(name)) {
			case "mcp-session-id":
				if len(value) >= 8 {
					seen[string(value)] = true
				}
			case "content-encoding":
				if !bytes.EqualFold(value, []byte("identity")) {
					compressed = true
				}
			case "id", "last-event-id":
				for _, part := range bytes.FieldsFunc(value, func(r rune) bool { return r == '_' || r == ':' || r == '/' }) {
					if len(part) >= 16 {
						events = append(events, slices.Clone(part))
					}
				}
			}
		}
	}
	if !compressed {
		for _, e := range events {
			seen[string(e)] = true
		}
	}
	for t := range seen {
		tokens = append(tokens, []byte(t))
	}
	slices.SortFunc(tokens, func(a, b []byte) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return bytes.Compare(a, b)
	})
	return tokens, compressed
}

// mutateToken changes tok's last three characters, each within its class
// (digits, lower case, upper case), by an amount that depends on k.
func mutateToken(tok []byte, k int) []byte {
	out := slices.Clone(tok)
	for i := max(0, len(out)-3); i < len(out); i++ {
		n := (k*7 + i) % 26
		switch c := out[i]; {
		case c >= '2' && c <= '7' && bytes.IndexFunc(tok, func(r rune) bool { return r >= 'A' && r <= 'Z' }) >= 0:
			out[i] = '2' + byte((int(c-'2')+1+n%5)%6) // base32 stays base32
		case c >= '0' && c <= '9':
			out[i] = '0' + byte((int(c-'0')+1+n%9)%10)
		case c >= 'a' && c <= 'f' && bytes.IndexFunc(tok, func(r rune) bool { return r > 'f' && r <= 'z' }) < 0:
			out[i] = 'a' + byte((int(c-'a')+1+n%5)%6) // hex stays hex
		case c >= 'a' && c <= 'z':
			out[i] = 'a' + byte((int(c-'a')+1+n%25)%26)
		case c >= 'A' && c <= 'Z':
			out[i] = 'A' + byte((int(c-'A')+1+n%25)%26)
		}
	}
	return out
}

// WarpedReplicas merges n replicas of the capture, the k-th shifted by
// k*step and then by amplitude*sin(2πt/period + k·2π/n) (t its own time
// since its first packet): each replica's packets keep their order (the
// warp is monotone while 2π·amplitude < period), but which replica's
// request comes first changes over the capture, as replicas polling on
// their own timers drift past each other.
func (c Capture) WarpedReplicas(n int, step, amplitude, period time.Duration) []pcaprec.Packet {
	return c.WarpedReplicasOpts(n, step, amplitude, period, func(int) ReplicaOptions { return ReplicaOptions{} })
}

// mutateHost changes, in place, the last character of the host part of
// every Host header line in payload, by k (a digit stays a digit, a letter a
// letter).
func mutateHost(payload []byte, k int) {
	headerLines(payload, "host", func(v []byte) {
		v = bytes.TrimRight(v, " ")
		host := v
		if i := bytes.LastIndexByte(v, ':'); i > 0 && !bytes.Contains(v[:i], []byte(":")) {
			host = v[:i]
		}
		if n := len(host); n > 0 {
			switch c := host[n-1]; {
			case c >= '0' && c <= '9':
				host[n-1] = '0' + byte((int(c-'0')+k)%10)
			case c >= 'a' && c <= 'z':
				host[n-1] = 'a' + byte((int(c-'a')+k)%26)
			case c >= 'A' && c <= 'Z':
				host[n-1] = 'A' + byte((int(c-'A')+k)%26)
			}
		}
	})
}

// OwnEndpointOptions: replica k its own endpoint and, when clientIsServer
// and k > 0, with replica k-1's backend address for its client.
func OwnEndpointOptions(k int, clientIsServer bool) ReplicaOptions {
	o := ReplicaOptions{OwnEndpoint: true}
	if clientIsServer && k > 0 {
		o.Client = &[4]byte{10, 1, byte(k), 1}
	}
	return o
}

// WarpedReplicasOpts is WarpedReplicas with replica k made with opt(k).
func (c Capture) WarpedReplicasOpts(n int, step, amplitude, period time.Duration, opt func(k int) ReplicaOptions) []pcaprec.Packet {
	var out []pcaprec.Packet
	for k := range n {
		r := c.ReplicaOpts(k, time.Duration(k)*step, opt(k))
		if len(r) == 0 {
			continue
		}
		t0 := r[0].CI.Timestamp
		phase := 2 * math.Pi * float64(k) / float64(n)
		for i := range r {
			t := r[i].CI.Timestamp.Sub(t0)
			w := float64(amplitude) * math.Sin(2*math.Pi*float64(t)/float64(period)+phase)
			r[i].CI.Timestamp = r[i].CI.Timestamp.Add(time.Duration(w))
		}
		out = append(out, r...)
	}
	slices.SortStableFunc(out, func(a, b pcaprec.Packet) int { return a.CI.Timestamp.Compare(b.CI.Timestamp) })
	return out
}

// headerLines calls f with the value (untrimmed, without the line end) of
// every line of payload whose field name is name (lower case).
func headerLines(payload []byte, name string, f func(value []byte)) {
	for off := 0; off < len(payload); {
		nl := bytes.IndexByte(payload[off:], '\n')
		end := len(payload)
		if nl >= 0 {
			end = off + nl
		}
		line := payload[off:end]
		if len(line) > len(name) && line[len(name)] == ':' && bytes.EqualFold(line[:len(name)], []byte(name)) {
			f(bytes.TrimRight(line[len(name)+1:], "\r"))
		}
		off = end + 1
	}
}

func sessionOrdinals(pkts []pcaprec.Packet) map[string]int {
	numbers := map[string]int{}
	for _, p := range pkts {
		payload, ok := tcpPayload(p)
		if !ok {
			continue
		}
		headerLines(payload, "mcp-session-id", func(v []byte) {
			id := string(bytes.TrimSpace(v))
			if _, ok := numbers[id]; !ok && id != "" {
				numbers[id] = len(numbers) + 1
			}
		})
	}
	return numbers
}

func numberSessions(payload []byte, numbers map[string]int) {
	headerLines(payload, "mcp-session-id", func(v []byte) {
		t := bytes.TrimSpace(v)
		n, ok := numbers[string(t)]
		if !ok {
			return
		}
		num := []byte(strconv.Itoa(n))
		if len(num) > len(t) {
			return
		}
		for i := range t {
			t[i] = ' '
		}
		copy(t, num)
	})
}

// tcpPayload is the TCP payload of an Ethernet frame of IPv4 TCP.
func tcpPayload(p pcaprec.Packet) ([]byte, bool) {
	d := p.Data
	if len(d) < 14+20+20 || d[12] != 0x08 || d[13] != 0x00 {
		return nil, false
	}
	ip := d[14:]
	tcp := ip[int(ip[0]&0x0f)*4:]
	if len(tcp) < 20 || len(tcp) < int(tcp[12]>>4)*4 {
		return nil, false
	}
	return tcp[int(tcp[12]>>4)*4:], true
}
