package docs

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/test/testenv"
)

// repoRoot is the repository's root: the tests run in docs/.
const repoRoot = ".."

// mdLink is one link target written in a Markdown document.
type mdLink struct {
	line   int    // 1-based line of the target
	target string // the destination, without <>, title or backslash escapes
}

// fence opens or closes a fenced code block: three or more backticks or
// tildes, indented by any amount (fences in list items are indented more
// than the three spaces CommonMark allows at top level).
var fence = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})(.*)$")

// refDef is a link reference definition, `[label]: target`. A label that
// starts with ^ is a footnote, not a link.
var refDef = regexp.MustCompile(`^ {0,3}\[((?:[^\]\\^]|\\.)(?:[^\]\\]|\\.)*)\]:[ \t]*(<[^>\n]*>|\S+)`)

// blankFences returns src's lines with every line of a fenced code block
// (the fences included) made empty, so nothing in it is read as Markdown
// and line numbers stay as they were.
func blankFences(src string) []string {
	lines := strings.Split(src, "\n")
	open, openLen := byte(0), 0
	for i, l := range lines {
		m := fence.FindStringSubmatch(l)
		switch {
		case open == 0 && m != nil && (m[1][0] == '~' || !strings.Contains(m[2], "`")):
			open, openLen = m[1][0], len(m[1])
			lines[i] = ""
		case open != 0:
			if m != nil && m[1][0] == open && len(m[1]) >= openLen && strings.TrimSpace(m[2]) == "" {
				open = 0
			}
			lines[i] = ""
		}
	}
	return lines
}

// blankCodeSpans replaces every code span of a block (a paragraph: code
// spans do not cross blank lines) by spaces, keeping its newlines.
func blankCodeSpans(b []byte) {
	run := func(i int) int { // length of the backtick run at i
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		return n
	}
	for i := 0; i < len(b); {
		switch {
		case b[i] == '\\' && i+1 < len(b):
			i += 2 // an escaped backtick opens nothing
		case b[i] == '`':
			n := run(i)
			end := -1
			for j := i + n; j < len(b); {
				if b[j] != '`' {
					j++
					continue
				}
				m := run(j)
				if m == n {
					end = j + m
					break
				}
				j += m
			}
			if end < 0 {
				i += n // no closing run: literal backticks
				continue
			}
			for k := i; k < end; k++ {
				if b[k] != '\n' {
					b[k] = ' '
				}
			}
			i = end
		default:
			i++
		}
	}
}

// openBracket finds the '[' that the ']' at close matches, or -1.
func openBracket(b []byte, close int) int {
	depth := 0
	for i := close - 1; i >= 0; i-- {
		if i > 0 && b[i-1] == '\\' {
			continue
		}
		switch b[i] {
		case ']':
			depth++
		case '[':
			if depth == 0 {
				return i
			}
			depth--
		}
	}
	return -1
}

// destination parses an inline link's destination and what may follow it
// (a title, then ')') at b[i:], just after "](". ok is false when what
// follows is not a link.
func destination(b []byte, i int) (target string, at int, ok bool) {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n') {
		i++
	}
	at = i
	var end int
	if i < len(b) && b[i] == '<' {
		j := bytes.IndexAny(b[i+1:], ">\n")
		if j < 0 || b[i+1+j] != '>' {
			return "", 0, false
		}
		target, end = string(b[i+1:i+1+j]), i+2+j
	} else {
		depth, j := 0, i
	scan:
		for ; j < len(b); j++ {
			switch c := b[j]; {
			case c == '\\' && j+1 < len(b):
				j++
			case c == '(':
				depth++
			case c == ')':
				if depth == 0 {
					break scan
				}
				depth--
			case c <= ' ':
				break scan
			}
		}
		target, end = string(b[i:j]), j
	}
	for end < len(b) && (b[end] == ' ' || b[end] == '\t' || b[end] == '\n') {
		end++
	}
	if end >= len(b) || !strings.ContainsRune(`)"'(`, rune(b[end])) {
		return "", 0, false
	}
	return unescape(target), at, true
}

// unescape removes the backslashes of escaped ASCII punctuation.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", s[i+1]) >= 0 {
			i++
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// markdownLinks returns the targets of a Markdown document's inline links
// and images ([text](target), ![alt](target)) and reference definitions
// ([label]: target), leaving out fenced code blocks and code spans.
func markdownLinks(src string) []mdLink {
	lines := blankFences(src)
	var links []mdLink
	for start := 0; start < len(lines); {
		if strings.TrimSpace(lines[start]) == "" {
			start++
			continue
		}
		end := start
		for end < len(lines) && strings.TrimSpace(lines[end]) != "" {
			end++
		}
		block := []byte(strings.Join(lines[start:end], "\n"))
		blankCodeSpans(block)
		lineAt := func(off int) int { return start + 1 + bytes.Count(block[:off], []byte("\n")) }
		off := 0
		for l := range strings.SplitSeq(string(block), "\n") {
			if m := refDef.FindStringSubmatch(l); m != nil {
				links = append(links, mdLink{lineAt(off), unescape(strings.TrimSuffix(strings.TrimPrefix(m[2], "<"), ">"))})
			}
			off += len(l) + 1
		}
		for i := 0; i+1 < len(block); i++ {
			if block[i] != ']' || block[i+1] != '(' || (i > 0 && block[i-1] == '\\') || openBracket(block, i) < 0 {
				continue
			}
			if target, at, ok := destination(block, i+2); ok {
				links = append(links, mdLink{lineAt(at), target})
			}
		}
		start = end
	}
	return links
}

// repoFiles lists the repository's files, relative to its root in slash
// form: those git tracks and those it would track (new, not ignored), so a
// page written but not yet committed is checked too, and nothing a clone
// lacks (ignored build output, node_modules) counts.
func repoFiles(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if testenv.InCI() {
			t.Fatal("git not found: it lists the repository's files")
		}
		t.Skip("git not found: install git to check the repository's links")
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("git ls-files: %v: %s", err, stderr.Bytes())
		}
		t.Skipf("not a git checkout (git ls-files: %v: %s)", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var files []string
	for f := range strings.SplitSeq(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	return slices.Compact(files) // a file with unmerged stages is listed once per stage
}

// repository is what links may point at: its files and their folders.
type repository struct {
	root  string // absolute
	files map[string]bool
	dirs  map[string]bool
	// exists says whether a path (relative to root, slash form) is there:
	// a file listed by the index may be deleted in the working tree.
	exists func(rel string) bool
}

func newRepository(t *testing.T, files []string) *repository {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	r := &repository{root: root, files: map[string]bool{}, dirs: map[string]bool{".": true}}
	r.exists = func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}
	for _, f := range files {
		r.files[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			r.dirs[d] = true
		}
	}
	return r
}

// skipLink says whether target is not a path to check: a web or mail
// address, or an anchor in the same page.
func skipLink(target string) bool {
	lower := strings.ToLower(target)
	for _, p := range []string{"http:", "https:", "mailto:", "#"} {
		if strings.HasPrefix(lower, p) {
			return true
		}
	}
	return false
}

// resolve returns the repository path (slash form, relative to the root)
// that target, written in the Markdown file page (relative to the root),
// names, or why it names none.
func (r *repository) resolve(page, target string) (string, error) {
	p := target
	if i := strings.IndexAny(p, "#?"); i >= 0 {
		p = p[:i]
	}
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	switch {
	case target == "":
		return "", fmt.Errorf("empty link target")
	case p == "":
		return page, nil // a query or fragment of the page itself
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("absolute path: write it relative to %s", page)
	}
	rel := path.Join(path.Dir(page), p)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("leaves the repository (resolves to %s)", rel)
	}
	switch {
	case !r.exists(rel):
		return "", fmt.Errorf("%s does not exist", rel)
	case !r.files[rel] && !r.dirs[rel]:
		return "", fmt.Errorf("%s is not part of the repository (git ignores it)", rel)
	}
	return rel, nil
}

// markdownFiles are the repository's Markdown files, none under a
// node_modules folder.
func markdownFiles(files []string) []string {
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, ".md") && !slices.Contains(strings.Split(f, "/"), "node_modules") {
			out = append(out, f)
		}
	}
	return out
}

// TestMarkdownLinks: every relative link of every Markdown file of the
// repository (inline links, images and reference definitions, outside code)
// names a file or folder inside the repository that exists. Web and mail
// addresses and same-page anchors are not checked; a #fragment or ?query is
// cut off before the path is.
func TestMarkdownLinks(t *testing.T) {
	files := repoFiles(t)
	r := newRepository(t, files)
	pages := markdownFiles(files)
	if len(pages) == 0 {
		t.Fatal("no Markdown files listed")
	}
	var bad []string
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(page)))
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(b)) {
			if skipLink(l.target) {
				continue
			}
			checked++
			if _, err := r.resolve(page, l.target); err != nil {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: %v", page, l.line, l.target, err))
			}
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	if len(bad) > 0 {
		t.Errorf("%d broken link(s) of %d relative links in %d Markdown files", len(bad), checked, len(pages))
	}
}

// TestMarkdownLinkExtraction holds markdownLinks to the link forms it must
// find and the code it must skip.
func TestMarkdownLinkExtraction(t *testing.T) {
	// One line per element: line n of the document is element n-1.
	src := strings.Join([]string{
		"# Title",
		"",
		"See [a](a.md) and ![pic](img/p.png \"t\").",
		"A [nested [x] text](b.md#part) and [c](<c d.md>).",
		"Code `[no](code.md)` and ``[no](two.md)`` here.",
		"A span `that goes",
		"on [no](span.md)` and [yes](e.md?q=1).",
		"",
		"```go",
		"x := [no](fence.md)",
		"```",
		"",
		"~~~",
		"[no](tilde.md)",
		"~~~",
		"",
		"[ref]: ref.md \"Title\"",
		"[^1]: a footnote, not a link",
		"Not a link: f](x) and \\[no](esc.md).",
		"[wrapped",
		"text](wrapped.md) and [p](f(1).md)",
		"- item",
		"  ```",
		"  [no](listfence.md)",
		"  ```",
		"[web](https://example.com) [mail](MAILTO:x@y) [anchor](#top)",
	}, "\n")
	var got []string
	for _, l := range markdownLinks(src) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := []string{"3:a.md", "3:img/p.png", "4:b.md#part", "4:c d.md", "7:e.md?q=1", "17:ref.md",
		"21:wrapped.md", "21:f(1).md", "26:https://example.com", "26:MAILTO:x@y", "26:#top"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("links\n got %q\nwant %q", got, want)
	}
	for _, target := range []string{"https://example.com", "MAILTO:x@y", "#top"} {
		if !skipLink(target) {
			t.Errorf("%s is checked, want it skipped", target)
		}
	}

	// The checks themselves, on a made-up repository.
	r := newRepository(t, []string{"README.md", "docs/a.md", "docs/runbooks/x.md"})
	r.exists = func(rel string) bool { return r.files[rel] || r.dirs[rel] || rel == "bin/tool" } // bin/tool: on disk, ignored by git
	for _, c := range []struct {
		page, target string
		ok           bool
	}{
		{"docs/a.md", "runbooks/x.md#confirm", true},
		{"docs/a.md", "../README.md?plain=1", true},
		{"docs/a.md", "runbooks", true},
		{"docs/a.md", "?q", true},
		{"docs/a.md", "../../elsewhere/notes.md", false}, // leaves the repository
		{"README.md", "../main/README.md", false},        // leaves it too, even if it comes back
		{"docs/a.md", "runbooks/y.md", false},            // missing
		{"docs/a.md", "../bin/tool", false},              // there, but git ignores it
		{"docs/a.md", "/docs/a.md", false},               // absolute
		{"docs/a.md", "", false},
	} {
		_, err := r.resolve(c.page, c.target)
		if (err == nil) != c.ok {
			t.Errorf("%s: link %q: error %v, want ok=%v", c.page, c.target, err, c.ok)
		}
	}
}
