package chtest

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Options configure a server. The zero value is a standalone server on free
// ports.
type Options struct {
	// TCPPort, HTTPPort and InterserverPort are the native, HTTP and
	// interserver (replication) ports on 127.0.0.1. Zero picks a free port;
	// NewServer picks again if another process takes it before the server
	// binds it.
	TCPPort, HTTPPort, InterserverPort int

	// Cluster, if not nil, adds ZooKeeper, remote_servers, macros and
	// distributed_ddl configuration (see NewCluster, which fills it in).
	Cluster *ClusterConfig

	// StartTimeout bounds each Start (default 60s).
	StartTimeout time.Duration
}

// ClusterConfig is one server's view of a cluster: one replica per shard.
type ClusterConfig struct {
	Name      string   // cluster name in remote_servers and ON CLUSTER
	ZooKeeper string   // "host:port" of the ZooKeeper server
	Shards    []string // native "host:port" of each shard's replica, shard 1 first
	Shard     int      // this server's shard number, 1-based: macros shard NN, replica rNN
}

// Server is a clickhouse-server process with its own config and data under
// Dir, listening on 127.0.0.1 only.
type Server struct {
	Addr     string // native protocol, "127.0.0.1:port"
	HTTPAddr string // HTTP interface, "127.0.0.1:port"
	Dir      string // config.xml, users.xml, data/, log/

	TCPPort, HTTPPort, InterserverPort int

	opts  Options
	token string // macro chtest_instance: tells this server from another on the same port

	mu   sync.Mutex
	proc *process // nil when not running
}

const (
	defaultStartTimeout = 60 * time.Second
	stopTimeout         = 30 * time.Second
)

// ServerBinary returns the path of clickhouse-server, or an error saying it is
// not installed.
func ServerBinary() (string, error) {
	return findBinary("clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server")
}

// ClientBinary returns the path of clickhouse-client.
func ClientBinary() (string, error) {
	return findBinary("clickhouse-client", "/usr/bin/clickhouse-client")
}

// NewServer writes a config under dir (created if needed) and starts the
// server. A port taken between choosing it and the server binding it is
// chosen again (up to 3 tries) if it was left zero in opts.
func NewServer(dir string, opts Options) (*Server, error) {
	if _, err := ServerBinary(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{dir, filepath.Join(dir, "data"), filepath.Join(dir, "log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		s := &Server{Dir: dir, opts: opts, token: randomToken()}
		if err := s.choosePorts(); err != nil {
			return nil, err
		}
		if err := s.writeConfig(); err != nil {
			return nil, err
		}
		err := s.Start()
		if err == nil {
			return s, nil
		}
		if attempt == 3 || !s.mayChooseAgain(err) {
			return nil, err
		}
	}
}

// mayChooseAgain reports whether err is a port taken by another process that
// NewServer chose (not one given in Options).
func (s *Server) mayChooseAgain(err error) bool {
	var pe *portInUseError
	if !errors.As(err, &pe) {
		return false
	}
	o := s.opts
	if pe.port == 0 { // the log did not say which
		return o.TCPPort == 0 && o.HTTPPort == 0 && o.InterserverPort == 0
	}
	return pe.port != o.TCPPort && pe.port != o.HTTPPort && pe.port != o.InterserverPort
}

func (s *Server) choosePorts() error {
	free, err := freePorts(3)
	if err != nil {
		return err
	}
	pick := func(p, i int) int {
		if p != 0 {
			return p
		}
		return free[i]
	}
	s.TCPPort = pick(s.opts.TCPPort, 0)
	s.HTTPPort = pick(s.opts.HTTPPort, 1)
	s.InterserverPort = pick(s.opts.InterserverPort, 2)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.TCPPort))
	s.HTTPAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.HTTPPort))
	return nil
}

func (s *Server) configPath() string { return filepath.Join(s.Dir, "config.xml") }
func (s *Server) errLogPath() string { return filepath.Join(s.Dir, "log", "err.log") }
func (s *Server) stderrPath() string { return filepath.Join(s.Dir, "log", "stderr.log") }

// Start starts the server on its ports and data directory (again, after Stop
// or Kill) and waits until it answers SELECT 1 on the native port. On failure
// the error includes what the server wrote to err.log and stderr.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return fmt.Errorf("clickhouse-server %s: already running", s.Addr)
	}
	bin, err := ServerBinary()
	if err != nil {
		return err
	}
	logs := markLogs(s.errLogPath(), s.stderrPath())
	p, err := startProcess("clickhouse-server "+s.Addr, bin, []string{"--config-file=" + s.configPath()}, s.Dir, s.stderrPath())
	if err != nil {
		return err
	}
	s.proc = p
	timeout := s.opts.StartTimeout
	if timeout == 0 {
		timeout = defaultStartTimeout
	}
	start := time.Now()
	err = waitReady(p, s.Addr, s.token, timeout)
	if err == nil && s.opts.Cluster != nil {
		err = waitDDLWorker(p, s.opts.Cluster.ZooKeeper, timeout-time.Since(start))
	}
	if err != nil {
		p.kill()
		s.proc = nil
		err = fmt.Errorf("clickhouse-server %s (dir %s): %w%s", s.Addr, s.Dir, err, logExcerpt(logs))
		if inUse, port := addrInUse(logs); inUse {
			err = &portInUseError{port, err}
		}
		return err
	}
	return nil
}

// waitReady polls until the server at addr answers with this server's token
// (SELECT 1 with the check that the answer does not come from another server
// on the same port), the process exits or timeout.
func waitReady(p *process, addr, token string, timeout time.Duration) error {
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		DialTimeout: time.Second,
		ReadTimeout: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	return p.waitFor("answer SELECT 1", timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var got string
		err := conn.QueryRow(ctx, "SELECT 1, substitution FROM system.macros WHERE macro = 'chtest_instance'").Scan(new(uint8), &got)
		if err == nil && got != token {
			err = fmt.Errorf("another server answers on %s", addr)
		}
		return err
	})
}

// Stop sends SIGTERM and waits for the server to exit, SIGKILLing it (and its
// process group) after 30s. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	s.proc.signalGroup(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	err := s.proc.stop(stopTimeout)
	s.proc = nil
	return err
}

// Kill SIGKILLs the server and its process group, for crash tests. Start
// brings it back on the same data.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.kill()
	s.proc = nil
}

// Pause stops the server with SIGSTOP: connections stay open and new ones
// are accepted by the kernel, but nothing answers (a hung server). Resume
// continues it; Stop and Kill resume it first.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.signalGroup(syscall.SIGSTOP)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.signalGroup(syscall.SIGCONT)
	}
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// DSN returns "clickhouse://127.0.0.1:PORT/database" for the native port.
func (s *Server) DSN(database string) string {
	return "clickhouse://" + s.Addr + "/" + database
}

// Open returns a clickhouse-go connection to database ("" is default).
func (s *Server) Open(database string) (driver.Conn, error) {
	return clickhouse.Open(&clickhouse.Options{
		Addr:        []string{s.Addr},
		Auth:        clickhouse.Auth{Database: database},
		DialTimeout: 5 * time.Second,
	})
}

// Exec runs statements on a short-lived connection, for setup code.
func (s *Server) Exec(ctx context.Context, statements ...string) error {
	conn, err := s.Open("")
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range statements {
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// Client runs clickhouse-client --host 127.0.0.1 --port PORT --query query
// with stdin (nil: empty) and returns its stdout; the error carries stderr.
// Useful to insert a file: Client(ctx, "INSERT INTO t FORMAT JSONEachRow", f).
func (s *Server) Client(ctx context.Context, query string, stdin io.Reader) ([]byte, error) {
	bin, err := ClientBinary()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--host", "127.0.0.1", "--port", strconv.Itoa(s.TCPPort), "--query", query)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		q := query
		if len(q) > 200 {
			q = q[:200] + "..."
		}
		return out, fmt.Errorf("clickhouse-client --query %q: %v: %s", q, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

var clusterNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

type configData struct {
	Dir                                string
	TCPPort, HTTPPort, InterserverPort int
	Token                              string
	Cluster                            *clusterData
}

type clusterData struct {
	Name          string
	ZKHost        string
	ZKPort        string
	Shards        []hostPort
	Shard, Replic string
}

type hostPort struct{ Host, Port string }

func (s *Server) writeConfig() error {
	d := configData{Dir: s.Dir, TCPPort: s.TCPPort, HTTPPort: s.HTTPPort, InterserverPort: s.InterserverPort, Token: s.token}
	if c := s.opts.Cluster; c != nil {
		if !clusterNameRE.MatchString(c.Name) {
			return fmt.Errorf("cluster name %q: want letters, digits and _", c.Name)
		}
		if c.Shard < 1 || c.Shard > len(c.Shards) {
			return fmt.Errorf("cluster %s: shard %d of %d", c.Name, c.Shard, len(c.Shards))
		}
		zh, zp, err := net.SplitHostPort(c.ZooKeeper)
		if err != nil {
			return fmt.Errorf("cluster %s: ZooKeeper address: %w", c.Name, err)
		}
		cd := &clusterData{Name: c.Name, ZKHost: zh, ZKPort: zp,
			Shard: fmt.Sprintf("%02d", c.Shard), Replic: fmt.Sprintf("r%02d", c.Shard)}
		for _, a := range c.Shards {
			h, p, err := net.SplitHostPort(a)
			if err != nil {
				return fmt.Errorf("cluster %s: shard address: %w", c.Name, err)
			}
			cd.Shards = append(cd.Shards, hostPort{h, p})
		}
		d.Cluster = cd
	}
	for name, t := range map[string]*template.Template{"config.xml": configTemplate, "users.xml": usersTemplate} {
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.Dir, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

var funcs = template.FuncMap{"x": xmlEscape}

// The root element is <yandex> (ClickHouse 18.16; newer servers accept it
// too). Caches are small: these are test servers.
var configTemplate = template.Must(template.New("config").Funcs(funcs).Parse(`<?xml version="1.0"?>
<!-- Written by test/chtest. -->
<yandex>
    <logger>
        <level>warning</level>
        <log>{{x .Dir}}/log/server.log</log>
        <errorlog>{{x .Dir}}/log/err.log</errorlog>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>{{.TCPPort}}</tcp_port>
    <http_port>{{.HTTPPort}}</http_port>
    <interserver_http_port>{{.InterserverPort}}</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <path>{{x .Dir}}/data/</path>
    <tmp_path>{{x .Dir}}/data/tmp/</tmp_path>
    <user_files_path>{{x .Dir}}/data/user_files/</user_files_path>
    <format_schema_path>{{x .Dir}}/data/format_schemas/</format_schema_path>
    <users_config>{{x .Dir}}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <macros>
        <chtest_instance>{{.Token}}</chtest_instance>
{{- with .Cluster}}
        <shard>{{.Shard}}</shard>
        <replica>{{.Replic}}</replica>
{{- end}}
    </macros>
{{- with .Cluster}}
    <zookeeper>
        <node><host>{{x .ZKHost}}</host><port>{{x .ZKPort}}</port></node>
        <session_timeout_ms>30000</session_timeout_ms>
    </zookeeper>
    <remote_servers>
        <{{.Name}}>
{{- range .Shards}}
            <shard>
                <internal_replication>true</internal_replication>
                <replica><host>{{x .Host}}</host><port>{{x .Port}}</port></replica>
            </shard>
{{- end}}
        </{{.Name}}>
    </remote_servers>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
{{- end}}
</yandex>
`))

var usersTemplate = template.Must(template.New("users").Parse(`<?xml version="1.0"?>
<!-- Written by test/chtest: user default, no password, from anywhere. -->
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <!-- An idle connection's handler looks for shutdown every
                 poll_interval seconds (default 10): Stop would wait that long
                 whenever a client keeps a connection open. -->
            <poll_interval>1</poll_interval>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>::/0</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`))
