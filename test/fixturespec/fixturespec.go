// Package fixturespec reads and checks the spec files beside the fixture
// captures (pipeline/testdata/fixtures/*.spec): what each capture must
// produce, as JSON Lines records. Used by the pipeline's end-to-end tests and
// by the binary's tests of freshly recorded fixtures.
package fixturespec

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
// text (quoted when it holds spaces: reason="capture gap in the evidence");
// value * means "present and not null". Without count the line means
// count>=1. Violations are a closed world: every violation reported must be
// matched by some "expect violation" line.
type Spec struct {
	Path    string
	Capture string // the capture file the spec is about
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

// Parse reads a spec file.
func Parse(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &Spec{Path: path, Capture: strings.TrimSuffix(path, ".spec") + ".pcap"}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		f, err := Fields(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "load":
			if len(f) != 2 {
				return nil, fmt.Errorf("%s:%d: load takes one file", path, n)
			}
			s.Capture = filepath.Join(filepath.Dir(path), f[1])
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

// Fields splits a spec line at blanks, except inside a double-quoted value
// (key="two words"), whose quotes it drops. The detector's spec files share
// it.
func Fields(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' || r == '\t':
			if quoted {
				cur.WriteRune(r)
			} else if in {
				out, in = append(out, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
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

// Check compares records (decoded JSON Lines) with the spec and returns
// every mismatch.
func (s *Spec) Check(recs []map[string]any) []string {
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

// Run checks every spec in dir: analyze returns the records of a capture
// (the whole pipeline, by whatever entry point the caller tests).
func Run(t *testing.T, dir string, analyze func(t *testing.T, capture string) []map[string]any) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.spec"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no spec files in %s (%v)", dir, err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".spec"), func(t *testing.T) {
			s, err := Parse(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range s.Check(analyze(t, s.Capture)) {
				t.Error(p)
			}
		})
	}
}

// Count is how many spec files dir holds.
func Count(t *testing.T, dir string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.spec"))
	if err != nil {
		t.Fatal(err)
	}
	return len(files)
}
