package pipeline

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// TestBusyCaptureUnderDamage is the damage rule on a busy capture: 150 live
// go-sdk sessions, 50 at a time, through test/benchgen's recording proxy
// (keep-alive connections carrying many exchanges, GET streams cut and
// resumed with Last-Event-ID, deletes), damaged by random loss, duplicates,
// reordering and a snap length. The small fixtures have few exchanges per
// connection; here a lost segment falls between requests and responses of a
// keep-alive connection, where pairing goes wrong. Every violation of a
// damaged run must be in the intact run, and 1 and 2 workers must agree.
func TestBusyCaptureUnderDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("records 150 live sessions")
	}
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "busy.pcap")
	cmd := exec.Command("go", "run", "./test/benchgen", "-out", filepath.Join(dir, "out.pcap"),
		"-template", tmpl, "-sessions", "150", "-concurrency", "50", "-size", "1KB")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("benchgen: %v\n%s", err, out)
	}
	pkts, lt, err := pcaprec.ReadPackets(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	c := damage.Capture{Packets: pkts, LinkType: lt}
	intact := runDamaged(t, 1, tmpl)
	if intact.err != nil {
		t.Fatalf("analysis failed: %v", intact.err)
	}
	variants := append(c.RandomVariants(10), damage.Variant{Name: "snaplen 1000", Packets: c.Snaplen(1000)})
	for _, v := range variants {
		path := filepath.Join(dir, strings.NewReplacer(" ", "-", ":", "-", "%", "pct").Replace(v.Name)+".pcap")
		writePackets(t, path, lt, v.Packets)
		got, lost := checkDamaged(t, v.Name, intact, []int{2}, path)
		t.Logf("%s: %d packets, violations %d before, %d lost, unverifiable %d (intact %d)", v.Name, len(v.Packets), len(intact.violations), len(lost), got.unverifiable, intact.unverifiable)
	}
	_ = os.Remove(tmpl)
}
