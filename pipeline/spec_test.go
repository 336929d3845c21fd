package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/replaywatch/replaywatch/sink"
	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/test/fixturespec"
)

// analyzeJSON runs the offline pipeline over files as `replaywatch analyze
// --format json` does and returns its records, the summary's included; an
// analysis that fails fails the test.
func analyzeJSON(t *testing.T, files ...string) []map[string]any {
	t.Helper()
	return recordsOf(t, files, func(w *jsonl.Writer) (*sink.Summary, error) {
		return Files(context.Background(), files, DefaultConfig(), w)
	})
}

// recordsOf runs one analysis into a JSON Lines writer and returns the
// records it wrote, its summary last.
func recordsOf(t *testing.T, files []string, run func(*jsonl.Writer) (*sink.Summary, error)) []map[string]any {
	t.Helper()
	var out bytes.Buffer
	w := jsonl.New(&out)
	s, err := run(w)
	if err != nil {
		t.Fatalf("analysis of %v failed: %v", files, err)
	}
	w.Summary(s)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestFixtureSpecs runs every committed real-SDK capture through the whole
// pipeline and checks the findings its spec names, and no others.
func TestFixtureSpecs(t *testing.T) {
	fixturespec.Run(t, filepath.Join("testdata", "fixtures"), func(t *testing.T, capture string) []map[string]any {
		return analyzeJSON(t, capture)
	})
}
