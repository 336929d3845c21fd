//go:build linux

package capture

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// Live capture tests capture real traffic the test makes, so they need root
// (or CAP_NET_RAW and CAP_NET_ADMIN). Without it they skip, unless CI is set (testenv.InCI):
// then they fail, so that CI never passes without running them.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if testenv.InCI() {
		t.Fatal("live capture tests need root (CI is set, so this is a failure, not a skip)")
	}
	t.Skip("live capture tests need root: run `go test` as root (with CI set a missing root fails)")
}

// smallRing keeps the tests' rings at 8 MiB a socket unless told
// otherwise, and uses two workers unless told otherwise.
func smallRing(cfg LiveConfig) LiveConfig {
	if cfg.BlockSize == 0 {
		cfg.BlockSize, cfg.NumBlocks = 1<<20, 8
	}
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	return cfg
}

// liveRun is a capture running in the background.
type liveRun struct {
	c      *LiveCapture
	rec    *recorder
	cancel context.CancelFunc
	done   chan struct{}
	st     LiveStats
	err    error

	mu    sync.Mutex
	trace map[flowKey]*keyTrace
}

// keyTrace is what the readers saw of one connection: which workers' sockets
// read it, on which interfaces, in which directions.
type keyTrace struct {
	workers map[int]bool
	ifaces  map[int]bool
	dirs    [2]bool
}

func startLive(t *testing.T, cfg LiveConfig) *liveRun {
	t.Helper()
	r := &liveRun{rec: &recorder{}, done: make(chan struct{}), trace: map[flowKey]*keyTrace{}}
	cfg.traceReader = func(worker, iface int, key flowKey, fromLo bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		k := r.trace[key]
		if k == nil {
			k = &keyTrace{workers: map[int]bool{}, ifaces: map[int]bool{}}
			r.trace[key] = k
		}
		k.workers[worker], k.ifaces[iface] = true, true
		if fromLo {
			k.dirs[0] = true
		} else {
			k.dirs[1] = true
		}
	}
	c, err := NewLive(smallRing(cfg), r.rec.newFactory)
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.st, r.err = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// stop cancels the capture, checks that Run returns within 2 s without an
// error and that the stream contract held, and returns the final counters.
func (r *liveRun) stop(t *testing.T) LiveStats {
	t.Helper()
	start := time.Now()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return 5 s after cancellation")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run returned %v after cancellation, want < 2 s", d)
	}
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if r.st.Kernel.Drops > 0 {
		t.Errorf("the kernel dropped %d packets: the capture did not keep up", r.st.Kernel.Drops)
	}
	r.rec.checkContract(t)
	for i, f := range r.rec.factories {
		if f.ticks == 0 {
			t.Errorf("factory %d never ticked", i)
		}
	}
	return r.st
}

// waitFor polls the capture's Snapshot until cond holds, for at most 5 s.
func (r *liveRun) waitFor(t *testing.T, what string, cond func(LiveStats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := r.c.Snapshot()
		if cond(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %+v", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSymmetric fails the test unless the kernel's fanout gave every
// connection, both directions and every interface, to one worker's sockets.
func (r *liveRun) checkSymmetric(t *testing.T, conns int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	perWorker := map[int]int{}
	for key, k := range r.trace {
		if len(k.workers) != 1 {
			t.Errorf("%v: read by the sockets of workers %v", key, k.workers)
		}
		if !k.dirs[0] || !k.dirs[1] {
			t.Errorf("%v: one direction only", key)
		}
		for w := range k.workers {
			perWorker[w]++
		}
	}
	if len(r.trace) < conns {
		t.Errorf("readers saw %d connections, want %d", len(r.trace), conns)
	}
	t.Logf("connections per worker socket: %v", perWorker)
}

// --- traffic ---

// connRecord is what one server-side connection read and wrote.
type connRecord struct {
	mu      sync.Mutex
	client  netip.AddrPort
	server  netip.AddrPort
	in, out bytes.Buffer
}

type recConn struct {
	net.Conn
	rec *connRecord
}

func (c *recConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rec.add(&c.rec.in, p[:n])
	return n, err
}

func (c *recConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.rec.add(&c.rec.out, p[:n])
	return n, err
}

func (r *connRecord) add(to *bytes.Buffer, p []byte) {
	r.mu.Lock()
	to.Write(p)
	r.mu.Unlock()
}

// recListener records every connection it accepts.
type recListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*connRecord
}

func (l *recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rec := &connRecord{client: addrPort(c.RemoteAddr()), server: addrPort(c.LocalAddr())}
	l.mu.Lock()
	l.conns = append(l.conns, rec)
	l.mu.Unlock()
	return &recConn{Conn: c, rec: rec}, nil
}

func (l *recListener) records() []*connRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*connRecord(nil), l.conns...)
}

// serve runs an HTTP server on l that answers POST /?n=N with N bytes.
func serve(t *testing.T, l net.Listener) *recListener {
	t.Helper()
	rl := &recListener{Listener: l}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		n, _ := strconv.Atoi(req.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "application/json")
		w.Write(bytes.Repeat([]byte{'a' + byte(len(body)%26)}, n))
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(rl)
	t.Cleanup(func() { srv.Close() })
	return rl
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func port(l net.Listener) uint16 { return addrPort(l.Addr()).Port() }

func addrPort(a net.Addr) netip.AddrPort {
	ap := a.(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// exchange makes one HTTP exchange on a connection of its own: a request
// of reqBytes, a response of respBytes.
func exchange(t *testing.T, addr net.Addr, reqBytes, respBytes int) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	body := strings.Repeat(`{"jsonrpc":"2.0"}`, reqBytes/17+1)[:reqBytes]
	resp, err := client.Post(fmt.Sprintf("http://%s/?n=%d", addr, respBytes), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(got) != respBytes {
		t.Fatalf("response: %d bytes, %v", len(got), err)
	}
}

// streamsByConn indexes a capture's streams by their client and server.
func streamsByConn(rec *recorder) map[[2]netip.AddrPort][]*recStream {
	m := map[[2]netip.AddrPort][]*recStream{}
	for _, s := range rec.streams() {
		k := [2]netip.AddrPort{s.meta.A, s.meta.B}
		m[k] = append(m[k], s)
	}
	return m
}

// checkStreams wants exactly one stream per recorded connection, with the
// very bytes the server read and wrote, closed after both FINs, and no other
// stream.
func checkStreams(t *testing.T, name string, rec *recorder, conns []*connRecord, from, to time.Time) {
	t.Helper()
	byConn := streamsByConn(rec)
	for _, c := range conns {
		ss := byConn[[2]netip.AddrPort{c.client, c.server}]
		if len(ss) != 1 {
			t.Errorf("%s: %v -> %v: %d streams, want 1", name, c.client, c.server, len(ss))
			continue
		}
		s := ss[0]
		c.mu.Lock()
		if s.fromA() != c.in.String() || s.fromB() != c.out.String() {
			t.Errorf("%s: %v: captured %d+%d bytes, the server read %d and wrote %d (equal: %v %v)", name, c.client,
				len(s.fromA()), len(s.fromB()), c.in.Len(), c.out.Len(), s.fromA() == c.in.String(), s.fromB() == c.out.String())
		}
		c.mu.Unlock()
		if !s.meta.SawSYN || s.reason != decode.CloseFIN {
			t.Errorf("%s: %v: SawSYN %v, closed %v: %v", name, c.client, s.meta.SawSYN, s.reason, s.calls)
		}
		for _, ts := range s.times {
			if ts.Before(from) || ts.After(to) {
				t.Errorf("%s: %v: data stamped %v, outside the test's %v to %v", name, c.client, ts, from, to)
				break
			}
		}
		delete(byConn, [2]netip.AddrPort{c.client, c.server})
	}
	for k, ss := range byConn {
		t.Errorf("%s: unexpected stream %v -> %v (%d)", name, k[0], k[1], len(ss))
	}
}

// sameStreams wants two captures to have made the same streams: the same
// connections, bytes and closes.
func sameStreams(t *testing.T, name string, got, want *recorder) {
	t.Helper()
	g, w := streamsByConn(got), streamsByConn(want)
	if len(g) != len(w) {
		t.Errorf("%s: %d connections, the single-interface capture %d", name, len(g), len(w))
	}
	for k, ws := range w {
		gs := g[k]
		if len(gs) != len(ws) {
			t.Errorf("%s: %v: %d streams, want %d", name, k, len(gs), len(ws))
			continue
		}
		for i := range ws {
			if gs[i].fromA() != ws[i].fromA() || gs[i].fromB() != ws[i].fromB() || gs[i].reason != ws[i].reason {
				t.Errorf("%s: %v: %d+%d bytes closed %v, the single-interface capture %d+%d closed %v", name, k,
					len(gs[i].fromA()), len(gs[i].fromB()), gs[i].reason, len(ws[i].fromA()), len(ws[i].fromB()), ws[i].reason)
			}
		}
	}
}

// TestLiveLoopback captures HTTP exchanges on lo with Ports, and the same
// traffic on "any" at the same time: every exchange with the server whose
// ports are in the filter arrives once, with its bytes, and the other
// server's traffic does not; on loopback each packet is captured twice by
// the kernel (sent and received), and the filter drops the sent copy, so
// nothing is counted as a duplicate; both captures make the same streams.
func TestLiveLoopback(t *testing.T) {
	requireRoot(t)
	from := time.Now()
	l4, l6, other := listen(t, "127.0.0.1:0"), listen(t, "[::1]:0"), listen(t, "127.0.0.1:0")
	srv4, srv6, srvOther := serve(t, l4), serve(t, l6), serve(t, other)
	ports := []uint16{port(l4), port(l6)}
	lo := startLive(t, LiveConfig{Interfaces: []string{"lo"}, Ports: ports})
	anyIf := startLive(t, LiveConfig{Interfaces: []string{AnyInterface}, Ports: ports})

	sizes := [][2]int{{100, 200}, {70000, 10}, {10, 300000}, {5000, 5000}, {1, 1}, {2000, 150000}}
	for i, sz := range sizes {
		exchange(t, l4.Addr(), sz[0], sz[1])
		if i%2 == 0 {
			exchange(t, l6.Addr(), sz[0], sz[1])
		}
		exchange(t, other.Addr(), sz[0], sz[1])
	}
	conns := append(srv4.records(), srv6.records()...)
	for _, r := range []*liveRun{lo, anyIf} {
		r.waitFor(t, "every connection to end", func(st LiveStats) bool { return st.Fins >= uint64(2*len(conns)) })
	}
	stLo, stAny := lo.stop(t), anyIf.stop(t)
	to := time.Now()

	checkStreams(t, "lo", lo.rec, conns, from, to)
	checkStreams(t, "any", anyIf.rec, conns, from, to)
	sameStreams(t, "any", anyIf.rec, lo.rec)
	lo.checkSymmetric(t, len(conns))
	anyIf.checkSymmetric(t, len(conns))
	if n := len(srvOther.records()); n != len(sizes) {
		t.Errorf("the filtered-out server had %d connections, want %d", n, len(sizes))
	}
	for name, st := range map[string]LiveStats{"lo": stLo, "any": stAny} {
		if st.Kernel.Packets == 0 || st.Kernel.Packets < st.Packets {
			t.Errorf("%s: kernel counted %d packets, capture read %d", name, st.Kernel.Packets, st.Packets)
		}
		// Were the sent copies let through, every other segment would be
		// a duplicate. A few may still be: two pure ACKs the same in every
		// header field.
		if st.Duplicates*10 > st.TCP {
			t.Errorf("%s: %d duplicates in %d TCP segments: the filter let loopback's sent copies through", name, st.Duplicates, st.TCP)
		}
		if st.Connections != uint64(len(conns)) || st.NonTCP != 0 || st.Gaps != 0 {
			t.Errorf("%s: %+v", name, st)
		}
		if len(st.Sockets) != 2 {
			t.Errorf("%s: %d sockets, want 2 (one per worker)", name, len(st.Sockets))
		}
		t.Logf("%s: %d packets, %d duplicates, kernel %+v, %d before start", name, st.Packets, st.Duplicates, st.Kernel, st.BeforeStart)
	}
}

// TestLiveFilter: the same with a tcpdump expression.
func TestLiveFilter(t *testing.T) {
	requireRoot(t)
	requireTcpdump(t)
	from := time.Now()
	l, other := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	srv, srvOther := serve(t, l), serve(t, other)
	r := startLive(t, LiveConfig{Interfaces: []string{"lo"}, Filter: fmt.Sprintf("tcp port %d", port(l))})
	exchange(t, l.Addr(), 3000, 100000)
	exchange(t, other.Addr(), 3000, 100000)
	exchange(t, l.Addr(), 10, 10)
	r.waitFor(t, "both connections to end", func(st LiveStats) bool { return st.Fins >= 4 })
	st := r.stop(t)
	checkStreams(t, "filter", r.rec, srv.records(), from, time.Now())
	if len(srvOther.records()) != 1 {
		t.Error("no exchange with the filtered-out server")
	}
	if st.Kernel.Packets == 0 || st.Duplicates != 0 || st.Connections != 2 {
		t.Errorf("%+v", st)
	}
}

// TestLiveCancel: cancelling closes the connections still open (CloseEOF)
// and stops promptly.
func TestLiveCancel(t *testing.T) {
	requireRoot(t)
	l := listen(t, "127.0.0.1:0")
	serve(t, l)
	r := startLive(t, LiveConfig{Interfaces: []string{"lo"}, Ports: []uint16{port(l)}, TickInterval: 50 * time.Millisecond})
	client := &http.Client{Timeout: 5 * time.Second} // keeps its connection open
	defer client.CloseIdleConnections()
	resp, err := client.Post(fmt.Sprintf("http://%s/?n=10", l.Addr()), "text/plain", strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	r.waitFor(t, "the response", func(st LiveStats) bool { return st.PayloadBytes > 10 })
	// With no packet, the workers still tick on the wall clock.
	time.Sleep(150 * time.Millisecond)
	st := r.stop(t)
	ss := r.rec.streams()
	if len(ss) != 1 || ss[0].reason != decode.CloseEOF || ss[0].closes != 1 || st.Fins != 0 {
		t.Fatalf("want one stream closed at the end of the capture, got %d: %+v", len(ss), st)
	}
	var ticks int
	for _, f := range r.rec.factories {
		ticks += f.ticks
	}
	if ticks < 4 {
		t.Errorf("%d ticks in 150 ms of silence with TickInterval 50 ms", ticks)
	}
}

// readerHold holds socket readers before their next read, as a busy core
// holds them, while the test makes traffic (LiveConfig.holdReader).
type readerHold struct {
	iface   int // the interface whose readers are held; -1: all
	gate    atomic.Pointer[chan struct{}]
	entered chan struct{}
}

func newReaderHold(iface int) *readerHold {
	return &readerHold{iface: iface, entered: make(chan struct{}, 64)}
}

func (h *readerHold) hook(iface int) {
	if g := h.gate.Load(); g != nil && (h.iface < 0 || iface == h.iface) {
		h.entered <- struct{}{}
		<-*g
	}
}

// hold returns once n readers are held.
func (h *readerHold) hold(n int) {
	g := make(chan struct{})
	h.gate.Store(&g)
	for range n {
		<-h.entered
	}
}

// release lets the held readers go; it does nothing when none are held.
// Tests also register it as a cleanup after the capture's own, which runs
// first and waits for the readers: a test that fails while readers are held
// must not leave its capture waiting for them until the test binary times
// out.
func (h *readerHold) release() {
	if g := h.gate.Swap(nil); g != nil {
		close(*g)
	}
}

// A ring whose reader a test holds for a second must hold that second's
// packets: a block goes to the reader 20 ms after its first packet however
// little it holds, so it is the number of blocks that counts.
const heldBlockSize, heldBlocks = 512 << 10, 48

// TestLiveBacklogNeverTicksAhead: readers that fall behind their rings
// (held here, as a busy core holds them) keep their workers' Ticks behind
// the packets still in the rings. A Tick on the wall clock alone would
// run ahead of them, and data a second old would reach the decoder after a
// Tick that said it was all there: late, its checks unverifiable.
func TestLiveBacklogNeverTicksAhead(t *testing.T) {
	requireRoot(t)
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			from := time.Now()
			l := listen(t, "127.0.0.1:0")
			srv := serve(t, l)
			h := newReaderHold(-1)
			cfg := LiveConfig{Interfaces: []string{"lo"}, Ports: []uint16{port(l)}, TickInterval: 20 * time.Millisecond,
				Config: Config{Workers: workers}, BlockSize: heldBlockSize, NumBlocks: heldBlocks}
			cfg.holdReader = h.hook
			r := startLive(t, cfg)
			t.Cleanup(h.release)
			exchange(t, l.Addr(), 100, 100)
			r.waitFor(t, "the first connection to end", func(st LiveStats) bool { return st.Fins >= 2 })

			h.hold(workers)
			for range 4 {
				exchange(t, l.Addr(), 3000, 20000)
			}
			time.Sleep(time.Second) // the rings hold a second's backlog; the ticker goes on
			h.release()
			r.waitFor(t, "every connection to end", func(st LiveStats) bool { return st.Fins >= 10 })
			r.stop(t)
			checkStreams(t, "backlog", r.rec, srv.records(), from, time.Now())
			for i, f := range r.rec.factories {
				if f.stale > 0 {
					t.Errorf("worker %d: %d data calls stamped before a Tick that came earlier", i, f.stale)
				}
			}
		})
	}
}

// TestLiveDuplicates: traffic between the host and a network namespace
// crosses a bridge and a veth, and a capture on both sees every segment
// twice; one on "any" too. Both must make the very streams a capture on the
// bridge alone makes, with the copies counted as duplicates; and the kernel
// must have handed both copies of a segment, both directions, to one
// worker's sockets.
func TestLiveDuplicates(t *testing.T) {
	requireRoot(t)
	nb := setupNetns(t)
	l := listenInNetns(t, nb.ns, netip.AddrPortFrom(nb.nsIP, 0).String())
	srv := serve(t, l)
	ports := []uint16{port(l)}
	single := startLive(t, LiveConfig{Interfaces: []string{nb.bridge}, Ports: ports})
	double := startLive(t, LiveConfig{Interfaces: []string{nb.bridge, nb.veth}, Ports: ports})
	anyIf := startLive(t, LiveConfig{Interfaces: []string{AnyInterface}, Ports: ports, Config: Config{Workers: 1}})

	from := time.Now()
	for _, sz := range [][2]int{{100, 200}, {70000, 10}, {10, 300000}, {5000, 5000}, {1, 1}, {2000, 150000}, {300, 40000}, {9, 9}} {
		exchange(t, l.Addr(), sz[0], sz[1])
	}
	conns := srv.records()
	for _, r := range []*liveRun{single, double, anyIf} {
		r.waitFor(t, "every connection to end", func(st LiveStats) bool { return st.Fins >= uint64(2*len(conns)) })
	}
	stSingle, stDouble, stAny := single.stop(t), double.stop(t), anyIf.stop(t)
	to := time.Now()

	checkStreams(t, "bridge", single.rec, conns, from, to)
	sameStreams(t, "bridge+veth", double.rec, single.rec)
	sameStreams(t, "any", anyIf.rec, single.rec)
	double.checkSymmetric(t, len(conns))
	for key, k := range double.trace {
		if len(k.ifaces) != 2 {
			t.Errorf("%v: seen on interfaces %v, want both", key, k.ifaces)
		}
	}
	for name, st := range map[string]LiveStats{"bridge+veth": stDouble, "any": stAny} {
		// Every TCP segment came twice: the second copy is a duplicate
		// (as are those the bridge alone saw twice: identical pure ACKs).
		if st.TCP != 2*stSingle.TCP || st.Duplicates != stSingle.TCP+stSingle.Duplicates {
			t.Errorf("%s: %d TCP segments, %d duplicates; the bridge alone %d segments, %d duplicates", name,
				st.TCP, st.Duplicates, stSingle.TCP, stSingle.Duplicates)
		}
		if st.PayloadBytes != stSingle.PayloadBytes || st.Connections != stSingle.Connections || st.Gaps != 0 {
			t.Errorf("%s: %+v\nthe bridge alone: %+v", name, st.Stats, stSingle.Stats)
		}
	}
	t.Logf("bridge: %d TCP segments, %d duplicates; bridge+veth %d, %d duplicates; any %d, %d duplicates",
		stSingle.TCP, stSingle.Duplicates, stDouble.TCP, stDouble.Duplicates, stAny.TCP, stAny.Duplicates)
}

// TestLiveInterfaceGone: a named interface that goes away stops the run
// with an error, promptly.
func TestLiveInterfaceGone(t *testing.T) {
	requireRoot(t)
	name := fmt.Sprintf("rwg%d", os.Getpid())
	if out, err := exec.Command("ip", "link", "add", name, "type", "veth", "peer", "name", name+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", name).Run() })
	exec.Command("ip", "link", "set", name, "up").Run()
	rec := &recorder{}
	c, err := NewLive(smallRing(LiveConfig{Interfaces: []string{name}}), rec.newFactory)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := c.Run(context.Background())
		done <- err
	}()
	if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("ip link del: %v: %s", err, out)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Run returned %v, want an error naming %s", err, name)
		}
		t.Logf("Run: %v", err)
	case <-time.After(2 * time.Second):
		t.Fatal("Run still runs 2 s after its interface went away")
	}
	rec.checkContract(t)
}

// netnsBridge is a network namespace whose veth's host end is on a bridge
// that has the host's address: host <-> bridge <-> veth <-> namespace.
type netnsBridge struct {
	ns, bridge, veth string
	hostIP, nsIP     netip.Addr
}

func setupNetns(t *testing.T) *netnsBridge {
	t.Helper()
	reapStaleNetns()
	id := freeSubnet(t, os.Getpid()%200)
	nb := &netnsBridge{
		ns:     fmt.Sprintf("rwcap%d", os.Getpid()),
		bridge: fmt.Sprintf("rwbr%d", os.Getpid()),
		veth:   fmt.Sprintf("rwh%d", os.Getpid()),
		hostIP: netip.AddrFrom4([4]byte{10, 231, byte(id), 1}),
		nsIP:   netip.AddrFrom4([4]byte{10, 231, byte(id), 2}),
	}
	peer := fmt.Sprintf("rwp%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", nb.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nb.ns).Run() })
	ip("link", "add", nb.bridge, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "del", nb.bridge).Run() })
	ip("link", "add", nb.veth, "type", "veth", "peer", "name", peer, "netns", nb.ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", nb.veth).Run() })
	ip("link", "set", nb.veth, "master", nb.bridge)
	ip("link", "set", nb.veth, "up")
	ip("addr", "add", nb.hostIP.String()+"/24", "dev", nb.bridge)
	ip("link", "set", nb.bridge, "up")
	ip("-n", nb.ns, "addr", "add", nb.nsIP.String()+"/24", "dev", peer)
	ip("-n", nb.ns, "link", "set", peer, "up")
	ip("-n", nb.ns, "link", "set", "lo", "up")
	return nb
}

// reapStaleNetns deletes the namespaces and bridges setupNetns made for
// test binaries that are gone: one killed before its cleanups ran leaves
// its subnet routed to a bridge nobody answers on.
func reapStaleNetns() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		pid, err := strconv.Atoi(strings.TrimPrefix(name, "rwcap"))
		if err != nil || !strings.HasPrefix(name, "rwcap") || pid == os.Getpid() || unix.Kill(pid, 0) == nil {
			continue
		}
		exec.Command("ip", "netns", "del", name).Run()
		exec.Command("ip", "link", "del", fmt.Sprintf("rwbr%d", pid)).Run()
		exec.Command("ip", "link", "del", fmt.Sprintf("rwh%d", pid)).Run()
	}
}

// freeSubnet returns the first id from want on whose 10.231.id.0/24 no
// interface of the host has an address: a subnet routed to another bridge
// would take the test's traffic.
func freeSubnet(t *testing.T, want int) int {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		id := (want + i) % 200
		prefix := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(id), 0}), 24)
		used := false
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && prefix.Contains(p.Addr()) {
				used = true
			}
		}
		if !used {
			return id
		}
	}
	t.Fatal("no free 10.231.x.0/24 subnet")
	return 0
}

// listenInNetns opens a listening socket in the named network namespace:
// a socket stays in the namespace it was made in, whichever thread uses it.
func listenInNetns(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result)
	go func() {
		// The thread is left to die (never unlocked) if it cannot be
		// put back in its namespace.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		l, err := net.Listen("tcp", addr)
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listening in namespace %s: %v", ns, r.err)
	}
	return r.l
}

// TestLiveMissedOnOneInterface: a capture on the bridge and the veth where
// each interface misses segments the other one saw (a reader dropping them,
// as a busy ring or an offload quirk would on one interface only) makes the
// very streams the bridge alone makes, with no gap: every byte was seen
// once somewhere. Also when the veth's readers fall a second behind their
// rings, twice LossProofDelay: the bridge's reader proves holes whose bytes
// still wait in the veth's rings, and the proofs must wait for them.
func TestLiveMissedOnOneInterface(t *testing.T) {
	requireRoot(t)
	nb := setupNetns(t)
	for _, behind := range []bool{false, true} {
		t.Run(fmt.Sprintf("veth behind %v", behind), func(t *testing.T) {
			l := listenInNetns(t, nb.ns, netip.AddrPortFrom(nb.nsIP, 0).String())
			srv := serve(t, l)
			ports := []uint16{port(l)}
			single := startLive(t, LiveConfig{Interfaces: []string{nb.bridge}, Ports: ports})
			cfg := LiveConfig{Interfaces: []string{nb.bridge, nb.veth}, Ports: ports, BlockSize: heldBlockSize, NumBlocks: heldBlocks}
			var missed [2]atomic.Uint64
			cfg.missReader = func(iface int, tcp *layers.TCP) bool {
				// One segment in four is missed, on one interface or the
				// other by a hash of its sequence number, never on both.
				h := tcp.Seq * 2654435761
				if len(tcp.Payload) == 0 || h>>24&3 != 0 || int(h>>28&1) != iface {
					return false
				}
				missed[iface].Add(1)
				return true
			}
			h := newReaderHold(1) // the veth's readers
			cfg.holdReader = h.hook
			lossy := startLive(t, cfg)
			t.Cleanup(h.release)
			if behind {
				h.hold(2) // one per worker
			}
			for _, sz := range [][2]int{{100, 200}, {70000, 10}, {10, 300000}, {5000, 5000}, {2000, 150000}} {
				exchange(t, l.Addr(), sz[0], sz[1])
			}
			if behind {
				// The bridge's reader moves on past the proof delay, with
				// traffic for both workers (by the flow hash, most likely).
				time.Sleep(2 * LiveMultiInterfaceLossProofDelay)
				for range 4 {
					exchange(t, l.Addr(), 10, 10)
				}
				h.release()
			}
			var conns []*connRecord
			ended := func() {
				conns = srv.records()
				for _, r := range []*liveRun{single, lossy} {
					r.waitFor(t, "every connection to end", func(st LiveStats) bool { return st.Fins >= uint64(2*len(conns)) })
				}
			}
			ended()
			// The misses are drawn by sequence numbers, which are random:
			// more traffic until each interface has missed some.
			for i := 0; i < 20 && (missed[0].Load() == 0 || missed[1].Load() == 0); i++ {
				exchange(t, l.Addr(), 5000, 5000)
				ended()
			}
			stSingle, stLossy := single.stop(t), lossy.stop(t)
			sameStreams(t, "bridge+veth, each missing segments", lossy.rec, single.rec)
			if missed[0].Load() == 0 || missed[1].Load() == 0 {
				t.Fatalf("missed %d and %d segments: the test did not damage both interfaces", missed[0].Load(), missed[1].Load())
			}
			if stLossy.Gaps != 0 || stLossy.PayloadBytes != stSingle.PayloadBytes {
				t.Errorf("with misses: %+v\nthe bridge alone: %+v", stLossy.Stats, stSingle.Stats)
			}
			t.Logf("missed %d segments on the bridge, %d on the veth", missed[0].Load(), missed[1].Load())
		})
	}
}
