package clickhouse

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func eventBatch(t *testing.T, sessions ...string) *batch {
	t.Helper()
	b := newBatch(streamEventsTable, SchemaVersion, len(sessions))
	for _, s := range sessions {
		appendRecord(map[*table]*batch{streamEventsTable: b}, SchemaVersion, sampleRecords(s, time.Unix(1764460800, 123456789))[5], false)
	}
	return b
}

func TestSpoolKeepsOrderAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	hostile := "S'\"\n\\\xff\xfe" // quotes, newline, backslash, invalid UTF-8
	for _, s := range []string{"A", "B", hostile} {
		if err := sp.put(eventBatch(t, s, s+"2")); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(sp.dir, "00000000000000000099.batch.tmp")
	os.WriteFile(tmp, []byte("half"), 0o600) // a crash mid-write
	first := sp.dir
	sp.close() // the process ends (its lock is released)
	// A new process opens the same directory.
	sp, err = openSpool(dir, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if st := sp.stats(); st.batches != 3 || st.rows != 6 {
		t.Fatalf("after reopen: %+v", st)
	}
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Error("the ended run's directory (and its interrupted write) is still there")
	}
	for _, want := range []string{"A", "B", hostile} {
		b, f, err := sp.head(nil)
		if err != nil || b == nil {
			t.Fatalf("head: %v %v", b, err)
		}
		orig := eventBatch(t, want, want+"2")
		if !reflect.DeepEqual(b.values(), orig.values()) || b.rows != 2 || b.table != streamEventsTable {
			t.Fatalf("read back %v, want %v", b.column(2), orig.column(2))
		}
		if err := sp.pop(f); err != nil {
			t.Fatal(err)
		}
	}
	if st := sp.stats(); st.batches != 0 || st.bytes != 0 {
		t.Fatalf("not empty: %+v", st)
	}
	// New batches after a reopen continue the sequence.
	if err := sp.put(eventBatch(t, "C")); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := sp.head(nil); b.column(2).([]string)[0] != "C" {
		t.Fatal("wrong head")
	}
}

// TestSpoolBoundIsOnDiskBytes: the bound holds on the bytes the files take,
// not on the batches' estimates (a stream_events file is about 1.6 times its
// estimate: gob's lengths and times), and a batch refused leaves no file.
func TestSpoolBoundIsOnDiskBytes(t *testing.T) {
	const bound = 8000
	sp, err := openSpool(t.TempDir(), bound, "")
	if err != nil {
		t.Fatal(err)
	}
	puts := 0
	for ; puts < 10; puts++ {
		b := newBatch(streamEventsTable, SchemaVersion, 100)
		for i := range 100 {
			appendStreamEvent(b, event(i), "", "")
		}
		if err := sp.put(b); errors.Is(err, errSpoolFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	st := sp.stats()
	if st.bytes > bound || puts == 0 {
		t.Errorf("%d batches put, the spool holds %d bytes: bound %d", puts, st.bytes, bound)
	}
	ents, err := os.ReadDir(sp.dir)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".batch") || strings.HasSuffix(e.Name(), ".tmp") {
			files++
		}
	}
	if files != st.batches {
		t.Errorf("%d files in the run directory for %d batches: a refused batch left one behind", files, st.batches)
	}
}

func TestSpoolBound(t *testing.T) {
	sp, err := openSpool(t.TempDir(), 1, "") // one byte: the first batch always fits
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.put(eventBatch(t, "A")); err != nil {
		t.Fatalf("first batch must fit an empty spool: %v", err)
	}
	if err := sp.put(eventBatch(t, "B")); !errors.Is(err, errSpoolFull) {
		t.Fatalf("second batch: %v, want errSpoolFull", err)
	}
	sp.unbound()
	if err := sp.put(eventBatch(t, "B")); err != nil {
		t.Fatal(err)
	}
}

func TestSpoolSetsCorruptFileAside(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openSpool(dir, 0, "")
	sp.put(eventBatch(t, "A"))
	sp.put(eventBatch(t, "B"))
	first := sp.files[0].path
	if err := os.WriteFile(first, []byte(spoolMagic+"garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sp.head(nil); err == nil {
		t.Fatal("corrupt file read without error")
	}
	if _, err := os.Stat(sp.corruptPath(first)); err != nil {
		t.Fatalf("corrupt file not kept: %v", err)
	}
	b, _, err := sp.head(nil)
	if err != nil || b.column(2).([]string)[0] != "B" {
		t.Fatalf("next batch after a corrupt one: %v %v", b, err)
	}
}

// TestSpoolRunsShareADirectory: processes sharing one spool directory each
// write their own files; one never takes a living run's files; a run
// opened later takes every ended run's files (and a spool an older
// release wrote directly in the directory), each once.
func TestSpoolRunsShareADirectory(t *testing.T) {
	root := t.TempDir()
	const runs, batches = 3, 40
	sps := make([]*spool, runs)
	for i := range sps {
		sp, err := openSpool(root, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		sps[i] = sp
	}
	var wg sync.WaitGroup
	for i, sp := range sps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range batches {
				if err := sp.put(eventBatch(t, fmt.Sprintf("r%d-b%d", i, j))); err != nil {
					t.Error(err)
				}
				if j%10 == 0 {
					if n, err := sp.adopt(); n != 0 || err != nil {
						t.Errorf("run %d adopted %d batches of living runs (%v)", i, n, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	// An older release's spool: batch files directly in the directory.
	legacy, err := os.ReadDir(sps[0].dir)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(sps[0].dir, legacy[0].Name()))
	os.WriteFile(filepath.Join(root, "00000000000000000001.batch"), data, 0o600)

	sps[0].close()
	if n, err := sps[1].adopt(); n != batches+1 || err != nil {
		t.Fatalf("adopted %d batches (%v), want the ended run's %d and the legacy file", n, err, batches)
	}
	sps[1].close()
	sps[2].close()
	last, err := openSpool(root, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for {
		b, f, err := last.head(nil)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		for _, s := range b.column(2).([]string) {
			seen[s]++
		}
		last.pop(f)
	}
	for i := range runs {
		for j := range batches {
			want := 1
			if i == 0 && j == 0 {
				want = 2 // the legacy copy
			}
			if n := seen[fmt.Sprintf("r%d-b%d", i, j)]; n != want {
				t.Errorf("batch r%d-b%d read %d times, want %d", i, j, n, want)
			}
		}
	}
	last.close()
	left, _ := os.ReadDir(root)
	for _, e := range left {
		if e.Name() != adoptLockName {
			t.Errorf("left in the spool directory: %s", e.Name())
		}
	}
}

// FuzzSpoolFile: whatever a spool file holds (a disk error, a file from
// another program), reading it back returns a batch of the right shape or
// an error, never a panic or a batch that would fail inside the driver.
func FuzzSpoolFile(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "seed")
	b := newBatch(streamEventsTable, SchemaVersion, 2)
	for _, s := range []string{"A", "B\xff"} {
		appendRecord(map[*table]*batch{streamEventsTable: b}, SchemaVersion, sampleRecords(s, time.Unix(1764460800, 0))[5], false)
	}
	if _, err := writeSpoolFile(good, b, ""); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(good)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte(spoolMagic))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeSpool(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if err := b.check(); err != nil {
			t.Fatalf("accepted a batch that fails its check: %v", err)
		}
		b.values() // every column must be a real slice
	})
}
