package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// TestNginxOnTheClientsHost: a real nginx in front of a go-sdk server with
// an event store, on the client's own host, both legs captured (a CI job
// running an MCP client's tests under tcpdump -i lo). Set up for SSE
// (HTTP/1.1 upstream, no buffering), it either keeps the client's Host, so
// both legs are one endpoint's and every event comes twice in one
// session's history, or sends its own; and with a proxy_read_timeout of a
// second it cuts a slow call's stream, which the client resumes through
// it. Every time the binary must see one session and no violation: until
// 2026-12-04 the kept Host gave a duplicate_delivery for every event of
// the proxy's hop. And in front of a stateless server, whose go-sdk client
// then speaks 2026-07-28 (no session ids), nginx with its own Host must be
// known for a proxy from its first two requests' answers, which it passes
// on.
func TestNginxOnTheClientsHost(t *testing.T) {
	nginx, bin := needNginx(t), buildBinary(t)
	for _, tc := range []struct {
		name, host, readTimeout string
	}{
		{"the client's Host", "$http_host", ""},
		{"its own Host", "$proxy_host", ""},
		{"the client's Host, streams cut after a second idle", "$http_host", "1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nginx.pcap")
			recordThroughNginx(t, nginx, tc.host, tc.readTimeout, path, nil)
			wantOneSession(t, bin, path)
			if tc.readTimeout == "" {
				return
			}
			var sum struct {
				Resumes map[string]int `json:"resumes"`
			}
			binarySummary(t, bin, &sum, path)
			if sum.Resumes["resumed"] == 0 || len(sum.Resumes) != 1 {
				t.Errorf("resumes %v, want the cut call streams resumed, nothing else", sum.Resumes)
			}
		})
	}
	for _, host := range []string{"$http_host", "$proxy_host"} {
		t.Run("2026-07-28 with "+host, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nginx.pcap")
			recordThroughNginx(t, nginx, host, "", path, &mcp.StreamableHTTPOptions{Stateless: true}, "one", "two", "three")
			// Keeping the Host, nginx is known at once; with its own,
			// from its first two requests' answers.
			hops := 3
			if host == "$proxy_host" {
				hops = 2
			}
			wantSessionlessHops(t, bin, path, hops)
		})
	}
	// mcp-go's stateless server answers in JSON bodies, not SSE: the
	// answers that prove nginx's legs are bodies.
	t.Run("2026-07-28 mcp-go with $proxy_host", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nginx.pcap")
		recordLegs(t, path, func(record func(backend string) *pcaprec.Proxy) {
			toServer := record(serveLoopback(t, &http.Server{Handler: mcpgoEchoServer()}, nil))
			toNginx := record(startNginx(t, nginx, toServer.Addr(), "$proxy_host", ""))
			mcpgoEchoSession(t, toNginx.URL("/mcp"), "one", "two", "three")
		})
		wantSessionlessHops(t, bin, path, 3)
	})
}

// mcpgoEchoServer is an mcp-go v1.2 server with a tool "echo", on its
// defaults (both revisions on one endpoint).
func mcpgoEchoServer() http.Handler {
	s := mcpserver.NewMCPServer("mcpgo-echo-server", "1.0.0", mcpserver.WithToolCapabilities(false))
	s.AddTool(mcpgo.NewTool("echo", mcpgo.WithString("text")),
		func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText(req.GetString("text", "")), nil
		})
	return mcpserver.NewStreamableHTTPServer(s)
}

// mcpgoEchoSession runs an mcp-go client on its default revision
// (2026-07-28): server/discover, tools/list, then echo with each of texts.
func mcpgoEchoSession(t *testing.T, endpoint string, texts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := mcpgoListing(ctx, t, endpoint, "mcpgo-echo-client", "", "2026-07-28")
	defer c.Close()
	for _, text := range texts {
		req := mcpgo.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "echo", map[string]any{"text": text}
		if _, err := c.CallTool(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNginxReissuedCallReportedOnce: under 2026-07-28 a call whose stream
// nginx cuts (proxy_read_timeout) is lost to the go-sdk client, and the
// application sends it again: a reissued_call_after_break, which the
// binary must report once, for the client's leg, whether nginx on the
// client's host keeps the Host, sends its own, or sends its own from
// another address (proxy_bind: a relay). Both legs are captured; before
// the relay and the proxy on the client's host were known under 2026-07-28
// (later on 2026-12-04) the last two reported it twice, once for nginx's
// leg. A call whose tool answers nothing before the timeout gets nginx's
// 504 instead, and its re-issue is the same finding: until then a 5xx
// counted as a refusal under 2026-07-28, and it went unseen. A stateful
// server's client speaks a session revision and sends the call again in
// its session: the same finding since 2026-12-05 (before, an
// unknown_outcome record only), with go-sdk and with mcp-go.
func TestNginxReissuedCallReportedOnce(t *testing.T) {
	nginx, bin := needNginx(t), buildBinary(t)
	goServer := func(sessions bool) http.Handler {
		return echoServerWith(&mcp.StreamableHTTPOptions{Stateless: !sessions}, addSlowOnceTool)
	}
	goClient := func(hold bool) func(*testing.T, string) {
		return func(t *testing.T, endpoint string) { reissueCutCall(t, endpoint, hold) }
	}
	for _, tc := range []struct {
		name, host, bind string
		server           http.Handler
		client           func(t *testing.T, endpoint string) // the application, run against nginx
		rev              string                              // the revision the client spoke
		// unresumable: the cut stream of a session revision carried no
		// event id (no event store): an unresumable_close too.
		unresumable bool
	}{
		{"the client's Host", "$http_host", "", goServer(false), goClient(false), "2026-07-28", false},
		{"its own Host", "$proxy_host", "", goServer(false), goClient(false), "2026-07-28", false},
		{"its own Host from another address", "$proxy_host", "127.0.0.3", goServer(false), goClient(false), "2026-07-28", false},
		{"the client's Host, 504 before any answer", "$http_host", "", goServer(false), goClient(true), "2026-07-28", false},
		// A stateful server: the client falls back to a session
		// revision and sends the call again in its session.
		{"a session's call, 504 before any answer", "$http_host", "", goServer(true), goClient(true), "2025-11-25", false},
		{"a session's call cut", "$proxy_host", "", goServer(true), goClient(false), "2025-11-25", true},
		{"mcp-go, a session's call, 504 before any answer", "$http_host", "", mcpgoSlowOnceServer(), mcpgoReissue, "2025-06-18", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nginx.pcap")
			var front string
			recordLegs(t, path, func(record func(backend string) *pcaprec.Proxy) {
				toServer := record(serveLoopback(t, &http.Server{Handler: tc.server}, nil))
				toNginx := record(startNginxFrom(t, nginx, toServer.Addr(), tc.host, "1s", tc.bind))
				front = toNginx.Addr()
				tc.client(t, toNginx.URL("/mcp"))
			})
			code, stdout, stderr := runBin(t, bin, "analyze", "--format", "json", path)
			if code != 1 { // violations found
				t.Fatalf("exit %d, want 1\n%s", code, stderr)
			}
			found := violationKeys(t, stdout, "server")
			want := []string{"reissued_call_after_break " + front}
			if tc.unresumable {
				want = append(want, "unresumable_close "+front)
			}
			if !slices.Equal(found, want) {
				t.Errorf("violations %q, want %q", found, want)
			}
			if revs := violationKeys(t, stdout, "protocol_version"); !slices.Contains(revs, "reissued_call_after_break "+tc.rev) {
				t.Errorf("violations by revision %q, want the re-issue's under %s", revs, tc.rev)
			}
		})
	}
}

// mcpgoListing connects an mcp-go client named name to endpoint, asking
// for revision ask ("" for the client's default), requires the server to
// choose want, and lists the tools. The caller closes the client.
func mcpgoListing(ctx context.Context, t *testing.T, endpoint, name, ask, want string) *mcpclient.Client {
	t.Helper()
	c, err := mcpclient.NewStreamableHttpClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: name, Version: "1.0.0"}
	init.Params.ProtocolVersion = ask
	if res, err := c.Initialize(ctx, init); err != nil || res.ProtocolVersion != want {
		c.Close()
		t.Fatalf("initialize: %v, want revision %s", err, want)
	}
	if _, err := c.ListTools(ctx, mcpgo.ListToolsRequest{}); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// mcpgoSlowOnceServer is an mcp-go server whose slow_once sleeps past
// nginx's 1 s read timeout the first time it is called.
func mcpgoSlowOnceServer() http.Handler {
	s := mcpserver.NewMCPServer("mcpgo-slow-server", "1.0.0", mcpserver.WithToolCapabilities(false))
	var calls atomic.Int32
	s.AddTool(mcpgo.NewTool("slow_once", mcpgo.WithString("text")),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			if calls.Add(1) == 1 {
				time.Sleep(1500 * time.Millisecond)
			}
			return mcpgo.NewToolResultText("done"), nil
		})
	return mcpserver.NewStreamableHTTPServer(s)
}

// mcpgoReissue is an mcp-go client speaking 2025-06-18 (a session
// revision): it lists the tools, gets nginx's 504 for slow_once and, as an
// application does, calls it again in its session.
func mcpgoReissue(t *testing.T, endpoint string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := mcpgoListing(ctx, t, endpoint, "mcpgo-reissuing-client", "2025-06-18", "2025-06-18")
	defer c.Close()
	req := mcpgo.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "slow_once", map[string]any{"text": "charge"}
	if _, err := c.CallTool(ctx, req); err == nil {
		t.Fatal("the call nginx should answer 504 succeeded")
	}
	time.Sleep(time.Second) // the tool's first run ends meanwhile
	if _, err := c.CallTool(ctx, req); err != nil {
		t.Fatalf("re-issue: %v", err)
	}
}

// reissueCutCall lists the tools, calls slow_once, whose first call sends
// its progress too slowly for nginx's 1 s read timeout (with hold, its
// first progress too), and, when that call fails, sends it again, as an
// application does.
func reissueCutCall(t *testing.T, endpoint string, hold bool) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "reissuing-client", Version: "1.0.0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	args := slowArgs{Steps: 2, DelayMs: 1500, Hold: hold}
	p := &mcp.CallToolParams{Name: "slow_once", Arguments: args}
	p.SetProgressToken("first")
	if _, err := cs.CallTool(ctx, p); err == nil {
		t.Fatal("the call nginx should cut succeeded")
	}
	// Past the tool's next write (1.5 s after its first progress, or
	// after the call with hold), which finds nginx's upstream connection
	// closed: the proxy's leg of the call has ended too when the
	// application tries again.
	time.Sleep(time.Second)
	p = &mcp.CallToolParams{Name: "slow_once", Arguments: args}
	p.SetProgressToken("again")
	if _, err := cs.CallTool(ctx, p); err != nil {
		t.Fatalf("re-issue: %v", err)
	}
}

// addSlowOnceTool adds a tool "slow_once" that, the first time it is
// called, sends a progress notification at once (the server's stateless
// handler sends its answer's head with the first message) and then each
// further one DelayMs later, as "slow" does; after that it answers at once.
func addSlowOnceTool(s *mcp.Server) {
	var calls atomic.Int32
	mcp.AddTool(s, &mcp.Tool{Name: "slow_once", Description: "slow the first time"},
		func(ctx context.Context, req *mcp.CallToolRequest, a slowArgs) (*mcp.CallToolResult, any, error) {
			if calls.Add(1) == 1 {
				for i := 1; i <= a.Steps; i++ {
					if i > 1 || a.Hold {
						time.Sleep(time.Duration(a.DelayMs) * time.Millisecond)
					}
					req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: float64(a.Steps)})
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
}

// needNginx is the path of nginx; outside CI a test without it is skipped.
func needNginx(t *testing.T) string {
	t.Helper()
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("nginx is needed (scripts/test.sh installs nginx-light)")
		}
		t.Skip("nginx not installed")
	}
	return nginx
}

// recordThroughNginx records one go-sdk client session through nginx, which
// sends the upstream the Host named by the nginx variable host, both legs
// through recording proxies on 127.0.0.1: echo once and twice, or each of
// texts. The server has an event store, or opts. With a readTimeout nginx
// cuts a stream idle that long, and the session makes a call whose
// progress comes slower instead.
func recordThroughNginx(t *testing.T, nginx, host, readTimeout, path string, opts *mcp.StreamableHTTPOptions, texts ...string) {
	t.Helper()
	if opts == nil {
		opts = &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}
	}
	if len(texts) == 0 {
		texts = []string{"once", "twice"}
	}
	recordLegs(t, path, func(record func(backend string) *pcaprec.Proxy) {
		toServer := record(serveLoopback(t, &http.Server{Handler: echoServerWith(opts, addSlowTool)}, nil))
		toNginx := record(startNginx(t, nginx, toServer.Addr(), host, readTimeout))
		if readTimeout == "" {
			echoSession(t, toNginx.URL("/mcp"), http.DefaultClient, texts...)
			return
		}
		client := mcp.NewClient(&mcp.Implementation{Name: "slow-client", Version: "1.0.0"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: toNginx.URL("/mcp")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := &mcp.CallToolParams{Name: "slow", Arguments: slowArgs{Steps: 3, DelayMs: 1500}}
		p.SetProgressToken("slow-1")
		if _, err := cs.CallTool(ctx, p); err != nil {
			t.Fatal(err)
		}
		cs.Close()
	})
}

type slowArgs struct {
	Steps   int `json:"steps"`
	DelayMs int `json:"delay_ms"`
	// Hold: slow_once waits DelayMs before its first progress too.
	Hold bool `json:"hold,omitempty"`
}

// addSlowTool adds a tool "slow" that sends a progress notification every
// DelayMs, Steps times, then answers.
func addSlowTool(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "progress, slowly, then done"},
		func(ctx context.Context, req *mcp.CallToolRequest, a slowArgs) (*mcp.CallToolResult, any, error) {
			for i := 1; i <= a.Steps; i++ {
				time.Sleep(time.Duration(a.DelayMs) * time.Millisecond)
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: float64(a.Steps)})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
}

// startNginx runs nginx in the foreground until the test ends, proxying a
// free port of 127.0.0.1 to upstream as an SSE set-up does, with
// proxy_read_timeout readTimeout unless it is empty, and returns the
// port's address.
func startNginx(t *testing.T, nginx, upstream, host, readTimeout string) string {
	return startNginxFrom(t, nginx, upstream, host, readTimeout, "")
}

// startNginxFrom is startNginx connecting to upstream from the address
// bind (proxy_bind) unless it is empty.
func startNginxFrom(t *testing.T, nginx, upstream, host, readTimeout, bind string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	directives := ""
	if readTimeout != "" {
		directives = "proxy_read_timeout " + readTimeout + ";"
	}
	if bind != "" {
		directives += " proxy_bind " + bind + ";"
	}
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
		listen %[2]s;
		location / {
			proxy_pass http://%[3]s;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host %[4]s;
			proxy_buffering off;
			%[5]s
		}
	}
}
`, dir, addr, upstream, host, directives)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(nginx, "-p", dir, "-c", confPath, "-e", "stderr", "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = &log, &log
	// Its own process group, so that its worker goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM: the master stops its worker and reaps it; the group's
		// SIGKILL is for a master that does not.
		cmd.Process.Signal(syscall.SIGTERM)
		stopped := time.AfterFunc(5*time.Second, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		cmd.Wait()
		stopped.Stop()
		if t.Failed() && log.Len() > 0 {
			t.Logf("nginx:\n%s", log.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s: %v", addr, err)
		}
	}
}
