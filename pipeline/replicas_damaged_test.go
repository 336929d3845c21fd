package pipeline

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestDamagedReplicasAddNothing: two replicas in step (5 ms and 300 ms
// apart), one of them damaged (damage.Variants: each of 8 segments lost, 8
// late starts, random loss, duplicates and reorder, snap lengths, a cut
// start or end), or the merged capture damaged. Damage can make a
// replica's request the one judged where its twin's was, or leave a
// replica's session judged from the middle: the findings must stay within
// the union of what each replica (damaged or intact) gives alone, by kind,
// session, client and server address and severity (ports, ids and tool
// aside: once a request is lost, the same finding may be raised on the
// session's next one). Captures with a compressed body are left out: their replicas'
// backends would share event ids (damage.Capture.EventIDsOwn). The crowd
// fixtures too, for time: their many clients are what the crowd tests are
// for.
func TestDamagedReplicasAddNothing(t *testing.T) {
	fixtures, captures := replicaCaptures(t)
	dir := t.TempDir()
	const most = 8
	var tally replicaTally
	used := 0
	for i, fx := range fixtures {
		name, c := captureName(fx), captures[i]
		if strings.Contains(name, "crowd") || !c.EventIDsOwn() {
			continue
		}
		used++
		for _, step := range []time.Duration{5 * time.Millisecond, 300 * time.Millisecond} {
			reps := [2][]pcaprec.Packet{c.Replica(0, 0), c.Replica(1, step)}
			var alone [2][]replicaFinding
			for k := range 2 {
				p := filepath.Join(dir, "alone.pcap")
				writePackets(t, p, c.LinkType, reps[k])
				alone[k] = runReplicas(t, p)
			}
			check := func(label string, want []replicaFinding, merged []pcaprec.Packet) {
				p := filepath.Join(dir, "merged.pcap")
				writePackets(t, p, c.LinkType, merged)
				tally.compare(t, withoutPorts(want), withoutPorts(runReplicas(t, p)), "%s, 2 replicas %v apart, %s", name, step, label)
			}
			for d := range 2 {
				rc := damage.Capture{Packets: reps[d], LinkType: c.LinkType}
				for _, v := range rc.Variants(1, most) {
					p := filepath.Join(dir, "alone.pcap")
					writePackets(t, p, c.LinkType, v.Packets)
					want := slices.Concat(alone[1-d], runReplicas(t, p))
					check(fmt.Sprintf("replica %d %s", d, v.Name), want, mergeInOrder(reps[1-d], v.Packets))
				}
			}
			mc := damage.Capture{Packets: mergeInOrder(reps[0], reps[1]), LinkType: c.LinkType}
			for _, v := range mc.Variants(1, most) {
				check("merged, "+v.Name, slices.Concat(alone[0], alone[1]), v.Packets)
			}
		}
	}
	tally.log(t, used)
}

// mergeInOrder merges packet lists by timestamp, keeping each list's own
// order (a reordered replica stays reordered).
func mergeInOrder(lists ...[]pcaprec.Packet) []pcaprec.Packet {
	idx := make([]int, len(lists))
	var out []pcaprec.Packet
	for {
		best := -1
		for k, l := range lists {
			if idx[k] < len(l) && (best < 0 || l[idx[k]].CI.Timestamp.Before(lists[best][idx[best]].CI.Timestamp)) {
				best = k
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, lists[best][idx[best]])
		idx[best]++
	}
}

// withoutPorts keys findings by addresses alone, and leaves out the ids and
// tool (another request of the session may carry the same finding).
func withoutPorts(fs []replicaFinding) []replicaFinding {
	out := make([]replicaFinding, len(fs))
	for i, f := range fs {
		if h, _, err := net.SplitHostPort(f.client); err == nil {
			f.client = h
		}
		if h, _, err := net.SplitHostPort(f.server); err == nil {
			f.server = h
		}
		f.ids, f.tool = "", ""
		out[i] = f
	}
	return out
}
