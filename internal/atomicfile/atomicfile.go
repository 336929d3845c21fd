// Package atomicfile writes files that are never seen half written: the
// data goes to a temporary file in the target's directory, is synced, and
// only then takes the target's name.
package atomicfile

import (
	"os"
	"path/filepath"
)

// writeTemp writes data to a new temporary file beside path and returns
// its name; the caller renames or links it into place, and removes it.
func writeTemp(path string, data []byte) (string, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

// Replace writes data to path, replacing what was there: a crash leaves
// the old file or the new one (mode 0600).
func Replace(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return os.Rename(tmp, path)
}

// Create writes data to path only if nothing is there; when another
// process got there first it fails with an error for which
// errors.Is(err, os.ErrExist) holds, and path keeps the other's data
// (mode 0600).
func Create(path string, data []byte) error {
	tmp, err := writeTemp(path, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return os.Link(tmp, path)
}
