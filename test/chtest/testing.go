package chtest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// notInstalled stops a test that needs a binary that is missing: in CI
// (CI set) that is a failure, since scripts/test.sh installs it; elsewhere
// the test is skipped.
func notInstalled(tb testing.TB, err error) {
	tb.Helper()
	if testenv.InCI() {
		tb.Fatalf("%v; CI must run the ClickHouse tests: scripts/test.sh installs clickhouse-server, clickhouse-client and zookeeper from Debian's packages", err)
	}
	tb.Skipf("clickhouse-server not installed: run scripts/test.sh, which installs it from Debian's packages (%v)", err)
}

func requireServer(tb testing.TB) {
	tb.Helper()
	if _, err := ServerBinary(); err != nil {
		notInstalled(tb, err)
	}
	if _, err := ClientBinary(); err != nil {
		notInstalled(tb, err)
	}
}

// Start starts a server for one test in tb.TempDir() and stops it in
// tb.Cleanup. Without clickhouse-server it skips the test, or fails it when
// CI is set.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	requireServer(tb)
	s, err := NewServer(tb.TempDir(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("stop: %v", err)
		}
	})
	return s
}

// StartCluster starts a cluster (see NewCluster) in tb.TempDir() and stops
// it in tb.Cleanup. Without clickhouse-server or zookeeper it skips the test,
// or fails it when CI is set.
func StartCluster(tb testing.TB, name string, shards int) *Cluster {
	tb.Helper()
	requireServer(tb)
	if err := ZooKeeperInstalled(); err != nil {
		notInstalled(tb, err)
	}
	c, err := NewCluster(tb.TempDir(), name, shards)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

var shared struct {
	main atomic.Bool // Main is running the tests
	once sync.Once
	mu   sync.Mutex
	srv  *Server
	dir  string
	err  error
}

// Main runs the tests and then stops the server Shared started, if any:
//
//	func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) }
func Main(m *testing.M) int {
	shared.main.Store(true)
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "chtest: stop shared server: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.srv = nil
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	return code
}

// Shared returns the test binary's one shared server, starting it on first
// use; Main stops it after all tests. Tests sharing it must not stop it and
// should each work in their own database (NewDatabase).
func Shared(tb testing.TB) *Server {
	tb.Helper()
	if !shared.main.Load() {
		tb.Fatal("chtest.Shared needs TestMain to stop the server: func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) }")
	}
	requireServer(tb)
	shared.once.Do(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.dir, shared.err = os.MkdirTemp("", "chtest-shared-")
		if shared.err != nil {
			return
		}
		shared.srv, shared.err = NewServer(shared.dir, Options{})
	})
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.err != nil {
		tb.Fatalf("shared server: %v", shared.err)
	}
	return shared.srv
}

var dbSeq atomic.Int64

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates a database named after the test (unique within the
// test binary) on srv and drops it in tb.Cleanup.
func NewDatabase(tb testing.TB, srv *Server) string {
	tb.Helper()
	name := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(tb.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d_%s", dbSeq.Add(1), name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Exec(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if !srv.Running() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Exec(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			tb.Errorf("drop test database: %v", err)
		}
	})
	return name
}

// Conn opens a clickhouse-go connection to database on srv and closes it in
// tb.Cleanup.
func Conn(tb testing.TB, srv *Server, database string) driver.Conn {
	tb.Helper()
	conn, err := srv.Open(database)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}
