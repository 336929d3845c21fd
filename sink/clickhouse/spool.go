package clickhouse

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxSpoolBytes bounds the on-disk spool: at ClickHouse's row sizes
// here (~150-400 bytes of column data) 1 GiB holds a few million rows, hours
// of a busy node's findings and events, while staying small next to a
// node's disk.
const DefaultMaxSpoolBytes = 1 << 30

// spoolMagic starts every spool file: format and version.
const spoolMagic = "replaywatch-spool-1\n"

// spool is a durable FIFO of batches on disk, one file per batch named by a
// sequence number, so replay order is file name order. A file is written to
// a temporary name, synced and renamed: after a crash a file is either
// whole or absent.
//
// Several processes may share one spool directory (two analyze runs, an
// agent and an analyze): each writes only in its own run directory,
// run-<start>-<pid>, whose lock file it holds (flock) for its whole life.
// A run directory whose lock can be taken belongs to a process that ended;
// its batches are adopted, moved by rename (atomic: a file is in exactly one
// run directory) into the adopter's own, and sent by it. Adopters take turns
// under adopt.lock, so two never share a dead run's files.
type spool struct {
	root     string   // the directory given, shared by every run
	dir      string   // this process's run directory under root
	lock     *os.File // dir's lock file, held (flock) until close
	maxBytes int64
	// dest is where this run's batches go (server addresses and
	// database, no credentials; "" when unknown): written in every file's
	// header. Batches of another destination are left where they are.
	dest string

	// foreign counts, by destination, the batches of ended runs the last
	// adopt left in place because they go elsewhere.
	foreign map[string]int

	mu      sync.Mutex
	files   []spoolFile // oldest first
	bytes   int64
	rows    int64
	nextSeq uint64
}

type spoolFile struct {
	seq     uint64
	path    string
	bytes   int64
	rows    int
	created time.Time
	table   string // from the header; "" when it could not be read
}

// spoolHeader precedes the columns in a spool file.
type spoolHeader struct {
	Table   string
	Version int
	Rows    int
	Bytes   int
	Created time.Time
	// Dest is where the batch goes (spool.dest); "" in files of older
	// releases, which go wherever the run that adopts them writes.
	Dest string
}

func init() {
	// The column slice types a batch holds (colType.goType).
	for _, v := range []any{[]string(nil), []time.Time(nil), []uint8(nil), []uint16(nil), []uint32(nil), []int32(nil), [][]string(nil)} {
		gob.Register(v)
	}
}

const (
	runDirPrefix  = "run-"
	lockFileName  = "lock"
	adoptLockName = "adopt.lock"
)

// openSpool opens (creating) root, makes this process's run directory in it
// and adopts the batches of every run that ended.
func openSpool(root string, maxBytes int64, dest string) (*spool, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxSpoolBytes
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	dir, lock, err := newRunDir(root)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", root, err)
	}
	s := &spool{root: root, dir: dir, lock: lock, maxBytes: maxBytes, nextSeq: 1, dest: dest}
	if _, err := s.adopt(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// newRunDir creates and locks a run directory. It is made under a hidden
// name and renamed once locked, so that a run-* directory is never seen
// unlocked while its owner lives.
func newRunDir(root string) (string, *os.File, error) {
	tmp, err := os.MkdirTemp(root, ".new-")
	if err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(tmp, lockFileName), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		os.RemoveAll(tmp)
		return "", nil, err
	}
	// Start time first: run directories sort by age.
	dir := filepath.Join(root, fmt.Sprintf("%s%020d-%d-%s", runDirPrefix, time.Now().UnixNano(), os.Getpid(), strings.TrimPrefix(filepath.Base(tmp), ".new-")))
	if err := os.Rename(tmp, dir); err != nil {
		lock.Close()
		os.RemoveAll(tmp)
		return "", nil, err
	}
	return dir, lock, nil
}

// adopt moves the batches of ended runs (and files of a spool written by an
// older release directly in root) into this run's directory, behind its
// own. It returns how many batches it took.
func (s *spool) adopt() (int, error) {
	guard, err := os.OpenFile(filepath.Join(s.root, adoptLockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("spool: %w", err)
	}
	defer guard.Close() // releases the flock
	if err := syscall.Flock(int(guard.Fd()), syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("spool: lock %s: %w", guard.Name(), err)
	}
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return 0, fmt.Errorf("spool: %w", err)
	}
	taken := 0
	foreign := map[string]int{}
	for _, e := range entries {
		path := filepath.Join(s.root, e.Name())
		switch {
		case e.IsDir() && strings.HasPrefix(e.Name(), runDirPrefix) && path != s.dir:
			n, err := s.adoptRun(path, foreign)
			taken += n
			if err != nil {
				return taken, err
			}
		case !e.IsDir() && strings.HasSuffix(e.Name(), ".batch"):
			if ok, err := s.takeMine(path, foreign); err != nil {
				return taken, err
			} else if ok {
				taken++
			}
		}
	}
	s.mu.Lock()
	s.foreign = foreign
	s.mu.Unlock()
	if taken > 0 {
		if err := syncDir(s.dir); err != nil {
			return taken, fmt.Errorf("spool: %w", err)
		}
	}
	return taken, nil
}

// adoptRun takes the batches of the run directory dir if its owner ended,
// then removes the directory. Files that could not be read before are moved
// up into root, where a human finds them. Batches of another destination
// stay (counted in foreign), and so does the directory, for a run that
// writes there.
func (s *spool) adoptRun(dir string, foreign map[string]int) (int, error) {
	lock, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR, 0)
	if err != nil {
		return 0, nil // being removed by its owner: nothing to take
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return 0, nil // its owner lives
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("spool: %w", err)
	}
	taken, left := 0, 0
	for _, e := range entries { // sequence order: names are zero-padded
		path := filepath.Join(dir, e.Name())
		switch {
		case strings.HasSuffix(e.Name(), ".batch"):
			ok, err := s.takeMine(path, foreign)
			if err != nil {
				return taken, err
			}
			if ok {
				taken++
			} else {
				left++
			}
		case strings.HasSuffix(e.Name(), ".corrupt"):
			os.Rename(path, s.corruptPath(strings.TrimSuffix(path, ".corrupt")))
		case strings.HasSuffix(e.Name(), ".tmp"): // a write the crash interrupted
			os.Remove(path)
		}
	}
	if left > 0 {
		return taken, nil // the lock file stays: a run of that destination adopts the rest
	}
	os.Remove(filepath.Join(dir, lockFileName))
	os.Remove(dir) // fails, harmlessly, if something unknown is left in it
	return taken, nil
}

// takeMine takes the batch file at path (take) unless its header names
// another database than this run's; false, counted in foreign, when it is
// left. The server addresses are recorded but not compared: one server is
// reached under several (a proxy, a load balancer, a DNS name), and a
// batch sent twice to one database collapses. A file whose header does not
// read is taken (and set aside when it reaches the head).
func (s *spool) takeMine(path string, foreign map[string]int) (bool, error) {
	if h, err := readSpoolHeader(path); err == nil && h.Dest != "" && destDatabase(h.Dest) != destDatabase(s.dest) {
		foreign[h.Dest]++
		return false, nil
	}
	return true, s.take(path)
}

// destDatabase is the database of a destination (destinationOf).
func destDatabase(dest string) string {
	return dest[strings.LastIndexByte(dest, '/')+1:]
}

// foreignBatches is how many batches of other destinations the last adopt
// left in place, and those destinations.
func (s *spool) foreignBatches() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, dests := 0, []string{}
	for d, k := range s.foreign {
		n += k
		dests = append(dests, d)
	}
	slices.Sort(dests)
	return n, dests
}

// take moves one batch file into this run's directory at the tail.
func (s *spool) take(path string) error {
	f := spoolFile{path: path, created: time.Now()}
	if h, err := readSpoolHeader(path); err == nil {
		f.rows, f.created, f.table = h.Rows, h.Created, h.Table
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f.seq = s.nextSeq
	s.nextSeq++
	f.path = filepath.Join(s.dir, fmt.Sprintf("%020d.batch", f.seq))
	if err := os.Rename(path, f.path); err != nil {
		return fmt.Errorf("spool: adopt %s: %w", path, err)
	}
	if st, err := os.Stat(f.path); err == nil {
		f.bytes = st.Size()
	}
	s.files = append(s.files, f)
	s.bytes += f.bytes
	s.rows += int64(f.rows)
	return nil
}

// corruptPath is where an unreadable batch file is kept: in root, named
// after its run and sequence.
func (s *spool) corruptPath(batchPath string) string {
	return filepath.Join(s.root, filepath.Base(filepath.Dir(batchPath))+"-"+filepath.Base(batchPath)+".corrupt")
}

// close releases the run directory: removed when empty, else left (with
// its lock released) for a later run to adopt.
func (s *spool) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock == nil {
		return
	}
	if len(s.files) == 0 {
		os.Remove(filepath.Join(s.dir, lockFileName))
		os.Remove(s.dir)
	}
	s.lock.Close()
	s.lock = nil
}

// errSpoolFull says a batch does not fit under the spool's bound.
var errSpoolFull = errors.New("spool full")

// put writes b durably at the tail. It fails with errSpoolFull when the
// bound would be passed (the caller waits for the head to drain).
func (s *spool) put(b *batch) error {
	s.mu.Lock()
	seq := s.nextSeq
	s.nextSeq++
	full := s.bytes > 0 && s.bytes+int64(b.bytes) > s.maxBytes
	s.mu.Unlock()
	if full {
		return errSpoolFull
	}
	path := filepath.Join(s.dir, fmt.Sprintf("%020d.batch", seq))
	tmp := path + ".tmp"
	size, err := writeSpoolFile(tmp, b, s.dest)
	if err == nil {
		s.mu.Lock()
		full = s.bytes > 0 && s.bytes+size > s.maxBytes
		s.mu.Unlock()
		if full {
			// The file came out larger than the batch's estimate (gob's
			// lengths and times): the bound holds on what is on disk.
			os.Remove(tmp)
			return errSpoolFull
		}
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool: %w", err)
	}
	s.mu.Lock()
	s.files = append(s.files, spoolFile{seq: seq, path: path, bytes: size, rows: b.rows, created: time.Now(), table: b.table.name})
	s.bytes += size
	s.rows += int64(b.rows)
	s.mu.Unlock()
	return nil
}

func writeSpoolFile(path string, b *batch, dest string) (int64, error) {
	f, err := createSpoolFile(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	w.WriteString(spoolMagic)
	enc := gob.NewEncoder(w)
	err = enc.Encode(spoolHeader{Table: b.table.name, Version: b.version, Rows: b.rows, Bytes: b.bytes, Created: time.Now(), Dest: dest})
	if err == nil {
		err = enc.Encode(b.values())
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return size, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func readSpoolHeader(path string) (spoolHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return spoolHeader{}, err
	}
	defer f.Close()
	var h spoolHeader
	r := bufio.NewReader(f)
	if err := readMagic(r); err != nil {
		return h, err
	}
	err = gob.NewDecoder(r).Decode(&h)
	return h, err
}

func readMagic(r io.Reader) error {
	magic := make([]byte, len(spoolMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != spoolMagic {
		return errors.New("not a replaywatch spool file")
	}
	return nil
}

// openSpoolFile opens a spool file to read it back, createSpoolFile a new
// one to write (test seams).
var (
	openSpoolFile   = os.Open
	createSpoolFile = func(path string) (*os.File, error) {
		return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	}
)

// errSpoolUnreadable: a spool file could not be opened (too many open
// files, a transient I/O error): it stays where it is, to be tried again.
var errSpoolUnreadable = errors.New("spool file not opened")

// head returns the oldest batch of a table not in skip without removing
// it; nil when there is none. A file that opens but does not decode is
// renamed *.corrupt (kept for a human) and reported; one that does not open
// is left in place (errSpoolUnreadable). Order is kept per table: a table's
// batches are sent oldest first, and one table's stuck batch does not hold
// back the others'.
func (s *spool) head(skip map[string]bool) (*batch, spoolFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.files, func(f spoolFile) bool { return !skip[f.table] })
	if i < 0 {
		return nil, spoolFile{}, nil
	}
	f := s.files[i]
	b, err := readSpoolFile(f.path)
	if errors.Is(err, errSpoolUnreadable) {
		return nil, f, err
	}
	if err != nil {
		// Set aside in the shared directory, where a human looks first,
		// so that the run directory can go.
		aside := s.corruptPath(f.path)
		if rerr := os.Rename(f.path, aside); rerr != nil {
			aside = f.path
		}
		s.dropLocked(i)
		name := filepath.Base(f.path)
		f.path = aside
		return nil, f, fmt.Errorf("spool file %s: %w (kept as %s)", name, err, aside)
	}
	return b, f, nil
}

func readSpoolFile(path string) (*batch, error) {
	fh, err := openSpoolFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err // gone: nothing to try again
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSpoolUnreadable, err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSpoolUnreadable, err)
	}
	return decodeSpool(bufio.NewReaderSize(fh, 1<<16), st.Size())
}

// decodeSpool reads a batch written by writeSpoolFile. size bounds what
// the decoder may allocate: gob trusts the lengths in its input (up to
// 1 GiB), so a damaged file could otherwise ask for far more memory than
// it has bytes.
func decodeSpool(r io.Reader, size int64) (*batch, error) {
	r = &boundedReader{r: r, left: size}
	if err := readMagic(r); err != nil {
		return nil, err
	}
	dec := gob.NewDecoder(r)
	var h spoolHeader
	if err := dec.Decode(&h); err != nil {
		return nil, err
	}
	t := tableNamed(h.Table)
	if t == nil {
		return nil, fmt.Errorf("unknown table %q", h.Table)
	}
	if h.Version < 1 || h.Version > SchemaVersion {
		return nil, fmt.Errorf("schema version %d", h.Version)
	}
	b := &batch{table: t, version: h.Version, rows: h.Rows, bytes: h.Bytes}
	var values []any
	if err := dec.Decode(&values); err != nil {
		return nil, err
	}
	b.cols = make([]any, len(values))
	for i, v := range values {
		if v == nil {
			continue // check reports it
		}
		p := reflect.New(reflect.TypeOf(v))
		p.Elem().Set(reflect.ValueOf(v))
		b.cols[i] = p.Interface()
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	return b, nil
}

// check verifies a batch read back has the shape of its table.
func (b *batch) check() error {
	cols := b.table.insertColumns(b.version)
	if len(cols) != len(b.cols) {
		return fmt.Errorf("%s: %d columns, want %d", b.table.name, len(b.cols), len(cols))
	}
	for i, c := range cols {
		if b.cols[i] == nil { // gob leaves an empty slice nil
			if b.rows != 0 {
				return fmt.Errorf("%s.%s: missing", b.table.name, c.name)
			}
			continue
		}
		v := reflect.ValueOf(b.cols[i]).Elem()
		if v.Type().Elem() != c.typ.goType() {
			return fmt.Errorf("%s.%s: %v values, want %v", b.table.name, c.name, v.Type().Elem(), c.typ.goType())
		}
		if n := v.Len(); n != b.rows {
			return fmt.Errorf("%s.%s: %d values for %d rows", b.table.name, c.name, n, b.rows)
		}
	}
	return nil
}

func tableNamed(name string) *table {
	for _, t := range tables {
		if t.name == name {
			return t
		}
	}
	return nil
}

// pop removes a batch head returned after it was delivered.
func (s *spool) pop(f spoolFile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.indexLocked(f.seq)
	if i < 0 {
		return nil
	}
	s.dropLocked(i)
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// reject sets aside a batch head returned that the server refused for good:
// renamed *.rejected into the shared directory, where a human looks first,
// and no longer sent. It returns where the file is now.
func (s *spool) reject(f spoolFile) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.indexLocked(f.seq)
	if i < 0 {
		return f.path, nil
	}
	aside := filepath.Join(s.root, filepath.Base(filepath.Dir(f.path))+"-"+filepath.Base(f.path)+".rejected")
	if err := os.Rename(f.path, aside); err != nil {
		return f.path, fmt.Errorf("spool: %w", err)
	}
	s.dropLocked(i)
	return aside, nil
}

// hasTable says whether the spool holds a batch of the table.
func (s *spool) hasTable(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.files, func(f spoolFile) bool { return f.table == name || f.table == "" })
}

func (s *spool) indexLocked(seq uint64) int {
	return slices.IndexFunc(s.files, func(f spoolFile) bool { return f.seq == seq })
}

func (s *spool) dropLocked(i int) {
	f := s.files[i]
	s.files = slices.Delete(s.files, i, i+1)
	s.bytes -= f.bytes
	s.rows -= int64(f.rows)
}

// unbound lifts the size bound (for the final flush at shutdown).
func (s *spool) unbound() {
	s.mu.Lock()
	s.maxBytes = 1 << 62
	s.mu.Unlock()
}

// spoolStats is the spool's state for metrics and reports.
type spoolStats struct {
	batches int
	rows    int64
	bytes   int64
	oldest  time.Time
}

func (s *spool) stats() spoolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := spoolStats{batches: len(s.files), rows: s.rows, bytes: s.bytes}
	if len(s.files) > 0 {
		st.oldest = s.files[0].created
	}
	return st
}

type boundedReader struct {
	r    io.Reader
	left int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
