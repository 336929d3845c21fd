package pipeline

import (
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
// reported twice. And as a node's capture on every interface sees clients
// reach the server through a Service address: every packet again, the
// same socket talking to the Service's address (damage.NATCopy). The
// detector sets the second hop or copy aside (detector/hops.go), so the
// findings must be exactly the fixture's own, each as many times. So must
// they behind a load balancer that opens every connection with a PROXY
// protocol header (damage.BehindProxyProtocol, versions 1 and 2), which
// the decoder skips.
func TestProxyHopsChangeNothing(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	dir := t.TempDir()
	total, repeated := 0, 0
	for i, fx := range fixtures {
		c, lt := captures[i], captures[i].LinkType
		name := strings.TrimSuffix(filepath.Base(fx), ".pcap")
		intact := runDamaged(t, 1, fx)
		for _, hop := range []struct {
			what    string
			packets []pcaprec.Packet
			// repeats: the hop may repeat findings, each at most once,
			// never add one of its own.
			repeats bool
		}{
			{"a proxy hop 300µs later", c.ProxyHop(300*time.Microsecond, damage.HopKeepsHost), false},
			{"a proxy hop 20ms later", c.ProxyHop(20*time.Millisecond, damage.HopKeepsHost), false},
			{"a proxy hop 2ms later with its own Host", c.ProxyHop(2*time.Millisecond, damage.HopInPod), false},
			// A relay is known from its first request that carries a long
			// session id, or its second in a row without one: before it
			// (an initialize, or the first exchange under 2026-07-28) its
			// hop is judged as another endpoint's traffic.
			{"a relay's hop 2ms later with its own Host", c.ProxyHop(2*time.Millisecond, damage.HopRelay), true},
			{"a proxy hop 1ms later from the clients' own host", c.ProxyHop(time.Millisecond, damage.HopOnClientHost), false},
			// Its initialize, and every request under 2026-07-28, carry
			// no session id: from the clients' address, to another
			// endpoint, they are a client's of two servers.
			{"a proxy hop 1ms later from the clients' own host with its own Host", c.ProxyHop(time.Millisecond, damage.HopOnClientHostOwnHost), true},
			{"a NAT copy 5µs later", c.NATCopy(5 * time.Microsecond), false},
			{"a PROXY protocol v1 header on every connection", c.BehindProxyProtocol(1), false},
			{"a PROXY protocol v2 header on every connection", c.BehindProxyProtocol(2), false},
		} {
			path := filepath.Join(dir, name+".pcap")
			writePackets(t, path, lt, hop.packets)
			got := runDamaged(t, 2, path)
			if got.err != nil {
				t.Fatalf("%s with %s: %v", name, hop.what, got.err)
			}
			lost, added := diffFindings(intact.violations, got.violations)
			if hop.repeats {
				var n int
				added, n = splitRepeats(added, intact.violations)
				repeated += n
			}
			if len(lost)+len(added) > 0 {
				t.Errorf("%s with %s: lost %v, added %v", name, hop.what, lost, added)
			}
		}
		total += len(intact.violations)
	}
	if total == 0 {
		t.Fatal("the fixtures hold no violation to keep")
	}
	t.Logf("%d captures, %d violations kept with a proxy hop; %d repeated where the hop may repeat", len(fixtures), total, repeated)
}
