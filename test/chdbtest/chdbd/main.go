// Command chdbd is test/chdbtest's helper process: it holds the one chDB
// session that a test binary's chdbtest.Sessions share. It is built and
// started by chdbtest.Open; nothing else runs it.
//
// chdb-go loads libchdb.so in a package init function, from the path in the
// environment variable CHDB_LIB_PATH, and panics when it cannot. Keeping it in
// this process lets a test binary without the library skip instead of
// crashing, and keeps a crash inside libchdb out of the test binary.
//
// Usage: chdbd DIR. The session's data lives in DIR/data. Requests come on
// file descriptor 3 and responses go out on 4, as gob values (package
// test/chdbtest/internal/wire); the first response, ID 0, says whether
// the session opened. When the
// requests end (the test binary exited), chdbd closes the session, removes
// DIR and exits.
package main

import (
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/chdb-io/chdb-go/chdb"

	"github.com/replaywatch/replaywatch/test/chdbtest/internal/wire"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chdbd DIR (started by test/chdbtest)")
		os.Exit(2)
	}
	dir := os.Args[1]
	err := serve(dir, os.NewFile(3, "requests"), os.NewFile(4, "responses"))
	if rmErr := os.RemoveAll(dir); err == nil {
		err = rmErr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chdbd:", err)
		os.Exit(1)
	}
}

func serve(dir string, in io.Reader, out io.Writer) error {
	dec := gob.NewDecoder(in)
	enc := gob.NewEncoder(out)
	s, err := chdb.NewSession(filepath.Join(dir, "data"))
	if err != nil {
		return errors.Join(err, enc.Encode(wire.Response{Error: "opening the chDB session: " + err.Error()}))
	}
	defer s.Close()
	if err := enc.Encode(wire.Response{}); err != nil {
		return err
	}
	for {
		var req wire.Request
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := enc.Encode(run(s, req)); err != nil {
			return err
		}
	}
}

// run runs one request with req.Database as the current database, which is
// set again for every request: a USE inside one request lasts for that
// request only.
func run(s *chdb.Session, req wire.Request) wire.Response {
	resp := wire.Response{ID: req.ID}
	if _, err := query(s, "USE `"+req.Database+"`", "Null"); err != nil {
		resp.Error = err.Error()
		return resp
	}
	out, err := query(s, req.Query, req.Format)
	if err != nil {
		resp.Error = err.Error()
	}
	resp.Output = out
	return resp
}

// query returns a copy of the output: the result's buffer belongs to chDB
// and is freed here.
func query(s *chdb.Session, q, format string) ([]byte, error) {
	r, err := s.Query(q, format)
	if err != nil {
		return nil, err
	}
	defer r.Free()
	if err := r.Error(); err != nil {
		return nil, err
	}
	return append([]byte(nil), r.Buf()...), nil
}
