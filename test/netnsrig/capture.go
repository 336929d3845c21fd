package netnsrig

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/replaywatch/replaywatch/test/testenv"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RequireTool finds a program, skipping the test without it (failing when
// CI is set: the test script installs it from Debian package pkg).
func RequireTool(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testenv.InCI() {
			tb.Fatalf("%s not found (CI is set: install Debian package %s)", name, pkg)
		}
		tb.Skipf("%s not found (Debian package %s)", name, pkg)
	}
	return p
}

// Tcpdump is a tcpdump writing a capture file, inside a role's namespace.
type Tcpdump struct {
	cmd     *exec.Cmd
	log     strings.Builder // its stderr; read once logDone is closed
	logDone chan struct{}
}

// StartTcpdump captures on iface (in role's namespace) into file, and
// returns once tcpdump listens. tcpdump is the program's path.
func (r *Rig) StartTcpdump(tcpdump, role, iface, file string) (*Tcpdump, error) {
	// --immediate-mode and -U: take each packet from the kernel and write
	// it as it comes (otherwise packets still buffered when tcpdump is
	// stopped are lost: the end of the session); -Z root: Debian's tcpdump
	// otherwise drops to user tcpdump, which cannot write in a root-owned
	// temporary directory.
	c := &Tcpdump{cmd: r.Exec(role, tcpdump, "-i", iface, "-n", "--immediate-mode", "-U", "-Z", "root", "-w", file),
		logDone: make(chan struct{})}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	listening := make(chan struct{})
	go func() {
		defer close(c.logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(&c.log, sc.Text())
			if strings.Contains(sc.Text(), "listening on") {
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
		return c, nil
	case <-c.logDone:
		c.cmd.Wait()
		return nil, fmt.Errorf("tcpdump exited: %s", c.log.String())
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.logDone
		c.cmd.Wait()
		return nil, fmt.Errorf("tcpdump not listening after 10s: %s", c.log.String())
	}
}

// kernelDrops finds tcpdump's count of packets the kernel dropped (its
// buffer was full): the capture misses them.
var kernelDrops = regexp.MustCompile(`(?m)^(\d+) packets? dropped by kernel`)

// Stop lets the last packets arrive (200 ms), stops tcpdump (SIGINT: it
// writes what it has and its counts) and returns those counts.
func (c *Tcpdump) Stop() (string, error) {
	time.Sleep(200 * time.Millisecond)
	c.cmd.Process.Signal(syscall.SIGINT)
	<-c.logDone
	err := c.cmd.Wait()
	log := strings.TrimSpace(c.log.String())
	if err != nil {
		return log, fmt.Errorf("tcpdump: %w: %s", err, log)
	}
	if m := kernelDrops.FindStringSubmatch(log); m != nil && m[1] != "0" {
		return log, errors.New("tcpdump: the kernel dropped packets: " + log)
	}
	return log, nil
}
