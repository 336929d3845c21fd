// Package pcaprec records TCP traffic that crosses a proxy of ours as a pcap
// file, so test fixtures are real bytes from real MCP SDKs on real sockets,
// written as the packets a capture on the client's side would have seen.
//
// The proxy is also where faults are injected: a per-connection Hooks value
// can rewrite, hold back or cut the bytes in either direction, and the
// upstream for each accepted connection is chosen by the caller (a load
// balancer draining one backend and sending the next connection elsewhere).
package pcaprec

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// segmentSize is the largest TCP payload written per packet, the usual
// Ethernet MSS, so long SSE responses span many packets as on a real wire.
const segmentSize = 1448

// Recorder writes synthesized Ethernet/IPv4(or 6)/TCP packets to a pcap file
// with nanosecond timestamps. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	f     *os.File // nil when recording to a writer of the caller's
	w     *pcapgo.Writer
	clock func() time.Time
	buf   gopacket.SerializeBuffer
	err   error
}

// Create starts a pcap file at path; packets are stamped with the time
// they are recorded.
func Create(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	r, err := New(f, time.Now)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.f = f
	return r, nil
}

// New starts a pcap stream on w, each packet stamped with clock(): a
// synthetic clock makes traffic at any rate, whatever the machine's speed
// (flood probes). Close does not close w.
func New(w io.Writer, clock func() time.Time) (*Recorder, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &Recorder{w: pw, clock: clock, buf: gopacket.NewSerializeBuffer()}, nil
}

// Close closes the file Create made and returns the first write error
// seen.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.err
	}
	if err := r.f.Close(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

// ConnRecorder is one recorded TCP connection. The handshake is written when
// it is created; data, FIN and RST as they happen.
type ConnRecorder struct {
	r              *Recorder
	client, server netip.AddrPort
	// next sequence numbers per direction
	cseq, sseq uint32
	finC, finS bool
}

// NewConn records a new connection between client and server (as the client
// side would see it) and writes its three-way handshake.
func (r *Recorder) NewConn(client, server netip.AddrPort) *ConnRecorder {
	// Initial sequence numbers as RFC 6528 has kernels draw them: a part
	// fixed for the pair of ports and a 4 µs clock, so a client that uses
	// its port again (clients on loopback do within seconds) starts its new
	// connection with new numbers. With the same numbers a capture of both
	// ends could not tell it from the other end's copy of the ended one.
	tick := uint32(r.clock().UnixNano() / 4000)
	c := &ConnRecorder{r: r, client: client, server: server,
		cseq: (uint32(client.Port())<<16 | 0x1000) + tick, sseq: (uint32(server.Port())<<16 | 0x2000) + tick}
	c.write(true, tcpFlags{syn: true}, nil)
	c.cseq++
	c.write(false, tcpFlags{syn: true, ack: true}, nil)
	c.sseq++
	c.write(true, tcpFlags{ack: true}, nil)
	return c
}

type tcpFlags struct{ syn, ack, fin, rst, psh bool }

// Send records p travelling from the client (fromClient) or the server,
// split into segments, each acknowledged by the peer.
func (c *ConnRecorder) Send(fromClient bool, p []byte) {
	for len(p) > 0 {
		n := min(len(p), segmentSize)
		c.write(fromClient, tcpFlags{ack: true, psh: n == len(p)}, p[:n])
		if fromClient {
			c.cseq += uint32(n)
		} else {
			c.sseq += uint32(n)
		}
		p = p[n:]
		c.write(!fromClient, tcpFlags{ack: true}, nil)
	}
}

// Fin records a FIN from one side (once).
func (c *ConnRecorder) Fin(fromClient bool) {
	if fromClient && !c.finC || !fromClient && !c.finS {
		c.write(fromClient, tcpFlags{fin: true, ack: true}, nil)
		if fromClient {
			c.finC = true
			c.cseq++
		} else {
			c.finS = true
			c.sseq++
		}
		c.write(!fromClient, tcpFlags{ack: true}, nil)
	}
}

// Reset records an RST from one side.
func (c *ConnRecorder) Reset(fromClient bool) {
	c.write(fromClient, tcpFlags{rst: true, ack: true}, nil)
}

func (c *ConnRecorder) write(fromClient bool, fl tcpFlags, payload []byte) {
	src, dst := c.client, c.server
	seq, ack := c.cseq, c.sseq
	if !fromClient {
		src, dst = dst, src
		seq, ack = ack, seq
	}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()),
		Seq: seq, Ack: ack, SYN: fl.syn, ACK: fl.ack || !fl.syn, FIN: fl.fin, RST: fl.rst, PSH: fl.psh, Window: 65535}
	if fl.syn && !fromClient {
		tcp.ACK = true
	} else if fl.syn {
		tcp.ACK, tcp.Ack = false, 0
	}
	eth := &layers.Ethernet{SrcMAC: mac(src), DstMAC: mac(dst)}
	var ip gopacket.SerializableLayer
	if src.Addr().Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		tcp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP,
			SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
		tcp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	}
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(r.buf, opts, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		r.err = err
		return
	}
	data := r.buf.Bytes()
	ci := gopacket.CaptureInfo{Timestamp: r.clock(), CaptureLength: len(data), Length: len(data)}
	r.err = r.w.WritePacket(ci, data)
}

func mac(a netip.AddrPort) net.HardwareAddr {
	b := a.Addr().As16()
	return net.HardwareAddr{0x02, 0, b[12], b[13], b[14], b[15]}
}

// Action is what a hook wants done after forwarding its bytes.
type Action int

const (
	Forward Action = iota // keep going
	Close                 // forward the bytes, then close both sides with FIN
	Reset                 // forward the bytes, then reset both sides
)

// Hooks rewrite one proxied connection's bytes. Either function may be nil
// (forward unchanged). They are called from the goroutine copying that
// direction, with the bytes of one read; they may return fewer, more or
// other bytes.
type Hooks struct {
	FromClient func(p []byte) ([]byte, Action)
	FromServer func(p []byte) ([]byte, Action)
}

// Proxy accepts TCP connections on a loopback port, dials an upstream chosen
// per connection, and records every byte it forwards.
type Proxy struct {
	rec      *Recorder
	ln       net.Listener
	upstream func(n int) string
	hooks    func(n int) Hooks
	wg       sync.WaitGroup
	mu       sync.Mutex
	n        int
	conns    map[net.Conn]struct{}
	closed   bool // Close began: a connection tracked later is closed at once
}

// ProxyHostEnv names the environment variable that moves every proxy to
// another loopback address (default 127.0.0.1). A live capture of the same
// traffic can then keep only the client-side leg with a filter on that
// host: the proxy-to-backend leg carries the same bytes a second time.
const ProxyHostEnv = "PCAPREC_PROXY_HOST"

// NewProxy listens on 127.0.0.1:0 (or $PCAPREC_PROXY_HOST:0). upstream
// returns the address to dial for the n-th accepted connection (0-based);
// hooks, if non-nil, returns that connection's fault hooks.
func NewProxy(rec *Recorder, upstream func(n int) string, hooks func(n int) Hooks) (*Proxy, error) {
	host := "127.0.0.1"
	if h := os.Getenv(ProxyHostEnv); h != "" {
		host = h
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	p := &Proxy{rec: rec, ln: ln, upstream: upstream, hooks: hooks, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's listening address (what clients connect to).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is http://Addr + path.
func (p *Proxy) URL(path string) string { return "http://" + p.Addr() + path }

// Close stops accepting, closes every open connection and waits for the
// copiers to finish recording.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		// A connection accepted before Close but tracked after it (its
		// handler was still dialling upstream) would keep Close waiting
		// for a client that never hangs up.
		if p.closed {
			c.Close()
			return
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		n := p.n
		p.n++
		p.mu.Unlock()
		p.wg.Add(1)
		go p.handle(n, c)
	}
}

func (p *Proxy) handle(n int, client net.Conn) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.upstream(n))
	if err != nil {
		client.Close()
		return
	}
	p.track(client, true)
	p.track(up, true)
	defer func() {
		p.track(client, false)
		p.track(up, false)
	}()
	var h Hooks
	if p.hooks != nil {
		h = p.hooks(n)
	}
	cr := p.rec.NewConn(addrPort(client.RemoteAddr()), addrPort(client.LocalAddr()))
	var once sync.Once
	var recMu sync.Mutex
	end := func(a Action, fromClient bool) {
		once.Do(func() {
			recMu.Lock()
			if a == Reset {
				cr.Reset(fromClient)
				if tc, ok := client.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
			} else {
				cr.Fin(fromClient)
				cr.Fin(!fromClient)
			}
			recMu.Unlock()
			client.Close()
			up.Close()
		})
	}
	pipe := func(dst, src net.Conn, fromClient bool, hook func([]byte) ([]byte, Action)) {
		buf := make([]byte, 32<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 {
				out, act := buf[:k], Forward
				if hook != nil {
					out, act = hook(append([]byte(nil), buf[:k]...))
				}
				if len(out) > 0 {
					recMu.Lock()
					cr.Send(fromClient, out)
					recMu.Unlock()
					if _, werr := dst.Write(out); werr != nil {
						end(Close, fromClient)
						return
					}
				}
				if act != Forward {
					// The hook cut this direction: its sender (the server
					// or load balancer for FromServer) closes first.
					end(act, fromClient)
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					// Half-close: pass the FIN on and keep the other direction open.
					recMu.Lock()
					cr.Fin(fromClient)
					recMu.Unlock()
					if tc, ok := dst.(*net.TCPConn); ok {
						tc.CloseWrite()
					}
					return
				}
				end(Close, fromClient)
				return
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(up, client, true, h.FromClient) }()
	go func() { defer wg.Done(); pipe(client, up, false, h.FromServer) }()
	wg.Wait()
	end(Close, true)
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		panic(fmt.Sprintf("pcaprec: address %q: %v", a, err))
	}
	return ap
}
