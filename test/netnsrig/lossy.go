package netnsrig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The lossy client link: the client's veth pair is replaced by two TAP
// devices, tap-client in the client's namespace (with the client's address)
// and tap-sw-client on the bridge in the switch namespace, joined by the
// lossyfwd program (cmd/lossyfwd), which runs in the switch namespace and
// drops, duplicates, reorders and delays frames in both directions. The
// kernel here has no netem qdisc; this is the same in userspace.
const (
	clientTap = "tap-client"
	switchTap = "tap-sw-client"
	// clientMAC is tap-client's address, the same for every lossy link of a
	// rig, so that the balancer's ARP entry for the client stays right when
	// one link replaces another.
	clientMAC = "02:72:77:00:00:0a"
)

// Impairment is what a lossy link does to the frames it carries, in each
// direction. The zero value is a clean link (every frame passed on at
// once, in order).
type Impairment struct {
	// Drop, Duplicate and Reorder are probabilities per frame: dropped;
	// else sent twice in a row; held back and sent after ReorderWindow
	// later frames (or ReorderMaxHold, when fewer come).
	Drop, Duplicate, Reorder float64
	ReorderWindow            int           // default 3
	ReorderMaxHold           time.Duration // default 50 ms
	// Delay is added to every frame.
	Delay time.Duration
	// Seed seeds the per-direction PRNGs: the n-th frame of a direction
	// meets the same fate on every link with the same seed.
	Seed uint64
}

// args are lossyfwd's impairment flags.
func (imp Impairment) args() []string {
	window, hold := imp.ReorderWindow, imp.ReorderMaxHold
	if window == 0 {
		window = 3
	}
	if hold == 0 {
		hold = 50 * time.Millisecond
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return []string{"-drop", f(imp.Drop), "-dup", f(imp.Duplicate), "-reorder", f(imp.Reorder),
		"-reorder-window", strconv.Itoa(window), "-reorder-max-hold", hold.String(),
		"-delay", imp.Delay.String(), "-seed", strconv.FormatUint(imp.Seed, 10)}
}

// LinkStats are lossyfwd's counters (the JSON it writes on exit). A is
// the client's side: AToB is what the client sent, BToA what it was sent.
type LinkStats struct {
	AToB DirStats `json:"a_to_b"`
	BToA DirStats `json:"b_to_a"`
}

// DirStats count one direction of a lossy link.
type DirStats struct {
	Frames int64 `json:"frames"` // read from the sending side's TAP
	Bytes  int64 `json:"bytes"`
	// Dropped, Duplicated and Reordered count the frames each fate met
	// (a duplicated frame may also be reordered: the pair is held back).
	Dropped    int64 `json:"dropped"`
	Duplicated int64 `json:"duplicated"`
	Reordered  int64 `json:"reordered"`
	// HoldTimeouts are reordered frames sent after the maximum hold, not
	// after the window's frames.
	HoldTimeouts int64 `json:"hold_timeouts"`
	// Written and WriteErrors count the writes to the receiving side's TAP
	// (a duplicate is written twice).
	Written     int64 `json:"written"`
	WriteErrors int64 `json:"write_errors"`
	// FirstWriteError is what the first failed write said.
	FirstWriteError string `json:"first_write_error,omitempty"`
}

// Add is the sum of two counts.
func (s LinkStats) Add(o LinkStats) LinkStats {
	return LinkStats{AToB: s.AToB.add(o.AToB), BToA: s.BToA.add(o.BToA)}
}

func (d DirStats) add(o DirStats) DirStats {
	first := d.FirstWriteError
	if first == "" {
		first = o.FirstWriteError
	}
	return DirStats{d.Frames + o.Frames, d.Bytes + o.Bytes, d.Dropped + o.Dropped, d.Duplicated + o.Duplicated,
		d.Reordered + o.Reordered, d.HoldTimeouts + o.HoldTimeouts, d.Written + o.Written, d.WriteErrors + o.WriteErrors, first}
}

// LossyLink is a running lossy client link.
type LossyLink struct {
	r     *Rig
	p     *proc
	stats string
}

// LossyLink joins the client to the bridge through lossyfwd with imp (the
// zero Impairment for a clean link), replacing the client's veth the first
// time: from then on ClientIface is tap-client, and the client is cut off
// whenever no lossy link runs. One runs at a time: Stop the previous one
// first. The client keeps its address and MAC address from one link to
// the next.
func (r *Rig) LossyLink(ctx context.Context, imp Impairment) (*LossyLink, error) {
	prog, err := r.programFor(ctx, "lossyfwd")
	if err != nil {
		return nil, err
	}
	l := &LossyLink{r: r, stats: filepath.Join(r.dir, "lossyfwd-stats.json")}
	r.mu.Lock()
	busy := r.link != nil
	if !busy {
		r.link = l
	}
	veth := r.ifaces[Client] != clientTap
	r.mu.Unlock()
	if busy {
		return nil, errors.New("a lossy link is running: Stop it first")
	}
	ok := false
	defer func() {
		if !ok {
			if l.p != nil {
				l.p.stop()
			}
			r.mu.Lock()
			r.link = nil
			r.mu.Unlock()
		}
	}()
	sw, cl := r.NS(Switch), r.NS(Client)
	if veth {
		// Deleting one end of the pair deletes both.
		if err := ipCmd("-n", sw, "link", "del", "sw-client"); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.ifaces[Client] = clientTap
		r.mu.Unlock()
	}
	os.Remove(l.stats)
	args := append([]string{"-a", cl + ":" + clientTap, "-b", switchTap, "-stats", l.stats}, imp.args()...)
	l.p, err = r.start(Switch, "lossyfwd", nil, prog, args...)
	if err != nil {
		return nil, err
	}
	if err := l.p.waitReady(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	addr := r.Addr(Client)
	for _, s := range [][]string{
		{"-n", cl, "link", "set", clientTap, "address", clientMAC},
		{"-n", cl, "link", "set", clientTap, "addrgenmode", "none"},
		{"-n", cl, "addr", "add", addr.String() + "/" + strconv.Itoa(r.Subnet.Bits()), "dev", clientTap},
		{"-n", cl, "link", "set", clientTap, "up"},
		{"-n", sw, "link", "set", switchTap, "addrgenmode", "none"},
		{"-n", sw, "link", "set", switchTap, "master", bridgeName},
		{"-n", sw, "link", "set", switchTap, "up"},
	} {
		if err := ipCmd(s...); err != nil {
			return nil, err
		}
	}
	ok = true
	return l, nil
}

// Stop ends lossyfwd (its TAP devices go with it: the client is cut off
// until the next LossyLink) and returns its counters.
func (l *LossyLink) Stop() (LinkStats, error) {
	var st LinkStats
	l.p.stop()
	l.r.mu.Lock()
	if l.r.link == l {
		l.r.link = nil
	}
	l.r.mu.Unlock()
	// The devices go when lossyfwd's files are closed; wait for that, so
	// that the next link can make them again.
	deadline := time.Now().Add(5 * time.Second)
	for exec.Command("ip", "-n", l.r.NS(Client), "link", "show", clientTap).Run() == nil {
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%s still exists 5s after lossyfwd ended", clientTap)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l.p.err != nil {
		return st, fmt.Errorf("lossyfwd: %v%s", l.p.err, l.p.logTail())
	}
	b, err := os.ReadFile(l.stats)
	if err != nil {
		return st, fmt.Errorf("lossyfwd's counters: %w%s", err, l.p.logTail())
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("lossyfwd's counters %q: %w", b, err)
	}
	return st, nil
}
