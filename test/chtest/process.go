package chtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
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
	"time"
)

// process is one child process started in its own process group, so that
// stopping it also stops anything it forked.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result; read only after done is closed
}

// startProcess starts bin with args in a new process group, stdout and stderr
// appended to outPath. The child gets SIGKILL if this process dies (Pdeathsig),
// so a test binary killed by its -timeout does not leave servers behind.
func startProcess(name, bin string, args []string, dir, outPath string) (*process, error) {
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the whole process group (the leader's pid is the
// group id because of Setpgid). ESRCH (nothing left) is not an error.
func (p *process) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// waitFor calls check every 50ms until it succeeds, the process exits or
// timeout passes; the error says what was awaited and check's last error.
func (p *process) waitFor(what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			return fmt.Errorf("exited during startup (%v)", p.err)
		}
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v: %v", what, timeout, err)
		}
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM to the group and waits up to timeout for the leader to
// exit, then SIGKILLs the group. Either way, leftovers in the group are killed.
func (p *process) stop(timeout time.Duration) error {
	p.signalGroup(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		p.signalGroup(syscall.SIGKILL)
		return nil
	case <-t.C:
		p.signalGroup(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s (pid %d) did not exit within %v of SIGTERM; killed it", p.name, p.cmd.Process.Pid, timeout)
	}
}

// kill SIGKILLs the group and waits for the leader to be reaped.
func (p *process) kill() {
	p.signalGroup(syscall.SIGKILL)
	<-p.done
}

// freePorts returns n distinct ports that were free a moment ago: all n are
// bound on 127.0.0.1:0 at once, then released. Each is also locked for the
// rest of this process's life with a lock file (see lockPort), so that no
// other chtest user on the machine (another package's test binary, a parallel
// test) is handed the same port before the server binds it, or while a
// server is stopped between Stop and Start. Other processes may still take a
// port; callers retry on errAddrInUse where the port is theirs to choose.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100 {
			return nil, fmt.Errorf("choose a free port: every port offered is locked by another chtest user (%s)", portLockDir())
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("choose a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !lockPort(port) {
			l.Close()
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

var portLocks struct {
	sync.Mutex
	files map[int]*os.File
}

func portLockDir() string { return filepath.Join(os.TempDir(), "chtest-ports") }

// lockPort takes an exclusive flock on TMPDIR/chtest-ports/PORT.lock, held
// until this process exits (the kernel drops it even on SIGKILL). It reports
// false if the port is already locked, by this process or another. If the
// lock file cannot be created at all (permissions), it reports true: the
// lock is only a guard against our own races.
func lockPort(port int) bool {
	portLocks.Lock()
	defer portLocks.Unlock()
	if _, ok := portLocks.files[port]; ok {
		return false
	}
	dir := portLockDir()
	if err := os.MkdirAll(dir, 0o777); err == nil {
		_ = os.Chmod(dir, 0o1777)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	if portLocks.files == nil {
		portLocks.files = make(map[int]*os.File)
	}
	portLocks.files[port] = f
	return true
}

// randomToken returns 16 random hex digits.
func randomToken() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// fileSize is the size of path, 0 if it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tailFrom returns at most the last maxLines lines of path written after byte
// offset from ("" if nothing).
func tailFrom(path string, from int64, maxLines int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxBytes = 64 << 10
	size := fileSize(path)
	if size-from > maxBytes {
		from = size - maxBytes
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// logExcerpt formats the new parts of the given log files for an error
// message.
func logExcerpt(logs []logMark) string {
	var b bytes.Buffer
	for _, l := range logs {
		if t := tailFrom(l.path, l.offset, 30); t != "" {
			fmt.Fprintf(&b, "\n--- %s (last lines) ---\n%s", l.path, t)
		}
	}
	if b.Len() == 0 {
		return "\n(no log output)"
	}
	return b.String()
}

// logMark is a log file and its size before a start, so that errors show only
// what this start wrote.
type logMark struct {
	path   string
	offset int64
}

func markLogs(paths ...string) []logMark {
	m := make([]logMark, len(paths))
	for i, p := range paths {
		m[i] = logMark{p, fileSize(p)}
	}
	return m
}

// errAddrInUse marks a start that failed because a port was taken between
// freePorts and the server's bind.
var errAddrInUse = errors.New("address already in use")

// inUseRE matches ClickHouse's "Net Exception: Address already in use:
// 127.0.0.1:PORT" and Java's "BindException: Address already in use".
var inUseRE = regexp.MustCompile(`(?i)address already in use(?:: [^\s]*:(\d+))?`)

// addrInUse reports whether the logs say a bind failed, and the port if they
// name it (0 if not).
func addrInUse(logs []logMark) (bool, int) {
	for _, l := range logs {
		if m := inUseRE.FindStringSubmatch(tailFrom(l.path, l.offset, 200)); m != nil {
			port, _ := strconv.Atoi(m[1])
			return true, port
		}
	}
	return false, 0
}

// portInUseError is errAddrInUse with the port that was taken.
type portInUseError struct {
	port int // 0: unknown
	err  error
}

func (e *portInUseError) Error() string   { return e.err.Error() }
func (e *portInUseError) Unwrap() []error { return []error{errAddrInUse, e.err} }

// findBinary looks name up in PATH, then in the given fallback paths (Debian
// installs clickhouse-server in /usr/sbin, which is not in every user's PATH).
func findBinary(name string, fallbacks ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, p := range fallbacks {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not installed (not in PATH or %s)", name, strings.Join(fallbacks, ", "))
}
