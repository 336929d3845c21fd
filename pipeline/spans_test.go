package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/sink"
	"github.com/replaywatch/replaywatch/sink/jsonl"
	"github.com/replaywatch/replaywatch/test/spanproj"
)

// spansJSON runs the offline spans pipeline over OTLP JSON files and
// returns its records.
func spansJSON(t *testing.T, files ...string) []map[string]any {
	t.Helper()
	cfg := SpansConfig{OTLP: otlp.DefaultConfig(), Decode: DefaultConfig().Decode, Detect: DefaultConfig().Detect}
	return recordsOf(t, files, func(w *jsonl.Writer) (*sink.Summary, error) {
		return SpanFiles(context.Background(), files, cfg, w)
	})
}

// findingKeys are a run's violations as "kind session", sorted, with
// duplicates (one per occurrence).
func findingKeys(recs []map[string]any) []string {
	var keys []string
	for _, r := range recs {
		if r["type"] == "violation" {
			keys = append(keys, fmt.Sprintf("%v %v", r["kind"], r["session_id"]))
		}
	}
	slices.Sort(keys)
	return keys
}

// missing is what of want is not in got (as multisets).
func missing(want, got []string) []string {
	left := map[string]int{}
	for _, k := range got {
		left[k]++
	}
	var out []string
	for _, k := range want {
		if left[k] > 0 {
			left[k]--
			continue
		}
		out = append(out, k)
	}
	return out
}

// TestSpansNeverSeeMoreThanPackets projects every fixture capture onto the
// spans an instrumented client would have exported for the same traffic
// and analyses them through the OTLP path: spans shaped as the guard
// records them (headers, requests, SSE events) and as an HTTP client
// instrumentation with header capture (headers only). Spans may see less
// than packets (a span shows no connection, and headers alone show no
// events), never more: no finding the packets do not prove. With every
// event recorded, the findings a span can show are those of the packets.
func TestSpansNeverSeeMoreThanPackets(t *testing.T) {
	pcaps, err := filepath.Glob(filepath.Join("testdata", "fixtures", "*.pcap"))
	if err != nil || len(pcaps) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	recall := map[spanproj.Shape][2]int{}
	for _, pcap := range pcaps {
		name := strings.TrimSuffix(filepath.Base(pcap), ".pcap")
		want := findingKeys(analyzeJSON(t, pcap))
		for _, shape := range []spanproj.Shape{spanproj.Guard, spanproj.Headers} {
			td, err := spanproj.FromPcap(context.Background(), []string{pcap}, shape)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), name+".json")
			if err := spanproj.WriteJSONLines(file, td, 7); err != nil {
				t.Fatal(err)
			}
			got := findingKeys(spansJSON(t, file))
			if extra := missing(got, want); len(extra) > 0 {
				t.Errorf("%s as %s spans: findings the packets do not show: %v", name, shape, extra)
			}
			lost := missing(want, got)
			r := recall[shape]
			r[0] += len(want) - len(lost)
			r[1] += len(want)
			recall[shape] = r
			switch {
			case len(lost) > 0 && shape == spanproj.Guard:
				t.Errorf("%s as %s spans: not seen, though the spans record every event: %v", name, shape, lost)
			case len(lost) > 0:
				t.Logf("%s as %s spans: not seen: %v", name, shape, lost)
			}
		}
	}
	for shape, r := range recall {
		t.Logf("%s spans find %d of the %d findings packets find", shape, r[0], r[1])
	}
}
