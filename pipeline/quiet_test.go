package pipeline

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
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
// spell may cost findings, never add one.
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
		for _, at := range []int{len(c.Packets) / 3, len(c.Packets) / 2, 2 * len(c.Packets) / 3} {
			quiet := make([]pcaprec.Packet, len(c.Packets))
			for j, p := range c.Packets {
				if j >= at {
					p.CI.Timestamp = p.CI.Timestamp.Add(spell)
				}
				quiet[j] = p
			}
			path := filepath.Join(dir, name+"-quiet.pcap")
			writePackets(t, path, c.LinkType, quiet)
			label := fmt.Sprintf("quiet %v at packet %d of %d", spell, at, len(c.Packets))
			got := runWith(t, cfg, path)
			if got.err != nil {
				t.Fatalf("%s %s: %v", name, label, got.err)
			}
			// Two workers find the same; the records' times may differ,
			// since a worker notices a connection idle at its own next
			// packet (a known gap, docs/damage.md).
			two := cfg
			two.Capture.Workers = 2
			if l, a := diffFindings(got.violations, runWith(t, two, path).violations); len(l)+len(a) > 0 {
				t.Errorf("%s %s: two workers lost %v and added %v", name, label, l, a)
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
