package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// runSend sends a capture's frames out of an interface, as tcpreplay -K
// does, but many frames per system call (sendmmsg on a packet socket):
// tcpreplay sends one per call, and on a two-core machine its own cost caps
// what the agent on the other core can be shown to sustain. The frames are
// loaded into memory first; the capture's timing is not kept (full speed,
// or paced to -mbps). It prints tcpreplay's summary lines, which
// bench-agent.sh reads.
func runSend(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	iface := fs.String("i", "", "interface to send on")
	mbps := fs.Float64("mbps", 0, "pace to this many Mbit/s of frames (0: full speed); checked after each batch")
	batch := fs.Int("batch", 64, "frames per sendmmsg call")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *iface == "" || fs.NArg() != 1 || *batch < 1 {
		return errors.New("usage: agentbench send -i IFACE [-mbps N] [-batch N] FILE.pcap")
	}
	frames, total, err := loadFrames(fs.Arg(0))
	if err != nil {
		return err
	}
	ifi, err := net.InterfaceByName(*iface)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0) // protocol 0: send only, receive nothing
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index}); err != nil {
		return fmt.Errorf("bind to %s: %w", *iface, err)
	}
	// The frames leave as they are: no qdisc (a veth has none to speak of).
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)

	hdrs := make([]unix.Mmsghdr, *batch)
	iovs := make([]unix.Iovec, *batch)
	var failed int
	start := time.Now()
	sentBytes := 0
	for off := 0; off < len(frames); {
		n := min(*batch, len(frames)-off)
		for i := range n {
			f := frames[off+i]
			iovs[i].Base = &f[0]
			iovs[i].SetLen(len(f))
			hdrs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Iov: &iovs[i], Iovlen: 1}}
		}
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(n), 0, 0, 0)
		switch {
		case errno == unix.EINTR || errno == unix.EAGAIN || errno == unix.ENOBUFS:
			continue
		case errno != 0:
			// The first frame of the batch was refused (too large for
			// the interface, say): count it and go on with the rest.
			failed++
			sentBytes += len(frames[off])
			off++
			continue
		}
		for i := range int(r) {
			sentBytes += len(frames[off+i])
		}
		off += int(r)
		if *mbps > 0 {
			// Wait until the bytes sent so far are due at the asked rate.
			due := start.Add(time.Duration(float64(sentBytes*8) / (*mbps * 1e6) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "Actual: %d packets (%d bytes) sent in %.2f seconds\n", len(frames)-failed, total, secs)
	fmt.Fprintf(stdout, "Rated: %.1f Bps, %.2f Mbps, %.2f pps\n", float64(total)/secs, float64(total)*8/secs/1e6, float64(len(frames)-failed)/secs)
	fmt.Fprintf(stdout, "\tFailed packets:        %d\n", failed)
	return nil
}

// loadFrames reads every frame of a pcap file into memory.
func loadFrames(path string) ([][]byte, int, error) {
	pkts, _, err := pcaprec.ReadPackets(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	frames := make([][]byte, 0, len(pkts))
	total := 0
	for _, p := range pkts {
		if len(p.Data) > 0 {
			frames = append(frames, p.Data)
			total += len(p.Data)
		}
	}
	if len(frames) == 0 {
		return nil, 0, fmt.Errorf("%s: no frames", path)
	}
	return frames, total, nil
}
