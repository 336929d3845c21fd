// Package chdbtest runs SQL on a current ClickHouse (26.x) in tests, without
// a server: the embedded engine chDB, through github.com/chdb-io/chdb-go and
// the libchdb.so of the npm package @chdb/lib-linux-x64-gnu, which
// scripts/fetch-chdb.sh fetches and caches.
//
// Open gives each caller a Session with a database of its own
// (rw_<n>, dropped at the end of the test), so tests stay independent while
// they share one chDB session: libchdb allows a single session per process
// (a second connection fails), so the first Open in a test binary starts it,
// sync.Once, and every later Open of that binary reuses it.
//
// The session lives in a helper process (./chdbd), not in the test binary:
// chdb-go opens libchdb.so in a package init function, from the path in
// CHDB_LIB_PATH, and panics when it cannot, so a test binary that linked it
// could neither skip without the library nor survive a crash inside it. Open
// builds the helper with the go command (found on PATH; go test puts its own
// there) into a temporary folder that the helper removes when the test binary
// exits, and starts it with CHDB_LIB_PATH set to LibPath's answer. Queries run
// one at a time, in the order they arrive.
//
// What the Sessions of one test binary do share: session settings (SET, query
// parameters set with SET param_x = ...) and everything outside their
// databases. Use a query's SETTINGS clause, and name only your own database's
// tables (unqualified names are looked up there).
package chdbtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/replaywatch/replaywatch/test/testenv"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// PinnedVersion is the version of @chdb/lib-linux-x64-gnu that
// scripts/fetch-chdb.sh fetches (its CHDB_VERSION), and so the folder of the
// cache where LibPath looks.
const PinnedVersion = "26.7.3-stable.1"

// LibEnv names the environment variable that says where libchdb.so is;
// scripts/test.sh sets it from scripts/fetch-chdb.sh's output.
const LibEnv = "REPLAYWATCH_CHDB_LIB"

// LibPath returns where the tests take libchdb.so from: $REPLAYWATCH_CHDB_LIB
// when set, else the file scripts/fetch-chdb.sh caches,
// ${XDG_CACHE_HOME:-$HOME/.cache}/replaywatch/chdb/<PinnedVersion>/libchdb.so.
// It does not check that the file is there.
func LibPath() (string, error) {
	if p := os.Getenv(LibEnv); p != "" {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "replaywatch", "chdb", PinnedVersion, "libchdb.so"), nil
}

// Session is one caller's view of the shared chDB session: its queries run
// with the Session's own database as the current database.
type Session struct {
	tb testing.TB
	h  *helper
	db string
}

var dbSeq atomic.Uint64

// Open returns a Session with a new, empty database, which is dropped when
// the test ends. Without libchdb.so it skips the test, or fails it when the
// environment variable CI is set; either way it says to run
// scripts/fetch-chdb.sh. Any other failure to start chDB fails the test.
func Open(tb testing.TB) *Session {
	tb.Helper()
	lib, err := LibPath()
	if err == nil {
		_, err = os.Stat(lib)
	}
	if err != nil {
		msg := fmt.Sprintf("chdbtest: no libchdb.so (%v): run scripts/fetch-chdb.sh and set %s to the path it prints (scripts/test.sh does both)", err, LibEnv)
		if testenv.InCI() {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	h, err := sharedHelper(lib)
	if err != nil {
		tb.Fatalf("chdbtest: %v", err)
	}
	s := &Session{tb: tb, h: h, db: fmt.Sprintf("rw_%d", dbSeq.Add(1))}
	// The test's own context ends before its cleanups run: these two get one
	// that does not.
	if _, err := h.do(context.Background(), "default", "CREATE DATABASE `"+s.db+"`", "Null"); err != nil {
		tb.Fatalf("chdbtest: creating database %s: %v", s.db, err)
	}
	tb.Cleanup(func() {
		if _, err := h.do(context.Background(), "default", "DROP DATABASE IF EXISTS `"+s.db+"` SYNC", "Null"); err != nil {
			tb.Errorf("chdbtest: dropping database %s: %v", s.db, err)
		}
	})
	return s
}

// Database returns the name of the Session's database.
func (s *Session) Database() string { return s.db }

// Exec runs statements that return no result: DDL, INSERT ... VALUES, SET.
// Output, if any, is thrown away. Several statements separated by semicolons
// run in order, up to the first that fails. chDB's errors come back as
// *Error.
//
// A query may not hold a NUL byte (chdb-go passes it to libchdb as a C
// string): Exec and Query refuse one; write it as \0 inside a literal.
//
// When ctx ends first, Exec and Query return ctx's error at once, but the
// query runs on in the shared session (chDB cannot cancel it from here) and
// later queries wait for it.
func (s *Session) Exec(ctx context.Context, query string) error {
	_, err := s.h.do(ctx, s.db, query, "Null")
	return err
}

// Column is a result column: its name and its ClickHouse type, as ClickHouse
// spells it (for example "LowCardinality(String)", "DateTime64(9, 'UTC')").
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Result is a query's result, decoded from chDB's JSONCompact output. Values
// are Go values chosen by the column's type, exact:
//
//	Int8 ... Int64            int64
//	UInt8 ... UInt64          uint64
//	Float32, Float64          float64
//	Bool                      bool
//	Array(T)                  []any of T's values
//	Nullable(T)               nil or T's value
//	LowCardinality(T)         T's value
//	String, dates and times,  string, as ClickHouse prints it
//	UUID, Enum, IPv4/6 ...
//
// Other numbers (Int128 and wider, Decimal) stay json.Number, the digits as
// printed; Tuple and Map are left as encoding/json decodes them, with
// json.Number for numbers.
type Result struct {
	Columns []Column
	Rows    [][]any
}

// Query runs one statement and returns its result. A statement without one
// (DDL) gives an empty Result; several statements that each return a result
// are an error, and so is a FORMAT clause (the output must stay
// JSONCompact). chDB's errors come back as *Error.
func (s *Session) Query(ctx context.Context, query string) (*Result, error) {
	out, err := s.h.do(ctx, s.db, query, "JSONCompact")
	if err != nil {
		return nil, err
	}
	return decodeResult(out)
}

// Version returns the engine's version, SELECT version(), as "26.7.2.1". It
// fails the test when the query fails.
func (s *Session) Version() string {
	s.tb.Helper()
	r, err := s.Query(context.Background(), "SELECT version()")
	if err != nil {
		s.tb.Fatalf("chdbtest: SELECT version(): %v", err)
	}
	if len(r.Rows) != 1 || len(r.Rows[0]) != 1 {
		s.tb.Fatalf("chdbtest: SELECT version() gave %v", r.Rows)
	}
	v, ok := r.Rows[0][0].(string)
	if !ok {
		s.tb.Fatalf("chdbtest: SELECT version() gave %T %v", r.Rows[0][0], r.Rows[0][0])
	}
	return v
}

// Error is an error that chDB reported, such as
// "Code: 62. DB::Exception: Syntax error: ... (SYNTAX_ERROR)".
type Error struct {
	Code    int    // ClickHouse's error code, 62; 0 if the message has none
	Name    string // the code's name, "SYNTAX_ERROR"; "" if the message has none
	Message string // the whole message, as chDB gave it
}

func (e *Error) Error() string { return e.Message }

var (
	errCode = regexp.MustCompile(`^Code: (\d+)\. `)
	errName = regexp.MustCompile(`\(([A-Z][A-Z0-9_]*)\)(?: \(version [^)]*\))?\s*$`)
)

func newError(msg string) *Error {
	e := &Error{Message: strings.TrimRight(msg, "\n")}
	if m := errCode.FindStringSubmatch(e.Message); m != nil {
		e.Code, _ = strconv.Atoi(m[1])
	}
	if m := errName.FindStringSubmatch(e.Message); m != nil {
		e.Name = m[1]
	}
	return e
}

func decodeResult(out []byte) (*Result, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		return &Result{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var doc struct {
		Meta []Column `json:"meta"`
		Data [][]any  `json:"data"`
	}
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("chdbtest: decoding chDB's output as JSONCompact (does the query have a FORMAT clause?): %w", err)
	}
	if dec.More() {
		return nil, errors.New("chdbtest: the query gave more than one result; Query takes one statement")
	}
	r := &Result{Columns: doc.Meta, Rows: doc.Data}
	for i, row := range r.Rows {
		if len(row) != len(r.Columns) {
			return nil, fmt.Errorf("chdbtest: row %d has %d values for %d columns", i, len(row), len(r.Columns))
		}
		for j, v := range row {
			var err error
			if row[j], err = convert(r.Columns[j].Type, v); err != nil {
				return nil, fmt.Errorf("chdbtest: row %d, column %s: %w", i, r.Columns[j].Name, err)
			}
		}
	}
	return r, nil
}

// convert turns the value v that encoding/json decoded (with UseNumber) from
// a column of ClickHouse type typ into the Go value Result promises.
func convert(typ string, v any) (any, error) {
	if inner, ok := unwrap(typ, "LowCardinality"); ok {
		return convert(inner, v)
	}
	if inner, ok := unwrap(typ, "Nullable"); ok {
		if v == nil {
			return nil, nil
		}
		return convert(inner, v)
	}
	if inner, ok := unwrap(typ, "Array"); ok {
		a, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s value %v is not an array", typ, v)
		}
		for i := range a {
			var err error
			if a[i], err = convert(inner, a[i]); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	bits := typeBits[typ]
	switch typ {
	case "Int8", "Int16", "Int32", "Int64":
		return parseNumber(typ, v, func(s string) (any, error) { return strconv.ParseInt(s, 10, bits) })
	case "UInt8", "UInt16", "UInt32", "UInt64":
		return parseNumber(typ, v, func(s string) (any, error) { return strconv.ParseUint(s, 10, bits) })
	case "Float32", "Float64":
		return parseNumber(typ, v, func(s string) (any, error) { return strconv.ParseFloat(s, 64) })
	case "Bool":
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("%s value %v is not a JSON boolean", typ, v)
		}
	}
	return v, nil
}

var typeBits = map[string]int{
	"Int8": 8, "Int16": 16, "Int32": 32, "Int64": 64,
	"UInt8": 8, "UInt16": 16, "UInt32": 32, "UInt64": 64,
}

// unwrap returns T for a type spelled wrapper(T).
func unwrap(typ, wrapper string) (string, bool) {
	if strings.HasPrefix(typ, wrapper+"(") && strings.HasSuffix(typ, ")") {
		return typ[len(wrapper)+1 : len(typ)-1], true
	}
	return "", false
}

// parseNumber parses a number that ClickHouse printed bare (json.Number) or
// quoted (a string: output_format_json_quote_64bit_integers, or inf and nan
// with output_format_json_quote_denormals).
func parseNumber(typ string, v any, parse func(string) (any, error)) (any, error) {
	var s string
	switch v := v.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = v
	default:
		return nil, fmt.Errorf("%s value %v (%T) is not a number", typ, v, v)
	}
	n, err := parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s value %q: %w", typ, s, err)
	}
	return n, nil
}
