package pcaprec

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
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

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var syns int
	var toServer, toClient strings.Builder
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
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
