package netnsrig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Ports the scenario listens on, at each role's address.
const (
	LBPort      = 8080
	BackendPort = 8080
)

// The rolling deploy's timing. slow_write sends deployProgress progress
// notifications 100 ms apart, then takes deployHold to write. The drain
// comes as soon as the balancer has forwarded deployProgress of them, so it
// falls inside the hold, with more than a second to spare before the
// result. go-sdk's client resumes 1 to 2 s after the cut; the application
// gives up on the call after deployTimeout and re-runs the write.
const (
	deployProgress = 2
	deployHold     = 1500 * time.Millisecond
	deployTimeout  = 3 * time.Second
)

// Result is what RollingDeploy saw: the client's own report, and the
// balancer's view.
type Result struct {
	ClientReport
	// Drained is the backend drained (address); DrainedStream the stream
	// that triggered it, as the balancer saw it when the drain was asked.
	Drained       string       `json:"drained"`
	DrainedStream RequestState `json:"drained_stream"`
	// LB is the balancer's state once the client had exited.
	LB LBState `json:"lb"`
	// Elapsed is the client's run time (connect to exit).
	Elapsed time.Duration `json:"elapsed_ns"`
}

// RollingDeploy runs the scenario program (built once per rig): go-sdk
// backends in the backend1 and backend2 namespaces, the balancer in lb, and
// the client in client, connecting to the balancer. The client calls
// slow_write with its SSE stream open; once the balancer has forwarded
// progress on it, the rig drains the backend serving it (POST /drain on the
// balancer's admin socket): the stream is cut, go-sdk's client resumes with
// Last-Event-ID, and the balancer sends the resume to the other backend,
// which answers 200 with a new session. When the client has exited, every
// process is stopped. A capture started on ClientIface before the call
// sees all of the client's traffic.
func (r *Rig) RollingDeploy(ctx context.Context) (Result, error) {
	return r.Run(ctx, Scenario{})
}

// Scenario is a variant of the rolling deploy; the zero value is
// RollingDeploy's.
type Scenario struct {
	// NoDrain runs the same programs and calls without the drain: the call
	// completes on backend1 with its progress, nothing is cut or resumed,
	// and the client closes its session. A capture of it holds no
	// violation.
	NoDrain bool
	// Timeout is the application's deadline for a call (default 3 s).
	// The first call of the rolling deploy never completes and ends only
	// at it; a longer one leaves the go-sdk client's resume (1 to 2 s after
	// the cut) more room on a slow or lossy link.
	Timeout time.Duration
}

// Run runs the scenario sc: RollingDeploy, or its variant.
func (r *Rig) Run(ctx context.Context, sc Scenario) (Result, error) {
	var res Result
	prog, err := r.programFor(ctx, "rollingdeploy")
	if err != nil {
		return res, err
	}
	timeout := sc.Timeout
	if timeout == 0 {
		timeout = deployTimeout
	}
	lbAddr := hostPort(r.Addr(LB), LBPort)
	b1, b2 := hostPort(r.Addr(Backend1), BackendPort), hostPort(r.Addr(Backend2), BackendPort)
	sock := filepath.Join(r.dir, "lb-admin.sock")

	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, s := range []struct {
		role string
		args []string
	}{
		{Backend1, []string{"backend", "-listen", b1, "-name", Backend1}},
		{Backend2, []string{"backend", "-listen", b2, "-name", Backend2}},
		{LB, []string{"lb", "-listen", lbAddr, "-backends", b1 + "," + b2, "-admin", "unix:" + sock}},
	} {
		p, err := r.start(s.role, s.role, nil, prog, s.args...)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.waitReady(ctx, 10*time.Second); err != nil {
			return res, err
		}
	}

	admin := newAdminClient(sock)
	defer admin.CloseIdleConnections()
	var out bytes.Buffer
	start := time.Now()
	client, err := r.start(Client, "client", &out, prog, "client", "-url", "http://"+lbAddr+"/mcp",
		"-steps", fmt.Sprint(deployProgress), "-hold", deployHold.String(), "-timeout", timeout.String())
	if err != nil {
		return res, err
	}
	procs = append(procs, client)

	if !sc.NoDrain {
		drained, err := drainWhenStreaming(ctx, admin, client.done)
		if err != nil {
			return res, err
		}
		if drained != nil {
			res.Drained, res.DrainedStream = drained.Backend, *drained
		}
	}
	select {
	case <-client.done:
	case <-ctx.Done():
		return res, fmt.Errorf("waiting for the client: %w", ctx.Err())
	}
	res.Elapsed = time.Since(start)
	if client.err != nil {
		return res, fmt.Errorf("client: %v%s", client.err, client.logTail())
	}
	if err := json.Unmarshal(out.Bytes(), &res.ClientReport); err != nil {
		return res, fmt.Errorf("client report: %v: %q", err, out.String())
	}
	st, err := adminDo(ctx, admin, http.MethodGet, "/state")
	if err != nil {
		return res, err
	}
	res.LB = *st
	if res.Drained == "" && !sc.NoDrain {
		return res, fmt.Errorf("the client finished before any stream carried %d progress events: nothing was drained", deployProgress)
	}
	return res, nil
}

// drainWhenStreaming polls the balancer until an open SSE stream has
// forwarded deployProgress progress notifications, and drains that
// stream's backend. It returns the stream as it was then, or nil when
// clientDone came first.
func drainWhenStreaming(ctx context.Context, admin *http.Client, clientDone <-chan struct{}) (*RequestState, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("rolling deploy: %w", ctx.Err())
		case <-clientDone:
			return nil, nil
		case <-tick.C:
		}
		st, err := adminDo(ctx, admin, http.MethodGet, "/state")
		if err != nil {
			return nil, err
		}
		for _, q := range st.Requests {
			if q.Open && q.SSE && q.Progress >= deployProgress {
				_, err := adminDo(ctx, admin, http.MethodPost, "/drain?backend="+url.QueryEscape(q.Backend))
				return &q, err
			}
		}
	}
}

func hostPort(a netip.Addr, port int) string {
	return netip.AddrPortFrom(a, uint16(port)).String()
}

// programFor builds one of the rig's programs (cmd/rollingdeploy,
// cmd/lossyfwd) into the rig's directory, once.
func (r *Rig) programFor(ctx context.Context, name string) (string, error) {
	r.buildMu.Lock()
	defer r.buildMu.Unlock()
	if p, ok := r.progs[name]; ok {
		return p, nil
	}
	out := filepath.Join(r.dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out,
		"github.com/replaywatch/replaywatch/test/netnsrig/cmd/"+name)
	// From this package's source directory when it is there (any working
	// directory inside the module does).
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if _, err := os.Stat(file); err == nil {
			cmd.Dir = filepath.Dir(file)
		}
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", name, err, b)
	}
	r.progs[name] = out
	return out, nil
}

// proc is one scenario process in a namespace. Its stderr goes to a log
// file in the rig's directory.
type proc struct {
	name  string
	cmd   *exec.Cmd
	log   string
	ready chan struct{} // closed at a server's "ready" line
	done  chan struct{}
	err   error // valid once done is closed
}

// start runs prog with args in role's namespace. Its stdout goes to stdout
// when set; otherwise to the log, watched for the "ready" line a server
// prints (see waitReady).
func (r *Rig) start(role, name string, stdout *bytes.Buffer, prog string, args ...string) (*proc, error) {
	p := &proc{name: name, cmd: r.Exec(role, prog, args...), log: filepath.Join(r.dir, name+".log"),
		ready: make(chan struct{}), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = logf
	if stdout != nil {
		p.cmd.Stdout = stdout
	} else {
		p.cmd.Stdout = &readyWriter{w: logf, ready: p.ready}
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) waitReady(ctx context.Context, limit time.Duration) error {
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it was ready: %v%s", p.name, p.err, p.logTail())
	case <-ctx.Done():
		return fmt.Errorf("%s not ready: %w", p.name, ctx.Err())
	case <-time.After(limit):
		return fmt.Errorf("%s not ready after %v%s", p.name, limit, p.logTail())
	}
}

// stop asks the process to end (SIGTERM), kills it if it has not within
// 3 s, and waits for it.
func (p *proc) stop() {
	if p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail is the end of the process's log, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	s := strings.TrimSpace(string(b))
	if s == "" {
		return ""
	}
	const max = 2000
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return "\n" + p.name + " log:\n" + s
}

// Logs returns the logs (stderr, and a server's stdout) of the processes
// RollingDeploy ran, each under a "== name ==" line: for a failing test to
// show.
func (r *Rig) Logs() string {
	files, _ := filepath.Glob(filepath.Join(r.dir, "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "== %s ==\n%s\n", strings.TrimSuffix(filepath.Base(f), ".log"), bytes.TrimSpace(data))
	}
	return b.String()
}

// readyWriter passes a server's stdout to w and closes ready at its first
// "ready " line.
type readyWriter struct {
	w     *os.File
	ready chan struct{}
	mu    sync.Mutex
	buf   []byte
	seen  bool
}

func (rw *readyWriter) Write(p []byte) (int, error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if !rw.seen {
		rw.buf = append(rw.buf, p...)
		for _, line := range strings.SplitAfter(string(rw.buf), "\n") {
			if strings.HasSuffix(line, "\n") && strings.HasPrefix(line, "ready ") {
				rw.seen = true
				rw.buf = nil
				close(rw.ready)
				break
			}
		}
	}
	return rw.w.Write(p)
}

// newAdminClient talks HTTP to the balancer's admin unix socket (reachable
// from the host's namespace: it is a file in the rig's directory).
func newAdminClient(sock string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

// adminDo calls the admin endpoint path and decodes the state it answers.
func adminDo(ctx context.Context, c *http.Client, method, path string) (*LBState, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://lb"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lb admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("lb admin %s %s: %s", method, path, resp.Status)
	}
	var st LBState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("lb admin %s %s: %w", method, path, err)
	}
	return &st, nil
}
