// Command gen writes the dashboards' JSON: dashboards/json/<uid>.json and
// the copies Kubernetes deploys, deploy/kubernetes/grafana/dashboards/<uid>.json.
//
//	go run ./dashboards/cmd/gen   (or go generate ./dashboards)
//
// It finds the module root from the working directory.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/replaywatch/replaywatch/dashboards"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	files, err := dashboards.Files()
	if err != nil {
		return err
	}
	for _, dir := range dashboards.OutputDirs {
		dir = filepath.Join(root, dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		old, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, p := range old {
			if _, ok := files[filepath.Base(p)]; !ok {
				if err := os.Remove(p); err != nil {
					return err
				}
			}
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
