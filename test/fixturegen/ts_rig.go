package main

// The TypeScript rig: real @modelcontextprotocol/sdk servers and clients
// (node processes running ts/server.mjs and ts/client.mjs), every client byte
// passing through the recording proxy of test/pcaprec. Faults come from
// proxy hooks (sseCut from the go-sdk rig, and this file's midEventCut and
// headerRewrite) or from the server script's deliberately broken modes and
// stdin commands (forget, drain, permissive session minting).

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// tsSDKVersion is the @modelcontextprotocol/sdk version pinned in
// ts/package.json, named in every ts- spec.
const tsSDKVersion = "1.32.2"

// tsProcessGrace bounds how long a node process may take to exit after its
// stdin is closed before it is killed.
const tsProcessGrace = 3 * time.Second

// tsVerboseEnv, when set, makes the ts scenarios print the node processes'
// output (what the client application did, step by step).
const tsVerboseEnv = "FIXTUREGEN_VERBOSE"

// tsLogLimit bounds the process output kept for error messages.
const tsLogLimit = 64 << 10

// tsDir is the folder holding the node scripts and package.json: beside this
// source file when the path is known (go run), else relative to the module
// root (the working directory go run is started from).
func tsDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(file), "ts")
		if _, err := os.Stat(filepath.Join(d, "package.json")); err == nil {
			return d
		}
	}
	return filepath.Join("test", "fixturegen", "ts")
}

// tsPackages are packages of ts/package.json whose absence from
// node_modules means it must be installed (again).
var tsPackages = []string{"@modelcontextprotocol/sdk", "tmcp", "@tmcp/transport-http", "@hono/mcp", "@ai-sdk/mcp", "fastmcp"}

var (
	nodeModulesOnce sync.Once
	nodeModulesErr  error
)

// ensureNodeModules runs `npm ci` once if a package of tsPackages is missing, so a
// fresh clone can run the generator; it fails with a clear message when node
// or npm is missing.
func ensureNodeModules(ctx context.Context) error {
	nodeModulesOnce.Do(func() {
		if _, err := exec.LookPath("node"); err != nil {
			nodeModulesErr = errors.New("ts scenarios need node (20 or later) on PATH")
			return
		}
		dir := tsDir()
		installed := true
		for _, pkg := range tsPackages {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
				installed = false
			}
		}
		if installed {
			return
		}
		if _, err := exec.LookPath("npm"); err != nil {
			nodeModulesErr = fmt.Errorf("%s/node_modules is missing and npm is not on PATH: run `npm ci` there", dir)
			return
		}
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeModulesErr = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, out)
		}
	})
	return nodeModulesErr
}

// nodeProc is one node script with a line protocol: JSON lines on stdout,
// commands on stdin.
type nodeProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout lines, closed at EOF
	mu    sync.Mutex
	log   bytes.Buffer // stdout and stderr, for error messages
	done  chan struct{}
	err   error // exit error, valid after done
}

func startNode(ctx context.Context, script string, config any) (*nodeProc, error) {
	if err := ensureNodeModules(ctx); err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("node", script, string(cfg))
	cmd.Dir = tsDir()
	p := &nodeProc{name: script, cmd: cmd, lines: make(chan string, 256), done: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = (*procLog)(p)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node %s: %w", script, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			(*procLog)(p).Write([]byte(line + "\n"))
			select {
			case p.lines <- line:
			default: // nobody is reading; the log keeps it
			}
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// procLog appends to the process log up to tsLogLimit.
type procLog nodeProc

func (l *procLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := tsLogLimit - l.log.Len(); room > 0 {
		l.log.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (p *nodeProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLine returns the first stdout line containing want.
func (p *nodeProc) waitLine(ctx context.Context, want string) (string, error) {
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("%s exited before printing %q:\n%s", p.name, want, p.output())
			}
			if strings.Contains(line, want) {
				return line, nil
			}
		case <-ctx.Done():
			return "", fmt.Errorf("%s: waiting for %q: %w\n%s", p.name, want, ctx.Err(), p.output())
		}
	}
}

// send writes one command line to the process's stdin.
func (p *nodeProc) send(cmd string) error {
	_, err := io.WriteString(p.stdin, cmd+"\n")
	return err
}

// wait waits for the process to exit on its own and reports a non-zero exit
// with its output.
func (p *nodeProc) wait(ctx context.Context) error {
	go func() {
		for range p.lines { // keep draining so the reader never blocks
		}
	}()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s: %w\n%s", p.name, ctx.Err(), p.output())
	}
	if p.err != nil {
		return fmt.Errorf("%s: %v\n%s", p.name, p.err, p.output())
	}
	return nil
}

// stop closes stdin (the scripts exit on EOF) and kills the process if it
// lingers.
func (p *nodeProc) stop() {
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(tsProcessGrace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// tsServer is one ts/server.mjs backend.
type tsServer struct {
	*nodeProc
	addr string
}

// tsServerConfig is server.mjs's configuration (see its header).
type tsServerConfig struct {
	// Script is the server to run, server.mjs when empty (tmcp_server.mjs
	// takes none of the options below).
	Script string `json:"-"`
	// NoEventIDs: the server sends none, so the probes cut streams after
	// any event.
	NoEventIDs    bool `json:"-"`
	RetryInterval int  `json:"retryInterval,omitempty"`
	Permissive    bool `json:"permissive,omitempty"`
	SharedStore   bool `json:"sharedStore,omitempty"`
	LegacyRouting bool `json:"legacyRouting,omitempty"`
	NoEventStore  bool `json:"noEventStore,omitempty"`
}

func startTSServer(ctx context.Context, cfg tsServerConfig) (*tsServer, error) {
	p, err := startNode(ctx, cmp.Or(cfg.Script, "server.mjs"), cfg)
	if err != nil {
		return nil, err
	}
	line, err := p.waitLine(ctx, `"port"`)
	if err != nil {
		p.stop()
		return nil, err
	}
	var hello struct{ Port int }
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Port == 0 {
		p.stop()
		return nil, fmt.Errorf("%s: bad greeting %q", p.name, line)
	}
	return &tsServer{nodeProc: p, addr: fmt.Sprintf("127.0.0.1:%d", hello.Port)}, nil
}

// command sends a stdin command and waits for the server's acknowledgement.
func (s *tsServer) command(ctx context.Context, cmd, ack string) error {
	if err := s.send(cmd); err != nil {
		return fmt.Errorf("server command %s: %w", cmd, err)
	}
	_, err := s.waitLine(ctx, ack)
	return err
}

// tsCallArgs are slow_write's arguments.
type tsCallArgs struct {
	Label     string `json:"label"`
	Steps     int    `json:"steps"`
	DelayMs   int    `json:"delayMs"`
	PollAfter int    `json:"pollAfter,omitempty"`
}

// tsAnnounceArgs are announce's arguments.
type tsAnnounceArgs struct {
	Count   int    `json:"count"`
	DelayMs int    `json:"delayMs"`
	Label   string `json:"label,omitempty"`
}

// tsTenants names the sharedStore flow's tenants; the first one's GET
// stream is the one a scenario cuts.
var tsTenants = []string{"tenant-a", "tenant-b", "tenant-c"}

// tsClientConfig is client.mjs's configuration (see its header).
type tsClientConfig struct {
	// Script is the client to run, client.mjs when empty
	// (aisdk_client.mjs runs the chaos flow only).
	Script      string          `json:"-"`
	URL         string          `json:"url"`
	Flow        string          `json:"flow"`
	Call        tsCallArgs      `json:"call"`
	SecondCall  *tsCallArgs     `json:"secondCall,omitempty"`
	Announce    *tsAnnounceArgs `json:"announce,omitempty"`
	TimeoutMs   int             `json:"timeoutMs,omitempty"`
	CallMayFail bool            `json:"callMayFail,omitempty"`
	SettleMs    int             `json:"settleMs,omitempty"`
	Tenants     []string        `json:"tenants,omitempty"`
	GiveUpAfter int             `json:"giveUpAfterMs,omitempty"`
	Chaos       *tsChaosConfig  `json:"chaos,omitempty"`
}

// tsChaosConfig drives the chaos flow (ts-chaos).
type tsChaosConfig struct {
	Seed       uint64 `json:"seed"`
	Clients    int    `json:"clients"`
	DurationMs int    `json:"durationMs"`
}

func startTSClient(ctx context.Context, cfg tsClientConfig) (*nodeProc, error) {
	return startNode(ctx, cmp.Or(cfg.Script, "client.mjs"), cfg)
}

// tsRig is one recording: the go-sdk rig's pcap and proxy (with no Go
// backends) in front of TS server processes.
type tsRig struct {
	*rig
	servers []*tsServer
	// backend is the index of the server new connections go to; a drain
	// moves it.
	backend atomic.Int32
}

// newTSRig starts one server per config and the proxy recording to path.
// Hooks may be appended before the first request.
func newTSRig(ctx context.Context, path string, cfgs ...tsServerConfig) (*tsRig, error) {
	r := &tsRig{rig: &rig{}}
	for _, c := range cfgs {
		s, err := startTSServer(ctx, c)
		if err != nil {
			r.stopServers()
			return nil, err
		}
		r.servers = append(r.servers, s)
	}
	rec, err := pcaprec.Create(path)
	if err != nil {
		r.stopServers()
		return nil, err
	}
	r.rec = rec
	r.proxy, err = pcaprec.NewProxy(rec,
		func(int) string { return r.servers[r.backend.Load()].addr },
		func(n int) pcaprec.Hooks { return chainHooks(r.hooks, n) })
	if err != nil {
		r.stopServers()
		rec.Close()
		return nil, err
	}
	return r, nil
}

// serverOutput is every server's log, for FIXTUREGEN_VERBOSE.
func (r *tsRig) serverOutput() string {
	var b strings.Builder
	for i, s := range r.servers {
		fmt.Fprintf(&b, "[%d] %s", i, s.output())
	}
	return b.String()
}

func (r *tsRig) stopServers() {
	for _, s := range r.servers {
		s.stop()
	}
}

// finish closes the proxy and the pcap (the go-sdk rig's finish), then the
// server processes.
func (r *tsRig) finish() error {
	err := r.rig.finish()
	r.stopServers()
	return err
}

// runTSClient runs client.mjs through the rig to completion, with onWait
// called for every {"wait":...} line (the hook where a scenario injects a
// server-side fault between two application steps).
func (r *tsRig) runTSClient(ctx context.Context, cfg tsClientConfig, onWait func(step string) error) (string, error) {
	cfg.URL = r.url()
	c, err := startTSClient(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer c.stop()
	if os.Getenv(tsVerboseEnv) != "" {
		defer func() { fmt.Fprintf(os.Stderr, "--- client.mjs\n%s--- servers\n%s", c.output(), r.serverOutput()) }()
	}
	for {
		line, err := c.waitLine(ctx, `"wait"`)
		if err != nil {
			if werr := c.wait(ctx); werr != nil {
				return c.output(), werr
			}
			return c.output(), nil
		}
		var w struct{ Wait string }
		json.Unmarshal([]byte(line), &w)
		if onWait == nil {
			return c.output(), fmt.Errorf("client waits for %q but the scenario injects nothing", w.Wait)
		}
		if err := onWait(w.Wait); err != nil {
			return c.output(), err
		}
		if err := c.send("go"); err != nil {
			return c.output(), err
		}
	}
}

// expectLines checks that the client's output contains each want, in order:
// the scenario did what its spec claims (a resumed call completed, a call
// was re-issued on a new session).
func expectLines(output string, wants ...string) error {
	rest := output
	for _, w := range wants {
		i := strings.Index(rest, w)
		if i < 0 {
			return fmt.Errorf("client output lacks %q (in order); output:\n%s", w, output)
		}
		rest = rest[i+len(w):]
	}
	return nil
}

// clientValue returns the string value of key from the first client output
// line that has it (the client prints one JSON object per line).
func clientValue(output, key string) (string, error) {
	for _, line := range strings.Split(output, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if v, ok := m[key].(string); ok && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("client output has no %q:\n%s", key, output)
}

// eventWith returns a match function for sseCut that is true for an SSE
// event containing every part. It is stateless on purpose: sseCut may look
// at the same event more than once while waiting for its chunk's end.
func eventWith(parts ...string) func(string) bool {
	return func(ev string) bool {
		for _, p := range parts {
			if !strings.Contains(ev, p) {
				return false
			}
		}
		return true
	}
}

// progressEvent matches the SSE event carrying progress notification n.
func progressEvent(n int) func(string) bool {
	return eventWith(tsProgress, fmt.Sprintf(`"progress":%d,`, n))
}

// midEventCut is a proxy fault: on the connection whose request contains
// reqMarker, once the SSE response has delivered the complete event holding
// the n-th occurrence of eventMarker, it forwards only the start of the next
// event, up to and including its `id:` line, then closes with FIN: the stream
// ends mid-event (and mid-chunk) after the id arrived. partialID is the id of
// that partial event.
type midEventCut struct {
	reqMarker, eventMarker []byte
	n                      int
	fired                  chan struct{}
	used                   atomic.Bool
	mu                     sync.Mutex
	partialID              string
}

// midEventCutWindow bounds the response bytes a midEventCut keeps to find
// its place; a response longer than that before the cut is forwarded as is.
const midEventCutWindow = 256 << 10

func newMidEventCut(reqMarker, eventMarker string, n int) *midEventCut {
	return &midEventCut{reqMarker: []byte(reqMarker), eventMarker: []byte(eventMarker), n: n, fired: make(chan struct{})}
}

var sseIDLine = regexp.MustCompile(`(?m)^id: ([^\r\n]*)\n`)

// cutPoint returns where in resp (a response so far) the cut goes: just
// after the id line of the event following the one with the n-th marker,
// and that id; -1 while those bytes have not all arrived.
func (c *midEventCut) cutPoint(resp []byte) (int, string) {
	at := 0
	for range c.n {
		i := bytes.Index(resp[at:], c.eventMarker)
		if i < 0 {
			return -1, ""
		}
		at += i + len(c.eventMarker)
	}
	end := bytes.Index(resp[at:], []byte("\n\n"))
	if end < 0 {
		return -1, ""
	}
	at += end + 2
	loc := sseIDLine.FindSubmatchIndex(resp[at:])
	if loc == nil {
		return -1, ""
	}
	return at + loc[1], string(resp[at+loc[2] : at+loc[3]])
}

func (c *midEventCut) hooks(int) pcaprec.Hooks {
	// armed is set by the client direction, read by the server direction;
	// resp is touched by the server direction's goroutine only.
	var armed atomic.Bool
	var resp []byte // the response bytes so far, up to midEventCutWindow
	return pcaprec.Hooks{
		FromClient: func(p []byte) ([]byte, pcaprec.Action) {
			armed.CompareAndSwap(false, !c.used.Load() && bytes.Contains(p, c.reqMarker))
			return p, pcaprec.Forward
		},
		FromServer: func(p []byte) ([]byte, pcaprec.Action) {
			base := len(resp)
			if !armed.Load() || base+len(p) > midEventCutWindow {
				return p, pcaprec.Forward
			}
			resp = append(resp, p...)
			cut, id := c.cutPoint(resp)
			if cut < 0 {
				return p, pcaprec.Forward
			}
			armed.Store(false)
			c.mu.Lock()
			c.partialID = id
			c.mu.Unlock()
			if c.used.CompareAndSwap(false, true) {
				close(c.fired)
			}
			return p[:max(0, cut-base)], pcaprec.Close
		},
	}
}

// wait waits for the cut and returns the partial event's id.
func (c *midEventCut) wait(ctx context.Context) (string, error) {
	select {
	case <-c.fired:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.partialID, nil
	case <-ctx.Done():
		return "", fmt.Errorf("mid-event cut never fired: %w", ctx.Err())
	}
}

// headerRewrite is a proxy fault playing a buggy client: in the first request
// that carries header (case-insensitive), its value is replaced by what
// value returns, given the original (resolved when the request passes, so
// it may depend on what an earlier fault saw).
type headerRewrite struct {
	re    *regexp.Regexp
	value func(old string) string
	used  atomic.Bool
	// seen receives the original and the new value once rewritten.
	old, new string
	fired    chan struct{}
}

func newHeaderRewrite(header string, value func(old string) string) *headerRewrite {
	return &headerRewrite{
		re:    regexp.MustCompile(`(?mi)^(` + regexp.QuoteMeta(header) + `:[ \t]*)([^\r\n]*)\r\n`),
		value: value, fired: make(chan struct{}),
	}
}

func (h *headerRewrite) hooks(int) pcaprec.Hooks {
	return pcaprec.Hooks{FromClient: func(p []byte) ([]byte, pcaprec.Action) {
		loc := h.re.FindSubmatchIndex(p)
		if loc == nil || !h.used.CompareAndSwap(false, true) {
			return p, pcaprec.Forward
		}
		h.old = string(p[loc[4]:loc[5]])
		h.new = h.value(h.old)
		out := append(append(append([]byte(nil), p[:loc[4]]...), h.new...), p[loc[5]:]...)
		close(h.fired)
		return out, pcaprec.Forward
	}}
}

// wait waits for the rewrite and returns the original and new values.
func (h *headerRewrite) wait(ctx context.Context) (string, string, error) {
	select {
	case <-h.fired:
		return h.old, h.new, nil
	case <-ctx.Done():
		return "", "", fmt.Errorf("header rewrite never fired: %w", ctx.Err())
	}
}

// tsSpecHeader is the first comment line of every ts- spec.
func tsSpecHeader(server string) string {
	return fmt.Sprintf("# @modelcontextprotocol/sdk %s (node) client and %s, revision 2025-11-25 (the SDK's latest).",
		tsSDKVersion, server)
}
