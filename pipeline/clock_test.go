package pipeline

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/capture"
)

// TestQuietSpellsAddNothing puts a quiet spell in every fixture (all
// traffic paused at a third, half and two thirds of it, then going on on
// the same connections), with the connection idle timeout shorter than the
// spell, so that capture lets go of every connection open across it and
// picks it up again mid-stream: an MCP server's standalone GET stream may
// carry nothing for longer than any idle timeout. Its later bytes were
// once skipped unseen while the session's history counted as whole (a
// resume from an event id they carried was unknown_last_event_id_accepted),
// and an event cut open by the let-go was taken for one never issued. The
// spell may cost findings, never add one, and one worker and two must give
// the very same records.
func TestQuietSpellsAddNothing(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	dir := t.TempDir()
	table := damageTable{}
	const spell = 90 * time.Second
	cfg := DefaultConfig()
	cfg.Capture.Workers = 1
	cfg.Capture.IdleTimeout = time.Minute
	for i, fx := range fixtures {
		name, c := strings.TrimSuffix(filepath.Base(fx), ".pcap"), captures[i]
		intact := runWith(t, cfg, fx)
		for _, at := range thirds(len(c.Packets)) {
			path := filepath.Join(dir, name+"-quiet.pcap")
			writePackets(t, path, c.LinkType, c.ShiftedFrom(at, spell))
			label := fmt.Sprintf("quiet %v at packet %d of %d", spell, at, len(c.Packets))
			got := runWith(t, cfg, path)
			if got.err != nil {
				t.Fatalf("%s %s: %v", name, label, got.err)
			}
			two := cfg
			two.Capture.Workers = 2
			if again := runWith(t, two, path); !bytes.Equal(again.records, got.records) {
				t.Errorf("%s %s: output differs between 1 and 2 workers:\n%s", name, label, firstDifference(got.records, again.records))
			}
			lost, added := diffFindings(intact.violations, got.violations)
			for _, f := range added {
				t.Errorf("%s %s: %s raised (intact: %v): %s", name, label, f, intact.violations, got.explain[f])
			}
			table.add(name, "quiet spell past the idle timeout", intact, got, lost)
		}
	}
	t.Log(table)
}

// TestClockStepsBackAddNothing steps the capturing host's clock back in
// every fixture (by 0.2 s, 1 s and 30 s, at a third, half and two thirds
// of it: NTP stepping it, a virtual machine resumed): the file's order is
// the capture's, and the reader keeps its times from going back
// (capture.MaxClockStepBack), so the findings must be exactly the
// fixture's, and a warning must say so. Before, the packets after the step
// came before the ones they followed: 8 violations added at 1 s, 13 at
// 30 s.
func TestClockStepsBackAddNothing(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	dir := t.TempDir()
	for i, fx := range fixtures {
		name, c := strings.TrimSuffix(filepath.Base(fx), ".pcap"), captures[i]
		intact := runDamaged(t, 1, fx)
		for _, back := range []time.Duration{200 * time.Millisecond, time.Second, 30 * time.Second} {
			for _, at := range thirds(len(c.Packets)) {
				path := filepath.Join(dir, name+"-stepped.pcap")
				writePackets(t, path, c.LinkType, c.ShiftedFrom(at, -back))
				got := runDamaged(t, 2, path)
				if got.err != nil {
					t.Fatalf("%s: %v", name, got.err)
				}
				if lost, added := diffFindings(intact.violations, got.violations); len(lost)+len(added) > 0 {
					t.Errorf("%s, clock back %v at packet %d: lost %v, added %v", name, back, at, lost, added)
				}
				// A step into a quiet spell longer than itself leaves the
				// times going forward: no step to see.
				stepped := c.Packets[at-1].CI.Timestamp.Sub(c.Packets[at].CI.Timestamp.Add(-back)) > capture.MaxClockStepBack
				if _, summary := withoutSummary(got.records); bytes.Contains(summary, []byte("clock went back by more than 100ms once")) != stepped {
					t.Errorf("%s, clock back %v at packet %d: a step is %v, summary %s", name, back, at, stepped, summary)
				}
			}
		}
	}
}

// thirds are the places a third, half and two thirds into n packets.
func thirds(n int) []int { return []int{n / 3, n / 2, 2 * n / 3} }
