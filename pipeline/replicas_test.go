package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestReplicasInStepAddNothing: production runs several replicas of one
// client application (the very same requests: clientInfo, User-Agent,
// JSON-RPC ids and params) from addresses of their own, talking to one
// service endpoint (one Host and path) whose load balancer sends each to a
// backend of its own (another server address, sessions and stream ids of
// its own), started together and polling in step. Every fixture as N such
// replicas (damage.Replicas: N = 2, 3, each a few hundred microseconds to
// most of a second after the last) must give no violation the replicas do
// not give alone, nor a higher severity: a replica's request repeating
// another's within a second is no proxy's second hop of it, and no
// re-issue of it. Losses are allowed (and counted).
func TestReplicasInStepAddNothing(t *testing.T) {
	fixtures, captures := replicaCaptures(t)
	dir := t.TempDir()
	var tally replicaTally
	for i, fx := range fixtures {
		name, c := captureName(fx), captures[i]
		alone := replicasAlone(t, dir, c, 3, plainReplica)
		for _, n := range []int{2, 3} {
			want := slices.Concat(alone[:n]...)
			for _, step := range replicaSteps {
				p := filepath.Join(dir, fmt.Sprintf("%s-x%d.pcap", name, n))
				writePackets(t, p, c.LinkType, c.Replicas(n, step))
				tally.compare(t, want, runReplicas(t, p), "%s, %d replicas %v apart", name, n, step)
			}
		}
	}
	tally.log(t, len(fixtures))
}

// replicaCaptures are the fixtures, or the captures REPLICAS_PATTERN names
// (a glob: the probes of test/fixturegen, say), for the replicas tests.
func replicaCaptures(t *testing.T) ([]string, []damage.Capture) {
	pattern := filepath.Join("testdata", "fixtures", "*.pcap")
	if p := os.Getenv("REPLICAS_PATTERN"); p != "" {
		pattern = p
	}
	return readCaptures(t, pattern)
}

// replicaTally counts a replicas test's cases and the findings they added
// and lost.
type replicaTally struct{ cases, added, lost int }

// compare fails t on every finding got has that want does not have, or has
// with a lower severity (diffReplicaFindings), naming the case.
func (r *replicaTally) compare(t *testing.T, want, got []replicaFinding, format string, args ...any) {
	t.Helper()
	lost, added := diffReplicaFindings(want, got)
	r.cases++
	r.lost += len(lost)
	r.added += len(added)
	for _, f := range added {
		t.Errorf("%s: added %s\n    %s", fmt.Sprintf(format, args...), f, f.explain)
	}
}

func (r replicaTally) log(t *testing.T, captures int) {
	t.Helper()
	t.Logf("%d captures, %d cases: %d findings added, %d lost", captures, r.cases, r.added, r.lost)
}

// replicaSteps are how far apart replicas in step run.
var replicaSteps = []time.Duration{500 * time.Microsecond, 5 * time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond}

// replicaWarp is how replicas drift past each other (damage.WarpedReplicas).
type replicaWarp struct{ step, amplitude, period time.Duration }

func (w replicaWarp) String() string {
	return fmt.Sprintf("%v apart, %v over %v", w.step, w.amplitude, w.period)
}

// replicaWarps are the drifts the replicas tests run.
var replicaWarps = []replicaWarp{
	{0, 5 * time.Millisecond, 200 * time.Millisecond},
	{0, 50 * time.Millisecond, 2 * time.Second},
	{0, 300 * time.Millisecond, 5 * time.Second},
	{2 * time.Millisecond, 20 * time.Millisecond, 500 * time.Millisecond},
	{100 * time.Millisecond, 150 * time.Millisecond, 3 * time.Second},
	{0, 400 * time.Millisecond, 3 * time.Second},
}

// captureName is a capture file's name without its extensions.
func captureName(path string) string {
	return strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".gz"), ".pcap")
}

// replicasAlone is what each of the first n replicas of c, made with
// opt(k), gives alone.
func replicasAlone(t *testing.T, dir string, c damage.Capture, n int, opt func(k int) damage.ReplicaOptions) [][]replicaFinding {
	t.Helper()
	var alone [][]replicaFinding
	for k := range n {
		p := filepath.Join(dir, "alone.pcap")
		writePackets(t, p, c.LinkType, c.ReplicaOpts(k, 0, opt(k)))
		alone = append(alone, runReplicas(t, p))
	}
	return alone
}

// plainReplica is damage.Capture.Replica's options.
func plainReplica(int) damage.ReplicaOptions { return damage.ReplicaOptions{} }

// replicaFinding is a violation as the replicas test compares it: which
// replica's client and server it names, and its severity.
type replicaFinding struct {
	kind, severity, session, client, server, tool, ids string
	explain                                            string
}

func (f replicaFinding) key() string {
	return strings.Join([]string{f.kind, f.session, f.client, f.server, f.tool, f.ids}, "|")
}

func (f replicaFinding) String() string {
	return fmt.Sprintf("%s (%s) on %s, client %s, server %s, tool %s, ids %s", f.kind, f.severity, f.session, f.client, f.server, f.tool, f.ids)
}

var severityRank = map[string]int{"medium": 1, "high": 2, "critical": 3}

// diffReplicaFindings: lost are those of want got does not have (or has
// with a lower severity); added those of got want does not have, or has
// with a lower severity.
func diffReplicaFindings(want, got []replicaFinding) (lost, added []replicaFinding) {
	left := map[string][]replicaFinding{}
	for _, f := range want {
		left[f.key()] = append(left[f.key()], f)
	}
	for _, f := range got {
		w := left[f.key()]
		if len(w) == 0 {
			added = append(added, f)
			continue
		}
		// The one of the highest severity first.
		slices.SortFunc(w, func(a, b replicaFinding) int { return severityRank[b.severity] - severityRank[a.severity] })
		if severityRank[f.severity] > severityRank[w[0].severity] {
			added = append(added, f)
		}
		left[f.key()] = w[1:]
	}
	for _, w := range left {
		lost = append(lost, w...)
	}
	return lost, added
}

func runReplicas(t *testing.T, files ...string) []replicaFinding {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Capture.Workers = 1
	var stdout bytes.Buffer
	w := jsonl.New(&stdout)
	if _, err := Files(context.Background(), files, cfg, w); err != nil {
		t.Fatalf("%v: %v", files, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var out []replicaFinding
	for _, line := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
		var rec map[string]any
		if len(line) == 0 || json.Unmarshal(line, &rec) != nil || rec["type"] != "violation" {
			continue
		}
		s := func(k string) string {
			switch v := rec[k].(type) {
			case nil:
				return ""
			case string:
				return v
			default:
				b, _ := json.Marshal(v)
				return string(b)
			}
		}
		expl, _, _ := strings.Cut(s("explanation"), ". ")
		out = append(out, replicaFinding{s("kind"), s("severity"), s("session_id"), s("client"), s("server"), s("tool"), s("jsonrpc_ids"), expl})
	}
	return out
}

// TestDivergingReplicasAddNothing: replicas in step (as in
// TestReplicasInStepAddNothing, two of them) until one stops: its capture
// cut at a fraction of the fixture's time (a replica scaled down, crashed,
// or a capture window that ends early for its node), the earlier one or the
// later one. What the other does then is no longer repeated by anybody:
// its findings must be those it has alone.
func TestDivergingReplicasAddNothing(t *testing.T) {
	fixtures, captures := replicaCaptures(t)
	dir := t.TempDir()
	fractions := []int{1, 2, 3, 4, 5, 6, 7} // eighths kept
	var tally replicaTally
	for i, fx := range fixtures {
		name, c := captureName(fx), captures[i]
		full := [2][]replicaFinding{}
		reps := [2]damage.Capture{}
		for k := range 2 {
			reps[k] = damage.Capture{Packets: c.Replica(k, 0), LinkType: c.LinkType}
			p := filepath.Join(dir, "alone.pcap")
			writePackets(t, p, c.LinkType, reps[k].Packets)
			full[k] = runReplicas(t, p)
		}
		d := reps[0].Duration()
		for _, eighths := range fractions {
			cut := d * time.Duration(8-eighths) / 8
			for stopper := range 2 {
				short := reps[stopper].Window(0, cut)
				p := filepath.Join(dir, "alone.pcap")
				writePackets(t, p, c.LinkType, short)
				want := slices.Concat(full[1-stopper], runReplicas(t, p))
				for _, step := range replicaSteps {
					var merged []pcaprec.Packet
					for k := range 2 {
						pk := reps[k].Packets
						if k == stopper {
							pk = short
						}
						for _, q := range pk {
							q.CI.Timestamp = q.CI.Timestamp.Add(time.Duration(k) * step)
							merged = append(merged, q)
						}
					}
					slices.SortStableFunc(merged, func(a, b pcaprec.Packet) int { return a.CI.Timestamp.Compare(b.CI.Timestamp) })
					p := filepath.Join(dir, "merged.pcap")
					writePackets(t, p, c.LinkType, merged)
					tally.compare(t, want, runReplicas(t, p), "%s, replica %d stops after %d/8, 2 replicas %v apart", name, stopper, eighths, step)
				}
			}
		}
	}
	tally.log(t, len(fixtures))
}

// TestDriftingReplicasAddNothing: replicas in step whose timers drift
// past each other (damage.WarpedReplicas): now one's request comes first,
// now the other's, so each has some of its requests set aside as the
// other's hops, and some judged.
func TestDriftingReplicasAddNothing(t *testing.T) {
	fixtures, captures := replicaCaptures(t)
	dir := t.TempDir()
	var tally replicaTally
	for i, fx := range fixtures {
		name, c := captureName(fx), captures[i]
		alone := replicasAlone(t, dir, c, 3, plainReplica)
		for _, n := range []int{2, 3} {
			want := slices.Concat(alone[:n]...)
			for _, w := range replicaWarps {
				p := filepath.Join(dir, "merged.pcap")
				writePackets(t, p, c.LinkType, c.WarpedReplicas(n, w.step, w.amplitude, w.period))
				tally.compare(t, want, runReplicas(t, p), "%s, %d replicas drifting %s", name, n, w)
			}
		}
	}
	tally.log(t, len(fixtures))
}
