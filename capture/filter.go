package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/bpf"
)

// Classic BPF as Linux runs it on packet sockets. A socket filter sees the
// packet from the link-layer header of the interface it was captured on
// (Ethernet, with zero addresses on loopback; none at all on a tunnel), so
// the port filter reads nothing at a fixed offset: it asks the kernel for the
// packet's protocol (skb->protocol, the EtherType with any VLAN tag taken
// off) and loads the IP and TCP headers relative to the network header,
// wherever the link layer put it.
const (
	// skfNetOff is SKF_NET_OFF: an absolute load at skfNetOff+k reads byte
	// k of the network header.
	skfNetOff = 0xfff00000 // -0x100000 as a uint32

	arphrdEther    = 1   // ARPHRD_ETHER
	arphrdLoopback = 772 // ARPHRD_LOOPBACK
	packetOutgoing = 4   // PACKET_OUTGOING, the SKF_AD_PKTTYPE of a packet the host sent
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86dd
	etherTypeVLAN  = 0x8100 // a tag still in the packet (one the driver did not take off)
	etherTypeQinQ  = 0x88a8
	ipProtoTCP     = 6

	// maxFilterInstructions is BPF_MAXINSNS, the kernel's limit.
	maxFilterInstructions = 4096
	// tcpdumpTimeout bounds how long compiling a Filter may take.
	tcpdumpTimeout = 10 * time.Second
)

// tcpdumpCommand is what compiles Filter expressions; tests replace it.
var tcpdumpCommand = "tcpdump"

// program is classic BPF under construction, with jumps to labels.
type program struct {
	ins    []bpf.Instruction
	labels map[string]int
	jumps  []labelJump
}

type labelJump struct {
	at      int
	cond    bpf.JumpTest
	val     uint32
	yes, no string // "" is the next instruction
	always  bool
}

func (p *program) emit(ins ...bpf.Instruction) { p.ins = append(p.ins, ins...) }

func (p *program) label(name string) {
	if p.labels == nil {
		p.labels = map[string]int{}
	}
	p.labels[name] = len(p.ins)
}

// jumpIf jumps to yes when A cond val holds, to no otherwise.
func (p *program) jumpIf(cond bpf.JumpTest, val uint32, yes, no string) {
	p.jumps = append(p.jumps, labelJump{at: len(p.ins), cond: cond, val: val, yes: yes, no: no})
	p.ins = append(p.ins, nil)
}

// jump jumps to the label.
func (p *program) jump(to string) {
	p.jumps = append(p.jumps, labelJump{at: len(p.ins), yes: to, always: true})
	p.ins = append(p.ins, nil)
}

func (p *program) assemble() ([]bpf.RawInstruction, error) {
	skip := func(from int, to string) (int, error) {
		if to == "" {
			return 0, nil
		}
		at, ok := p.labels[to]
		if !ok {
			return 0, fmt.Errorf("no label %q", to)
		}
		return at - from - 1, nil
	}
	for _, j := range p.jumps {
		yes, err := skip(j.at, j.yes)
		if err != nil {
			return nil, err
		}
		no, err := skip(j.at, j.no)
		if err != nil {
			return nil, err
		}
		if j.always {
			if yes < 0 {
				return nil, fmt.Errorf("jump from %d backwards", j.at)
			}
			p.ins[j.at] = bpf.Jump{Skip: uint32(yes)}
			continue
		}
		if yes < 0 || yes > 255 || no < 0 || no > 255 {
			return nil, fmt.Errorf("jump from %d out of range (%d, %d)", j.at, yes, no)
		}
		p.ins[j.at] = bpf.JumpIf{Cond: j.cond, Val: j.val, SkipTrue: uint8(yes), SkipFalse: uint8(no)}
	}
	if len(p.ins) > maxFilterInstructions {
		return nil, fmt.Errorf("%d instructions, more than the kernel's %d", len(p.ins), maxFilterInstructions)
	}
	return bpf.Assemble(p.ins)
}

// guard starts every Live filter. Loopback hands packet sockets each packet
// twice, as sent (PACKET_OUTGOING) and as received; the guard drops the sent
// copy (libpcap does the same). ethernetOnly also drops packets from
// interfaces without an Ethernet header, which a filter compiled for
// Ethernet would misread. The guard falls through to the label "filter",
// which the caller emits next.
func (p *program) guard(ethernetOnly bool) {
	p.emit(bpf.LoadExtension{Num: bpf.ExtLinkLayerType})
	p.jumpIf(bpf.JumpEqual, arphrdLoopback, "", "link")
	p.emit(bpf.LoadExtension{Num: bpf.ExtType})
	p.jumpIf(bpf.JumpEqual, packetOutgoing, "drop", "filter")
	p.label("link")
	if ethernetOnly {
		p.jumpIf(bpf.JumpEqual, arphrdEther, "filter", "")
		p.jumpIf(bpf.JumpEqual, arphrdLoopback, "filter", "drop")
	} else {
		p.jump("filter")
	}
	p.label("drop")
	p.emit(bpf.RetConstant{Val: 0})
	p.label("filter")
}

// portFilter compiles "TCP from or to one of ports, over IPv4 or IPv6" for
// a packet socket, any link layer; an empty ports accepts every packet.
// Accepted packets are cut to snapLen.
func portFilter(ports []uint16, snapLen int) ([]bpf.RawInstruction, error) {
	var p program
	p.guard(false)
	if len(ports) == 0 {
		p.emit(bpf.RetConstant{Val: uint32(snapLen)})
		return p.assemble()
	}
	ports = slices.Clone(ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)

	p.emit(bpf.LoadExtension{Num: bpf.ExtProto})
	p.jumpIf(bpf.JumpEqual, etherTypeIPv4, "ipv4", "")
	p.jumpIf(bpf.JumpEqual, etherTypeIPv6, "ipv6", "")
	p.jumpIf(bpf.JumpEqual, etherTypeVLAN, "version", "")
	p.jumpIf(bpf.JumpEqual, etherTypeQinQ, "version", "reject")
	// A VLAN tag left in the packet: the network header is past it, and
	// its version says which IP it is.
	p.label("version")
	p.emit(bpf.LoadAbsolute{Off: skfNetOff, Size: 1}, bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4})
	p.jumpIf(bpf.JumpEqual, 4, "ipv4", "")
	p.jumpIf(bpf.JumpEqual, 6, "ipv6", "reject")

	// IPv4: TCP, not a later fragment (those carry no TCP header); X is
	// the header length.
	p.label("ipv4")
	p.emit(bpf.LoadAbsolute{Off: skfNetOff + 9, Size: 1})
	p.jumpIf(bpf.JumpEqual, ipProtoTCP, "", "reject")
	p.emit(bpf.LoadAbsolute{Off: skfNetOff + 6, Size: 2})
	p.jumpIf(bpf.JumpBitsSet, 0x1fff, "reject", "")
	p.emit(bpf.LoadAbsolute{Off: skfNetOff, Size: 1},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x0f},
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2},
		bpf.TAX{})
	p.jump("ports")

	// IPv6: TCP right after the fixed header (as tcpdump's "tcp port"
	// has it, extension headers are not followed).
	p.label("ipv6")
	p.emit(bpf.LoadAbsolute{Off: skfNetOff + 6, Size: 1})
	p.jumpIf(bpf.JumpEqual, ipProtoTCP, "", "reject")
	p.emit(bpf.LoadConstant{Dst: bpf.RegX, Val: 40})

	// Source port, then destination port, against each port.
	p.label("ports")
	for i, off := range []uint32{0, 2} {
		p.emit(bpf.LoadIndirect{Off: skfNetOff + off, Size: 2})
		for j, port := range ports {
			no := ""
			if i == 1 && j == len(ports)-1 {
				no = "reject"
			}
			p.jumpIf(bpf.JumpEqual, uint32(port), "accept", no)
		}
	}
	p.label("reject")
	p.emit(bpf.RetConstant{Val: 0})
	p.label("accept")
	p.emit(bpf.RetConstant{Val: uint32(snapLen)})
	return p.assemble()
}

// expressionFilter compiles a tcpdump filter expression for Ethernet with
// `tcpdump -ddd -y EN10MB`, behind the guard (which also keeps packets from
// other link layers out). The program's accepting returns are cut to
// snapLen.
func expressionFilter(expr string, snapLen int) ([]bpf.RawInstruction, error) {
	compiled, err := runTcpdump(expr)
	if err != nil {
		return nil, err
	}
	var p program
	p.guard(true)
	for _, ins := range compiled {
		if ins.Op == bpfRetK && ins.K > uint32(snapLen) {
			ins.K = uint32(snapLen)
		}
		p.emit(ins)
	}
	prog, err := p.assemble()
	if err != nil {
		return nil, fmt.Errorf("capture: Filter %q: %v", expr, err)
	}
	return prog, nil
}

// bpfRetK is BPF_RET|BPF_K: return a constant.
const bpfRetK = 0x06

// runTcpdump runs tcpdump to compile expr and parses its -ddd output: a
// count, then one instruction a line as four decimal numbers.
func runTcpdump(expr string) ([]bpf.RawInstruction, error) {
	path, err := exec.LookPath(tcpdumpCommand)
	if err != nil && !strings.Contains(tcpdumpCommand, "/") {
		// Debian has it in /usr/bin, older releases in /usr/sbin, which
		// a user's PATH may lack.
		for _, dir := range []string{"/usr/sbin/", "/usr/bin/", "/sbin/"} {
			if p, e := exec.LookPath(dir + tcpdumpCommand); e == nil {
				path, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("capture: Filter is compiled by tcpdump, which is not installed (apt-get install tcpdump), or use Ports: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tcpdumpTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "-ddd", "-y", "EN10MB", "--", expr)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("capture: Filter %q: %s", expr, msg)
	}
	prog, err := parseTcpdump(stdout.String())
	if err != nil {
		return nil, fmt.Errorf("capture: Filter %q: reading tcpdump -ddd output: %v", expr, err)
	}
	return prog, nil
}

func parseTcpdump(out string) ([]bpf.RawInstruction, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	n, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		return nil, fmt.Errorf("no instruction count: %q", lines[0])
	}
	if n < 1 || n != len(lines)-1 {
		return nil, fmt.Errorf("%d instructions announced, %d given", n, len(lines)-1)
	}
	prog := make([]bpf.RawInstruction, 0, n)
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("bad instruction %q", line)
		}
		var v [4]uint64
		for i, bits := range []int{16, 8, 8, 32} {
			if v[i], err = strconv.ParseUint(f[i], 10, bits); err != nil {
				return nil, fmt.Errorf("bad instruction %q", line)
			}
		}
		prog = append(prog, bpf.RawInstruction{Op: uint16(v[0]), Jt: uint8(v[1]), Jf: uint8(v[2]), K: uint32(v[3])})
	}
	if last := prog[len(prog)-1]; last.Op&0x07 != 0x06 { // BPF_RET class
		return nil, errors.New("the program does not end with a return")
	}
	return prog, nil
}

// liveFilter is the program a run attaches to every socket.
func liveFilter(cfg LiveConfig) ([]bpf.RawInstruction, error) {
	if cfg.Filter != "" {
		return expressionFilter(cfg.Filter, cfg.SnapLen)
	}
	return portFilter(cfg.Ports, cfg.SnapLen)
}
