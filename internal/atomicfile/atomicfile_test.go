package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCreateAndReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Create(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := Create(path, []byte("second")); !errors.Is(err, os.ErrExist) {
		t.Fatalf("a second Create: %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" {
		t.Fatalf("Create replaced the file: %q", b)
	}
	if err := Replace(path, []byte("third")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "third" {
		t.Fatalf("after Replace: %q", b)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}
