package chdbtest

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/replaywatch/replaywatch/test/chdbtest/internal/wire"
)

// helper is the running chdbd process that holds the test binary's one chDB
// session.
type helper struct {
	cmd *exec.Cmd
	dir string // chdbd's folder: its binary, log and data

	wmu sync.Mutex // serialises requests
	enc *gob.Encoder

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan wire.Response // closed when chdbd stops
	err     error                         // why chdbd stopped
}

var shared struct {
	once sync.Once
	h    *helper
	err  error
}

// sharedHelper starts chdbd the first time it is called and returns the same
// helper, or the same error, every time.
func sharedHelper(lib string) (*helper, error) {
	shared.once.Do(func() { shared.h, shared.err = startHelper(lib) })
	return shared.h, shared.err
}

func startHelper(lib string) (h *helper, err error) {
	dir, err := os.MkdirTemp("", "replaywatch-chdb-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	bin := filepath.Join(dir, "chdbd")
	if err := buildHelper(bin); err != nil {
		return nil, err
	}

	logf, err := os.Create(filepath.Join(dir, "chdbd.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}

	cmd := exec.Command(bin, dir)
	cmd.Env = append(os.Environ(), "CHDB_LIB_PATH="+lib)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{reqR, respW} // fds 3 and 4
	// Its own process group: an interrupt at the terminal stops the test
	// binary, whose exit then ends chdbd's requests, and chdbd cleans up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	// chdbd's ends: closed here, so that its exit ends the responses.
	reqR.Close()
	respW.Close()
	if err != nil {
		reqW.Close()
		respR.Close()
		return nil, fmt.Errorf("starting chdbd: %w", err)
	}

	h = &helper{cmd: cmd, dir: dir, enc: gob.NewEncoder(reqW), pending: map[uint64]chan wire.Response{}}
	dec := gob.NewDecoder(respR)
	var hello wire.Response
	// Loading the library takes about a second; a chdbd that has not
	// answered in a minute will not.
	stuck := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	err = dec.Decode(&hello)
	stuck.Stop()
	if err != nil || hello.Error != "" {
		if err == nil {
			err = errors.New(hello.Error)
		}
		reqW.Close()
		respR.Close()
		return nil, h.stopped(err)
	}
	go h.read(dec)
	return h, nil
}

// buildHelper builds chdbd, the package ./chdbd beside this one, into bin.
func buildHelper(bin string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building chdbd needs the go command on PATH: %w", err)
	}
	pkg := reflect.TypeFor[Session]().PkgPath() + "/chdbd"
	out, err := exec.Command(goTool, "build", "-buildvcs=false", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

// read hands each response to the request waiting for it, until chdbd stops.
func (h *helper) read(dec *gob.Decoder) {
	for {
		var r wire.Response
		if err := dec.Decode(&r); err != nil {
			err = h.stopped(err)
			h.mu.Lock()
			h.err = err
			for id, ch := range h.pending {
				close(ch)
				delete(h.pending, id)
			}
			h.mu.Unlock()
			return
		}
		h.mu.Lock()
		ch := h.pending[r.ID]
		delete(h.pending, r.ID)
		h.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// stopped waits for chdbd, which has stopped answering, and returns an error
// that says why, with the end of its log.
func (h *helper) stopped(cause error) error {
	werr := h.cmd.Wait()
	log, _ := os.ReadFile(filepath.Join(h.dir, "chdbd.log"))
	if len(log) > 4000 {
		log = log[len(log)-4000:]
	}
	os.RemoveAll(h.dir)
	msg := fmt.Sprintf("chdbd (the chDB helper process) stopped: %v", cause)
	if errors.Is(cause, io.EOF) || errors.Is(cause, io.ErrUnexpectedEOF) {
		msg = fmt.Sprintf("chdbd (the chDB helper process) stopped: %v", werr)
	}
	if s := strings.TrimSpace(string(log)); s != "" {
		msg += "\nits log ends:\n" + s
	}
	return errors.New(msg)
}

// do runs query with db as the current database and returns its output in
// format. When ctx ends first, do returns ctx's error; the query itself goes
// on (chDB cannot stop it from here) and its output is dropped.
func (h *helper) do(ctx context.Context, db, query, format string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if i := strings.IndexByte(query, 0); i >= 0 {
		// chdb-go hands the query to libchdb as a C string, which would end
		// there: chDB would run only the part before it.
		return nil, fmt.Errorf("chdbtest: the query has a NUL byte at offset %d; write it as \\0 in a string literal", i)
	}
	ch := make(chan wire.Response, 1)
	h.wmu.Lock()
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		h.wmu.Unlock()
		return nil, h.err
	}
	h.next++
	id := h.next
	h.pending[id] = ch
	h.mu.Unlock()
	err := h.enc.Encode(wire.Request{ID: id, Database: db, Query: query, Format: format})
	h.wmu.Unlock()
	if err != nil {
		h.forget(id)
		return nil, fmt.Errorf("sending to chdbd: %w", err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			h.mu.Lock()
			defer h.mu.Unlock()
			return nil, h.err
		}
		if r.Error != "" {
			return nil, newError(r.Error)
		}
		return r.Output, nil
	case <-ctx.Done():
		h.forget(id)
		return nil, ctx.Err()
	}
}

func (h *helper) forget(id uint64) {
	h.mu.Lock()
	delete(h.pending, id)
	h.mu.Unlock()
}
