package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/internal/atomicfile"
)

// HashKeyEnv gives the hash key itself (a Kubernetes Secret shared by every
// agent of a deployment); it wins over --hash-key-file.
const HashKeyEnv = "REPLAYWATCH_HASH_KEY"

// hashKeyBytes is the size of a generated key (hex-encoded in its file).
const hashKeyBytes = 32

// registerPrivacy adds the flags that decide what of the wire is kept: the
// hash key and query strings (tool arguments: --store-arguments).
func registerPrivacy(fs *flag.FlagSet, path *string, dc *decode.Config) {
	fs.BoolVar(&dc.KeepQueryStrings, "keep-query-strings", false, "keep request query strings in evidence and explanations (default: replaced by their length; a query can carry a token)")
	fs.StringVar(path, "hash-key-file", "", "file holding the key of every hash of user data (HMAC-SHA-256 of Authorization values, tool arguments, event data), created with a random key when missing; give every agent of a deployment the same key (env "+HashKeyEnv+" gives the key itself and wins) (default $XDG_STATE_HOME/replaywatch/hash.key)")
}

// stateDir is where replaywatch keeps state between runs: the spool and
// the hash key (XDG_STATE_HOME: data, not a cache).
func stateDir() (string, error) {
	if base := os.Getenv("XDG_STATE_HOME"); base != "" {
		return filepath.Join(base, "replaywatch"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "replaywatch"), nil
}

// hashKey is the key and where it came from, for the log (never the key).
type hashKey struct {
	key    []byte
	origin string
	// warning, when set, says why hashes of this run cannot be compared
	// with other runs' (the key could not be stored).
	warning string
}

// loadHashKey reads the key from HashKeyEnv, else from path (default in
// stateDir), generating and storing one on first use. Two processes
// starting at once store one key: it is written aside and linked into
// place, and the loser reads the winner's. When the key cannot be stored
// at the default path (a read-only home) a random key serves this run,
// with a warning; at a path the operator gave, that is an error: they
// asked for one key across runs and agents.
func loadHashKey(path string) (hashKey, error) {
	if v := os.Getenv(HashKeyEnv); v != "" {
		return checkedKey([]byte(strings.TrimSpace(v)), "environment "+HashKeyEnv)
	}
	explicit := path != ""
	if !explicit {
		dir, err := stateDir()
		if err != nil {
			return ephemeralKey(err)
		}
		path = filepath.Join(dir, "hash.key")
	}
	if b, err := os.ReadFile(path); err == nil {
		return checkedKey([]byte(strings.TrimSpace(string(b))), "file "+path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return hashKey{}, fmt.Errorf("hash key: %w", err)
	}
	key, err := newKey()
	if err != nil {
		return hashKey{}, err
	}
	if err := storeKey(path, key); err != nil {
		if errors.Is(err, os.ErrExist) {
			return loadHashKey(path) // another process stored one first
		}
		if explicit {
			return hashKey{}, fmt.Errorf("hash key: cannot store a new key in %s: %w", path, err)
		}
		return ephemeralKey(err)
	}
	return hashKey{key: key, origin: "file " + path + " (generated now)"}, nil
}

func checkedKey(key []byte, origin string) (hashKey, error) {
	if len(key) < decode.MinHashKeyBytes {
		return hashKey{}, fmt.Errorf("hash key from %s: %d bytes, want at least %d (e.g. %d random bytes in hex)", origin, len(key), decode.MinHashKeyBytes, hashKeyBytes)
	}
	return hashKey{key: key, origin: origin}, nil
}

func newKey() ([]byte, error) {
	raw := make([]byte, hashKeyBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("hash key: %w", err)
	}
	return []byte(hex.EncodeToString(raw)), nil
}

func ephemeralKey(cause error) (hashKey, error) {
	key, err := newKey()
	if err != nil {
		return hashKey{}, err
	}
	return hashKey{key: key, origin: "this run only",
		warning: fmt.Sprintf("no hash key could be stored (%v): this run's hashes cannot be compared with other runs'; give --hash-key-file or %s", cause, HashKeyEnv)}, nil
}

// storeKey writes key to path without ever exposing a partial file; it
// fails with os.ErrExist if another process got there first.
func storeKey(path string, key []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Create(path, append(key, '\n'))
}
