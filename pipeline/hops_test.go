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
// ids, messages and Host (damage.ProxyHop). Read as one session's history,
// every event came twice and every answer was delivered twice; the
// detector sets the second hop aside (detector/hops.go), so the findings
// must be exactly the fixture's own.
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
		for _, delay := range []time.Duration{300 * time.Microsecond, 20 * time.Millisecond} {
			path := filepath.Join(dir, fmt.Sprintf("%s-%v.pcap", name, delay))
			writePackets(t, path, lt, damage.Capture{Packets: pkts, LinkType: lt}.ProxyHop(delay))
			got := runDamaged(t, 2, path)
			if got.err != nil {
				t.Fatalf("%s with a proxy hop %v later: %v", name, delay, got.err)
			}
			if lost, added := diffFindings(intact.violations, got.violations); len(lost)+len(added) > 0 {
				t.Errorf("%s with a proxy hop %v later: lost %v, added %v", name, delay, lost, added)
			}
		}
		total += len(intact.violations)
	}
	if total == 0 {
		t.Fatal("the fixtures hold no violation to keep")
	}
	t.Logf("%d captures, %d violations kept with a proxy hop", len(fixtures), total)
}
