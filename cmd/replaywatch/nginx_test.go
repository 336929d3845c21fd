package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/pcaprec"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// TestNginxOnTheClientsHost: a real nginx in front of a go-sdk server with
// an event store, on the client's own host, both legs captured (a CI job
// running an MCP client's tests under tcpdump -i lo). Set up for SSE
// (HTTP/1.1 upstream, no buffering), it either keeps the client's Host, so
// both legs are one endpoint's and every event comes twice in one
// session's history, or sends its own. Either way the binary must see one
// session and no violation: until 2026-12-04 the kept Host gave a
// duplicate_delivery for every event of the proxy's hop.
func TestNginxOnTheClientsHost(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("nginx is needed (scripts/test.sh installs nginx-light)")
		}
		t.Skip("nginx not installed")
	}
	bin := buildBinary(t)
	for _, host := range []string{"$http_host", "$proxy_host"} {
		t.Run("Host "+host, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "nginx.pcap")
			recordThroughNginx(t, nginx, host, path)
			wantOneSession(t, bin, path)
		})
	}
}

// recordThroughNginx records one go-sdk client session through nginx, which
// sends the upstream the Host named by the nginx variable host, both legs
// through recording proxies on 127.0.0.1.
func recordThroughNginx(t *testing.T, nginx, host, path string) {
	t.Helper()
	recordLegs(t, path, func(record func(backend string) *pcaprec.Proxy) {
		toServer := record(serveLoopback(t, &http.Server{Handler: echoServerWith(
			&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})}, nil))
		toNginx := record(startNginx(t, nginx, toServer.Addr(), host))
		echoSession(t, toNginx.URL("/mcp"), http.DefaultClient, "once", "twice")
	})
}

// startNginx runs nginx in the foreground until the test ends, proxying a
// free port of 127.0.0.1 to upstream as an SSE set-up does, and returns the
// port's address.
func startNginx(t *testing.T, nginx, upstream, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
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
		}
	}
}
`, dir, addr, upstream, host)
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
		if t.Failed() {
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
