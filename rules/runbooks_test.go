package rules

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const runbookDir = "../docs/runbooks"

// TestRunbooksExist: a runbook for every catalogue kind, each page linked
// from the index, and every page with the four sections the alerts promise.
func TestRunbooksExist(t *testing.T) {
	index, err := os.ReadFile(filepath.Join(runbookDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range catalogue {
		if _, err := os.Stat(filepath.Join(runbookDir, string(k)+".md")); err != nil {
			t.Errorf("catalogue kind %s: %v", k, err)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(runbookDir, "*.md"))
	for _, p := range pages {
		name := filepath.Base(p)
		if name == "README.md" {
			continue
		}
		if !strings.Contains(string(index), "("+name+")") {
			t.Errorf("%s is not linked from docs/runbooks/README.md", name)
		}
		b, _ := os.ReadFile(p)
		for _, section := range []string{"## What it means", "## Confirm it", "## Reconcile", "## Fix"} {
			if !strings.Contains(string(b), section) {
				t.Errorf("%s: no section %q", name, section)
			}
		}
	}
}

var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// TestRunbookQueries runs every SQL block of the runbooks on ClickHouse 26.x
// with replaywatch's schema: the column and table names they tell the
// on-call engineer to type must be real.
func TestRunbookQueries(t *testing.T) {
	ctx := context.Background()
	s := openSchema(t)
	pages, _ := filepath.Glob(filepath.Join(runbookDir, "*.md"))
	n := 0
	for _, p := range pages {
		b, _ := os.ReadFile(p)
		for _, m := range sqlBlock.FindAllStringSubmatch(string(b), -1) {
			block := strings.NewReplacer("replaywatch.", s.Database()+".", "<session>", "S1", "<server>", "10.0.0.9:8080", "<node>", "n1").Replace(m[1])
			for stmt := range strings.SplitSeq(block, ";") {
				if strings.TrimSpace(regexp.MustCompile(`(?m)^--.*$`).ReplaceAllString(stmt, "")) == "" {
					continue
				}
				n++
				if _, err := s.Query(ctx, stmt); err != nil {
					t.Errorf("%s: %v\n%s", filepath.Base(p), err, stmt)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no SQL in the runbooks")
	}
	t.Logf("%d runbook queries ran", n)
}
