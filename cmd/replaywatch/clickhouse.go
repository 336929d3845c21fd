package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
)

// DSNEnv gives the ClickHouse DSN when --clickhouse is not set.
const DSNEnv = "REPLAYWATCH_CLICKHOUSE"

// clickhouseFlags are the flags of every command that talks to ClickHouse.
type clickhouseFlags struct {
	connect chsink.ConnectOptions
	sink    chsink.Config
}

// registerConnect adds the flags that say where ClickHouse is.
func (c *clickhouseFlags) registerConnect(fs *flag.FlagSet) {
	fs.StringVar(&c.connect.DSN, "clickhouse", os.Getenv(DSNEnv),
		"ClickHouse to write to: clickhouse://[user[:password]@]host:9000/database (env "+DSNEnv+"; the password is better given by file or env "+chsink.PasswordEnv+")")
	fs.StringVar(&c.connect.PasswordFile, "clickhouse-password-file", "", "file holding the ClickHouse password")
	fs.StringVar(&c.connect.Cluster, "clickhouse-cluster", "", "cluster name: ON CLUSTER DDL, replicated local tables and Distributed tables sharded by session id")
	fs.IntVar(&c.connect.RetentionDays, "retention-days", 30, "keep rows this many days (on ClickHouse 19.6+ the tables' TTL, set when schema apply creates them; on older servers daily partitions dropped by analyze at start, by the agent hourly; 0 keeps them)")
	fs.DurationVar(&c.connect.DialTimeout, "clickhouse-dial-timeout", 5*time.Second, "time to wait for a ClickHouse connection")
}

// registerSink adds the flags of the sink itself.
func (c *clickhouseFlags) registerSink(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.sink.Node, "node", host, "name stored in the node column of every row; its default is this host's name")
	fs.IntVar(&c.sink.BatchRows, "batch-rows", chsink.DefaultBatchRows, "rows per insert (per table)")
	fs.IntVar(&c.sink.BatchBytes, "batch-bytes", chsink.DefaultBatchBytes, "bytes per insert (per table; unless set, derived from --memory-limit)")
	fs.DurationVar(&c.sink.FlushInterval, "flush-interval", chsink.DefaultFlushInterval, "insert what is pending at least this often")
	fs.IntVar(&c.sink.MaxRetries, "max-retries", chsink.DefaultMaxRetries, "retries of a failed insert before the batch goes to the spool (0: none)")
	fs.StringVar(&c.sink.SpoolDir, "spool-dir", "", "directory for batches ClickHouse could not take, sent first on the next run (default: $XDG_STATE_HOME/replaywatch/spool/<server>)")
	fs.Int64Var(&c.sink.MaxSpoolBytes, "max-spool-bytes", chsink.DefaultMaxSpoolBytes, "bound of the spool; when full, analysis waits for ClickHouse")
	fs.DurationVar(&c.sink.CloseTimeout, "spool-drain-timeout", 10*time.Second, "at the end, how long to keep trying to send the spool before leaving it for the next run")
	fs.BoolVar(&c.sink.StoreArguments, "store-arguments", false, "store tool-call arguments in clear (default: only their keyed hash)")
}

func (c *clickhouseFlags) enabled() bool { return c.connect.DSN != "" }

func (c *clickhouseFlags) validateConnect() error {
	if !strings.HasPrefix(c.connect.DSN, "clickhouse://") {
		return fmt.Errorf("--clickhouse %s: want clickhouse://host:port/database", chsink.Redact(c.connect.DSN))
	}
	if c.connect.RetentionDays < 0 {
		return errors.New("--retention-days must not be negative")
	}
	if c.connect.DialTimeout <= 0 {
		return errors.New("--clickhouse-dial-timeout must be positive")
	}
	return nil
}

func (c *clickhouseFlags) validate() error {
	if !c.enabled() {
		return nil
	}
	if err := c.validateConnect(); err != nil {
		return err
	}
	if c.sink.BatchRows <= 0 || c.sink.BatchBytes <= 0 || c.sink.FlushInterval <= 0 || c.sink.MaxSpoolBytes <= 0 || c.sink.CloseTimeout <= 0 || c.sink.MaxRetries < 0 {
		return errors.New("--batch-rows, --batch-bytes, --flush-interval, --max-spool-bytes and --spool-drain-timeout must be positive; --max-retries not negative")
	}
	return nil
}

var unsafePath = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// defaultSpoolDir is per server and database, so two destinations never
// share a spool; under the state directory (not a cache: it holds data).
func defaultSpoolDir(dsn string) (string, error) {
	base, err := stateDir()
	if err != nil {
		return "", fmt.Errorf("no --spool-dir: %w", err)
	}
	where := strings.TrimPrefix(chsink.Redact(dsn), "clickhouse://")
	if i := strings.IndexByte(where, '@'); i >= 0 {
		where = where[i+1:]
	}
	if i := strings.IndexByte(where, '?'); i >= 0 {
		where = where[:i]
	}
	return filepath.Join(base, "spool", unsafePath.ReplaceAllString(where, "_")), nil
}

// sinkConfig is the sink's configuration as the flags give it.
func (c *clickhouseFlags) sinkConfig() chsink.Config {
	cfg := c.sink
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = -1 // the sink reads 0 as its default; the flag's 0 means no retry
	}
	return cfg
}

// openSink connects, checks the schema and starts the sink. When the server
// cannot be reached, the sink starts anyway and spools until it can (conn is
// nil then); a wrong schema or bad credentials are errors.
// The sink logs to log, or as analyze's own lines on stderr when log is nil.
func (c *clickhouseFlags) openSink(ctx context.Context, source string, stderr io.Writer, log *slog.Logger) (*chsink.Sink, *chsink.Conn, error) {
	cfg := c.sinkConfig()
	cfg.Source = source
	cfg.Logger = log
	if log == nil {
		cfg.Logger = slog.New(newLineHandler(stderr, "replaywatch analyze: "))
	}
	if cfg.SpoolDir == "" {
		dir, err := defaultSpoolDir(c.connect.DSN)
		if err != nil {
			return nil, nil, err
		}
		cfg.SpoolDir = dir
	}
	conn, err := chsink.Connect(ctx, c.connect)
	if err != nil {
		if !chsink.Unreachable(err) {
			return nil, nil, err
		}
		s, serr := chsink.NewDeferred(c.connect, cfg)
		if serr != nil {
			return nil, nil, fmt.Errorf("%v, and the spool cannot hold the findings either: %w", err, serr)
		}
		if log != nil { // the agent's log is JSON: no plain line in it
			log.Warn("clickhouse unreachable; findings are kept in the spool and sent when it is back", "err", err.Error(), "spool", cfg.SpoolDir)
		} else {
			fmt.Fprintf(stderr, "replaywatch: warning: %v\nreplaywatch: findings are kept in the spool %s and sent when ClickHouse is back\n", err, cfg.SpoolDir)
		}
		return s, nil, nil
	}
	s, err := chsink.New(ctx, conn, cfg)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return s, conn, nil
}

// registerSchemaFlags adds the flags of the schema verbs.
func registerSchemaFlags(fs *flag.FlagSet, c *clickhouseFlags, serverVersion *string, target *int) {
	c.registerConnect(fs)
	fs.StringVar(serverVersion, "server-version", "26.7", "print: the server version to write DDL for")
	fs.IntVar(target, "target-version", 0, fmt.Sprintf("apply: migrate up to this schema version (default: the latest, %d)", chsink.SchemaVersion))
}

const schemaUsage = `Usage: replaywatch schema apply|status|print [flags]

  apply    create or migrate the replaywatch tables (idempotent; safe to run
           again and from several machines at once)
  status   print the server version, what the schema uses there, and the
           schema version recorded in the database
  print    print the DDL for a server version without connecting
           (--server-version, default a current release)

Flags:
`

func runSchema(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && helpWanted(args[:1]) {
			fs := flag.NewFlagSet("schema", flag.ContinueOnError)
			registerSchemaFlags(fs, new(clickhouseFlags), new(string), new(int))
			fs.SetOutput(stdout)
			fmt.Fprint(stdout, schemaUsage)
			fs.PrintDefaults()
			return exitOK
		}
		fmt.Fprint(stderr, schemaUsage)
		return exitError
	}
	verb := args[0]
	fs := flag.NewFlagSet("schema "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if helpWanted(args[1:]) {
		fs.SetOutput(stdout)
	}
	var c clickhouseFlags
	serverVersion, target := new(string), new(int)
	registerSchemaFlags(fs, &c, serverVersion, target)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), schemaUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "replaywatch schema %s: %v\n", verb, err)
		return exitError
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if verb == "print" {
		v, err := chsink.ParseVersion(*serverVersion)
		if err != nil {
			return fail(err)
		}
		database := "replaywatch"
		if c.connect.DSN != "" {
			if i := strings.LastIndexByte(strings.SplitN(c.connect.DSN, "?", 2)[0], '/'); i > len("clickhouse://") {
				database = strings.SplitN(c.connect.DSN, "?", 2)[0][i+1:]
			}
		}
		d := chsink.Dialect{Version: v, Database: database, Cluster: c.connect.Cluster, RetentionDays: c.connect.RetentionDays}
		if err := d.Validate(); err != nil { // as apply would refuse them
			return fail(err)
		}
		for _, s := range d.Script("replaywatch " + version()) { // as clickhouse-client --multiquery runs it
			fmt.Fprintf(stdout, "%s;\n\n", s)
		}
		return exitOK
	}
	if verb != "apply" && verb != "status" {
		fmt.Fprintf(stderr, "replaywatch schema: unknown command %q\n\n%s", verb, schemaUsage)
		return exitError
	}
	if c.connect.DSN == "" {
		return fail(fmt.Errorf("no --clickhouse DSN (or %s)", DSNEnv))
	}
	if err := c.validateConnect(); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	conn, err := chsink.Connect(ctx, c.connect)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	d := conn.Dialect()
	retention := "TTL"
	if !d.HasTTL() {
		retention = "daily partitions dropped by analyze at start and by the agent hourly"
	}
	if verb == "status" {
		v, err := chsink.AppliedVersion(ctx, conn, d)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "server %s: ClickHouse %s (retention: %s)\ndatabase %s: schema version %d (this build writes %d)\n",
			conn, d.Version, retention, d.Database, v, chsink.SchemaVersion)
		if v != chsink.SchemaVersion {
			return exitViolations
		}
		return exitOK
	}
	applied, err := chsink.Apply(ctx, conn, d, *target, "replaywatch "+version())
	for _, a := range applied {
		fmt.Fprintf(stdout, "applied %d: %s\n", a.Version, a.Name)
	}
	if err != nil {
		return fail(err)
	}
	v, err := chsink.AppliedVersion(ctx, conn, d)
	if err != nil {
		return fail(err)
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "database %s on %s is up to date (schema version %d)\n", d.Database, conn, v)
	} else {
		fmt.Fprintf(stdout, "database %s on %s (ClickHouse %s) is at schema version %d\n", d.Database, conn, d.Version, v)
	}
	return exitOK
}
