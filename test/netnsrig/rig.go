// Package netnsrig runs MCP traffic on a real (virtual) network: four Linux
// network namespaces (client, lb, backend1, backend2) joined by a bridge in a
// fifth, "switch" namespace, so packets cross veth interfaces as on a host's
// NIC and a capture tool (tcpdump, replaywatch agent) can watch the client's
// interface while a scenario runs. The host's own network is never touched:
// the bridge and every veth live in the rig's namespaces and die with them.
//
// RollingDeploy runs the go-sdk rolling-deploy scenario of
// test/netnsrig/cmd/rollingdeploy across it: a load balancer drains the
// backend holding the client's session in the middle of a streaming tool
// call, and the client's resume lands on the other backend, which answers
// 200 with a new session (a session_swap).
//
// LossyLink replaces the client's veth with two TAP devices joined by
// cmd/lossyfwd, a userspace forwarder that drops, duplicates, reorders and
// delays frames (this kernel has no netem), so the same scenario can run
// over a clean and an impaired link and TCP really retransmits.
//
// Needs root and iproute2's ip. Setup skips a test without them unless CI is
// set, where it fails.
package netnsrig

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/replaywatch/replaywatch/test/testenv"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Node roles: the first argument of Exec, NS and Addr.
const (
	Client   = "client"
	LB       = "lb"
	Backend1 = "backend1"
	Backend2 = "backend2"
	// Switch holds the bridge; it has no address and runs nothing.
	Switch = "switch"
)

// nodes are the roles with an address, each joined to the bridge by a veth
// pair, and the last octet of its address in the rig's /24.
var nodes = []struct {
	role  string
	short string // in interface names (at most 15 bytes in all)
	host  byte
}{
	{Client, "client", 10},
	{LB, "lb", 20},
	{Backend1, "b1", 31},
	{Backend2, "b2", 32},
}

// bridgeName is the bridge in the switch namespace.
const bridgeName = "br-rig"

// Rig is one set of namespaces. Its methods are safe for concurrent use.
type Rig struct {
	// ID is random per rig; every namespace name starts with "rw-"+ID.
	ID string
	// Subnet is 10.213.X.0/24 with X random per rig.
	Subnet netip.Prefix

	dir   string            // temporary files: the built programs, logs, sockets
	ns    map[string]string // role -> namespace name
	addrs map[string]netip.Addr

	mu      sync.Mutex
	created []string // namespaces created so far, in order
	closed  bool
	ifaces  map[string]string // role -> its interface, inside its namespace (LossyLink changes the client's)
	link    *LossyLink        // the lossy client link running, if any

	buildMu sync.Mutex
	progs   map[string]string // program name (a directory in cmd/) -> built binary
}

// Setup is New for tests: it skips the test when not root or ip is missing
// (fails instead when CI is set) and closes the rig in tb.Cleanup.
func Setup(tb testing.TB) *Rig {
	tb.Helper()
	if err := Available(); err != nil {
		if testenv.InCI() {
			tb.Fatalf("netnsrig: %v (CI is set: the test script must run this as root with iproute2 installed)", err)
		}
		tb.Skipf("netnsrig: %v", err)
	}
	r, err := New()
	if err != nil {
		tb.Fatalf("netnsrig: %v", err)
	}
	tb.Cleanup(func() {
		if err := r.Close(); err != nil {
			tb.Errorf("netnsrig: close: %v", err)
		}
	})
	return r
}

// Available reports why a rig cannot be built here, nil when it can.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("ip (iproute2) is not installed")
	}
	return nil
}

// New creates the namespaces, the bridge and the veth pairs, and brings
// everything up. On error, whatever was created is removed again.
func New() (*Rig, error) {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	r := &Rig{
		ID:     hex.EncodeToString(b[:4]),
		Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, b[4], 0}), 24),
		ns:     map[string]string{},
		addrs:  map[string]netip.Addr{},
		ifaces: map[string]string{},
		progs:  map[string]string{},
	}
	dir, err := os.MkdirTemp("", "netnsrig-"+r.ID+"-")
	if err != nil {
		return nil, err
	}
	r.dir = dir
	if err := r.build(); err != nil {
		if cerr := r.Close(); cerr != nil {
			err = fmt.Errorf("%w (and on cleanup: %v)", err, cerr)
		}
		return nil, err
	}
	return r, nil
}

func (r *Rig) build() error {
	for _, role := range []string{Switch, Client, LB, Backend1, Backend2} {
		name := "rw-" + r.ID + "-" + role
		if err := ipCmd("netns", "add", name); err != nil {
			return err
		}
		r.mu.Lock()
		r.created = append(r.created, name)
		r.mu.Unlock()
		r.ns[role] = name
		if err := ipCmd("-n", name, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	sw := r.ns[Switch]
	// No IPv6 link-local addresses anywhere (addrgenmode none): no router
	// solicitations or neighbour discovery flooded to the captures.
	for _, s := range [][]string{
		{"-n", sw, "link", "add", bridgeName, "type", "bridge"},
		{"-n", sw, "link", "set", bridgeName, "addrgenmode", "none"},
		{"-n", sw, "link", "set", bridgeName, "up"},
	} {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	base := r.Subnet.Addr().As4()
	for _, n := range nodes {
		port, iface := "sw-"+n.short, "veth-"+n.short
		ns := r.ns[n.role]
		a := base
		a[3] = n.host
		addr := netip.AddrFrom4(a)
		steps := [][]string{
			// Created in the switch namespace, its peer moved at once into
			// the node's: no interface ever appears on the host.
			{"-n", sw, "link", "add", port, "type", "veth", "peer", "name", iface, "netns", ns},
			{"-n", sw, "link", "set", port, "master", bridgeName},
			{"-n", sw, "link", "set", port, "addrgenmode", "none"},
			{"-n", sw, "link", "set", port, "up"},
			{"-n", ns, "link", "set", iface, "addrgenmode", "none"},
			{"-n", ns, "addr", "add", netip.PrefixFrom(addr, r.Subnet.Bits()).String(), "dev", iface},
			{"-n", ns, "link", "set", iface, "up"},
		}
		for _, s := range steps {
			if err := ipCmd(s...); err != nil {
				return err
			}
		}
		r.addrs[n.role] = addr
		r.ifaces[n.role] = iface
	}
	return nil
}

// NS is the network namespace name of a role (for ip netns exec, or
// ip -n).
func (r *Rig) NS(role string) string { return lookup(r.ns, role, "namespace") }

// Addr is a role's IPv4 address (not for Switch, which has none).
func (r *Rig) Addr(role string) netip.Addr { return lookup(r.addrs, role, "address") }

// Iface is the name of a role's veth inside its own namespace (for the
// client, tap-client once LossyLink has replaced its veth).
func (r *Rig) Iface(role string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lookup(r.ifaces, role, "interface")
}

// lookup is m[role]; a role without one is a programming error.
func lookup[V any](m map[string]V, role, what string) V {
	v, ok := m[role]
	if !ok {
		panic("netnsrig: no " + what + " for role " + strconv.Quote(role))
	}
	return v
}

// ClientIface is the client's interface (inside the client namespace):
// where a capture on the client's node listens. It is its veth, or
// tap-client once LossyLink has replaced it.
func (r *Rig) ClientIface() string { return r.Iface(Client) }

// Dir is the rig's temporary directory, removed by Close. Unix sockets in
// it are reachable from every namespace.
func (r *Rig) Dir() string { return r.dir }

// Exec returns a command running name inside a role's namespace (through
// ip netns exec, which execs name in place: the command's pid is name's).
// It is killed if the process that started it dies, and Close kills
// whatever still runs in the rig's namespaces.
func (r *Rig) Exec(role, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", r.NS(role), name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Close kills every process left in the rig's namespaces, deletes the
// namespaces (the bridge and the veths go with them) and the temporary
// directory. It may be called more than once.
func (r *Rig) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var errs []error
	for _, name := range slices.Backward(r.created) {
		if err := killAll(name); err != nil {
			errs = append(errs, err)
		}
		if err := ipCmd("netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	r.created = nil
	if r.dir != "" {
		if err := os.RemoveAll(r.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killAll kills the processes in namespace name and waits until they are
// gone, so deleting the name also frees the namespace.
func killAll(name string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "pids", name).Output()
		if err != nil {
			return fmt.Errorf("ip netns pids %s: %w", name, err)
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: processes %v survive SIGKILL", name, pids)
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Namespaces lists the rig's namespace names (those not yet deleted).
func (r *Rig) Namespaces() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.created)
}

// ipCmd runs ip with args and returns its output in the error.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Existing lists the network namespaces ip knows about (ip netns list), for
// tests checking that nothing leaked.
func Existing() ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}
