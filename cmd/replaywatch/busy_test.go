package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/internal/damage"
	"github.com/replaywatch/replaywatch/internal/pcaprec"
)

// TestBusyCaptureUnderDamage is the damage rule on a busy capture: 150 live
// go-sdk sessions, 50 at a time, through internal/benchgen's recording proxy
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
	cmd := exec.Command("go", "run", "./internal/benchgen", "-out", filepath.Join(dir, "out.pcap"),
		"-template", tmpl, "-sessions", "150", "-concurrency", "50", "-size", "1KB")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("benchgen: %v\n%s", err, out)
	}
	pkts, lt, err := pcaprec.ReadPackets(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	c := damage.Capture{Packets: pkts, LinkType: lt}
	intact := runDamaged(t, 1, tmpl)
	if intact.code == exitError {
		t.Fatalf("analyze failed: %s", intact.stderr)
	}
	var variants []damage.Variant
	for seed := range uint64(10) {
		for _, rate := range []float64{0.001, 0.01, 0.05} {
			variants = append(variants, damage.Variant{Name: fmt.Sprintf("drop %g%%:seed %d", rate*100, seed), Packets: c.DropRandom(rate, seed)})
		}
		variants = append(variants,
			damage.Variant{Name: fmt.Sprintf("duplicate 5%%:seed %d", seed), Packets: c.Duplicate(0.05, seed)},
			damage.Variant{Name: fmt.Sprintf("reorder 5%% within 4:seed %d", seed), Packets: c.Reorder(0.05, 4, seed)})
	}
	variants = append(variants, damage.Variant{Name: "snaplen 1000", Packets: c.Snaplen(1000)})
	for _, v := range variants {
		path := filepath.Join(dir, strings.NewReplacer(" ", "-", ":", "-", "%", "pct").Replace(v.Name)+".pcap")
		writePackets(t, path, lt, v.Packets)
		got := runDamaged(t, 1, path)
		if got.code == exitError {
			t.Errorf("%s: analyze failed: %s", v.Name, got.stderr)
			continue
		}
		if again := runDamaged(t, 2, path); string(again.records) != string(got.records) {
			t.Errorf("%s: output differs between 1 and 2 workers:\n%s", v.Name, firstDifference(got.records, again.records))
		}
		lost := 0
		for _, f := range intact.violations {
			if !slices.Contains(got.violations, f) {
				lost++
			}
		}
		for _, f := range got.violations {
			if !slices.Contains(intact.violations, f) {
				t.Errorf("%s: %s raised on damaged evidence: %s", v.Name, f, got.explain[f])
			}
		}
		t.Logf("%s: %d packets, violations %d before, %d lost, unverifiable %d (intact %d)", v.Name, len(v.Packets), len(intact.violations), lost, got.unverifiable, intact.unverifiable)
	}
	_ = os.Remove(tmpl)
}
