package fixturespec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSpecParser(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.spec")
	os.WriteFile(path, []byte("# c\nexpect violation kind=session_swap count=1 # why\nexpect resume outcome=resumed count>=2\nexpect violation count=0\n"), 0o644)
	s, err := Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.expects) != 3 || s.Capture != filepath.Join(dir, "x.pcap") {
		t.Fatalf("parsed %+v", s)
	}
	recs := []map[string]any{
		{"type": "violation", "kind": "session_swap"},
		{"type": "resume", "outcome": "resumed"},
	}
	probs := s.Check(recs)
	// resumed appears once (want >= 2) and one violation exists (want 0 for the bare line).
	if len(probs) != 2 {
		t.Fatalf("problems = %q, want 2", probs)
	}
	recs = append(recs, map[string]any{"type": "violation", "kind": "replayed_event"})
	if probs := s.Check(recs); !strings.Contains(strings.Join(probs, "\n"), "unexpected violation replayed_event") {
		t.Fatalf("closed world not enforced: %q", probs)
	}
	os.WriteFile(path, []byte("expect unverifiable reason=\"capture gap in the evidence\" check=cursor_dropped\n"), 0o644)
	if s, err = Parse(path); err != nil {
		t.Fatal(err)
	}
	if probs := s.Check([]map[string]any{{"type": "unverifiable", "reason": "capture gap in the evidence", "check": "cursor_dropped"}}); len(probs) != 0 {
		t.Fatalf("quoted value: %q", probs)
	}
	for _, bad := range []string{"frobnicate\n", "expect nothing\n", "expect violation count=x\n", "expect violation kind\n", "expect unverifiable reason=\"open\n"} {
		os.WriteFile(path, []byte(bad), 0o644)
		if _, err := Parse(path); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}
