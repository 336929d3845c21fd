package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/dashboards"
	"github.com/replaywatch/replaywatch/dashboards/internal/dataset"
	"github.com/replaywatch/replaywatch/test/chtest"
)

// TestRenderEveryPanel renders the pictures of the fixtures' data set into
// a temporary folder: every panel of the pictured dashboards that reads
// ClickHouse or the replaywatch data source, and the swim lanes, give a PNG that decodes and is not blank, the
// page shows each, and the page and pictures are the ones committed in docs.
func TestRenderEveryPanel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary, starts ClickHouse and chDB")
	}
	const root = "../.."
	bin, err := dataset.BuildBinary(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv := chtest.Start(t, chtest.Options{})
	data, err := dataset.Build(t, root, bin, srv, chtest.NewDatabase(t, srv), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	pics, err := Render(data, out)
	if err != nil {
		t.Fatal(err)
	}

	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{dashboards.SessionUID + "/Timeline as swim lanes": true}
	for _, uid := range pictured {
		var d dashboardJSON
		if err := json.Unmarshal(files[uid+".json"], &d); err != nil {
			t.Fatal(err)
		}
		for _, p := range flatten(d.Panels) {
			if p.drawn() {
				want[uid+"/"+p.Title] = true
			}
		}
	}
	got := map[string]bool{}
	for _, p := range pics {
		got[p.UID+"/"+p.Panel] = true
		checkPNG(t, filepath.Join(out, p.File))
	}
	for title := range want {
		if !got[title] {
			t.Errorf("no picture of panel %q", title)
		}
	}
	if len(pics) < len(want) {
		t.Errorf("%d pictures for %d panels", len(pics), len(want))
	}

	doc := filepath.Join(out, "dashboards.md")
	if err := WriteDoc(doc, out, data, pics); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pics {
		if !strings.Contains(string(page), "]("+p.File+")") {
			t.Errorf("the page does not show %s", p.File)
		}
	}
	checkCommitted(t, root, out, page, pics)
}

// checkCommitted fails when docs/dashboards.md or a picture in docs/img is
// not what the renderer draws today: the page promises what the dashboards
// show over the fixtures, and a fixture added or re-recorded changes that.
func checkCommitted(t *testing.T, root, out string, page []byte, pics []Picture) {
	t.Helper()
	const redraw = "stale: run scripts/render-dashboards.sh and commit docs/dashboards.md and docs/img"
	committed, err := os.ReadFile(filepath.Join(root, "docs", "dashboards.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The page in the temporary folder has its pictures beside it.
	if strings.ReplaceAll(string(committed), "](img/", "](") != string(page) {
		t.Errorf("docs/dashboards.md is %s", redraw)
	}
	for _, p := range pics {
		got, err := os.ReadFile(filepath.Join(out, p.File))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, "docs", "img", p.File))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("docs/img/%s is %s", p.File, redraw)
		}
	}
}

// checkPNG: the file is a PNG of some size with more than one colour.
func checkPNG(t *testing.T, file string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	b := img.Bounds()
	if b.Dx() < 100 || b.Dy() < 50 {
		t.Errorf("%s: %dx%d pixels", file, b.Dx(), b.Dy())
	}
	first := img.At(b.Min.X, b.Min.Y)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if img.At(x, y) != first {
				return
			}
		}
	}
	t.Errorf("%s: blank", file)
}
