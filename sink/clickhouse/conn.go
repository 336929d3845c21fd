package clickhouse

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// PasswordEnv is the environment variable a password is read from when
// neither the DSN nor a password file gives one.
const PasswordEnv = "REPLAYWATCH_CLICKHOUSE_PASSWORD"

// ConnectOptions says where the database is and how to log in.
type ConnectOptions struct {
	// DSN is clickhouse://[user[:password]@]host:port[,host:port]/database[?options]
	// (clickhouse-go's DSN options apply, e.g. secure=true, dial_timeout=5s).
	DSN string
	// PasswordFile, when set, holds the password (trailing newline
	// ignored). It wins over the DSN and PasswordEnv, and keeps the
	// password out of process listings.
	PasswordFile string
	// Cluster: see Dialect.Cluster.
	Cluster       string
	RetentionDays int
	DialTimeout   time.Duration
}

// Conn is a native-protocol connection that knows the server's dialect.
type Conn struct {
	native  driver.Conn
	dialect Dialect
	where   string // the DSN without its password, for messages
	dest    string // destinationOf the DSN
	dial    *dialer
}

// errAborted is the error of a connection cut by abort.
var errAborted = errors.New("clickhouse connection aborted (shutting down)")

// dialer opens the driver's connections and keeps them, so that abort can
// close them mid-read: the driver's Close closes only idle connections, and
// a request context's cancellation does not reach a blocked read.
type dialer struct {
	timeout time.Duration
	tls     *tls.Config

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	aborted bool
}

func (d *dialer) dialContext(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	aborted, timeout, tlsConfig := d.aborted, d.timeout, d.tls
	d.mu.Unlock()
	if aborted {
		return nil, errAborted
	}
	nd := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if tlsConfig != nil {
		c, err = (&tls.Dialer{NetDialer: nd, Config: tlsConfig}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = nd.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.aborted {
		c.Close()
		return nil, errAborted
	}
	if d.conns == nil {
		d.conns = map[net.Conn]struct{}{}
	}
	d.conns[c] = struct{}{}
	return &trackedConn{Conn: c, d: d}, nil
}

// abort closes every connection and refuses new ones.
func (d *dialer) abort() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.aborted = true
	for c := range d.conns {
		c.Close()
	}
	clear(d.conns)
}

type trackedConn struct {
	net.Conn
	d *dialer
}

func (c *trackedConn) Close() error {
	c.d.mu.Lock()
	delete(c.d.conns, c.Conn)
	c.d.mu.Unlock()
	return c.Conn.Close()
}

// secretOption matches the names of DSN query options that hold a secret:
// clickhouse-go's password, and any other name that reads like one.
var secretOption = regexp.MustCompile(`(?i)pass|secret|token|jwt|credential|auth|key`)

// Redact returns dsn with any password replaced by "xxxxx", for messages
// and logs: the user-info's, every credential-looking query option's
// (?password=...) and the user-info of a URL in an option (http_proxy).
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k, vs := range q {
			for i, v := range vs {
				if s := optionSecret(k, v); s != "" {
					vs[i] = strings.ReplaceAll(v, s, "xxxxx")
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// optionSecret is the secret in the DSN query option k=v: all of v when k
// reads like a secret's name, the password of a URL in v (http_proxy), or
// "" for none.
func optionSecret(k, v string) string {
	if secretOption.MatchString(k) {
		return v
	}
	if pu, err := url.Parse(v); err == nil && pu.User != nil {
		p, _ := pu.User.Password()
		return p
	}
	return ""
}

// dsnSecrets is every secret value in dsn (what Redact hides).
func dsnSecrets(dsn string) []string {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil
	}
	var secrets []string
	if p, ok := u.User.Password(); ok && p != "" {
		secrets = append(secrets, p)
	}
	for k, vs := range u.Query() {
		for _, v := range vs {
			if s := optionSecret(k, v); s != "" {
				secrets = append(secrets, s)
			}
		}
	}
	return secrets
}

// Connect opens a connection, checks the server answers and detects its
// version. Errors never contain the password.
func Connect(ctx context.Context, o ConnectOptions) (*Conn, error) {
	return openConn(ctx, o, &dialer{})
}

func openConn(ctx context.Context, o ConnectOptions, d *dialer) (*Conn, error) {
	where := Redact(o.DSN)
	opts, err := ch.ParseDSN(o.DSN)
	if err != nil {
		return nil, fmt.Errorf("clickhouse DSN %s: %v", where, redactErr(err, o.DSN))
	}
	if opts.Auth.Database == "" {
		opts.Auth.Database = "replaywatch"
	}
	database := opts.Auth.Database
	// The database may not exist yet (schema apply creates it): log in to
	// default and name the database in every statement.
	opts.Auth.Database = "default"
	switch {
	case o.PasswordFile != "":
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("clickhouse password file: %w", err)
		}
		opts.Auth.Password = strings.TrimRight(string(b), "\r\n")
	case opts.Auth.Password == "" && os.Getenv(PasswordEnv) != "":
		opts.Auth.Password = os.Getenv(PasswordEnv)
	}
	if o.DialTimeout > 0 {
		opts.DialTimeout = o.DialTimeout
	}
	d.mu.Lock()
	d.timeout, d.tls = opts.DialTimeout, opts.TLS
	d.mu.Unlock()
	opts.DialContext = d.dialContext
	native, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %v", where, redactErr(err, o.DSN))
	}
	c := &Conn{native: native, where: where, dest: destinationOf(o.DSN), dial: d}
	if err := native.Ping(ctx); err != nil {
		native.Close()
		return nil, fmt.Errorf("clickhouse %s: %w", where, err)
	}
	sv, err := native.ServerVersion()
	if err != nil {
		native.Close()
		return nil, fmt.Errorf("clickhouse %s: server version: %w", where, err)
	}
	c.dialect = Dialect{
		Version:  Version{Major: int(sv.Version.Major), Minor: int(sv.Version.Minor), Patch: int(sv.Version.Patch)},
		Database: database, Cluster: o.Cluster, RetentionDays: o.RetentionDays,
	}
	if err := c.dialect.Validate(); err != nil {
		native.Close()
		return nil, err
	}
	return c, nil
}

func redactErr(err error, dsn string) string {
	msg := err.Error()
	for _, p := range dsnSecrets(dsn) {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(p), "xxxxx")
	}
	return msg
}

// Dialect is the detected server dialect.
func (c *Conn) Dialect() Dialect { return c.dialect }

// String names the server without credentials.
func (c *Conn) String() string { return c.where }

// Close closes the connection.
func (c *Conn) Close() error { return c.native.Close() }

// Exec runs a statement; args are bound by the driver, never spliced.
func (c *Conn) Exec(ctx context.Context, query string, args ...any) error {
	return c.native.Exec(ctx, query, args...)
}

// QueryStrings runs a query whose columns are all String.
func (c *Conn) QueryStrings(ctx context.Context, query string, args ...any) ([][]string, error) {
	rows, err := c.native.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	n := len(rows.Columns())
	var out [][]string
	for rows.Next() {
		row := make([]string, n)
		ptrs := make([]any, n)
		for i := range row {
			ptrs[i] = &row[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// withDDLSettings adds the settings DDL needs on this server.
func withDDLSettings(ctx context.Context, d Dialect) context.Context {
	s := d.ddlSettings()
	if len(s) == 0 {
		return ctx
	}
	settings := ch.Settings{}
	for k, v := range s {
		settings[k] = v
	}
	return ch.Context(ctx, ch.WithSettings(settings))
}

// insert sends one batch with the driver's columnar append.
func (c *Conn) insert(ctx context.Context, b *batch) error {
	if c.dialect.Cluster != "" {
		// Confirm only once every shard has the rows: an asynchronous
		// Distributed insert would report success for rows still queued
		// on this server's disk.
		ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_distributed_sync": 1}))
	}
	pb, err := c.native.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (%s)", c.dialect.InsertTable(b.table.name), b.table.columnList(b.version)))
	if err != nil {
		return err
	}
	for i, col := range b.values() {
		if err := pb.Column(i).Append(col); err != nil {
			pb.Abort()
			return fmt.Errorf("column %d of %s: %w", i, b.table.name, err)
		}
	}
	return pb.Send()
}

func (c *Conn) abort() { c.dial.abort() }

// destinationOf names where a DSN writes, for the spool's files: the
// server addresses and the database, without credentials or options; ""
// when the DSN does not parse.
func destinationOf(dsn string) string {
	opts, err := ch.ParseDSN(dsn)
	if err != nil {
		return ""
	}
	database := opts.Auth.Database
	if database == "" {
		database = "replaywatch"
	}
	return strings.Join(opts.Addr, ",") + "/" + database
}

func (c *Conn) destination() string { return c.dest }

// deferredConn connects on first use: a sink started while the server is
// unreachable spools and connects (and checks the schema) when it can. Used
// from the sender goroutine only, but for abort.
type deferredConn struct {
	opts ConnectOptions
	conn *Conn
	dial dialer // shared by every connection made, so abort reaches a connect in progress
}

func (l *deferredConn) abort() { l.dial.abort() }

func (l *deferredConn) destination() string { return destinationOf(l.opts.DSN) }

func (l *deferredConn) insert(ctx context.Context, b *batch) error {
	if l.conn == nil {
		c, err := openConn(ctx, l.opts, &l.dial)
		if err != nil {
			return err
		}
		if err := CheckSchema(ctx, c, c.Dialect()); err != nil {
			c.Close()
			return err
		}
		l.conn = c
	}
	err := l.conn.insert(ctx, b)
	if err != nil && !errors.Is(classify(err), errPermanent) {
		// Start afresh after a network failure.
		l.conn.Close()
		l.conn = nil
	}
	return err
}

// errPermanent marks an insert error that retrying cannot fix (the server
// rejected the data or the schema): the batch goes to the spool at once and
// the error is reported.
var errPermanent = errors.New("permanent")

// classify tells transient failures (network, server down or overloaded)
// from permanent ones (a ClickHouse exception about the query itself).
func classify(err error) error {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		switch {
		case tooManyPartitions(err):
			// The same code as too many parts, but about the batch: it
			// spans more partitions than one INSERT may (the sender
			// inserts it in parts; refused again, it never passes).
		case slices.Contains([]int32{202, 203, 209, 210, 241, 242, 252, 159, 425, 999}, ex.Code):
			// too many simultaneous queries, no free connection, socket
			// timeout, network error, memory limit, table read-only, too
			// many parts (merges behind), timeout, system error, keeper
			// exception
			return err
		}
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	return err
}

// tooManyPartitions says the server refused an insert for spanning more
// partitions than one INSERT may (code 252, TOO_MANY_PARTS, with its
// "Too many partitions for single INSERT block" message; the same code
// without it says merges are behind, which passes).
func tooManyPartitions(err error) bool {
	var ex *ch.Exception
	return errors.As(err, &ex) && ex.Code == 252 && strings.Contains(strings.ToLower(ex.Message), "too many partitions")
}

// refusedForGood says the server refused a batch for a reason retrying
// cannot fix and which is about the batch or its table (a column it does
// not have, a value it cannot parse, too many partitions): the batch is set
// aside rather than block what follows. Refusals about the connection (the
// login, the database, a table missing: the set-up, which a human fixes
// and which every batch meets alike) are not: those batches wait.
func refusedForGood(err error) bool {
	var ex *ch.Exception
	if !errors.Is(classify(err), errPermanent) || !errors.As(err, &ex) {
		return false
	}
	switch ex.Code {
	case 60, 81, 164, 192, 193, 194, 195, 291, 497, 516:
		// unknown table, unknown database, readonly, unknown user,
		// wrong password, required password, IP address not allowed,
		// database access denied, access denied, authentication failed
		return false
	}
	return true
}

// Unreachable says err is about reaching the server (refused, timed out,
// no route), not about what was asked of it: a sink can start anyway and
// spool until the server is back.
func Unreachable(err error) bool {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ch.ErrAcquireConnTimeout)
}
