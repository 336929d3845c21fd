package pipeline

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/test/damage"
)

// TestMirroredCaptureFindsTheSame reads every fixture as a collector of
// mirrored traffic records it, each frame inside VXLAN (cloud traffic
// mirroring) or ERSPAN (a switch's remote SPAN): decapsulated, it must give
// exactly the fixture's records, and the summary must count every packet
// as tunnelled.
func TestMirroredCaptureFindsTheSame(t *testing.T) {
	fixtures, captures := readFixtureCaptures(t)
	dir := t.TempDir()
	for i, fx := range fixtures {
		name, c := strings.TrimSuffix(filepath.Base(fx), ".pcap"), captures[i]
		intact := runDamaged(t, 1, fx)
		for _, m := range []struct {
			what string
			how  damage.Mirror
		}{{"VXLAN", damage.MirrorVXLAN}, {"ERSPAN", damage.MirrorERSPAN}} {
			path := filepath.Join(dir, name+".pcap")
			writePackets(t, path, c.LinkType, c.Mirrored(m.how))
			got := runDamaged(t, 2, path)
			if got.err != nil {
				t.Fatalf("%s in %s: %v", name, m.what, got.err)
			}
			want, _ := withoutSummary(intact.records)
			have, summary := withoutSummary(got.records)
			if !bytes.Equal(want, have) {
				t.Errorf("%s in %s: records differ\nintact:\n%s\nmirrored:\n%s", name, m.what, want, have)
			}
			var s struct {
				Packets   uint64 `json:"packets"`
				Tunnelled uint64 `json:"tunnelled_packets"`
			}
			if err := json.Unmarshal(summary, &s); err != nil || s.Packets == 0 || s.Tunnelled != s.Packets {
				t.Errorf("%s in %s: summary %s: want every packet tunnelled (%v)", name, m.what, summary, err)
			}
		}
	}
}

// withoutSummary splits a run's records into the others and the summary.
func withoutSummary(records []byte) (others, summary []byte) {
	var kept [][]byte
	for _, line := range bytes.Split(records, []byte("\n")) {
		if bytes.Contains(line, []byte(`"type":"summary"`)) {
			summary = line
			continue
		}
		kept = append(kept, line)
	}
	return bytes.Join(kept, []byte("\n")), summary
}
