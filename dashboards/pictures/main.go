// Command pictures draws what the Overview and Session dashboards show, for
// readers without a Grafana: it builds the data set the dashboards' tests
// run on (package dataset: the fixtures analysed by the real binary into a
// ClickHouse 18.16 server, copied into chDB, ClickHouse 26.x), takes every
// ClickHouse panel of the generated dashboards, expands its SQL exactly as
// Grafana and the plugin do (dashboards.Expand), runs it on chDB, runs
// every story panel and annotation through replaywatch's own data source
// plugin on the 18.16 database, and draws the rows and frames with
// gonum.org/v1/plot: time series as stacked bars or lines, stats as big
// numbers, tables as text tables, a state timeline as coloured spans with
// the annotations, plus the chosen session's timeline as swim lanes. It writes one PNG per panel to -out and the page
// that shows them to -doc.
//
//	go run ./dashboards/pictures -out docs/img -doc docs/dashboards.md
//
// scripts/render-dashboards.sh runs it with what it needs: clickhouse-server
// and clickhouse-client (Debian packages) and chDB's libchdb.so
// (scripts/fetch-chdb.sh; REPLAYWATCH_CHDB_LIB says where).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/dashboards/internal/dataset"
	"github.com/replaywatch/replaywatch/test/chtest"
)

func main() {
	out := flag.String("out", "docs/img", "folder for the PNGs, relative to the module root unless absolute")
	doc := flag.String("doc", "docs/dashboards.md", "the Markdown page showing them, relative to the module root unless absolute (empty: none)")
	flag.Parse()
	if err := run(*out, *doc); err != nil {
		fmt.Fprintln(os.Stderr, "pictures:", err)
		os.Exit(1)
	}
}

func run(out, doc string) (err error) {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tb := &programTB{}
	defer tb.cleanup()
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = errors.New(string(f))
		}
	}()
	tmp, err := os.MkdirTemp("", "pictures-")
	if err != nil {
		return err
	}
	tb.Cleanup(func() { os.RemoveAll(tmp) })
	fmt.Fprintln(os.Stderr, "pictures: building replaywatch, starting clickhouse-server")
	bin, err := dataset.BuildBinary(root, tmp)
	if err != nil {
		return err
	}
	srv, err := chtest.NewServer(filepath.Join(tmp, "clickhouse"), chtest.Options{})
	if err != nil {
		return fmt.Errorf("clickhouse-server (Debian package; scripts/render-dashboards.sh installs it): %w", err)
	}
	tb.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pictures: stopping clickhouse-server:", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Exec(ctx, "CREATE DATABASE pictures"); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "pictures: analysing the fixtures, copying the tables to chDB")
	data, err := dataset.Build(tb, root, bin, srv, "pictures", tb.Logf)
	if err != nil {
		return err
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	pics, err := Render(data, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "pictures: %d images in %s\n", len(pics), out)
	if doc == "" {
		return nil
	}
	if !filepath.IsAbs(doc) {
		doc = filepath.Join(root, doc)
	}
	return WriteDoc(doc, out, data, pics)
}

// moduleRoot asks the go command, which go run needs anyway.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w: run from the module", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// programTB lets a program use the test helpers (chdbtest.Open takes a
// testing.TB): a failure or skip panics with fatal, which run recovers,
// and the cleanups run when run returns. Methods the helpers do not call
// are left to the embedded nil interface.
type programTB struct {
	testing.TB
	cleanups []func()
}

type fatal string

func (*programTB) Helper()                      {}
func (*programTB) Name() string                 { return "pictures" }
func (*programTB) Fatal(args ...any)            { panic(fatal(fmt.Sprint(args...))) }
func (*programTB) Fatalf(f string, args ...any) { panic(fatal(fmt.Sprintf(f, args...))) }
func (*programTB) Skip(args ...any)             { panic(fatal(fmt.Sprint(args...))) }
func (*programTB) Skipf(f string, args ...any)  { panic(fatal(fmt.Sprintf(f, args...))) }
func (*programTB) Errorf(f string, args ...any) { fmt.Fprintf(os.Stderr, "pictures: "+f+"\n", args...) }
func (*programTB) Logf(f string, args ...any)   { fmt.Fprintf(os.Stderr, "pictures: "+f+"\n", args...) }
func (p *programTB) Cleanup(f func())           { p.cleanups = append(p.cleanups, f) }
func (p *programTB) cleanup() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
}
