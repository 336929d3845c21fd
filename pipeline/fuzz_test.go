package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/replaywatch/replaywatch/detector"
)

// discard is a sink of findings that keeps nothing.
type discard struct{}

func (discard) Violation(*detector.Violation)           {}
func (discard) Resume(*detector.ResumeAttempt)          {}
func (discard) Session(*detector.SessionSummary)        {}
func (discard) UnknownOutcome(*detector.UnknownOutcome) {}
func (discard) Unverifiable(*detector.Unverifiable)     {}

// FuzzAnalyzeFile feeds arbitrary bytes through the whole file path:
// capture, reassembly, HTTP/SSE decoding and the detector. Whatever the
// input, analysis returns (a result or a clear error) without panicking. The
// seeds are real SDK captures, so mutations explore damaged real traffic.
func FuzzAnalyzeFile(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "cmd", "replaywatch", "testdata", "fixtures", "*.pcap"))
	for _, s := range seeds {
		if data, err := os.ReadFile(s); err == nil && len(data) < 64<<10 {
			f.Add(data)
		}
	}
	f.Add([]byte{})
	f.Add([]byte("\xd4\xc3\xb2\xa1"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in.pcap")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Capture.Workers = 1
		s, err := Files(context.Background(), []string{path}, cfg, discard{})
		if err == nil && s == nil {
			t.Fatal("no summary and no error")
		}
	})
}
