package capture

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/testenv"
	"golang.org/x/net/bpf"
)

// These tests need neither root nor Linux.

// requireTcpdump skips (fails in CI: testenv.InCI) without tcpdump.
func requireTcpdump(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err == nil {
		return
	}
	if testenv.InCI() {
		t.Fatal("tcpdump is not installed (apt-get install tcpdump); CI is set, so this is a failure")
	}
	t.Skip("tcpdump is not installed (apt-get install tcpdump)")
}

func TestLiveConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  LiveConfig
		want string // "" for valid
	}{
		{LiveConfig{}, ""},
		{LiveConfig{Interfaces: []string{"lo"}, Ports: []uint16{80, 8080}}, ""},
		{LiveConfig{Interfaces: []string{"no-such-if0"}}, `unknown interface "no-such-if0"`},
		{LiveConfig{Interfaces: []string{"lo", "lo"}}, `interface "lo" given twice`},
		{LiveConfig{Interfaces: []string{"any", "lo"}}, `cannot be given with others`},
		{LiveConfig{Interfaces: []string{""}}, "empty interface name"},
		{LiveConfig{Promiscuous: true}, "Promiscuous needs named interfaces"},
		{LiveConfig{Ports: []uint16{80, 0}}, "port 0"},
		{LiveConfig{Ports: make([]uint16, MaxPorts+1)}, "more than MaxPorts"},
		{LiveConfig{Ports: []uint16{80}, Filter: "tcp port 80"}, "set Ports or Filter, not both"},
		{LiveConfig{SnapLen: MaxPacketBytes + 1}, "SnapLen"},
		{LiveConfig{TickInterval: -time.Second}, "TickInterval"},
		{LiveConfig{FrameSize: 100}, "FrameSize 100"},
		{LiveConfig{BlockSize: 1<<20 + 16}, "not a multiple of the page size"},
		{LiveConfig{BlockSize: 64 << 10}, "cannot hold a packet of SnapLen 262144"},
		{LiveConfig{BlockSize: 64 << 10, SnapLen: 9000}, ""},
		{LiveConfig{NumBlocks: 2048}, "over MaxRingBytes"},
		{LiveConfig{NumBlocks: -1}, "must not be negative"},
		{LiveConfig{Config: Config{Workers: -1}}, "Workers must not be negative"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	d := LiveConfig{}.WithDefaults()
	if d.Interfaces[0] != AnyInterface || d.BlockSize*d.NumBlocks != 64<<20 || d.SnapLen != DefaultSnapLen ||
		d.TickInterval != DefaultTickInterval || d.Workers < 1 {
		t.Errorf("defaults: %+v", d)
	}
}

// TestPortFilterAssembles: the largest port set still fits the filter's
// jumps, and every port is compared as source and as destination.
func TestPortFilterAssembles(t *testing.T) {
	ports := make([]uint16, MaxPorts)
	for i := range ports {
		ports[i] = uint16(1000 + i)
	}
	prog, err := portFilter(ports, 1500)
	if err != nil {
		t.Fatal(err)
	}
	var compares int
	for _, raw := range prog {
		if j, ok := raw.Disassemble().(bpf.JumpIf); ok && j.Val >= 1000 && j.Val < 1000+MaxPorts {
			compares++
		}
	}
	if compares != 2*MaxPorts {
		t.Errorf("%d port comparisons, want %d", compares, 2*MaxPorts)
	}
	if last := prog[len(prog)-1].Disassemble(); last != (bpf.RetConstant{Val: 1500}) {
		t.Errorf("accepting return %v, want the snap length", last)
	}
	// Duplicate ports are compared once.
	if p2, _ := portFilter([]uint16{80, 80, 443}, 1500); len(p2) >= len(prog) {
		t.Errorf("duplicates not removed: %d instructions", len(p2))
	}
	if _, err := portFilter(nil, 1500); err != nil {
		t.Fatal(err)
	}
}

func TestParseTcpdump(t *testing.T) {
	prog, err := parseTcpdump("3\n40 0 0 12\n21 0 1 2048\n6 0 0 262144\n")
	if err != nil || len(prog) != 3 || prog[1] != (bpf.RawInstruction{Op: 21, Jt: 0, Jf: 1, K: 2048}) {
		t.Fatalf("%v %v", prog, err)
	}
	for _, bad := range []string{"", "x\n", "2\n6 0 0 0\n", "1\n6 0 0\n", "1\n6 0 300 0\n", "1\n40 0 0 12\n"} {
		if _, err := parseTcpdump(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestExpressionFilter(t *testing.T) {
	t.Run("no tcpdump", func(t *testing.T) {
		old := tcpdumpCommand
		tcpdumpCommand = "/nonexistent/tcpdump"
		defer func() { tcpdumpCommand = old }()
		_, err := expressionFilter("tcp port 80", 1500)
		if err == nil || !strings.Contains(err.Error(), "tcpdump, which is not installed") {
			t.Fatalf("got %v", err)
		}
	})
	if _, err := exec.LookPath("tcpdump"); err != nil {
		requireTcpdump(t)
	}
	prog, err := expressionFilter("tcp port 80", 1500)
	if err != nil {
		t.Fatal(err)
	}
	var rets []uint32
	for _, raw := range prog {
		if r, ok := raw.Disassemble().(bpf.RetConstant); ok {
			rets = append(rets, r.Val)
		}
	}
	// The guard's drop, then tcpdump's accept (cut to the snap length)
	// and reject.
	if len(rets) != 3 || rets[0] != 0 || rets[1] != 1500 || rets[2] != 0 {
		t.Errorf("returns %v", rets)
	}
	_, err = expressionFilter("tcp port eighty", 1500)
	if err == nil || !strings.Contains(err.Error(), `Filter "tcp port eighty"`) || !strings.Contains(err.Error(), "tcpdump") {
		t.Errorf("bad expression: %v", err)
	}
}

func TestDupWindow(t *testing.T) {
	d := newDupWindow(4)
	key := func(seq uint32) dupKey { return dupKey{seq: seq} }
	for seq := range uint32(4) {
		if d.check(key(seq)) {
			t.Fatalf("%d: a duplicate at first sight", seq)
		}
	}
	if !d.check(key(0)) || !d.check(key(3)) {
		t.Fatal("a copy in the window was not recognised")
	}
	d.check(key(4)) // pushes 0 out
	if d.check(key(0)) {
		t.Error("0 is still remembered after the window moved past it")
	}
	if len(d.index) != 4 || d.dropped != 2 {
		t.Errorf("%d keys, %d dropped", len(d.index), d.dropped)
	}
}

// TestDecoderIPID: both decoding paths give the IPv4 identification Live's
// duplicate check uses.
func TestDecoderIPID(t *testing.T) {
	ip := ipPacket(t, seg{src: client, dst: server, seq: 1, flags: "PA", payload: "x"})
	ip[4], ip[5] = 0x12, 0x34
	for _, frame := range [][]byte{ethernet()(ip), ethernet(0x8100)(ip)} {
		d := newPacketDecoder()
		if _, v := d.decode(frame, 1); v != verdictTCP || d.ipID != 0x1234 {
			t.Errorf("%x: verdict %v, IP ID %#x", frame, v, d.ipID)
		}
	}
}
