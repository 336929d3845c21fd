package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/replaywatch/replaywatch/test/fixturespec"
)

// analyzeJSON runs analyze on files with --format json and returns the
// records and the exit code.
func analyzeJSON(t *testing.T, extra []string, files ...string) ([]map[string]any, int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := append([]string{"analyze", "--format", "json", "--progress", "never"}, extra...)
	code := run(append(args, files...), nil, &stdout, &stderr)
	var recs []map[string]any
	for i, line := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("output line %d is not JSON: %v\n%s", i+1, err, line)
		}
		recs = append(recs, r)
	}
	return recs, code, stderr.String()
}

// runSpecs checks every spec in dir against the binary's analyze, the exit
// code included (freshly recorded fixtures, TestRegeneratedFixtures).
func runSpecs(t *testing.T, dir string) {
	fixturespec.Run(t, dir, func(t *testing.T, capture string) []map[string]any {
		recs, code, stderr := analyzeJSON(t, nil, capture)
		if code == exitError {
			t.Fatalf("analyze failed (exit %d): %s", code, stderr)
		}
		violations := 0
		for _, r := range recs {
			if r["type"] == "violation" {
				violations++
			}
		}
		if want := map[bool]int{true: exitViolations, false: exitOK}[violations > 0]; code != want {
			t.Errorf("exit code %d with %d violations, want %d", code, violations, want)
		}
		return recs
	})
}
