package pipeline

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/damage"
)

// hostMode is how replicas of their own endpoints are made: each replica
// calls a server of its own name (another Host), and may run where another
// replica's server is (its client address that backend's: a pod that is a
// client and a server), against servers that number their sessions (every
// replica's backend mints the same short ids, so requests carrying them
// repeat each other's).
type hostMode struct {
	name                     string
	clientIsServer, numbered bool
	// reverse: replica 0's client address is replica 1's backend instead.
	reverse bool
}

var hostModes = []hostMode{
	{"own hosts", false, false, false},
	{"own hosts, client serves", true, false, false},
	{"own hosts, numbered sessions", false, true, false},
	{"own hosts, client serves, numbered sessions", true, true, false},
	{"own hosts, first client serves", false, false, true},
	{"own hosts, first client serves, numbered sessions", false, true, true},
}

func (m hostMode) opt(k int) damage.ReplicaOptions {
	o := damage.OwnEndpointOptions(k, m.clientIsServer)
	o.NumberedSessions = m.numbered
	if m.reverse && k == 0 {
		o.Client = &[4]byte{10, 1, 2, 1}
	}
	return o
}

// TestReplicasOfOwnEndpointsAddNothing: as TestReplicasInStepAddNothing and
// TestDriftingReplicasAddNothing, each replica calling a server of its own
// name, in every hostMode. A request repeating another client's within the
// second to another server is set aside as a proxy's hop here when its
// sender serves MCP, or after two in a row (a relay); replicas of servers
// that number their sessions send requests alike even with session ids.
// Until 2026-12-06 a replica whose address served MCP had its session's
// habit set aside, and a re-issue after a 404 was a false high
// silent_reinit_after_404 (ts- and go-404-poller-new-session, numbered
// sessions: unverifiable_reinit_habit_set_aside_client_serves.test).
func TestReplicasOfOwnEndpointsAddNothing(t *testing.T) {
	fixtures, captures := replicaCaptures(t)
	dir := t.TempDir()
	var tally replicaTally
	for i, fx := range fixtures {
		name, c := captureName(fx), captures[i]
		for _, mode := range hostModes {
			alone := replicasAlone(t, dir, c, 3, mode.opt)
			for _, n := range []int{2, 3} {
				want := slices.Concat(alone[:n]...)
				check := func(label string, merged []replicaFinding) {
					tally.compare(t, want, merged, "%s, %s, %d replicas %s", name, mode.name, n, label)
				}
				p := filepath.Join(dir, "merged.pcap")
				for _, step := range replicaSteps {
					writePackets(t, p, c.LinkType, c.WarpedReplicasOpts(n, step, 0, time.Second, mode.opt))
					check(step.String()+" apart", runReplicas(t, p))
				}
				for _, w := range replicaWarps {
					writePackets(t, p, c.LinkType, c.WarpedReplicasOpts(n, w.step, w.amplitude, w.period, mode.opt))
					check("drifting "+w.String(), runReplicas(t, p))
				}
			}
		}
	}
	tally.log(t, len(fixtures))
}
