package chtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cluster is one ZooKeeper and one clickhouse-server per shard (one replica
// each), all configured with the same cluster Name.
type Cluster struct {
	Name      string
	ZooKeeper *ZooKeeper
	Servers   []*Server // Servers[i] is shard i+1 (macros shard "0i+1", replica "r0i+1")
}

// NewCluster starts ZooKeeper in dir/zookeeper and shards servers in
// dir/shardNN. Every server has <zookeeper> pointing at it, remote_servers
// defining cluster name with one shard per server (internal_replication true),
// macros <shard>NN</shard><replica>rNN</replica> and distributed_ddl at
// /clickhouse/task_queue/ddl, so ON CLUSTER DDL, ReplicatedMergeTree tables
// with '/clickhouse/tables/{shard}/...', '{replica}' and Distributed(name, ...)
// tables work.
func NewCluster(dir, name string, shards int) (*Cluster, error) {
	if shards < 1 {
		return nil, fmt.Errorf("cluster %s: %d shards", name, shards)
	}
	if !clusterNameRE.MatchString(name) {
		return nil, fmt.Errorf("cluster name %q: want letters, digits and _", name)
	}
	if _, err := ServerBinary(); err != nil {
		return nil, err
	}
	zk, err := StartZooKeeper(filepath.Join(dir, "zookeeper"))
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, ZooKeeper: zk}
	for attempt := 1; ; attempt++ {
		err = c.startServers(dir, shards)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == 3 {
			zk.Stop()
			return nil, err
		}
	}
}

// startServers picks every server's ports first (the cluster definition
// names them all), then starts the servers in parallel.
func (c *Cluster) startServers(dir string, shards int) error {
	ports, err := freePorts(3 * shards)
	if err != nil {
		return err
	}
	addrs := make([]string, shards)
	for i := range shards {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*i]))
	}
	servers := make([]*Server, shards)
	errs := make([]error, shards)
	var wg sync.WaitGroup
	for i := range shards {
		sdir := filepath.Join(dir, fmt.Sprintf("shard%02d", i+1))
		// A retry starts from an empty data dir: ZooKeeper already
		// knows nothing about these replicas.
		os.RemoveAll(sdir)
		wg.Go(func() {
			servers[i], errs[i] = NewServer(sdir, Options{
				TCPPort: ports[3*i], HTTPPort: ports[3*i+1], InterserverPort: ports[3*i+2],
				Cluster: &ClusterConfig{Name: c.Name, ZooKeeper: c.ZooKeeper.Addr, Shards: addrs, Shard: i + 1},
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range servers {
			if s != nil {
				s.Stop()
			}
		}
		return err
	}
	c.Servers = servers
	return nil
}

// Stop stops every server, then ZooKeeper.
func (c *Cluster) Stop() error {
	errs := make([]error, len(c.Servers)+1)
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.Stop() })
	}
	wg.Wait()
	errs[len(c.Servers)] = c.ZooKeeper.Stop()
	return errors.Join(errs...)
}

// waitDDLWorker waits until the DDLWorker of the clickhouse-server in p has
// its ZooKeeper session. ClickHouse 18.16 stores that session in a member
// that its DDLWorker thread sets after connecting, while the TCP port opens
// in parallel; an ON CLUSTER query in between dereferences the null session
// and crashes the server (segfault in zkutil::ZooKeeper::createImpl, from
// DDLWorker::enqueueQuery).
//
// On a fresh server the DDLWorker is the first to connect to ZooKeeper, and
// it sends its first request (creating the queue's ancestors) right after
// storing the session; on a restarted server with replicated tables, table
// loading connects earlier and the DDLWorker thread, started before the
// ports open, just picks that session up. So: wait until this server has a
// ZooKeeper session that has sent a request. ZooKeeper does not know pids:
// the server's socket inodes (/proc/PID/fd) give its connection to
// ZooKeeper (/proc/net/tcp), whose local port finds the session in the
// four-letter "cons" answer. (ZooKeeper 3.8's "wchp" does not list the
// watches 18.16's client sets, so the queue watch cannot be checked.)
func waitDDLWorker(p *process, zkAddr string, timeout time.Duration) error {
	_, zkPortStr, err := net.SplitHostPort(zkAddr)
	if err != nil {
		return err
	}
	zkPort, err := strconv.Atoi(zkPortStr)
	if err != nil {
		return err
	}
	return p.waitFor("DDLWorker's ZooKeeper session", timeout, func() error {
		return ddlWorkerHasSession(p.cmd.Process.Pid, zkAddr, zkPort)
	})
}

func ddlWorkerHasSession(pid int, zkAddr string, zkPort int) error {
	inodes, err := socketInodes(pid)
	if err != nil {
		return err
	}
	var localPorts []int
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "01" || !inodes[f[9]] { // 01: ESTABLISHED
				continue
			}
			if hexPort(f[2]) == zkPort {
				localPorts = append(localPorts, hexPort(f[1]))
			}
		}
	}
	if len(localPorts) == 0 {
		return errors.New("no connection to ZooKeeper yet")
	}
	cons, err := fourLetter(zkAddr, "cons")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(cons, "\n") {
		for _, lp := range localPorts {
			if !strings.Contains(line, ":"+strconv.Itoa(lp)+"[") {
				continue
			}
			if m := lcxidRE.FindStringSubmatch(line); m != nil {
				if n, err := strconv.ParseInt(m[1], 16, 64); err == nil && n > 0 {
					return nil
				}
			}
		}
	}
	return errors.New("no ZooKeeper session with a request yet")
}

var lcxidRE = regexp.MustCompile(`lcxid=0x([0-9a-f]+)`)

// socketInodes returns the inodes of pid's sockets, as /proc/net/tcp shows
// them (decimal strings).
func socketInodes(pid int) (map[string]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return inodes, nil
}

// hexPort parses the port of a /proc/net/tcp address ("0100007F:A4F3").
func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(p)
}
