package capture

import (
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The workers deliver in-order segments themselves and hand a connection to
// the assembler at its first other segment. These tests run the same capture
// both ways (Config.assembleAll sends everything to the assembler, as before
// the in-order path existed) and want the very same calls, times and stats.

// messyCapture is many interleaved connections damaged the ways real
// captures are: reordered, lost, duplicated and partly retransmitted
// segments, RSTs, missing handshakes and ports used again.
func messyCapture(seed int64, conns int) []seg {
	rng := rand.New(rand.NewSource(seed))
	var all []seg
	for i := range conns {
		// Few client ports, so some are used again by later connections.
		c := netip.AddrPortFrom(client.Addr(), uint16(45000+rng.Intn(conns/2+1)))
		n := 2 + rng.Intn(6)
		if rng.Intn(4) == 0 {
			n = 30 // long enough to fill the page limits behind a hole
		}
		var msgs []string
		for j := range n {
			msgs = append(msgs, fmt.Sprintf("%d-%d-%s", i, j, "abcdefghijklmnopqrstuvwxyz"[:1+rng.Intn(26)]))
		}
		conv := conversation(c, server, time.Duration(i)*2*time.Millisecond, msgs...)
		if rng.Intn(8) == 0 {
			conv = conv[3:] // no handshake
		}
		var out []seg
		for j, s := range conv {
			switch x := rng.Intn(100); {
			case x < 4 || j >= len(conv)-3 && rng.Intn(8) == 0: // lost (some connections never end)
				continue
			case x < 8: // duplicated
				out = append(out, s, s)
			case x < 12 && len(s.payload) > 2: // a partial retransmission overlapping it
				k := 1 + rng.Intn(len(s.payload)-1)
				r := s
				r.seq += uint32(k)
				r.payload = s.payload[k:] + "zz"
				out = append(out, s, r)
			case x == 12: // RST
				s.flags += "R"
				out = append(out, s)
			default:
				out = append(out, s)
			}
		}
		for j := range out {
			if j > 0 && rng.Intn(10) == 0 {
				out[j-1], out[j] = out[j], out[j-1]
			}
		}
		for j := range out { // keep capture time increasing in file order
			out[j].at = conv[0].at + time.Duration(j)*time.Millisecond
		}
		all = append(all, out...)
	}
	sortByTime(all)
	return all
}

// sameDelivery fails the test unless both runs made the same calls.
func sameDelivery(t *testing.T, cfg Config, path string) {
	t.Helper()
	cfg.noLossProofs = true
	fast, stFast, errFast := run(t, cfg, path)
	cfg.assembleAll = true
	slow, stSlow, errSlow := run(t, cfg, path)
	if fmt.Sprint(errFast) != fmt.Sprint(errSlow) {
		t.Fatalf("errors differ: %v vs %v", errFast, errSlow)
	}
	a, b := fast.streams(), slow.streams()
	if len(a) != len(b) {
		t.Fatalf("%d streams with the in-order path, %d without", len(a), len(b))
	}
	for i := range a {
		if a[i].meta != b[i].meta || !reflect.DeepEqual(a[i].calls, b[i].calls) || !reflect.DeepEqual(a[i].times, b[i].times) {
			t.Fatalf("conn %d differs:\nin order  %+v %q %v\nassembler %+v %q %v",
				i, a[i].meta, a[i].calls, a[i].times, b[i].meta, b[i].calls, b[i].times)
		}
	}
	if stFast != stSlow {
		t.Errorf("stats differ:\nin order  %+v\nassembler %+v", stFast, stSlow)
	}
}

// tinyLimits makes page limits, reorder and idle timeouts and evictions
// happen on small captures.
func tinyLimits(workers int) Config {
	return Config{Workers: workers, MaxConnections: 4, MaxBufferedPagesPerConnection: 4,
		MaxBufferedPagesTotal: 16, IdleTimeout: 30 * time.Millisecond, ReorderTimeout: 5 * time.Millisecond}
}

func TestInOrderPathMatchesAssembler(t *testing.T) {
	for seed := range int64(20) {
		path := capFile(t, messyCapture(seed, 40))
		for _, workers := range []int{1, 2} {
			t.Run(fmt.Sprintf("seed=%d/workers=%d", seed, workers), func(t *testing.T) {
				sameDelivery(t, Config{Workers: workers}, path)
				sameDelivery(t, tinyLimits(workers), path)
				sameDelivery(t, Config{Workers: workers, MaxBufferedPagesPerConnection: 2,
					IdleTimeout: 20 * time.Millisecond, ReorderTimeout: 50 * time.Millisecond}, path)
			})
		}
	}
}

// FuzzInOrderPath: on any input, the in-order path delivers what the
// assembler alone would.
func FuzzInOrderPath(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Add(pcapBytes(f, 1, frames(f, ethernetLink, messyCapture(1, 6))))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		sameDelivery(t, tinyLimits(1+len(data)%2), path)
	})
}
