package capture

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/gopacket/gopacket/layers"
)

// Live capture: its defaults and bounds. See README.md ("Live capture").
const (
	// AnyInterface captures on every interface of the network namespace,
	// including those that appear while the capture runs.
	AnyInterface = "any"

	// DefaultFrameSize, DefaultBlockSize and DefaultNumBlocks size the
	// TPACKET_V3 ring of each socket (one per worker and interface): the
	// kernel writes packets back to back into blocks of BlockSize bytes,
	// NumBlocks of them, so a socket's ring takes BlockSize × NumBlocks
	// bytes (FrameSize × BlockSize/FrameSize frames × NumBlocks): 64 MiB
	// by default, and a run Workers × interfaces times that. FrameSize only
	// sets how the kernel counts frames; it does not bound a packet, the
	// block does.
	DefaultFrameSize = 4096
	DefaultBlockSize = 1 << 20
	DefaultNumBlocks = 64
	// MaxRingBytes bounds BlockSize × NumBlocks, the ring of one socket.
	MaxRingBytes = 1 << 30

	// DefaultSnapLen is how much of each packet is captured: all of the
	// largest packet accepted (a 64 KiB GSO segment on loopback fits).
	DefaultSnapLen = MaxPacketBytes
	// DefaultTickInterval is how often each worker tells its StreamFactory
	// the time its readers have reached (the wall clock, less a margin,
	// when they are idle) when no packet does, so that idle connections are
	// flushed and downstream timeouts advance on a quiet network.
	DefaultTickInterval = time.Second
	// MaxPorts bounds LiveConfig.Ports: the compiled filter compares each
	// port in turn, and its jumps reach 255 instructions at most.
	MaxPorts = 64

	// minBlockOverhead is what a block needs besides a packet: the block
	// header, the packet's header and link-layer address, alignment.
	minBlockOverhead = 256
)

// LiveConfig controls a live capture. The zero value of a field means its
// default.
type LiveConfig struct {
	// Config holds the workers and the reassembly limits, as for
	// ReadFiles (Progress is not used). Each worker has one socket per
	// interface; the kernel spreads packets over them by flow hash.
	Config

	// Interfaces are the interface names to capture on, or just "any"
	// (AnyInterface). Empty means "any".
	Interfaces []string
	// Ports, when set, captures only TCP segments from or to one of these
	// ports (IPv4 and IPv6), with a filter compiled by this package.
	Ports []uint16
	// Filter, when set, is a tcpdump filter expression, compiled by running
	// tcpdump (see README.md). Ports and Filter exclude each other.
	Filter string

	// SnapLen is how many bytes of each packet are captured; a longer
	// packet is cut, and reassembly reports the lost bytes as a gap.
	SnapLen int
	// FrameSize, BlockSize and NumBlocks size each socket's ring (see
	// DefaultBlockSize). BlockSize must be a multiple of the page size and
	// of FrameSize, and hold a packet of SnapLen bytes.
	FrameSize int
	BlockSize int
	NumBlocks int
	// Promiscuous puts the named interfaces in promiscuous mode while the
	// capture runs (not with "any").
	Promiscuous bool
	// TickInterval is how often workers Tick their StreamFactory with the
	// time their readers have reached (DefaultTickInterval).
	TickInterval time.Duration

	// traceReader (tests only) is called by each socket reader with the
	// worker that socket belongs to and every TCP segment it read.
	traceReader func(worker, iface int, key flowKey, fromLo bool)
	// missReader (tests only), when it returns true, makes a socket
	// reader drop a TCP segment as if that interface had never seen it.
	missReader func(iface int, tcp *layers.TCP) bool
	// holdReader (tests only) is called by each socket reader before it
	// reads the next packet; a reader is held while it blocks.
	holdReader func(iface int)
}

// WithDefaults returns the config a run really uses: zero fields replaced by
// their defaults (Interfaces by "any"), Workers capped at MaxWorkers.
// newFactory(i) is called for i in [0, WithDefaults().Workers).
func (c LiveConfig) WithDefaults() LiveConfig {
	if c.LossProofDelay == 0 && len(c.Interfaces) > 1 {
		c.LossProofDelay = LiveMultiInterfaceLossProofDelay
	}
	c.Config = c.Config.WithDefaults()
	if len(c.Interfaces) == 0 {
		c.Interfaces = []string{AnyInterface}
	}
	if c.SnapLen == 0 {
		c.SnapLen = DefaultSnapLen
	}
	if c.FrameSize == 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.NumBlocks == 0 {
		c.NumBlocks = DefaultNumBlocks
	}
	if c.TickInterval == 0 {
		c.TickInterval = DefaultTickInterval
	}
	return c
}

// Validate reports what would make Live fail before it opens anything: an
// unknown or repeated interface, "any" with other names, a bad port, both
// Ports and Filter, a ring the kernel would refuse or one over MaxRingBytes.
func (c LiveConfig) Validate() error {
	errs := []error{c.Config.Validate()}
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("capture: "+format, args...))
	}
	ifaces := c.Interfaces
	if len(ifaces) == 0 {
		ifaces = []string{AnyInterface}
	}
	seen := map[string]bool{}
	for _, name := range ifaces {
		switch {
		case name == "":
			bad("empty interface name")
		case seen[name]:
			bad("interface %q given twice", name)
		case name == AnyInterface:
			if len(ifaces) > 1 {
				bad("interface %q captures every interface, so it cannot be given with others", AnyInterface)
			}
			if c.Promiscuous {
				bad("Promiscuous needs named interfaces, not %q", AnyInterface)
			}
		default:
			if _, err := net.InterfaceByName(name); err != nil {
				bad("unknown interface %q", name)
			}
		}
		seen[name] = true
	}
	if len(c.Ports) > 0 && c.Filter != "" {
		bad("set Ports or Filter, not both (a Filter can say \"tcp port 80 or tcp port 8080\")")
	}
	if len(c.Ports) > MaxPorts {
		bad("%d ports, more than MaxPorts (%d); use a Filter", len(c.Ports), MaxPorts)
	}
	for _, p := range c.Ports {
		if p == 0 {
			bad("port 0 in Ports")
		}
	}
	if c.SnapLen < 0 || c.SnapLen > MaxPacketBytes {
		bad("SnapLen %d is not in [1, %d]", c.SnapLen, MaxPacketBytes)
	}
	if c.TickInterval < 0 {
		bad("TickInterval must not be negative (got %s)", c.TickInterval)
	}
	if c.FrameSize < 0 || c.BlockSize < 0 || c.NumBlocks < 0 {
		bad("FrameSize, BlockSize and NumBlocks must not be negative")
	} else {
		d := c.WithDefaults()
		page := os.Getpagesize()
		switch {
		case d.FrameSize < 128 || d.FrameSize%16 != 0:
			bad("FrameSize %d is not a multiple of 16 from 128", d.FrameSize)
		case d.BlockSize%page != 0 || d.BlockSize%d.FrameSize != 0:
			bad("BlockSize %d is not a multiple of the page size (%d) and of FrameSize (%d)", d.BlockSize, page, d.FrameSize)
		case d.SnapLen > 0 && d.BlockSize < d.SnapLen+minBlockOverhead:
			bad("BlockSize %d cannot hold a packet of SnapLen %d (it needs %d bytes more)", d.BlockSize, d.SnapLen, minBlockOverhead)
		case int64(d.BlockSize)*int64(d.NumBlocks) > MaxRingBytes:
			bad("a ring of BlockSize × NumBlocks = %d bytes is over MaxRingBytes (%d)", int64(d.BlockSize)*int64(d.NumBlocks), MaxRingBytes)
		}
	}
	return errors.Join(errs...)
}

// KernelStats are the kernel's counters for packet sockets
// (PACKET_STATISTICS), read on a timer, by Snapshot and at the end.
type KernelStats struct {
	// Packets is how many packets the socket's filter accepted, those
	// dropped included.
	Packets uint64
	// Drops is how many of them were lost because the ring was full: the
	// capture did not keep up.
	Drops uint64
	// QueueFreezes is how many times the ring filled up (TPACKET_V3's
	// freeze_q_cnt).
	QueueFreezes uint64
}

func (k *KernelStats) add(o KernelStats) {
	k.Packets += o.Packets
	k.Drops += o.Drops
	k.QueueFreezes += o.QueueFreezes
}

// SocketStats are the kernel's counters of one socket: one worker's share of
// one interface.
type SocketStats struct {
	Interface string
	Worker    int
	KernelStats
}

// LiveStats counts what a live capture read and what the kernel dropped.
type LiveStats struct {
	// Stats counts the packets read from the rings and what reassembly made
	// of them, as ReadFiles counts a file's (Files and the file damage
	// counters stay 0). Packets counts each copy of a packet seen twice.
	Stats
	// Duplicates is how many TCP segments were dropped before reassembly as
	// copies of one already handed to it (seen on two interfaces).
	Duplicates uint64
	// BeforeStart is how many packets the rings held from before the
	// filters were attached; they are dropped unread.
	BeforeStart uint64
	// OpenConnections is how many TCP connections the workers follow now.
	OpenConnections int
	// Kernel sums Sockets.
	Kernel KernelStats
	// Sockets has the kernel's counters per worker and interface.
	Sockets []SocketStats
}
