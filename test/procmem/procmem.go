// Package procmem measures a child process's peak memory the way the
// memory tests and benchmarks need it: its own VmHWM from /proc, read
// until it exits. Not wait4's ru_maxrss: os/exec starts children with
// vfork and exec, and the kernel folds the RSS of the address space exec
// leaves (the parent's) into the child's ru_maxrss, so a large test binary
// makes a small child look large.
package procmem

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// PeakRSS is process pid's peak resident set (VmHWM), in bytes; 0 when it
// cannot be read (the process is gone, or a zombie).
func PeakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Run starts cmd and waits for it, reading its peak resident set every
// 2 ms; it returns the largest read and Wait's error.
func Run(cmd *exec.Cmd) (peak int64, err error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		peak = max(peak, PeakRSS(cmd.Process.Pid))
		select {
		case err := <-done:
			return peak, err
		case <-time.After(2 * time.Millisecond):
		}
	}
}
