// Command lossyfwd is an impaired Ethernet link in userspace, for kernels
// without the netem qdisc: it creates two TAP devices (IFF_TAP|IFF_NO_PI,
// so a read or write is exactly one Ethernet frame), possibly in two
// different network namespaces, and forwards every frame read from one to
// the other, dropping, duplicating, reordering and delaying frames on the
// way as its flags say. TCP on both ends really retransmits.
//
// Usage:
//
//	lossyfwd -a [NETNS:]IFACE -b [NETNS:]IFACE [-drop P] [-dup P]
//	    [-reorder P] [-reorder-window N] [-reorder-max-hold D]
//	    [-delay D] [-seed N] [-stats FILE]
//
// NETNS is a name in /run/netns (as ip netns add makes) or a path to a
// network namespace file; without it the device is made in lossyfwd's own
// namespace. The devices exist while lossyfwd runs: they go away when it
// exits. It configures nothing (no address, no link up): the caller does,
// once lossyfwd has printed "ready" on stdout.
//
// Each direction (a to b, b to a) has its own PRNG, seeded by -seed and the
// direction, drawn three times per frame: the n-th frame of a direction
// meets the same fate in every run. A frame is dropped with probability
// -drop; otherwise it is sent twice in a row with probability -dup, and
// with probability -reorder it is held back (one frame at a time) and sent
// after the next -reorder-window frames of its direction, or after
// -reorder-max-hold when fewer come. Every frame is written -delay after
// its turn, in order.
//
// On SIGTERM or SIGINT it stops taking frames, sends those it holds or
// delays, writes its counters (netnsrig.LinkStats, JSON) to -stats and to
// stderr, and exits 0.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/replaywatch/replaywatch/test/netnsrig"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "lossyfwd: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("lossyfwd", flag.ExitOnError)
	a := fs.String("a", "", "first TAP device: [NETNS:]IFACE")
	b := fs.String("b", "", "second TAP device: [NETNS:]IFACE")
	drop := fs.Float64("drop", 0, "probability that a frame is dropped")
	dup := fs.Float64("dup", 0, "probability that a frame is sent twice")
	reorder := fs.Float64("reorder", 0, "probability that a frame is held back and sent after later ones")
	window := fs.Int("reorder-window", 3, "a held-back frame is sent after this many later frames")
	holdMax := fs.Duration("reorder-max-hold", 50*time.Millisecond, "a held-back frame is sent after this long when fewer frames follow")
	delay := fs.Duration("delay", 0, "delay added to every frame")
	seed := fs.Uint64("seed", 1, "PRNG seed (the same seed, the same fate for the n-th frame of a direction)")
	statsFile := fs.String("stats", "", "file to write the counters to (JSON) on exit")
	fs.Parse(args)
	if *a == "" || *b == "" {
		return errors.New("-a and -b are required")
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"drop", *drop}, {"dup", *dup}, {"reorder", *reorder}} {
		if p.v < 0 || p.v > 1 {
			return fmt.Errorf("-%s %v: want a probability in [0, 1]", p.name, p.v)
		}
	}
	if *window < 1 || *holdMax <= 0 || *delay < 0 {
		return errors.New("-reorder-window must be at least 1, -reorder-max-hold positive, -delay not negative")
	}
	imp := impairment{drop: *drop, duplicate: *dup, reorder: *reorder, window: *window, holdMax: *holdMax, delay: *delay}

	ta, err := openTAP(*a)
	if err != nil {
		return err
	}
	tb, err := openTAP(*b)
	if err != nil {
		return err
	}
	ab := newPipe(imp, *seed, 1, writer(tb))
	ba := newPipe(imp, *seed, 2, writer(ta))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	errc := make(chan error, 2)
	go func() { errc <- forward(ta, *a, ab) }()
	go func() { errc <- forward(tb, *b, ba) }()
	fmt.Printf("ready %s %s\n", *a, *b)

	select {
	case <-sigs:
	case err = <-errc:
	}
	// Every frame taken is written before the counters are: on a clean
	// link, written = frames - dropped + duplicated, exactly.
	ab.drain()
	ba.drain()
	st := netnsrig.LinkStats{AToB: ab.stats(), BToA: ba.stats()}
	js, _ := json.Marshal(st)
	fmt.Fprintf(os.Stderr, "lossyfwd: %s\n", js)
	if *statsFile != "" {
		if werr := os.WriteFile(*statsFile, append(js, '\n'), 0o644); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return err
}

// forward reads frames from src (the device of spec) into p until src
// fails.
func forward(src *os.File, spec string, p *pipe) error {
	buf := make([]byte, 65536) // more than any frame: the MTU is 1500, no offloads
	for {
		n, err := src.Read(buf)
		if err != nil {
			return fmt.Errorf("reading %s: %w", spec, err)
		}
		if n == 0 {
			continue
		}
		p.push(append([]byte(nil), buf[:n]...))
	}
}

// writer writes one frame per call to dst.
func writer(dst *os.File) func([]byte) error {
	return func(frame []byte) error {
		_, err := dst.Write(frame)
		return err
	}
}

// openTAP creates the TAP device of spec ([NETNS:]IFACE). A TUN/TAP file
// belongs to the network namespace of the thread that opened it; for
// another namespace, a thread of our own enters it to open the file and is
// then thrown away (never unlocked: it dies with its goroutine).
func openTAP(spec string) (*os.File, error) {
	ns, name, found := strings.Cut(spec, ":")
	if !found {
		ns, name = "", spec
	}
	if name == "" || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("bad interface name in %q", spec)
	}
	if ns == "" {
		return createTAP(name)
	}
	if !strings.Contains(ns, "/") {
		ns = "/run/netns/" + ns
	}
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		nsf, err := os.Open(ns)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer nsf.Close()
		if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("entering %s: %w", ns, err)}
			return
		}
		f, err := createTAP(name)
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

// createTAP opens /dev/net/tun as a new TAP device name, in the calling
// thread's network namespace. The device is attached (TUNSETIFF) before
// the file is handed to the runtime's poller: a TUN/TAP file without a
// device is not pollable, and os would treat it as a blocking file.
func createTAP(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("/dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			err = fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}
