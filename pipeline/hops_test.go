package pipeline

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestProxyHopsChangeNothing records every fixture as a node that also runs
// a reverse proxy in front of the server sees it: each exchange twice, the
// client's hop and the proxy's hop to the server, with the same session
// ids, messages and Host (damage.ProxyHop); and as an nginx in the
// server's pod sends it, from the server's address with a Host of its own.
// Read as one session's history, every event came twice and every answer
// was delivered twice; read as another endpoint's, every finding would be
// reported twice. The detector sets the second hop aside
// (detector/hops.go), so the findings must be exactly the fixture's own,
// each as many times.
func TestProxyHopsChangeNothing(t *testing.T) {
	fixtures, _ := filepath.Glob(filepath.Join("testdata", "fixtures", "*.pcap"))
	if len(fixtures) == 0 {
		t.Fatal("no fixtures")
	}
	dir := t.TempDir()
	total := 0
	for _, fx := range fixtures {
		pkts, lt, err := pcaprec.ReadPackets(fx)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(fx), ".pcap")
		intact := runDamaged(t, 1, fx)
		for _, hop := range []struct {
			delay       time.Duration
			rewriteHost bool
		}{{300 * time.Microsecond, false}, {20 * time.Millisecond, false}, {2 * time.Millisecond, true}} {
			what := fmt.Sprintf("a proxy hop %v later", hop.delay)
			if hop.rewriteHost {
				what += " with its own Host"
			}
			path := filepath.Join(dir, fmt.Sprintf("%s-%v-%v.pcap", name, hop.delay, hop.rewriteHost))
			writePackets(t, path, lt, damage.Capture{Packets: pkts, LinkType: lt}.ProxyHop(hop.delay, hop.rewriteHost))
			got := runDamaged(t, 2, path)
			if got.err != nil {
				t.Fatalf("%s with %s: %v", name, what, got.err)
			}
			if lost, added := diffFindings(intact.violations, got.violations); len(lost)+len(added) > 0 {
				t.Errorf("%s with %s: lost %v, added %v", name, what, lost, added)
			}
		}
		total += len(intact.violations)
	}
	if total == 0 {
		t.Fatal("the fixtures hold no violation to keep")
	}
	t.Logf("%d captures, %d violations kept with a proxy hop", len(fixtures), total)
}
