package pipeline

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/damage"
)

// TestSpreadOverNodesAddsNothing: a load balancer without session affinity
// (servers sharing their session and event stores) spreads each session's
// connections over servers on several nodes, and each node's agent sees
// only the connections sent to its own. Nothing on the wire says a
// connection went elsewhere. Every fixture is judged with each of its
// connections gone in turn (at most maxExhaustiveCases of them, evenly
// spaced), and spread at random over two and three nodes (each node's part
// judged alone, with one worker and with two, which must print the same
// records); so are the crowd of every fixture and the probe captures
// (testdata/probes: random correct traffic, many streams cut and resumed).
// Each may lose violations and never add one. Before, a resume of a stream
// another node saw was unknown_last_event_id_accepted (high), and progress
// that another node's request restarted was progress_replay.
func TestSpreadOverNodesAddsNothing(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	seeds := uint64(6)
	if testing.Short() {
		seeds = 2
	}
	dir := t.TempDir()
	table := damageTable{}
	// check judges one node's capture (path) against intact; a spread
	// capture is judged with two workers too, which must agree.
	check := func(label, capture, kind string, intact damageRun, path string) {
		var reruns []int
		if kind == "spread over nodes" {
			reruns = []int{2}
		}
		if got, lost := checkDamaged(t, label, intact, reruns, path); got.err == nil {
			table.add(capture, kind, intact, got, lost)
		}
	}
	var want []finding
	// The probes of testdata/probes (README.md there): random correct
	// traffic of real SDKs, which must raise nothing.
	probes, probeCaptures := readCaptures(t, filepath.Join("testdata", "probes", "*.pcap.gz"))
	all := slices.Concat(captures, probeCaptures)
	for i, fx := range slices.Concat(fixtures, probes) {
		name, c := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(fx), ".gz"), ".pcap"), all[i]
		intact := runDamaged(t, 1, fx)
		if i < len(fixtures) {
			want = append(want, intact.violations...)
		} else if len(intact.violations) > 0 {
			t.Errorf("probe %s: %v on correct traffic", name, intact.violations)
		}
		path := filepath.Join(dir, name+"-spread.pcap")
		for _, v := range c.ConnectionsElsewhere(maxExhaustiveCases) {
			writePackets(t, path, c.LinkType, v.Packets)
			check(name+" "+v.Name, name, "one connection elsewhere", intact, path)
		}
		for seed := range seeds {
			n := 2 + int(seed%2)
			for k, node := range c.OnNodes(n, seed) {
				writePackets(t, path, c.LinkType, node)
				check(fmt.Sprintf("%s node %d of %d (seed %d)", name, k+1, n, seed), name, "spread over nodes", intact, path)
			}
		}
	}
	crowd := damageRun{violations: want}
	for _, stagger := range []time.Duration{0, 50 * time.Millisecond} {
		merged, err := damage.Crowd(captures, stagger)
		if err != nil {
			t.Fatal(err)
		}
		c := damage.Capture{Packets: merged, LinkType: captures[0].LinkType}
		path := filepath.Join(dir, "crowd-spread.pcap")
		for seed := range seeds {
			n := 2 + int(seed%2)
			for k, node := range c.OnNodes(n, seed) {
				writePackets(t, path, c.LinkType, node)
				check(fmt.Sprintf("crowd (stagger %v) node %d of %d (seed %d)", stagger, k+1, n, seed), "crowd", "spread over nodes", crowd, path)
			}
		}
	}
	t.Log(table)
}
