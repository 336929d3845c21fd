package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestHashKeyStoredOnce: processes starting at once with no key store one
// between them and all use it; a later run reads it back.
func TestHashKeyStoredOnce(t *testing.T) {
	t.Setenv(HashKeyEnv, "")
	path := filepath.Join(t.TempDir(), "state", "hash.key")
	keys := make([]hashKey, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := loadHashKey(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for _, k := range keys {
		if !bytes.Equal(k.key, keys[0].key) || k.warning != "" {
			t.Fatalf("concurrent first runs disagree on the key (%s vs %s)", k.origin, keys[0].origin)
		}
	}
	again, err := loadHashKey(path)
	if err != nil || !bytes.Equal(again.key, keys[0].key) || again.origin != "file "+path {
		t.Fatalf("a later run: %v, %s", err, again.origin)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v, mode %v: want private", err, st.Mode())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".hash.key-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestHashKeySources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "hash.key")
	os.WriteFile(file, []byte("from-the-file-0123456789\n"), 0o600)
	notDir := filepath.Join(dir, "plain")
	os.WriteFile(notDir, nil, 0o600)
	for _, tc := range []struct {
		name, env, path string
		stateHome       string // XDG_STATE_HOME, for the default path
		key, errText    string
		warned          bool
	}{
		{name: "file", path: file, key: "from-the-file-0123456789"},
		{name: "environment wins", env: "from-the-secret-0123456789", path: file, key: "from-the-secret-0123456789"},
		{name: "short key", env: "1234", errText: "at least 16"},
		{name: "unreadable file", path: filepath.Join(notDir, "hash.key"), errText: "not a directory"},
		// Absent, and no directory can be made there (a read-only mount):
		// the operator named it, so a key of this run only is an error.
		{name: "cannot be stored", path: "/proc/self/replaywatch/hash.key", errText: "cannot store a new key"},
		// The same at the default path (a read-only home): this run's own
		// key, with a warning.
		{name: "default cannot be stored", stateHome: "/proc/self/state", warned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(HashKeyEnv, tc.env)
			t.Setenv("XDG_STATE_HOME", tc.stateHome)
			k, err := loadHashKey(tc.path)
			switch {
			case tc.errText != "":
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err %v, want %q", err, tc.errText)
				}
			case err != nil:
				t.Fatal(err)
			case tc.key != "" && string(k.key) != tc.key:
				t.Fatalf("key from %s", k.origin)
			case tc.warned != (k.warning != "") || len(k.key) < 16:
				t.Fatalf("warning %q, %d-byte key", k.warning, len(k.key))
			}
		})
	}
}
