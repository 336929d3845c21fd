// Package chtest runs real ClickHouse servers (and ZooKeeper, for clusters)
// for tests and benchmarks: no mocks, no Docker.
//
// What it starts:
//
//   - NewServer / Start: one clickhouse-server process (the Debian 12
//     package, 18.16) with a config.xml and users.xml written into its
//     directory: user default without password, timezone UTC, logs at
//     warning level. It listens on 127.0.0.1 only, on three free ports
//     (native Addr, HTTPAddr, interserver), chosen by binding 127.0.0.1:0;
//     a port taken by another process before the server binds it is chosen
//     again. Start waits until the server answers SELECT 1 on the native
//     port (and checks, through a chtest_instance macro, that the answer
//     comes from this server).
//   - StartZooKeeper: a standalone ZooKeeper from the Debian zookeeper
//     package (java -cp /usr/share/java/zookeeper.jar
//     org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg, 128 MB heap,
//     admin server off) on a free client port.
//   - NewCluster / StartCluster: one ZooKeeper and one server per shard (one
//     replica each) with remote_servers, macros (shard NN, replica rNN) and
//     distributed_ddl, so ON CLUSTER DDL, ReplicatedMergeTree and Distributed
//     tables work.
//   - Shared: one server per test binary, started on first use and stopped
//     by Main (func TestMain(m *testing.M) { os.Exit(chtest.Main(m)) });
//     NewDatabase gives each test its own database on it.
//
// Where data goes: the directory given to NewServer (Start uses
// tb.TempDir(), Shared a directory under os.TempDir() that Main removes):
// config.xml, users.xml, data/ (the server's path), log/server.log,
// log/err.log and log/stderr.log. ZooKeeper: zoo.cfg, data/, zookeeper.out.
// A server that fails to start is reported with the end of what it wrote to
// err.log and stderr during that start. Ports are also locked in
// TMPDIR/chtest-ports (one empty lock file per port, flock held while this
// process lives) so that parallel test binaries do not pick each other's
// ports, even while a server is stopped between Stop and Start.
//
// Processes never outlive the test: each runs in its own process group;
// Stop sends SIGTERM and SIGKILLs the group after 30s, Kill SIGKILLs it; the
// test wrappers stop everything in Cleanup; and every child is started with
// Pdeathsig SIGKILL, so a test binary that dies (a -timeout panic) takes its
// servers with it.
//
// Installing: scripts/test.sh installs the Debian packages clickhouse-server,
// clickhouse-client and zookeeper when they are missing (it starts no
// service; this package starts its own processes). Without
// clickhouse-server the test wrappers skip, unless CI is set, where they
// fail: CI must run these tests.
//
// ClickHouse 18.16 behaviour worth knowing:
//
//   - An ON CLUSTER query sent before the server's DDLWorker has its
//     ZooKeeper session crashes the server (segfault: null session in
//     DDLWorker::enqueueQuery). The ports open while the DDLWorker thread is
//     still connecting, and it stays without a session while ZooKeeper
//     refuses it (ZooKeeper answers "ruok" before it serves sessions). So
//     StartZooKeeper waits for "srvr" to say it serves, and Start waits, on
//     cluster servers, until the server's ZooKeeper session exists.
//   - clickhouse-go's Exec("INSERT ... VALUES (...)") hangs: the 18.16 server
//     waits for data blocks after inline VALUES. Use a batch or INSERT ...
//     SELECT.
//   - clickhouse-go's PrepareBatch needs the column list ("INSERT INTO t (a,
//     b)"); without it the driver sees no columns.
//   - An idle client connection delays shutdown by poll_interval (default
//     10s); the users.xml here sets it to 1s.
package chtest
