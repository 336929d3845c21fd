package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestHTTP2Reported: one go-sdk server speaks HTTP/1.1 and h2c; one client
// talks to it over HTTP/1.1 and another over h2c with prior knowledge (Go's
// Transport with UnencryptedHTTP2). The binary reads the first client's
// session and reports the second's connection as HTTP/2 it did not decode,
// instead of "no violations" over a capture it could not read.
func TestHTTP2Reported(t *testing.T) {
	bin := buildBinary(t)
	path := filepath.Join(t.TempDir(), "h2c.pcap")
	recordH2CTraffic(t, path)

	var sum struct {
		MCPSessions      int     `json:"mcp_sessions"`
		HTTP2Connections int     `json:"http2_connections"`
		HTTP2Bytes       int     `json:"http2_bytes"`
		PayloadBytes     int     `json:"tcp_payload_bytes"`
		Violations       int     `json:"violations"`
		AnalysedShare    float64 `json:"analysed_share"`
	}
	_, stderr := binarySummary(t, bin, &sum, "--allow-partial", path)
	if !strings.Contains(stderr, "HTTP/2 (h2c) on 1 TCP connection(s)") {
		t.Errorf("stderr does not warn of the HTTP/2 connection:\n%s", stderr)
	}
	if sum.MCPSessions != 1 || sum.HTTP2Connections != 1 || sum.Violations != 0 {
		t.Errorf("mcp_sessions %d, http2_connections %d, violations %d; want 1, 1, 0", sum.MCPSessions, sum.HTTP2Connections, sum.Violations)
	}
	if sum.HTTP2Bytes <= 0 || sum.HTTP2Bytes >= sum.PayloadBytes {
		t.Errorf("http2_bytes %d of %d payload bytes, want some but not all", sum.HTTP2Bytes, sum.PayloadBytes)
	}
	if want := float64(sum.PayloadBytes-sum.HTTP2Bytes) / float64(sum.PayloadBytes); sum.AnalysedShare != want {
		t.Errorf("analysed_share %v, want %v (HTTP/2 bytes are not analysed)", sum.AnalysedShare, want)
	}

	_, text, _ := runBin(t, bin, "analyze", "--allow-partial", path)
	if !strings.Contains(text, "HTTP/2             1 connection(s)") {
		t.Errorf("text report has no HTTP/2 row:\n%s", text)
	}
}

type echoArgs struct {
	Text string `json:"text"`
}

// echoServer is a go-sdk server with one tool.
func echoServer() http.Handler { return echoServerWith(nil) }

// echoServerWith is echoServer with the handler's options (an event store
// gives its SSE events ids) and more tools, each added by one of tools.
func echoServerWith(opts *mcp.StreamableHTTPOptions, tools ...func(*mcp.Server)) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "echo-server", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "returns its text"},
		func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
	for _, add := range tools {
		add(s)
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
}

// recordClients records go-sdk clients of the server at backend through a
// recording proxy at path, one after another: each initialises, calls echo
// twice and closes. scheme is the clients' (http or https); hooks, if
// non-nil, rewrite each connection's bytes (pcaprec.NewProxy).
func recordClients(t *testing.T, path, backend, scheme string, hooks func(n int) pcaprec.Hooks, clients ...*http.Client) {
	t.Helper()
	rec, err := pcaprec.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := pcaprec.NewProxy(rec, func(int) string { return backend }, hooks)
	if err != nil {
		t.Fatal(err)
	}
	for _, hc := range clients {
		echoSession(t, scheme+"://"+proxy.Addr()+"/mcp", hc, "one", "two")
	}
	if err := proxy.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}

// echoSession runs one go-sdk client session at endpoint over hc: it
// initialises, calls echo with each text and closes.
func echoSession(t *testing.T, endpoint string, hc *http.Client, texts ...string) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "echo-client", Version: "1.0.0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range texts {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: echoArgs{text}}); err != nil {
			t.Fatal(err)
		}
	}
	cs.Close()
	hc.CloseIdleConnections()
}

// serveLoopback serves srv on a free port of 127.0.0.1 until the test ends,
// through wrap when it is not nil, and returns the address.
func serveLoopback(t *testing.T, srv *http.Server, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return addr
}

// recordH2CTraffic records two go-sdk clients of one server: one over
// HTTP/1.1, one over h2c.
func recordH2CTraffic(t *testing.T, path string) {
	t.Helper()
	var both http.Protocols
	both.SetHTTP1(true)
	both.SetUnencryptedHTTP2(true)
	addr := serveLoopback(t, &http.Server{Handler: echoServer(), Protocols: &both}, nil)
	var clients []*http.Client
	for _, h2c := range []bool{false, true} {
		var p http.Protocols
		p.SetHTTP1(!h2c)
		p.SetUnencryptedHTTP2(h2c)
		clients = append(clients, &http.Client{Transport: &http.Transport{Protocols: &p}})
	}
	recordClients(t, path, addr, "http", nil, clients...)
}

// TestTLSNamed: a go-sdk client over TLS. Packets cannot show its MCP; the
// report names the TLS connections and, with no MCP recognised at all,
// points to the spans.
func TestTLSNamed(t *testing.T) {
	bin := buildBinary(t)
	path := filepath.Join(t.TempDir(), "tls.pcap")
	ts := httptest.NewUnstartedServer(echoServer())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the proxy's last connection closes mid-handshake
	ts.StartTLS()
	defer ts.Close()
	recordClients(t, path, strings.TrimPrefix(ts.URL, "https://"), "https", nil, ts.Client())

	code, stdout, stderr := runBin(t, bin, "analyze", path)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"TLS                ", "connection(s) were TLS", "analyze --spans"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "were TLS") {
		t.Errorf("stderr does not warn of TLS:\n%s", stderr)
	}
}

// TestProxyProtocolRead: a go-sdk client's connections reach the server
// through a load balancer that opens each with a PROXY protocol header
// (the recording proxy writes it; the server's listener strips it). The
// binary skips the headers, reads the session and names the client the
// headers name.
func TestProxyProtocolRead(t *testing.T) {
	bin := buildBinary(t)
	headers := map[string][]byte{
		"v1": []byte("PROXY TCP4 198.51.100.7 10.0.0.2 51234 8080\r\n"),
		// TCP over IPv4, the 12 address bytes, then a 3-byte TLV.
		"v2": []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0f\xc6\x33\x64\x07\x0a\x00\x00\x02\xc8\x22\x1f\x90\x04\x00\x00"),
	}
	for version, header := range headers {
		t.Run(version, func(t *testing.T) {
			addr := serveLoopback(t, &http.Server{Handler: echoServer()}, func(ln net.Listener) net.Listener {
				return &proxyHeaderListener{Listener: ln, header: len(header)}
			})
			// Go's Transport may dial a connection it then never
			// sends on (a dial racing an idle one): it carries no
			// header. sent counts those that carry one.
			var sent atomic.Int32
			prepend := func(int) pcaprec.Hooks {
				first := true
				return pcaprec.Hooks{FromClient: func(p []byte) ([]byte, pcaprec.Action) {
					if first {
						first = false
						sent.Add(1)
						return append(append([]byte(nil), header...), p...), pcaprec.Forward
					}
					return p, pcaprec.Forward
				}}
			}
			path := filepath.Join(t.TempDir(), "proxy-"+version+".pcap")
			recordClients(t, path, addr, "http", prepend, &http.Client{})

			var sum struct {
				MCPSessions          int `json:"mcp_sessions"`
				MCPExchanges         int `json:"mcp_exchanges"`
				TCPConnections       int `json:"tcp_connections"`
				ProxyProtocolHeaders int `json:"proxy_protocol_headers"`
			}
			stdout, _ := binarySummary(t, bin, &sum, path)
			if !strings.Contains(stdout, `"client":"198.51.100.7:51234"`) {
				t.Errorf("no record names the client the headers name, 198.51.100.7:51234:\n%s", stdout)
			}
			if n := int(sent.Load()); sum.MCPSessions != 1 || sum.MCPExchanges < 4 || sum.ProxyProtocolHeaders != n || n == 0 || n > sum.TCPConnections {
				t.Errorf("mcp_sessions %d, mcp_exchanges %d, proxy_protocol_headers %d of %d connections; want 1, at least 4 (initialize, its notification, two calls), one per connection the client sent on (%d)",
					sum.MCPSessions, sum.MCPExchanges, sum.ProxyProtocolHeaders, sum.TCPConnections, n)
			}
		})
	}
}

// proxyHeaderListener strips a PROXY protocol header of a known length
// from each accepted connection, as a server behind such a load balancer
// does. The header is skipped on the connection's first read, in the
// server's goroutine for it, not in Accept: a connection the client's
// Transport dialed and never sent on carries none, and waiting for it in
// Accept held every later connection back (the client's next request then
// timed out).
type proxyHeaderListener struct {
	net.Listener
	header int
}

func (l *proxyHeaderListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headerSkippingConn{Conn: c, skip: int64(l.header)}, nil
}

// headerSkippingConn drops the first skip bytes read from its Conn.
type headerSkippingConn struct {
	net.Conn
	skip int64
}

func (c *headerSkippingConn) Read(p []byte) (int, error) {
	if c.skip > 0 {
		n, err := io.CopyN(io.Discard, c.Conn, c.skip)
		if c.skip -= n; err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

// binarySummary runs the binary's analyze --format json with args, which
// must exit 0, and decodes its summary into sum; it returns standard output
// and error.
func binarySummary(t *testing.T, bin string, sum any, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := runBin(t, bin, append([]string{"analyze", "--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, stdout, stderr)
	}
	for line := range strings.Lines(stdout) {
		if strings.Contains(line, `"type":"summary"`) {
			if err := json.Unmarshal([]byte(line), sum); err != nil {
				t.Fatal(err)
			}
			return stdout, stderr
		}
	}
	t.Fatalf("no summary in\n%s", stdout)
	return "", ""
}

// TestForwardProxyBothLegs: a go-sdk client reaches the server through a
// forward proxy (its Transport's Proxy, as HTTP_PROXY sets it), and the
// capture holds both legs: the client's requests in absolute form to the
// proxy, the proxy's in origin form to the server. Both name one endpoint,
// and the proxy's leg is set aside as a hop: one session, judged once,
// whether the proxy connects from an address of its own (another host or
// pod) or from the client's (one on the client's host).
func TestForwardProxyBothLegs(t *testing.T) {
	bin := buildBinary(t)
	for _, from := range []string{"127.0.0.2", "127.0.0.1"} {
		t.Run("proxy from "+from, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "forward.pcap")
			recordThroughProxy(t, path, net.ParseIP(from), forwardProxy, nil)
			wantOneSession(t, bin, path)
		})
	}
}

// TestReverseProxyBothLegs: a reverse proxy that reaches the server from an
// address serving no MCP (127.0.0.3; as one on a node's own network
// reaches a pod from the bridge's address) and sends the server's Host,
// not the client's: only the requests tie its hops to the client's. And
// one on the client's own host that keeps the Host, as nginx set up for
// SSE does (proxy_set_header Host $http_host): both legs from one address
// to one endpoint, every event twice in one session's history.
func TestReverseProxyBothLegs(t *testing.T) {
	bin := buildBinary(t)
	for _, tc := range []struct {
		name string
		from string
		kind proxyKind
	}{
		{"relay with the server's Host", "127.0.0.3", reverseProxy},
		{"on the client's host keeping the Host", "127.0.0.1", reverseProxyKeepingHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "reverse.pcap")
			recordThroughProxy(t, path, net.ParseIP(tc.from), tc.kind, nil)
			wantOneSession(t, bin, path)
		})
	}
	// Under 2026-07-28 (a stateless server: go-sdk's client then speaks
	// its default revision) no request carries a session id: the relay is
	// known from its second request in a row that repeats the client's,
	// and every later one is set aside (detector/hops.go, relayRepeats).
	t.Run("relay under 2026-07-28", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "reverse.pcap")
		recordThroughProxy(t, path, net.ParseIP("127.0.0.3"), reverseProxy, &mcp.StreamableHTTPOptions{Stateless: true}, "one", "two", "three")
		wantSessionlessHops(t, bin, path, 3)
	})
}

// wantSessionlessHops runs the binary on a capture of a 2026-07-28 client's
// requests, each captured on both legs of a proxy known only once it
// forwarded some: no session, and at least hops of its requests set aside.
func wantSessionlessHops(t *testing.T, bin, path string, hops int) {
	t.Helper()
	wantHops(t, bin, path, 0, hops)
}

// wantOneSession runs the binary on a capture of one session whose every
// request was captured on both legs of a proxy.
func wantOneSession(t *testing.T, bin, path string) {
	t.Helper()
	wantHops(t, bin, path, 1, 1)
}

// wantHops runs the binary on a capture of sessions MCP sessions through a
// proxy, both legs captured: at least hops requests set aside, no
// violation.
func wantHops(t *testing.T, bin, path string, sessions, hops int) {
	t.Helper()
	var sum struct {
		MCPSessions int `json:"mcp_sessions"`
		ProxyHops   int `json:"proxy_hops"`
		Violations  int `json:"violations"`
	}
	binarySummary(t, bin, &sum, path)
	if sum.MCPSessions != sessions || sum.ProxyHops < hops || sum.Violations != 0 {
		t.Errorf("mcp_sessions %d, proxy_hops %d, violations %d; want %d sessions, at least %d requests set aside as hops, no violation",
			sum.MCPSessions, sum.ProxyHops, sum.Violations, sessions, hops)
	}
}

// proxyKind is how recordThroughProxy's proxy forwards.
type proxyKind int

const (
	// forwardProxy: the client's HTTP proxy.
	forwardProxy proxyKind = iota
	// reverseProxy: a proxy the client takes for the server, which sends
	// the server's own Host (httputil.ProxyRequest.SetURL).
	reverseProxy
	// reverseProxyKeepingHost: the same, sending the client's Host.
	reverseProxyKeepingHost
)

// recordThroughProxy records a go-sdk client's session (echo once, or each
// of texts) through a proxy that connects to the server from the address
// from, both legs through recording proxies; opts are the server's.
func recordThroughProxy(t *testing.T, path string, from net.IP, kind proxyKind, opts *mcp.StreamableHTTPOptions, texts ...string) {
	t.Helper()
	if len(texts) == 0 {
		texts = []string{"once"}
	}
	recordLegs(t, path, func(record func(backend string) *pcaprec.Proxy) {
		toServer := record(serveLoopback(t, &http.Server{Handler: echoServerWith(opts)}, nil))
		rewrite := func(*httputil.ProxyRequest) {}
		if kind != forwardProxy {
			target := &url.URL{Scheme: "http", Host: toServer.Addr()}
			rewrite = func(r *httputil.ProxyRequest) {
				r.SetURL(target)
				if kind == reverseProxyKeepingHost {
					r.Out.Host = r.In.Host
				}
			}
		}
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}
		toProxy := record(serveLoopback(t, &http.Server{Handler: &httputil.ReverseProxy{
			Rewrite:       rewrite,
			Transport:     &http.Transport{DialContext: dialer.DialContext},
			FlushInterval: -1,
		}}, nil))
		if kind != forwardProxy {
			echoSession(t, toProxy.URL("/mcp"), http.DefaultClient, texts...)
		} else {
			hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: toProxy.Addr()})}}
			echoSession(t, toServer.URL("/mcp"), hc, texts...)
		}
	})
}

// recordLegs records into path what passes through the recording proxies
// legs makes with record, each to its backend, and closes them, the last
// made first, when legs returns.
func recordLegs(t *testing.T, path string, legs func(record func(backend string) *pcaprec.Proxy)) {
	t.Helper()
	rec, err := pcaprec.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var proxies []*pcaprec.Proxy
	legs(func(backend string) *pcaprec.Proxy {
		p, err := pcaprec.NewProxy(rec, func(int) string { return backend }, nil)
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, p)
		return p
	})
	for _, p := range slices.Backward(proxies) {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}
