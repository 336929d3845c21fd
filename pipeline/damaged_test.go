package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func writePackets(t *testing.T, path string, lt layers.LinkType, pkts []pcaprec.Packet) {
	t.Helper()
	if err := pcaprec.WritePackets(path, lt, 65535, pkts); err != nil {
		t.Fatal(err)
	}
}

// finding is what makes two violations the same finding across damage: the
// kind and the session it accuses (without a session, the call).
type finding struct{ kind, session string }

func (f finding) String() string { return f.kind + " on " + f.session }

// damageRun is one analysis of a (damaged) capture.
type damageRun struct {
	err          error
	violations   []finding
	unverifiable int
	records      []byte // every record but the summary's timing, to compare runs
	explain      map[finding]string
}

func runDamaged(t *testing.T, workers int, files ...string) damageRun {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Capture.Workers = workers
	return runWith(t, cfg, files...)
}

// runWith is runDamaged with a configuration of its own.
func runWith(t *testing.T, cfg Config, files ...string) damageRun {
	t.Helper()
	var stdout bytes.Buffer
	w := jsonl.New(&stdout)
	s, err := Files(context.Background(), files, cfg, w)
	r := damageRun{err: err, explain: map[finding]string{}}
	if err != nil {
		return r
	}
	w.Summary(s)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var kept [][]byte
	for _, line := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("output is not JSON Lines: %v\n%s", err, line)
		}
		switch rec["type"] {
		case "violation":
			sid, _ := rec["session_id"].(string)
			if sid == "" {
				// A sessionless finding (2026-07-28) accuses a call.
				sid = fmt.Sprintf("no session: tool %v, ids %v", rec["tool"], rec["jsonrpc_ids"])
			}
			f := finding{rec["kind"].(string), sid}
			r.violations = append(r.violations, f)
			r.explain[f], _ = rec["explanation"].(string)
		case "unverifiable":
			r.unverifiable++
		case "summary":
			delete(rec, "elapsed_seconds")
			line, _ = json.Marshal(rec)
		}
		kept = append(kept, line)
	}
	r.records = bytes.Join(kept, []byte("\n"))
	return r
}

// damageRow is one line of the damage table: a kind of damage over every
// capture.
type damageRow struct {
	captures                        map[string]bool // by name
	cases                           int
	before, lost, added, unverified int
}

// damageTable counts, per kind of damage, what damaged runs lost and added
// against their intact run.
type damageTable map[string]*damageRow

// add counts one damaged run (got) of the capture named capture.
func (tb damageTable) add(capture, vname string, intact, got damageRun, lost []finding) {
	kind := damageKind(vname)
	row := tb[kind]
	if row == nil {
		row = &damageRow{captures: map[string]bool{}}
		tb[kind] = row
	}
	row.captures[capture] = true
	row.cases++
	row.before += len(intact.violations)
	row.unverified += max(0, got.unverifiable-intact.unverifiable)
	row.lost += len(lost)
	_, added := diffFindings(intact.violations, got.violations)
	row.added += len(added)
}

func (tb damageTable) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| damage | captures | cases | violations before | lost | added | unverifiable added |\n|---|---|---|---|---|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(tb)) {
		r := tb[k]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d |\n", k, len(r.captures), r.cases, r.before, r.lost, r.added, r.unverified)
	}
	return b.String()
}

// damageKind is a variant's kind of damage, for the table.
func damageKind(name string) string {
	kind, _, _ := strings.Cut(name, ":")
	return kind
}

// maxExhaustiveCases bounds the cases per capture of the damages made at
// every place (each payload segment lost, the capture started at each
// packet): a capture with more places gets that many, evenly spaced. The
// dense crowd captures have thousands of packets, each case three runs.
const maxExhaustiveCases = 300

// TestDamageNeverAddsAViolation is the architecture's rule on lossy
// captures, run over every real SDK capture in the suite and every damage
// the damage package makes (each payload segment lost in turn, random loss
// of 0.1%, 1% and 5%, duplicates, reordering, snap lengths 64/200/1000, the
// start or the end of the capture cut), plus the capture started late at
// every packet and the same file given twice (each segment and each packet:
// at most maxExhaustiveCases of them, evenly spaced): the damaged result may lose
// violations and gain unverifiable records, but every violation it reports
// is also in the intact result (same kind, same session). Each damaged
// capture is analysed with one worker and twice with two, and the three
// outputs must be identical: ids are deterministic on damaged captures too.
//
// No case is excluded. The table it logs (go test -v) is the one in the
// issue's closing note.
func TestDamageNeverAddsAViolation(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	dir := t.TempDir()
	table := damageTable{}
	for i, fx := range fixtures {
		name := strings.TrimSuffix(filepath.Base(fx), ".pcap")
		c, lt := captures[i], captures[i].LinkType
		intact := runDamaged(t, 1, fx)
		if intact.err != nil {
			t.Fatalf("%s: analysis failed: %v", name, intact.err)
		}
		variants := c.Variants(seeds, maxExhaustiveCases)
		check := func(vname string, files ...string) damageRun {
			got, lost := checkDamaged(t, name+" "+vname, intact, []int{2, 2}, files...)
			if got.err == nil {
				table.add(name, vname, intact, got, lost)
			}
			return got
		}
		for _, v := range variants {
			path := filepath.Join(dir, name+"-"+strings.NewReplacer("/", "of", " ", "-", ":", "-", "%", "pct").Replace(v.Name)+".pcap")
			writePackets(t, path, lt, v.Packets)
			check(v.Name, path)
		}
		check("same file twice", fx, fx)
		// Two interfaces (the second with another link header, so no
		// packet is a byte-identical copy), each missing segments the
		// other holds: merged, nothing is lost, so nothing may be lost
		// from the findings either.
		for seed := range uint64(seeds) {
			a, b := c.SplitLoss(0.1, seed)
			pa := filepath.Join(dir, fmt.Sprintf("%s-iface-a-%d.pcap", name, seed))
			pb := filepath.Join(dir, fmt.Sprintf("%s-iface-b-%d.pcap", name, seed))
			writePackets(t, pa, lt, a)
			writePackets(t, pb, layers.LinkTypeLinuxSLL, damage.AsLinuxSLL(b))
			vname := fmt.Sprintf("two interfaces, each missing 5%%:seed %d", seed)
			got := check(vname, pa, pb)
			if !slices.Equal(sortedFindings(got.violations), sortedFindings(intact.violations)) {
				t.Errorf("%s %s: violations %v, want those of the intact capture %v", name, vname, got.violations, intact.violations)
			}
		}
	}
	t.Log(table)
}

// checkDamaged analyses files (a damaged capture) with one worker and again
// with each of reruns, which must print the very same records, and reports
// every violation intact does not have (the rule: damage may lose a finding,
// never add one). It returns the one-worker run and the violations lost.
func checkDamaged(t *testing.T, label string, intact damageRun, reruns []int, files ...string) (damageRun, []finding) {
	t.Helper()
	got := runDamaged(t, 1, files...)
	if got.err != nil {
		t.Errorf("%s: analysis failed: %v", label, got.err)
		return got, nil
	}
	for _, w := range reruns {
		if again := runDamaged(t, w, files...); !bytes.Equal(again.records, got.records) {
			t.Errorf("%s: output differs between --workers 1 and --workers %d:\n%s", label, w, firstDifference(got.records, again.records))
			break
		}
	}
	lost, added := diffFindings(intact.violations, got.violations)
	for _, f := range added {
		t.Errorf("%s: %s raised on damaged evidence (intact: %v): %s", label, f, intact.violations, got.explain[f])
	}
	return got, lost
}

// diffFindings compares the violations of a run with those wanted, as
// multisets: lost are wanted and not got, added got and not wanted. A
// finding reported twice where once was wanted (a proxy's hop judged as
// another client) is added once.
func diffFindings(want, got []finding) (lost, added []finding) {
	left := map[finding]int{}
	for _, f := range got {
		left[f]++
	}
	for _, f := range want {
		if left[f] > 0 {
			left[f]--
			continue
		}
		lost = append(lost, f)
	}
	for _, f := range got {
		if left[f] > 0 {
			left[f]--
			added = append(added, f)
		}
	}
	return lost, added
}

// splitRepeats splits added into the findings that repeat one of intact
// (each at most once) and those that are new.
func splitRepeats(added, intact []finding) (fresh []finding, repeats int) {
	fresh, _ = diffFindings(added, intact)
	return fresh, len(added) - len(fresh)
}

func sortedFindings(fs []finding) []finding {
	out := slices.Clone(fs)
	slices.SortFunc(out, func(a, b finding) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// firstDifference shows the first line where two outputs differ.
func firstDifference(a, b []byte) string {
	la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range max(len(la), len(lb)) {
		var x, y []byte
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("line %d:\n  %s\n  %s", i+1, x, y)
		}
	}
	return "(same lines)"
}
