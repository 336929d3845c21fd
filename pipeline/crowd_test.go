package pipeline

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestCrowdedCaptureFindsTheUnion: every real SDK capture of the suite
// merged into one, as many clients behind one address reaching one server
// (damage.Crowd: one client IP, one server port, one Host per server
// implementation, times shifted to overlap), must give exactly the
// violations of each capture alone: nothing lost, nothing added. Linking a
// new session to the wrong lost one, or keying state by address alone,
// shows here. So must the crowd behind a proxy that sends its own Host,
// from the address its clients reach or from a relay's (which may repeat a
// finding, never add one), and with a NAT copy of every packet
// (damage.ProxyHop, damage.NATCopy).
func TestCrowdedCaptureFindsTheUnion(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	var want []finding
	for _, fx := range fixtures {
		want = append(want, runDamaged(t, 1, fx).violations...)
	}
	for _, stagger := range crowdStaggers {
		path, merged, got := runCrowd(t, captures, stagger)
		if again := runDamaged(t, 2, path); string(again.records) != string(got.records) {
			t.Errorf("stagger %v: output differs between 1 and 2 workers:\n%s", stagger, firstDifference(got.records, again.records))
		}
		lost, added := diffFindings(sortedFindings(want), sortedFindings(got.violations))
		for _, f := range lost {
			t.Errorf("stagger %v: lost in the crowd: %s", stagger, f)
		}
		for _, f := range added {
			t.Errorf("stagger %v: added by the crowd: %s: %s", stagger, f, strings.SplitN(got.explain[f], ". ", 2)[0])
		}
		t.Logf("stagger %v: %d captures, %d packets merged: %d violations, %d expected", stagger, len(captures), len(merged), len(got.violations), len(want))
		// The crowd behind a proxy on the node, or reaching its servers
		// through a Service address: its many identical requests from one
		// address must not hide each other's second hop or copy.
		c := damage.Capture{Packets: merged, LinkType: captures[0].LinkType}
		for _, twice := range []struct {
			what    string
			packets []pcaprec.Packet
			repeats bool // as in TestProxyHopsChangeNothing
		}{
			{"behind a proxy with its own Host", c.ProxyHop(2*time.Millisecond, damage.HopInPod), false},
			{"behind a relay with its own Host", c.ProxyHop(2*time.Millisecond, damage.HopRelay), true},
			{"behind a proxy on the clients' host", c.ProxyHop(time.Millisecond, damage.HopOnClientHost), false},
			{"with a NAT copy", c.NATCopy(5 * time.Microsecond), false},
		} {
			writePackets(t, path, captures[0].LinkType, twice.packets)
			got := runDamaged(t, 1, path)
			lost, added := diffFindings(sortedFindings(want), sortedFindings(got.violations))
			if twice.repeats {
				added, _ = splitRepeats(added, want)
			}
			if len(lost)+len(added) > 0 {
				t.Errorf("stagger %v, %s: lost %v, added %v", stagger, twice.what, lost, added)
			}
		}
	}
}

// crowdStaggers: from all starting at once to one every 200 ms.
var crowdStaggers = []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}

// runCrowd merges captures behind one address (damage.Crowd), each one
// stagger after the last, and analyses the crowd with one worker.
func runCrowd(t *testing.T, captures []damage.Capture, stagger time.Duration) (path string, merged []pcaprec.Packet, got damageRun) {
	t.Helper()
	merged, err := damage.Crowd(captures, stagger)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "crowd.pcap")
	writePackets(t, path, captures[0].LinkType, merged)
	return path, merged, runDamaged(t, 1, path)
}

// TestIdenticalClientsCrowdAddsNothing: the probes' correct traffic of real
// SDKs (testdata/probes) and two captures of one client run with the same
// seed (testdata/identical-clients: identical calls, label for label)
// crowded behind one address, each implementation behind one Host. Clients
// of one application make the very same calls; a new session's own call
// must not be taken for another client's lost session's call re-made.
func TestIdenticalClientsCrowdAddsNothing(t *testing.T) {
	_, probes := readCaptures(t, filepath.Join("testdata", "probes", "*.pcap.gz"))
	_, identical := readCaptures(t, filepath.Join("testdata", "identical-clients", "*.pcap.gz"))
	captures := slices.Concat(probes, identical)
	for _, stagger := range crowdStaggers {
		_, _, got := runCrowd(t, captures, stagger)
		for _, f := range got.violations {
			t.Errorf("stagger %v: %s: %s", stagger, f, strings.SplitN(got.explain[f], ". ", 2)[0])
		}
	}
}

// TestDamagedCrowdNeverAddsAViolation: production's wire is crowded and
// lossy at once. The crowds of TestCrowdedCaptureFindsTheUnion (all at once,
// one every 50 ms), damaged as TestDamageNeverAddsAViolation damages one
// capture (random loss, duplicates and reordering, snap lengths, cut ends,
// each of a sample of its segments lost, late starts at a sample of its
// packets), may lose violations but never add one: there a lost request or
// 404 may be any of many clients'. Recorded on two interfaces that each miss
// segments the other holds, it must give exactly the intact findings. Each
// case runs with one worker and with two, which must print the same
// records. The table it logs (go test -v) is the one in docs/damage.md.
func TestDamagedCrowdNeverAddsAViolation(t *testing.T) {
	_, captures := readFixtureCaptures(t)
	seeds, sample := 2, 100
	if testing.Short() {
		seeds, sample = 1, 10
	}
	dir := t.TempDir()
	lt := captures[0].LinkType
	table := damageTable{}
	for _, stagger := range []time.Duration{0, 50 * time.Millisecond} {
		merged, err := damage.Crowd(captures, stagger)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("crowd, stagger %v", stagger)
		path := filepath.Join(dir, "crowd.pcap")
		writePackets(t, path, lt, merged)
		intact := runDamaged(t, 1, path)
		if intact.err != nil || len(intact.violations) == 0 {
			t.Fatalf("%s, intact: %d violations, error %v", name, len(intact.violations), intact.err)
		}
		crowd := damage.Capture{Packets: merged, LinkType: lt}
		for i, v := range crowd.Variants(seeds, sample) {
			p := filepath.Join(dir, fmt.Sprintf("case-%d.pcap", i))
			writePackets(t, p, lt, v.Packets)
			got, lost := checkDamaged(t, name+" "+v.Name, intact, []int{2}, p)
			if got.err == nil {
				table.add(name, v.Name, intact, got, lost)
			}
		}
		// Two interfaces, each missing segments the other holds: merged,
		// nothing is lost, so the findings must be the intact ones.
		a, b := crowd.SplitLoss(0.1, 1)
		pa, pb := filepath.Join(dir, "iface-a.pcap"), filepath.Join(dir, "iface-b.pcap")
		writePackets(t, pa, lt, a)
		writePackets(t, pb, layers.LinkTypeLinuxSLL, damage.AsLinuxSLL(b))
		vname := "two interfaces, each missing 5%"
		got, lost := checkDamaged(t, name+" "+vname, intact, []int{2}, pa, pb)
		if got.err == nil {
			table.add(name, vname, intact, got, lost)
		}
		if len(lost) > 0 {
			t.Errorf("%s %s: lost %v", name, vname, lost)
		}
	}
	t.Log(table)
}

// readFixtureCaptures reads the suite's SDK captures and their paths, each
// with its server implementation for damage.Crowd: its name's family (go,
// mcpgo, ts).
func readFixtureCaptures(t *testing.T) ([]string, []damage.Capture) {
	t.Helper()
	return readCaptures(t, filepath.Join("testdata", "fixtures", "*.pcap"))
}

// readCaptures reads the capture files pattern matches (gzip-compressed or
// not), each with the server implementation its name begins with.
func readCaptures(t *testing.T, pattern string) ([]string, []damage.Capture) {
	t.Helper()
	files, _ := filepath.Glob(pattern)
	if len(files) == 0 {
		t.Fatalf("no captures match %s", pattern)
	}
	var captures []damage.Capture
	for _, f := range files {
		pkts, lt, err := pcaprec.ReadPackets(f)
		if err != nil {
			t.Fatal(err)
		}
		family, _, _ := strings.Cut(filepath.Base(f), "-")
		captures = append(captures, damage.Capture{Packets: pkts, LinkType: lt, Implementation: family})
	}
	return files, captures
}
