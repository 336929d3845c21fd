package chtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Debian's zookeeper package (libzookeeper-java): the jar's manifest
// Class-Path lists its dependencies in /usr/share/java, so the jar alone is
// the classpath. The package's zkServer.sh adds /etc/zookeeper/conf (for
// log4j.properties, unused: there is no log4j binding); we add slf4j-simple,
// when present, so that errors reach zookeeper.out.
const (
	zooKeeperJar  = "/usr/share/java/zookeeper.jar"
	zooKeeperHome = "/usr/share/zookeeper"
	slf4jSimple   = "/usr/share/java/slf4j-simple.jar"
	zooKeeperMain = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// ZooKeeper is a standalone ZooKeeper server (the Debian package's jars, run
// with java) with its zoo.cfg and data under Dir, on 127.0.0.1 only.
type ZooKeeper struct {
	Addr string // client address, "127.0.0.1:port"
	Port int
	Dir  string

	mu   sync.Mutex
	proc *process
}

// ZooKeeperInstalled returns an error saying what is missing, if java or the
// Debian zookeeper package is.
func ZooKeeperInstalled() error {
	if _, err := os.Stat(zooKeeperHome); err != nil {
		return fmt.Errorf("zookeeper not installed (%s missing)", zooKeeperHome)
	}
	if _, err := os.Stat(zooKeeperJar); err != nil {
		return fmt.Errorf("zookeeper not installed (%s missing)", zooKeeperJar)
	}
	_, err := findBinary("java", "/usr/bin/java")
	return err
}

// StartZooKeeper starts a standalone ZooKeeper on a free client port, with
// zoo.cfg, data/ and zookeeper.out under dir, and waits until it answers
// "srvr" with "Mode: standalone": it answers "ruok" with "imok" before it
// serves sessions, and a ClickHouse 18.16 server whose DDLWorker cannot
// connect at start crashes on its first ON CLUSTER query. The admin server
// is disabled and the heap is 128 MB. The four-letter commands ruok, srvr
// and cons are allowed.
func StartZooKeeper(dir string) (*ZooKeeper, error) {
	if err := ZooKeeperInstalled(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		z := &ZooKeeper{Port: ports[0], Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), Dir: dir}
		err = z.start()
		if err == nil {
			return z, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == 3 {
			return nil, err
		}
	}
}

func (z *ZooKeeper) start() error {
	cfg := fmt.Sprintf(`# Written by test/chtest: standalone, for tests.
tickTime=2000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,cons
autopurge.purgeInterval=0
`, filepath.Join(z.Dir, "data"), z.Port)
	cfgPath := filepath.Join(z.Dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	java, err := findBinary("java", "/usr/bin/java")
	if err != nil {
		return err
	}
	cp := zooKeeperJar
	if _, err := os.Stat(slf4jSimple); err == nil {
		cp += ":" + slf4jSimple
	}
	args := []string{
		"-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true",
		"-Dzookeeper.admin.enableServer=false",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dzookeeper.log.dir=" + z.Dir,
		"-cp", cp, zooKeeperMain, cfgPath,
	}
	out := filepath.Join(z.Dir, "zookeeper.out")
	logs := markLogs(out)
	p, err := startProcess("zookeeper "+z.Addr, java, args, z.Dir, out)
	if err != nil {
		return err
	}
	if err := p.waitFor("serve", 60*time.Second, func() error { return serving(z.Addr) }); err != nil {
		p.kill()
		err = fmt.Errorf("zookeeper %s (dir %s): %w%s", z.Addr, z.Dir, err, logExcerpt(logs))
		if inUse, _ := addrInUse(logs); inUse {
			err = &portInUseError{z.Port, err}
		}
		return err
	}
	z.mu.Lock()
	z.proc = p
	z.mu.Unlock()
	return nil
}

// serving sends ZooKeeper's four-letter "srvr" and wants "Mode: standalone"
// (before the database is loaded it answers "This ZooKeeper instance is not
// currently serving requests").
func serving(addr string) error {
	out, err := fourLetter(addr, "srvr")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "Mode: standalone") {
		return fmt.Errorf("srvr answered %q", strings.TrimSpace(out))
	}
	return nil
}

// fourLetter sends one of ZooKeeper's four-letter commands (whitelisted in
// zoo.cfg) and returns the answer.
func fourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	return string(b), nil
}

// Stop stops ZooKeeper (SIGTERM, SIGKILL after 10s). Stopping a stopped
// ZooKeeper does nothing.
func (z *ZooKeeper) Stop() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.proc == nil {
		return nil
	}
	err := z.proc.stop(10 * time.Second)
	z.proc = nil
	return err
}
