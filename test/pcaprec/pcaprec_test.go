package pcaprec

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// TestProxyRecordsBothDirections sends a real HTTP exchange through the proxy
// and checks the pcap holds a handshake and every payload byte, in order.
func TestProxyRecordsBothDirections(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 5000))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	path := filepath.Join(t.TempDir(), "out.pcap")
	rec, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(rec, func(int) string { return ln.Addr().String() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(p.URL("/hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if len(body) != 5000 {
		t.Fatalf("body %d bytes", len(body))
	}
	p.Close()
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}

	pkts, lt, err := ReadPackets(path)
	if err != nil {
		t.Fatal(err)
	}
	var syns int
	var toServer, toClient strings.Builder
	for _, pk := range pkts {
		tcp := pk.TCP(lt)
		if tcp == nil {
			t.Fatal("packet without TCP")
		}
		if tcp.SYN {
			syns++
		}
		if tcp.DstPort == layers.TCPPort(mustPort(t, p.Addr())) {
			toServer.Write(tcp.Payload)
		} else {
			toClient.Write(tcp.Payload)
		}
	}
	if syns != 2 {
		t.Errorf("SYN packets = %d, want 2", syns)
	}
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(toServer.String())))
	if err != nil || req.URL.Path != "/hello" {
		t.Fatalf("recorded request: %v %v", req, err)
	}
	rresp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(toClient.String())), req)
	if err != nil {
		t.Fatal(err)
	}
	rbody, err := io.ReadAll(rresp.Body)
	if err != nil || string(rbody) != strings.Repeat("x", 5000) {
		t.Errorf("recorded response body not intact (%d bytes, %v)", len(rbody), err)
	}
}

func mustPort(t *testing.T, addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := net.LookupPort("tcp", port)
	return n
}

// TestServerCutRecordsServerFINFirst: when a FromServer hook cuts the stream
// (a drained backend, a load balancer), the capture must show the server's
// side closing first, as the wire would: the decoder tells a server that ended
// a stream from a client that gave it up by which FIN came first.
func TestServerCutRecordsServerFINFirst(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "cut.pcap")
	rec, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(rec, func(int) string { return ln.Addr().String() }, func(int) Hooks {
		return Hooks{FromServer: func(b []byte) ([]byte, Action) {
			if strings.Contains(string(b), "data: one") {
				return b, Close
			}
			return b, Forward
		}}
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(p.URL("/sse"))
	if err == nil {
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	p.Close()
	rec.Close()

	pkts, lt, err := ReadPackets(path)
	if err != nil {
		t.Fatal(err)
	}
	proxyPort := layers.TCPPort(mustPort(t, p.Addr()))
	for _, pk := range pkts {
		if tcp := pk.TCP(lt); tcp != nil && tcp.FIN {
			if tcp.SrcPort != proxyPort {
				t.Fatalf("first FIN from port %d (the client), want the server side %d", tcp.SrcPort, proxyPort)
			}
			return
		}
	}
	t.Fatal("no FIN recorded")
}

// TestReusedPortsGetNewSequenceNumbers: a client that reuses its port for
// a new connection to the same server is given new initial sequence
// numbers, as a kernel draws them; a capture of both ends tells the new
// connection from the other end's copy of the ended one by them.
func TestReusedPortsGetNewSequenceNumbers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reuse.pcap")
	rec, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	client, server := netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:8080")
	for range 2 {
		conn := rec.NewConn(client, server)
		time.Sleep(time.Millisecond)
		conn.Fin(true)
		conn.Fin(false)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	pkts, lt, err := ReadPackets(path)
	if err != nil {
		t.Fatal(err)
	}
	type isns struct{ client, server uint32 }
	var got []isns
	var synSeq uint32
	for _, p := range pkts {
		tcp, ok := gopacket.NewPacket(p.Data, lt, gopacket.Default).Layer(layers.LayerTypeTCP).(*layers.TCP)
		switch {
		case !ok || !tcp.SYN:
		case !tcp.ACK:
			synSeq = tcp.Seq
		default:
			got = append(got, isns{synSeq, tcp.Seq})
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d handshakes recorded, want 2", len(got))
	}
	if got[0].client == got[1].client || got[0].server == got[1].server {
		t.Errorf("the ports used again kept sequence numbers: %+v, then %+v", got[0], got[1])
	}
}
