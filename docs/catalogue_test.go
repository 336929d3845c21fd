package docs

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/detector"
)

// The catalogue's layout, which this test reads: one section per kind,
// headed "## `kind`", holding a table row "| severity | ... |" that names
// each severity in bold, a link to the kind's runbook and links to the
// spec tests that pin it.
var (
	kindHeading = regexp.MustCompile("^## `([a-z0-9_]+)`")
	severityRow = regexp.MustCompile(`^\|\s*severity\s*\|(.*)\|\s*$`)
	boldLevel   = regexp.MustCompile(`\*\*(critical|high|medium|low)\*\*`)
)

// catalogueSection is one kind's section of docs/catalogue.md.
type catalogueSection struct {
	kind       detector.Kind
	start, end int // 1-based lines: the heading, and the last line
	lines      []string
}

// catalogueSections splits the catalogue into its kinds' sections (a
// section runs to the next level-1 or level-2 heading), outside code.
func catalogueSections(src string) []catalogueSection {
	lines := blankFences(src)
	var out []catalogueSection
	for i, l := range lines {
		if strings.HasPrefix(l, "# ") || strings.HasPrefix(l, "## ") {
			if n := len(out); n > 0 && out[n-1].end == 0 {
				out[n-1].end = i
			}
		}
		if m := kindHeading.FindStringSubmatch(l); m != nil {
			out = append(out, catalogueSection{kind: detector.Kind(m[1]), start: i + 1})
		}
	}
	if n := len(out); n > 0 && out[n-1].end == 0 {
		out[n-1].end = len(lines)
	}
	for i := range out {
		out[i].lines = lines[out[i].start-1 : out[i].end]
	}
	return out
}

// TestCatalogue: docs/catalogue.md has a section for exactly the kinds the
// detector reports (detector.Kinds(), in its order), each stating the
// severities its findings carry (detector.SeveritiesOf, the catalogue's
// first) and linking the kind's runbook, which exists, and at least one
// spec test of detector/testdata, which exists.
func TestCatalogue(t *testing.T) {
	const page = "docs/catalogue.md"
	b, err := os.ReadFile("catalogue.md")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	sections := catalogueSections(src)
	var got []detector.Kind
	for _, s := range sections {
		got = append(got, s.kind)
	}
	if want := detector.Kinds(); !slices.Equal(got, want) {
		for _, k := range want {
			if !slices.Contains(got, k) {
				t.Errorf("%s: no section for kind %s", page, k)
			}
		}
		for _, k := range got {
			if !slices.Contains(want, k) {
				t.Errorf("%s: section for %s, which is not a kind of detector.Kinds()", page, k)
			}
		}
		t.Errorf("%s: sections\n%v\nwant detector.Kinds(), in order:\n%v", page, got, want)
	}

	links := markdownLinks(src)
	for _, s := range sections {
		t.Run(string(s.kind), func(t *testing.T) {
			var levels []detector.Severity
			rows := 0
			for _, l := range s.lines {
				if m := severityRow.FindStringSubmatch(l); m != nil {
					rows++
					for _, b := range boldLevel.FindAllStringSubmatch(m[1], -1) {
						if sev := detector.Severity(b[1]); !slices.Contains(levels, sev) {
							levels = append(levels, sev)
						}
					}
				}
			}
			want := detector.SeveritiesOf(s.kind)
			switch {
			case rows != 1:
				t.Errorf("%s:%d: %d \"| severity | ... |\" rows, want 1", page, s.start, rows)
			case len(levels) == 0 || levels[0] != want[0] || !sameSet(levels, want):
				t.Errorf("%s:%d: severities %v, want %v (detector.SeveritiesOf; %s first, each in bold)", page, s.start, levels, want, want[0])
			}

			runbook := path.Join("docs/runbooks", string(s.kind)+".md")
			var hasRunbook, hasSpec bool
			for _, l := range links {
				if l.line < s.start || l.line > s.end || skipLink(l.target) {
					continue
				}
				p := l.target
				if i := strings.IndexAny(p, "#?"); i >= 0 {
					p = p[:i]
				}
				rel := path.Join("docs", p)
				if rel == runbook {
					hasRunbook = true
				}
				if path.Dir(rel) == "detector/testdata" && strings.HasSuffix(rel, ".test") {
					if _, err := os.Stat(path.Join(repoRoot, rel)); err != nil {
						t.Errorf("%s:%d: spec test %s: %v", page, l.line, rel, err)
					} else {
						hasSpec = true
					}
				}
			}
			if !hasRunbook {
				t.Errorf("%s:%d: no link to the runbook %s", page, s.start, runbook)
			}
			if _, err := os.Stat(path.Join(repoRoot, runbook)); err != nil {
				t.Errorf("%s: runbook of %s: %v", page, s.kind, err)
			}
			if !hasSpec {
				t.Errorf("%s:%d: no link to a spec test in detector/testdata", page, s.start)
			}
		})
	}
}

func sameSet[T comparable](a, b []T) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}

// TestCatalogueSections holds catalogueSections to the layout it reads.
func TestCatalogueSections(t *testing.T) {
	src := strings.Join([]string{
		"# Catalogue",
		"## `a_kind`",
		"| severity | **high** |",
		"```",
		"## `in_code`",
		"```",
		"## Other section",
		"text",
		"## `b_kind`: with words",
		"### Sub-heading stays inside",
		"last",
	}, "\n")
	var got []string
	for _, s := range catalogueSections(src) {
		got = append(got, fmt.Sprintf("%s:%d-%d", s.kind, s.start, s.end))
	}
	if want := []string{"a_kind:2-6", "b_kind:9-11"}; !slices.Equal(got, want) {
		t.Errorf("sections %q, want %q", got, want)
	}
}
