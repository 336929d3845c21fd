package pipeline

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestTwoEndsFindTheSame analyses every fixture as captured on both ends
// at once, the clients' host and the servers', read together: the same
// connections twice, the server end's copy late or early by a clock's skew
// and the link's latency (from half a millisecond to a minute and a half),
// each end's sent packets with a checksum left to the network card, so
// that no packet is a byte-identical duplicate of its copy. The records
// must be exactly the fixture's, with one worker and with two; a copy read
// again after its connection ended was once a second run of every request
// in it. With each end losing 1% of its segments on its own, the records
// may lose findings, never gain one.
func TestTwoEndsFindTheSame(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	dir := t.TempDir()
	table := damageTable{}
	for i, fx := range fixtures {
		name, c := strings.TrimSuffix(filepath.Base(fx), ".pcap"), captures[i]
		intact := runDamaged(t, 1, fx)
		want, _ := withoutSummary(intact.records)
		ends := func(clientEnd, serverEnd []pcaprec.Packet) (string, string) {
			a := filepath.Join(dir, name+"-client.pcap")
			b := filepath.Join(dir, name+"-server.pcap")
			writePackets(t, a, c.LinkType, clientEnd)
			writePackets(t, b, c.LinkType, serverEnd)
			return a, b
		}
		for _, skew := range []time.Duration{-1500 * time.Millisecond, 500 * time.Microsecond, 40 * time.Millisecond, 1500 * time.Millisecond, 15 * time.Second, 90 * time.Second} {
			a, b := ends(c.TwoEnds(skew))
			want := want
			if skew < 0 {
				// Every packet's first copy is the server end's: the
				// records are the server end's alone, skew earlier.
				want, _ = withoutSummary(runDamaged(t, 1, b).records)
			}
			for _, workers := range []int{1, 2} {
				got := runDamaged(t, workers, a, b)
				if got.err != nil {
					t.Fatalf("%s, two ends %v apart: %v", name, skew, got.err)
				}
				have, summary := withoutSummary(got.records)
				if !bytes.Equal(want, have) {
					t.Errorf("%s, two ends %v apart, %d workers: records differ\nintact:\n%s\ntwo ends:\n%s", name, skew, workers, want, have)
				}
				if skew >= 15*time.Second && !bytes.Contains(summary, []byte("read again after they had ended")) {
					// Every fixture's connections are shorter than that.
					t.Errorf("%s, two ends %v apart: no warning of connections read again: %s", name, skew, summary)
				}
			}
		}
		for _, skew := range []time.Duration{3 * time.Millisecond, 15 * time.Second} {
			for seed := range uint64(3) {
				lossy := damage.Capture{Packets: c.DropRandom(0.01, seed), LinkType: c.LinkType}
				clientEnd, _ := lossy.TwoEnds(skew)
				lossy.Packets = c.DropRandom(0.01, seed+100)
				_, serverEnd := lossy.TwoEnds(skew)
				a, b := ends(clientEnd, serverEnd)
				label := fmt.Sprintf("two ends %v apart, each losing 1%%:seed %d", skew, seed)
				if got, lost := checkDamaged(t, name+" "+label, intact, []int{2}, a, b); got.err == nil {
					table.add(name, label, intact, got, lost)
				}
			}
		}
	}
	t.Log(table)
}

// TestTwoEndsWithAProxyFindTheSame reads every fixture behind a reverse
// proxy as two hosts' captures read together show it: the host with the
// proxy holds both legs (damage.ProxyHop), the other host the leg it is
// on, as its own capture (its clock apart by skew, its sent checksums
// offloaded): the proxy's upstream leg for a proxy on the clients' host,
// the clients' leg for one beside the server. Either leg's copy may then
// come first. The findings may be lost, never added, against those of the
// proxy's host alone.
func TestTwoEndsWithAProxyFindTheSame(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	dir := t.TempDir()
	table := damageTable{}
	for i, fx := range fixtures {
		name, c := strings.TrimSuffix(filepath.Base(fx), ".pcap"), captures[i]
		for _, p := range []struct {
			what       string
			kind       damage.HopKind
			onUpstream bool // the other host holds the upstream leg
		}{
			{"a proxy on the clients' host", damage.HopOnClientHost, true},
			{"a proxy on the clients' host with its own Host", damage.HopOnClientHostOwnHost, true},
			{"an ingress beside the server", damage.HopKeepsHost, false},
			{"an nginx in the server's pod", damage.HopInPod, false},
			{"a relay", damage.HopRelay, false},
		} {
			hop := c.ProxyHop(time.Millisecond, p.kind)
			proxyHost := filepath.Join(dir, name+"-proxy-host.pcap")
			writePackets(t, proxyHost, c.LinkType, hop)
			base := runDamaged(t, 1, proxyHost)
			leg, upstream := damage.HopLegs(hop)
			if p.onUpstream {
				leg = upstream
			}
			for _, skew := range []time.Duration{-900 * time.Millisecond, -5 * time.Millisecond, 5 * time.Millisecond, 1500 * time.Millisecond} {
				_, other := damage.Capture{Packets: leg, LinkType: c.LinkType}.TwoEnds(skew)
				otherHost := filepath.Join(dir, name+"-other-host.pcap")
				writePackets(t, otherHost, c.LinkType, other)
				label := fmt.Sprintf("two hosts %v apart, %s", skew, p.what)
				if got, lost := checkDamaged(t, name+" "+label, base, nil, proxyHost, otherHost); got.err == nil {
					table.add(name, label, base, got, lost)
				}
			}
		}
	}
	t.Log(table)
}
