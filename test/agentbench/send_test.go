package main

import (
	"bytes"
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/replaywatch/replaywatch/test/netnsrig"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestSend: agentbench send puts every frame of a capture on the wire once,
// in order and unchanged: tcpdump on the far end of the client's veth (the
// switch's port) sees exactly the fixture's frames.
func TestSend(t *testing.T) {
	r := netnsrig.Setup(t)
	tcpdump := netnsrig.RequireTool(t, "tcpdump", "tcpdump")
	dir := t.TempDir()
	bin := filepath.Join(dir, "agentbench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building agentbench: %v\n%s", err, out)
	}
	fixture := "../../pipeline/testdata/fixtures/go-correct-resume.pcap"
	want, _, err := pcaprec.ReadPackets(fixture)
	if err != nil {
		t.Fatal(err)
	}
	pcap := filepath.Join(dir, "wire.pcap")
	capture, err := r.StartTcpdump(tcpdump, netnsrig.Switch, "sw-client", pcap)
	if err != nil {
		t.Fatal(err)
	}
	// One frame at a time, paced: tcpdump's ring (in immediate mode, a few
	// snaplen-sized slots) would drop a burst.
	out, sendErr := r.Exec(netnsrig.Client, bin, "send", "-i", r.ClientIface(), "-batch", "1", "-mbps", "2", fixture).CombinedOutput()
	if _, err := capture.Stop(); err != nil {
		t.Fatal(err)
	}
	if sendErr != nil {
		t.Fatalf("agentbench send: %v\n%s", sendErr, out)
	}
	if !bytes.Contains(out, []byte("Failed packets:        0")) {
		t.Errorf("agentbench send's summary:\n%s", out)
	}
	got, _, err := pcaprec.ReadPackets(pcap)
	if err != nil {
		t.Fatal(err)
	}
	// The namespace's own frames (IPv6 neighbour discovery and MLD as an
	// interface comes up) may cross the port too: the fixture's are TCP.
	got = slices.DeleteFunc(got, func(p pcaprec.Packet) bool { return !tcpOverEthernet(p.Data) })
	if len(got) != len(want) {
		t.Fatalf("%d frames on the wire, %d in %s", len(got), len(want), fixture)
	}
	for i := range want {
		if !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("frame %d differs on the wire", i)
		}
	}
}

// tcpOverEthernet says whether an Ethernet frame carries TCP over IPv4 or
// IPv6 (without extension headers).
func tcpOverEthernet(frame []byte) bool {
	if len(frame) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(frame[12:14]) {
	case 0x0800:
		return len(frame) > 14+9 && frame[14+9] == 6
	case 0x86dd:
		return len(frame) > 14+6 && frame[14+6] == 6
	}
	return false
}

func TestSendUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"-i", "lo"}, {"x.pcap"}, {"-i", "lo", "-batch", "0", "x.pcap"}, {"-i", "no-such-interface-0", "../../pipeline/testdata/fixtures/go-correct-resume.pcap"}} {
		if err := runSend(args, &bytes.Buffer{}); err == nil {
			t.Errorf("runSend(%q): no error", args)
		}
	}
}
