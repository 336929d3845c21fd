// Command rollingdeploy is the program test/netnsrig runs in its network
// namespaces: real go-sdk (github.com/modelcontextprotocol/go-sdk) MCP
// servers and client over Streamable HTTP, and a load balancer between them
// that can drain a backend in the middle of a stream (a rolling deploy).
//
// Usage:
//
//	rollingdeploy backend -listen ADDR [-name NAME] [-unknown-session adopt|404]
//	rollingdeploy lb -listen ADDR -backends A,B -admin ADDR|unix:PATH
//	rollingdeploy client -url URL [-steps N] [-hold D] [-timeout D] [-retry]
//
// backend and lb print "ready ADDR" on stdout once they accept connections
// and stop on SIGTERM or SIGINT. client prints its report (one JSON object,
// netnsrig.ClientReport) on stdout and exits 0 whatever the servers did; a
// non-zero exit is a failure of the client itself (no connection, bad
// flags).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "backend":
		err = runBackend(os.Args[2:])
	case "lb":
		err = runLB(os.Args[2:])
	case "client":
		err = runClient(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rollingdeploy %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: rollingdeploy backend|lb|client [flags] (-h for a mode's flags)")
	os.Exit(2)
}

// listen opens addr: a TCP host:port, or unix:PATH for a unix socket
// (reachable from every network namespace, unlike a TCP port).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		os.Remove(path)
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// serve runs servers on their listeners, says "ready" for the first one,
// and closes them all on SIGTERM or SIGINT.
func serve(servers []*http.Server, listeners []net.Listener) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() { errc <- s.Serve(listeners[i]) }()
	}
	fmt.Printf("ready %s\n", listeners[0].Addr())
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	for _, s := range servers {
		// Streams still open would make Shutdown wait; the scenario is
		// over when we are stopped, so close at once.
		s.Close()
	}
	return err
}

// newServer is an http.Server with the timeouts a long-lived SSE server
// can have: a bound on reading headers only.
func newServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
}

// logger is go-sdk's logger: its messages go to stderr, which the rig keeps
// as the process's log.
func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
