// Command chbench measures the ClickHouse sink's insert rate against
// clickhouse-client loading the same rows from a file, in one run:
//
//	go run ./test/chbench -rows 1000000
//	scripts/bench-clickhouse.sh            # also the conversion-only rate
//
// It generates -rows deterministic detector.StreamEvent records (go-sdk
// shaped: 26-character base32 session ids, event ids "<stream>_<index>",
// progress notifications and responses, hex data hashes, client and server
// addresses, times 1 ms apart), starts a clickhouse-server of its own
// (test/chtest, in a temporary directory) unless -dsn names one, and
// applies the schema to two databases, ours and client. Then, -repeat times,
// alternating which side goes first, each on an emptied table:
//
//   - ours: every record through sink/clickhouse (default Config); timed
//     from the first StreamEvent call until Close returns, which is when the
//     server has confirmed every row. Report.Written and count() must both
//     equal -rows.
//   - client: clickhouse-client --query "INSERT INTO client.stream_events
//     (columns) FORMAT TabSeparated" < file, the file written beforehand
//     (untimed) from the same records in the sink's insert column order
//     (sink/clickhouse.InsertColumns). Timed from starting the process until
//     it exits; count() must equal -rows.
//
// It prints the server version, the host, each run, and a table of median
// seconds and rows/s per side with the ratio ours/client (target: at least
// 0.8). Performance is reported, never asserted: the exit status is non-zero
// only on errors (a failed insert, a wrong count). -convert-rate adds the
// sink's conversion-only rate (records to columns, no-op connection) that
// scripts/bench-clickhouse.sh measures with go test -bench
// ConvertStreamEvents; -cpuprofile profiles this process during the ours
// runs only. -timeout (30m) ends a hung run with every goroutine's stack.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/replaywatch/replaywatch/detector"
	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/test/chtest"
)

const table = "stream_events"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chbench:", err)
		os.Exit(1)
	}
}

type options struct {
	rows, repeat, sessions int
	dsn, dbPrefix          string
	convertRate            float64
	cpuProfile             string
	batchRows              int
	keep                   bool
	timeout                time.Duration
}

func run(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("chbench", flag.ContinueOnError)
	var o options
	fs.IntVar(&o.rows, "rows", 1_000_000, "stream_events rows each side inserts per run")
	fs.IntVar(&o.repeat, "repeat", 3, "runs per side (alternating which goes first); the table shows medians")
	fs.IntVar(&o.sessions, "sessions", 0, "MCP sessions the rows belong to (0: rows/2000, between 50 and 500)")
	fs.StringVar(&o.dsn, "dsn", "", "use this server (clickhouse://[user[:password]@]host:port) instead of starting one; its databases <prefix>ours and <prefix>client must not exist, and are dropped at the end")
	fs.StringVar(&o.dbPrefix, "db-prefix", "", "prefix of the two database names")
	fs.Float64Var(&o.convertRate, "convert-rate", 0, "conversion-only rows/s measured elsewhere (go test -bench ConvertStreamEvents), shown in the table; 0: not shown")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process during the ours runs to this file")
	fs.IntVar(&o.batchRows, "batch-rows", 0, "the sink's Config.BatchRows (0: its default)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary server directory (or, with -dsn, the databases)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long: print every goroutine's stack, stop the server and exit 1 (a hung insert cannot be cancelled)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rows < 1 || o.repeat < 1 {
		return errors.New("-rows and -repeat must be at least 1")
	}
	if o.sessions <= 0 {
		o.sessions = min(max(o.rows/2000, 50), 500)
	}

	work, err := os.MkdirTemp("", "chbench-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep && o.dsn == "" {
			fmt.Printf("kept %s\n", work)
			return
		}
		if rerr := os.RemoveAll(work); rerr != nil && err == nil {
			err = rerr
		}
	}()

	target, err := newTarget(o, work)
	if err != nil {
		return err
	}
	defer func() {
		if serr := target.close(); serr != nil && err == nil {
			err = serr
		}
	}()

	// Sink.Close takes no context: a hang there (or in the driver) can
	// only be ended by exiting, with the stacks that say where it hung.
	watchdog := time.AfterFunc(o.timeout, func() {
		fmt.Fprintf(os.Stderr, "chbench: timed out after %v; goroutines:\n", o.timeout)
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		_ = target.close()
		if !o.keep {
			_ = os.RemoveAll(work)
		}
		os.Exit(1)
	})
	defer watchdog.Stop()

	b := &bench{o: o, t: target, work: work}
	return b.run(ctx)
}

// target is the server both sides write to.
type target struct {
	srv        *chtest.Server // nil with -dsn
	base       *url.URL       // DSN without a database
	host, port string         // for clickhouse-client
	user, pass string
	dbs        []string // databases this run created, dropped at the end with -dsn
	keep       bool
}

func newTarget(o options, work string) (*target, error) {
	t := &target{keep: o.keep}
	if o.dsn == "" {
		srv, err := chtest.NewServer(filepath.Join(work, "server"), chtest.Options{})
		if err != nil {
			return nil, err
		}
		t.srv = srv
		o.dsn = srv.DSN("")
	}
	u, err := url.Parse(o.dsn)
	if err != nil {
		t.close()
		return nil, fmt.Errorf("-dsn %s: not a URL", chsink.Redact(o.dsn))
	}
	if u.Scheme != "clickhouse" || u.Host == "" {
		t.close()
		return nil, fmt.Errorf("-dsn %s: want clickhouse://host:port", chsink.Redact(o.dsn))
	}
	first, _, _ := strings.Cut(u.Host, ",")
	t.host, t.port, err = net.SplitHostPort(first)
	if err != nil {
		t.close()
		return nil, fmt.Errorf("-dsn %s: %v", chsink.Redact(o.dsn), err)
	}
	if u.User != nil {
		t.user = u.User.Username()
		t.pass, _ = u.User.Password()
	}
	u.Path = ""
	t.base = u
	return t, nil
}

// dsn is the DSN of database db.
func (t *target) dsn(db string) string {
	u := *t.base
	u.Path = "/" + db
	return u.String()
}

// clientCmd is clickhouse-client running query, credentials from the DSN.
func (t *target) clientCmd(ctx context.Context, query string) (*exec.Cmd, error) {
	bin, err := chtest.ClientBinary()
	if err != nil {
		return nil, err
	}
	args := []string{"--host", t.host, "--port", t.port}
	if t.user != "" {
		args = append(args, "--user", t.user)
	}
	if t.pass != "" {
		args = append(args, "--password", t.pass)
	}
	return exec.CommandContext(ctx, bin, append(args, "--query", query)...), nil
}

func (t *target) close() error {
	if t.srv != nil {
		return t.srv.Stop()
	}
	if t.keep || len(t.dbs) == 0 {
		return nil
	}
	// With -dsn: drop what this run created.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := chsink.Connect(ctx, chsink.ConnectOptions{DSN: t.dsn("default")})
	if err != nil {
		return err
	}
	defer c.Close()
	for _, db := range t.dbs {
		if err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
			return err
		}
	}
	return nil
}

type bench struct {
	o    options
	t    *target
	work string

	ours, client *chsink.Conn
	oursDB       string
	clientDB     string
	columns      []string
	events       []detector.StreamEvent
	tsv          string
	tsvBytes     int64
}

// sample is one timed run.
type sample struct {
	seconds float64
	cpu     float64 // CPU seconds of the inserting process (this one, or clickhouse-client)
	server  float64 // CPU seconds of clickhouse-server during the run; -1 unknown (-dsn)
}

func (b *bench) run(ctx context.Context) error {
	o := b.o
	b.oursDB, b.clientDB = o.dbPrefix+"ours", o.dbPrefix+"client"
	var err error
	if b.ours, err = b.setup(ctx, b.oursDB); err != nil {
		return err
	}
	defer b.ours.Close()
	if b.client, err = b.setup(ctx, b.clientDB); err != nil {
		return err
	}
	defer b.client.Close()

	version, err := b.ours.QueryStrings(ctx, "SELECT version()")
	if err != nil {
		return err
	}
	fmt.Printf("server: ClickHouse %s at %s:%s (%s)\n", version[0][0], b.t.host, b.t.port, serverKind(b.t))
	fmt.Printf("host: %d cores (nproc), %s; %s; load average %s\n", runtime.NumCPU(), cpuModel(), runtime.Version(), loadAvg())

	b.columns = chsink.InsertColumns(table)
	if b.columns == nil {
		return fmt.Errorf("sink/clickhouse knows no table %s", table)
	}
	genStart := time.Now()
	b.events = generate(o.rows, o.sessions)
	if err := b.writeTSV(ctx); err != nil {
		return err
	}
	fmt.Printf("rows: %d stream_events in %d sessions; TabSeparated file %.1f MB (%d columns); prepared in %.1fs\n",
		o.rows, o.sessions, float64(b.tsvBytes)/1e6, len(b.columns), time.Since(genStart).Seconds())
	batchRows := o.batchRows
	if batchRows <= 0 {
		batchRows = chsink.DefaultBatchRows
	}
	fmt.Printf("ours: sink/clickhouse, BatchRows %d, native protocol; client: clickhouse-client < file, FORMAT TabSeparated\n", batchRows)

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		// Profiling runs through the client runs too, but this process only
		// waits for clickhouse-client then: what the profile shows is the
		// ours runs.
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	var ours, client []sample
	for r := range o.repeat {
		order := []string{"ours", "client"}
		if r%2 == 1 {
			order = []string{"client", "ours"}
		}
		for _, side := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			var s sample
			var err error
			if side == "ours" {
				s, err = b.runOurs(ctx)
				ours = append(ours, s)
			} else {
				s, err = b.runClient(ctx)
				client = append(client, s)
			}
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", r+1, side, err)
			}
			fmt.Printf("run %d %-6s %7.2fs %10.0f rows/s  CPU-s: %5.2f %s, %s server\n", r+1, side, s.seconds, float64(o.rows)/s.seconds, s.cpu,
				map[string]string{"ours": "this process", "client": "clickhouse-client"}[side], cpuString(s.server))
		}
	}
	// The last run of each side left its rows: they must be the same.
	fo, err := b.fingerprint(ctx, b.ours)
	if err != nil {
		return err
	}
	fc, err := b.fingerprint(ctx, b.client)
	if err != nil {
		return err
	}
	if fo != fc {
		return fmt.Errorf("the two tables differ: %s.%s %s, %s.%s %s", b.oursDB, table, fo, b.clientDB, table, fc)
	}
	fmt.Printf("both tables hold the same rows (count and sum of cityHash64 over every inserted column: %s)\n", fo)
	b.report(ours, client)
	return nil
}

// fingerprint is the row count and an order-independent hash of every
// inserted column of c's table.
func (b *bench) fingerprint(ctx context.Context, c *chsink.Conn) (string, error) {
	cols := make([]string, len(b.columns))
	for i, name := range b.columns {
		cols[i] = "toString(" + name + ")"
	}
	rows, err := c.QueryStrings(ctx, fmt.Sprintf("SELECT toString(count()), toString(sum(cityHash64(%s))) FROM %s",
		strings.Join(cols, ", "), c.Dialect().InsertTable(table)))
	if err != nil {
		return "", err
	}
	return rows[0][0] + " rows, " + rows[0][1], nil
}

func serverKind(t *target) string {
	if t.srv != nil {
		return "started by chbench in " + t.srv.Dir
	}
	return "-dsn"
}

// setup creates database db at the current schema and returns a sink
// connection to it. With -dsn the database must not exist yet.
func (b *bench) setup(ctx context.Context, db string) (*chsink.Conn, error) {
	c, err := chsink.Connect(ctx, chsink.ConnectOptions{DSN: b.t.dsn(db)})
	if err != nil {
		return nil, err
	}
	if b.t.srv == nil {
		n, err := c.QueryStrings(ctx, "SELECT toString(count()) FROM system.databases WHERE name = ?", db)
		if err != nil {
			c.Close()
			return nil, err
		}
		if n[0][0] != "0" {
			c.Close()
			return nil, fmt.Errorf("database %s exists on %s: chbench empties and drops its databases; drop it or choose -db-prefix", db, chsink.Redact(b.t.dsn(db)))
		}
	}
	b.t.dbs = append(b.t.dbs, db)
	if _, err := chsink.Apply(ctx, c, c.Dialect(), 0, "chbench"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// empty truncates db's table (TRUNCATE works on MergeTree tables since
// 18.x) and checks it is empty.
func (b *bench) empty(ctx context.Context, c *chsink.Conn) error {
	name := c.Dialect().InsertTable(table)
	if err := c.Exec(ctx, "TRUNCATE TABLE "+name); err != nil {
		return err
	}
	if n, err := count(ctx, c); err != nil || n != 0 {
		return cmp.Or(err, fmt.Errorf("%s holds %d rows after TRUNCATE", name, n))
	}
	return nil
}

func count(ctx context.Context, c *chsink.Conn) (int, error) {
	rows, err := c.QueryStrings(ctx, "SELECT toString(count()) FROM "+c.Dialect().InsertTable(table))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(rows[0][0])
}

func (b *bench) runOurs(ctx context.Context) (sample, error) {
	if err := b.empty(ctx, b.ours); err != nil {
		return sample{}, err
	}
	spool := filepath.Join(b.work, "spool")
	if err := os.RemoveAll(spool); err != nil {
		return sample{}, err
	}
	s, err := chsink.New(ctx, b.ours, chsink.Config{SpoolDir: spool, Node: "chbench", Source: "chbench", BatchRows: b.o.batchRows})
	if err != nil {
		return sample{}, err
	}
	runtime.GC() // the previous run's garbage is not this run's cost
	cpu0, srv0 := processCPU(), b.t.serverCPU()
	start := time.Now()
	for i := range b.events {
		s.StreamEvent(&b.events[i])
	}
	rep := s.Close(context.Background())
	out := sample{seconds: time.Since(start).Seconds(), cpu: processCPU() - cpu0, server: b.t.serverCPU().minus(srv0)}
	if rep.Written != int64(b.o.rows) || rep.LeftRows != 0 {
		return out, fmt.Errorf("sink wrote %d of %d rows: %s", rep.Written, b.o.rows, rep)
	}
	n, err := count(ctx, b.ours)
	if err == nil && n != b.o.rows {
		err = fmt.Errorf("count() = %d, want %d", n, b.o.rows)
	}
	return out, err
}

func (b *bench) runClient(ctx context.Context) (sample, error) {
	if err := b.empty(ctx, b.client); err != nil {
		return sample{}, err
	}
	f, err := os.Open(b.tsv)
	if err != nil {
		return sample{}, err
	}
	defer f.Close()
	query := fmt.Sprintf("INSERT INTO %s (%s) FORMAT TabSeparated", b.client.Dialect().InsertTable(table), strings.Join(b.columns, ", "))
	cmd, err := b.t.clientCmd(ctx, query)
	if err != nil {
		return sample{}, err
	}
	cmd.Stdin = f
	var stderr strings.Builder
	cmd.Stderr = &stderr
	srv0 := b.t.serverCPU()
	start := time.Now()
	err = cmd.Run()
	out := sample{seconds: time.Since(start).Seconds(), server: b.t.serverCPU().minus(srv0)}
	if cmd.ProcessState != nil {
		out.cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		return out, fmt.Errorf("clickhouse-client: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	n, err := count(ctx, b.client)
	if err == nil && n != b.o.rows {
		err = fmt.Errorf("count() = %d, want %d", n, b.o.rows)
	}
	return out, err
}

func (b *bench) report(ours, client []sample) {
	rows := float64(b.o.rows)
	secs := func(s sample) float64 { return s.seconds }
	cpu := func(s sample) float64 { return s.cpu }
	server := func(s sample) float64 { return s.server }
	om, cm := median(ours, secs), median(client, secs)
	ratio := (rows / om) / (rows / cm)
	fmt.Printf("\n== ClickHouse insert: %d rows, median of %d runs per side, %d cores, load average after %s\n", b.o.rows, b.o.repeat, runtime.NumCPU(), loadAvg())
	fmt.Printf("%-38s %8s %8s %9s %7s %9s %9s\n", "side", "rows", "seconds", "rows/s", "CPU-s", "server-s", "x client")
	fmt.Printf("%-38s %8d %8.2f %9.0f %7.2f %9s %9.2f\n", "ours (sink/clickhouse, native)", b.o.rows, om, rows/om, median(ours, cpu), cpuString(median(ours, server)), ratio)
	fmt.Printf("%-38s %8d %8.2f %9.0f %7.2f %9s %9.2f\n", "client (clickhouse-client < TSV file)", b.o.rows, cm, rows/cm, median(client, cpu), cpuString(median(client, server)), 1.0)
	if b.o.convertRate > 0 {
		fmt.Printf("%-38s %8s %8.2f %9.0f %7s %9s %9.2f\n", "conversion only (no-op connection)", "-", rows/b.o.convertRate, b.o.convertRate, "-", "-", b.o.convertRate/(rows/cm))
	}
	verdict := "MISS"
	if ratio >= 0.8 {
		verdict = "PASS"
	}
	fmt.Printf("ratio ours/client (rows/s): %.2f  target >= 0.80: %s (reported, not asserted)\n", ratio, verdict)
	fmt.Println("CPU-s: the inserting process (this Go process for ours, clickhouse-client for client); server-s: clickhouse-server during the timed run.")
}

func cpuString(v float64) string {
	if v < 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// cpuTime is a process's CPU seconds; -1 when unknown.
type cpuTime float64

func (c cpuTime) minus(before cpuTime) float64 {
	if c < 0 || before < 0 {
		return -1
	}
	return float64(c - before)
}

// serverCPU is the CPU time of the clickhouse-server chbench started (a
// child of this process), from /proc; -1 with -dsn or without /proc.
func (t *target) serverCPU() cpuTime {
	if t.srv == nil {
		return -1
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	me := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: fields 14 and 15; comm
		// may hold spaces, so count from its closing parenthesis.
		open, end := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(string(stat[end+1:]))
		if len(f) < 13 || !strings.HasPrefix(string(stat[open+1:end]), "clickhouse-serv") {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != me {
			continue
		}
		utime, err1 := strconv.ParseInt(f[11], 10, 64)
		stime, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return -1
		}
		return cpuTime(float64(utime+stime) / 100) // USER_HZ is 100 on Linux
	}
	return -1
}

func median(s []sample, f func(sample) float64) float64 {
	v := make([]float64, len(s))
	for i := range s {
		v[i] = f(s[i])
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// processCPU is this process's user + system CPU seconds so far.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "cpu unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "cpu unknown"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// writeTSV writes the events as TabSeparated in b.columns order, the way the
// sink would send them to this server (time in whole seconds where the
// column is DateTime).
func (b *bench) writeTSV(ctx context.Context) error {
	types, err := b.client.QueryStrings(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?", b.clientDB, table)
	if err != nil {
		return err
	}
	typeOf := map[string]string{}
	for _, r := range types {
		typeOf[r[0]] = r[1]
	}
	fields := make([]func(*detector.StreamEvent, []byte) []byte, len(b.columns))
	for i, name := range b.columns {
		typ, ok := typeOf[name]
		if !ok {
			return fmt.Errorf("%s.%s has no column %s", b.clientDB, table, name)
		}
		if strings.Contains(typ, "Array") {
			// stream_events has none; an array column would need
			// ['a','b'] and a getter below.
			return fmt.Errorf("column %s is %s: chbench writes no arrays", name, typ)
		}
		if fields[i] = field(name, strings.HasPrefix(typ, "DateTime64")); fields[i] == nil {
			return fmt.Errorf("column %s: chbench does not know how to write it", name)
		}
	}
	b.tsv = filepath.Join(b.work, "stream_events.tsv")
	f, err := os.Create(b.tsv)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var line []byte
	for i := range b.events {
		line = line[:0]
		for j, fn := range fields {
			if j > 0 {
				line = append(line, '\t')
			}
			line = fn(&b.events[i], line)
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	st, err := f.Stat()
	if err == nil {
		b.tsvBytes = st.Size()
	}
	return errors.Join(err, f.Close())
}

// field returns the writer of column name's value in TabSeparated text.
// Booleans are UInt8 0/1, as the sink stores them; node and source are the
// sink's Config.Node and Config.Source.
func field(name string, dateTime64 bool) func(*detector.StreamEvent, []byte) []byte {
	str := func(get func(*detector.StreamEvent) string) func(*detector.StreamEvent, []byte) []byte {
		return func(e *detector.StreamEvent, buf []byte) []byte { return appendTSV(buf, get(e)) }
	}
	num := func(get func(*detector.StreamEvent) int64) func(*detector.StreamEvent, []byte) []byte {
		return func(e *detector.StreamEvent, buf []byte) []byte { return strconv.AppendInt(buf, get(e), 10) }
	}
	boolean := func(get func(*detector.StreamEvent) bool) func(*detector.StreamEvent, []byte) []byte {
		return num(func(e *detector.StreamEvent) int64 {
			if get(e) {
				return 1
			}
			return 0
		})
	}
	switch name {
	case "id":
		return str(func(e *detector.StreamEvent) string { return e.ID })
	case "time":
		layout := "2006-01-02 15:04:05"
		if dateTime64 {
			layout = "2006-01-02 15:04:05.000000000"
		}
		return func(e *detector.StreamEvent, buf []byte) []byte { return e.Time.UTC().AppendFormat(buf, layout) }
	case "session_id":
		return str(func(e *detector.StreamEvent) string { return e.SessionID })
	case "stream_id":
		return str(func(e *detector.StreamEvent) string { return e.StreamID })
	case "event_id":
		return str(func(e *detector.StreamEvent) string { return e.EventID })
	case "position":
		return num(func(e *detector.StreamEvent) int64 { return int64(e.Position) })
	case "delivery":
		return num(func(e *detector.StreamEvent) int64 { return int64(e.Delivery) })
	case "resumed":
		return boolean(func(e *detector.StreamEvent) bool { return e.Resumed })
	case "priming":
		return boolean(func(e *detector.StreamEvent) bool { return e.Priming })
	case "method":
		return str(func(e *detector.StreamEvent) string { return e.Method })
	case "jsonrpc_id":
		return str(func(e *detector.StreamEvent) string { return e.JSONRPCID })
	case "messages":
		return num(func(e *detector.StreamEvent) int64 { return int64(e.Messages) })
	case "data_bytes":
		return num(func(e *detector.StreamEvent) int64 { return int64(e.DataBytes) })
	case "data_hash":
		return str(func(e *detector.StreamEvent) string { return e.DataHash })
	case "client":
		return str(func(e *detector.StreamEvent) string { return e.Client })
	case "server":
		return str(func(e *detector.StreamEvent) string { return e.Server })
	case "source_kind":
		return str(func(e *detector.StreamEvent) string { return e.Source })
	case "node", "source":
		return str(func(*detector.StreamEvent) string { return "chbench" })
	}
	return nil
}

// appendTSV appends s escaped for TabSeparated: backslash, tab, newline
// (and carriage return and NUL, which ClickHouse also reads escaped).
func appendTSV(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			buf = append(buf, '\\', '\\')
		case '\t':
			buf = append(buf, '\\', 't')
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case 0:
			buf = append(buf, '\\', '0')
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// session is one generated MCP session's state.
type session struct {
	id, client, server string
	life               string // first-seen time, part of every row id (as the detector does)
	stream             int    // current SSE stream: 0 standalone GET, then one per request
	index              int    // next event index on the stream
	replayed           int    // events of a resumed stream delivered again so far
	left               int    // progress notifications left before the response
	request            int    // JSON-RPC id of the current request
}

// base32 is go-sdk's session id alphabet (crypto/rand.Text).
const base32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// generate returns n deterministic stream events in nSessions sessions, 1 ms
// apart, interleaved the way concurrent sessions are: each session runs
// tools/call requests whose SSE streams carry 3 to 8 notifications/progress
// and then the response (method "", the request's id); some streams are
// resumed after a cut, so their first events are second deliveries.
func generate(n, nSessions int) []detector.StreamEvent {
	rng := rand.New(rand.NewPCG(2026, 11))
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	servers := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:3000"}
	sess := make([]*session, nSessions)
	for i := range sess {
		id := make([]byte, 26)
		for j := range id {
			id[j] = base32[rng.IntN(len(base32))]
		}
		sess[i] = &session{
			id:      string(id),
			client:  fmt.Sprintf("10.%d.%d.%d:%d", 1+i/65536, i/256%256, i%256, 40000+rng.IntN(20000)),
			server:  servers[rng.IntN(len(servers))],
			life:    strconv.FormatInt(base.Add(time.Duration(i)*time.Millisecond).UnixNano(), 10),
			stream:  1,
			left:    3 + rng.IntN(6),
			request: 2,
		}
	}
	evs := make([]detector.StreamEvent, n)
	sum := make([]byte, 0, sha256.Size)
	for i := range evs {
		s := sess[rng.IntN(len(sess))]
		e := &evs[i]
		eventID := strconv.Itoa(s.stream) + "_" + strconv.Itoa(s.index)
		*e = detector.StreamEvent{
			Time: base.Add(time.Duration(i) * time.Millisecond), SessionID: s.id,
			StreamID: strconv.Itoa(s.stream), EventID: eventID, Position: int32(s.index), Delivery: 1,
			Messages: 1, Client: s.client, Server: s.server,
			DataHash: fmt.Sprintf("%016x", rng.Uint64()),
		}
		switch {
		case s.stream%10 == 0 && s.index == 2 && s.replayed < 2:
			// One stream in 10 is cut after its first two events and
			// resumed with Last-Event-ID: the server sends both again
			// (second deliveries), then the rest of the stream.
			e.EventID = strconv.Itoa(s.stream) + "_" + strconv.Itoa(s.replayed)
			e.Position, e.Delivery, e.Resumed = int32(s.replayed), 2, true
			e.Method = "notifications/progress"
			e.DataBytes = 140 + rng.IntN(60)
			s.replayed++
		case s.left > 0:
			e.Method = "notifications/progress"
			e.DataBytes = 140 + rng.IntN(60)
			e.Resumed = s.replayed > 0
			s.left--
			s.index++
		default:
			e.JSONRPCID = strconv.Itoa(s.request)
			e.DataBytes = 200 + rng.IntN(1800)
			e.Resumed = s.replayed > 0
			s.stream++
			s.index, s.replayed = 0, 0
			s.left = 3 + rng.IntN(6)
			s.request++
		}
		h := sha256.New()
		for _, p := range []string{"stream_event", s.id, s.life, e.EventID, strconv.Itoa(e.Delivery)} {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
		e.ID = hex.EncodeToString(h.Sum(sum[:0])[:16])
	}
	return evs
}
