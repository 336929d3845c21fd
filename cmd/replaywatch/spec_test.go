package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A spec file states what a capture must produce, in the spirit of
// Prometheus' promqltest files: adding a case is adding a capture and a text
// file, not code. Grammar (one statement a line, # starts a comment):
//
//	load FILE.pcap                       the capture (default: the .spec's name with .pcap)
//	expect TYPE [key=value ...] [count=N | count>=N]
//
// TYPE is a JSON Lines record type (violation, resume, session,
// unknown_outcome, unverifiable). Each key is a record field compared as
// text; value * means "present and not null". Without count the line means
// count>=1. Violations are a closed world: every violation reported must be
// matched by some "expect violation" line.
type spec struct {
	path    string
	capture string
	expects []expectation
}

type expectation struct {
	line    int
	typ     string
	fields  map[string]string
	count   int
	atLeast bool
}

func (e expectation) String() string {
	keys := make([]string, 0, len(e.fields))
	for k := range e.fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(e.typ)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, e.fields[k])
	}
	if e.atLeast {
		fmt.Fprintf(&b, " count>=%d", e.count)
	} else {
		fmt.Fprintf(&b, " count=%d", e.count)
	}
	return b.String()
}

var recordTypes = map[string]bool{"violation": true, "resume": true, "session": true, "unknown_outcome": true, "unverifiable": true}

func parseSpec(path string) (*spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &spec{path: path, capture: strings.TrimSuffix(path, ".spec") + ".pcap"}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "load":
			if len(f) != 2 {
				return nil, fmt.Errorf("%s:%d: load takes one file", path, n)
			}
			s.capture = filepath.Join(filepath.Dir(path), f[1])
		case "expect":
			if len(f) < 2 || !recordTypes[f[1]] {
				return nil, fmt.Errorf("%s:%d: expect needs a record type (violation, resume, session, unknown_outcome, unverifiable)", path, n)
			}
			e := expectation{line: n, typ: f[1], fields: map[string]string{}, count: 1, atLeast: true}
			for _, kv := range f[2:] {
				switch {
				case strings.HasPrefix(kv, "count>="):
					c, err := strconv.Atoi(strings.TrimPrefix(kv, "count>="))
					if err != nil {
						return nil, fmt.Errorf("%s:%d: %q: %v", path, n, kv, err)
					}
					e.count, e.atLeast = c, true
				case strings.HasPrefix(kv, "count="):
					c, err := strconv.Atoi(strings.TrimPrefix(kv, "count="))
					if err != nil {
						return nil, fmt.Errorf("%s:%d: %q: %v", path, n, kv, err)
					}
					e.count, e.atLeast = c, false
				default:
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return nil, fmt.Errorf("%s:%d: %q is not key=value", path, n, kv)
					}
					e.fields[k] = v
				}
			}
			s.expects = append(s.expects, e)
		default:
			return nil, fmt.Errorf("%s:%d: unknown statement %q (want load or expect)", path, n, f[0])
		}
	}
	return s, sc.Err()
}

// matches reports whether record r (a decoded JSON line) satisfies e's fields.
func (e expectation) matches(r map[string]any) bool {
	if r["type"] != e.typ {
		return false
	}
	for k, want := range e.fields {
		got, ok := r[k]
		if !ok || got == nil {
			if want == "null" {
				continue
			}
			return false
		}
		if want == "*" {
			continue
		}
		if fieldText(got) != want {
			return false
		}
	}
	return true
}

func fieldText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

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

// checkSpec compares records with the spec and returns every mismatch.
func checkSpec(s *spec, recs []map[string]any) []string {
	var problems []string
	for _, e := range s.expects {
		n := 0
		for _, r := range recs {
			if e.matches(r) {
				n++
			}
		}
		if e.atLeast && n < e.count || !e.atLeast && n != e.count {
			problems = append(problems, fmt.Sprintf("line %d: expect %s: got %d", e.line, e, n))
		}
	}
	for _, r := range recs {
		if r["type"] != "violation" {
			continue
		}
		matched := false
		for _, e := range s.expects {
			if e.typ == "violation" && e.count > 0 && e.matches(r) {
				matched = true
				break
			}
		}
		if !matched {
			problems = append(problems, fmt.Sprintf("unexpected violation %v (session %v, last_event_id %v, first_event_id %v): %v",
				r["kind"], r["session_id"], r["last_event_id"], r["first_event_id"], r["explanation"]))
		}
	}
	return problems
}

func specFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.spec"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// runSpecs runs every spec in dir against the pipeline.
func runSpecs(t *testing.T, dir string) {
	files := specFiles(t, dir)
	if len(files) == 0 {
		t.Fatalf("no spec files in %s", dir)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".spec"), func(t *testing.T) {
			s, err := parseSpec(path)
			if err != nil {
				t.Fatal(err)
			}
			recs, code, stderr := analyzeJSON(t, nil, s.capture)
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
			for _, p := range checkSpec(s, recs) {
				t.Error(p)
			}
		})
	}
}

// TestFixtureSpecs runs every committed real-SDK capture through the whole
// pipeline and checks the findings its spec names, and no others.
func TestFixtureSpecs(t *testing.T) {
	runSpecs(t, filepath.Join("testdata", "fixtures"))
}

func TestSpecParser(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.spec")
	os.WriteFile(path, []byte("# c\nexpect violation kind=session_swap count=1 # why\nexpect resume outcome=resumed count>=2\nexpect violation count=0\n"), 0o644)
	s, err := parseSpec(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.expects) != 3 || s.capture != filepath.Join(dir, "x.pcap") {
		t.Fatalf("parsed %+v", s)
	}
	recs := []map[string]any{
		{"type": "violation", "kind": "session_swap"},
		{"type": "resume", "outcome": "resumed"},
	}
	probs := checkSpec(s, recs)
	// resumed appears once (want >= 2) and one violation exists (want 0 for the bare line).
	if len(probs) != 2 {
		t.Fatalf("problems = %q, want 2", probs)
	}
	recs = append(recs, map[string]any{"type": "violation", "kind": "replayed_event"})
	if probs := checkSpec(s, recs); !strings.Contains(strings.Join(probs, "\n"), "unexpected violation replayed_event") {
		t.Fatalf("closed world not enforced: %q", probs)
	}
	for _, bad := range []string{"frobnicate\n", "expect nothing\n", "expect violation count=x\n", "expect violation kind\n"} {
		os.WriteFile(path, []byte(bad), 0o644)
		if _, err := parseSpec(path); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}
