package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
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

	code, stdout, stderr := runBin(t, bin, "analyze", "--format", "json", "--allow-partial", path)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "HTTP/2 (h2c) on 1 TCP connection(s)") {
		t.Errorf("stderr does not warn of the HTTP/2 connection:\n%s", stderr)
	}
	var sum struct {
		Type             string  `json:"type"`
		MCPSessions      int     `json:"mcp_sessions"`
		HTTP2Connections int     `json:"http2_connections"`
		HTTP2Bytes       int     `json:"http2_bytes"`
		PayloadBytes     int     `json:"tcp_payload_bytes"`
		Violations       int     `json:"violations"`
		AnalysedShare    float64 `json:"analysed_share"`
	}
	for line := range strings.Lines(stdout) {
		if strings.Contains(line, `"type":"summary"`) {
			if err := json.Unmarshal([]byte(line), &sum); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sum.Type != "summary" {
		t.Fatalf("no summary in\n%s", stdout)
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

// recordH2CTraffic records two go-sdk clients of one server through a
// recording proxy: one over HTTP/1.1, one over h2c.
func recordH2CTraffic(t *testing.T, path string) {
	t.Helper()
	type echoArgs struct {
		Text string `json:"text"`
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "h2c-server", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "returns its text"},
		func(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.Text}}}, nil, nil
		})
	var both http.Protocols
	both.SetHTTP1(true)
	both.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil), Protocols: &both}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	rec, err := pcaprec.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := pcaprec.NewProxy(rec, func(int) string { return ln.Addr().String() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h2c := range []bool{false, true} {
		var p http.Protocols
		p.SetHTTP1(!h2c)
		p.SetUnencryptedHTTP2(h2c)
		hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
		client := mcp.NewClient(&mcp.Implementation{Name: "h2c-client", Version: "1.0.0"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: proxy.URL("/mcp"), HTTPClient: hc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{"one", "two"} {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: echoArgs{text}}); err != nil {
				t.Fatal(err)
			}
		}
		cs.Close()
		cancel()
		hc.CloseIdleConnections()
	}
	if err := proxy.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}
