package decode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGolden runs every stream in testdata/streams through the decoder and
// compares the rendered observations and counters with testdata/golden.
// Each stream is also delivered one byte at a time and in random pieces: the
// output must not depend on how TCP cut the bytes.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/streams/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no stream files: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".txt")
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sc := parseScript(t, string(text))
			obs, stats := run(t, sc.cfg, whole, sc)
			got := render(obs) + renderStats(stats)

			splits := map[string]splitter{"bytes": byteByByte, "random1": randomPieces(1), "random2": randomPieces(2), "random3": randomPieces(3)}
			for splitName, split := range splits {
				obs, stats := run(t, sc.cfg, split, sc)
				if other := render(obs) + renderStats(stats); other != got {
					t.Errorf("delivery %s differs from whole segments:\n--- whole\n%s--- %s\n%s", splitName, got, splitName, other)
				}
			}

			golden := filepath.Join("testdata", "golden", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./decode -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (go test ./decode -update rewrites it):\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}
