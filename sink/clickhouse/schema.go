package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// SchemaVersion is the schema this build writes. Each migration below moves
// a database one version up; Apply records every one it ran in the
// schema_migrations table.
const SchemaVersion = 4

// migration is one step of the schema's history. Its statements are
// idempotent (IF NOT EXISTS, or guarded by a look at system.columns), so a
// migration cut short by a crash or run by two agents at once is simply run
// again.
type migration struct {
	version int
	name    string
}

var migrations = []migration{
	{1, "findings tables: violations, resumes, sessions, unknown_outcomes, unverifiable"},
	{2, "stream_events: one row per SSE event, payload as a hash"},
	{3, "unknown_outcomes.arguments: tool arguments, stored only on opt-in"},
	{4, "source_kind: which input a row came from"},
}

// Execer is what schema changes need of a connection: the native
// connection in production, an embedded engine in tests.
type Execer interface {
	Exec(ctx context.Context, query string, args ...any) error
	// QueryStrings runs a query whose result columns are all String and
	// returns its rows.
	QueryStrings(ctx context.Context, query string, args ...any) ([][]string, error)
}

// Dialect is what the server can do, detected from its version at connect,
// and how the schema is laid out on it.
type Dialect struct {
	Version Version
	// Database the tables live in.
	Database string
	// Cluster, when set, makes every DDL ON CLUSTER and every table a
	// ReplicatedReplacingMergeTree "<name>_local" on each shard under a
	// Distributed "<name>" sharded by session id.
	Cluster string
	// RetentionDays bounds how long rows are kept: a TTL where the server
	// has it (19.6+), otherwise daily partitions dropped by analyze and the
	// agent (DropExpiredPartitions). 0 keeps rows forever.
	RetentionDays int
}

// Version is a ClickHouse server version.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

func (v Version) atLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ParseVersion reads what SELECT version() returns ("18.16.1",
// "26.7.3.1").
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("server version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	var v Version
	for i, p := range []*int{&v.Major, &v.Minor, &v.Patch} {
		if i >= len(parts) {
			break
		}
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return Version{}, fmt.Errorf("server version %q: %v", s, err)
		}
		*p = n
	}
	return v, nil
}

// Features of the server version that the schema uses where present.
func (d Dialect) lowCardinalityNative() bool { return d.Version.atLeast(19, 0) }

// lowCardinality: experimental before 19, allowed by a setting of the DDL
// query. ON CLUSTER DDL is run by each server's DDL worker with its own
// profile, without the query's settings, so on such old clusters the
// columns stay String.
func (d Dialect) lowCardinality() bool {
	return d.lowCardinalityNative() || d.Version.atLeast(18, 12) && d.Cluster == ""
}
func (d Dialect) dateTime64() bool { return d.Version.atLeast(20, 1) }
func (d Dialect) ttl() bool        { return d.Version.atLeast(19, 6) }

// HasTTL says whether retention is a table TTL (else the sink drops
// partitions).
func (d Dialect) HasTTL() bool { return d.ttl() }

// ddlSettings are the settings DDL needs on this server.
func (d Dialect) ddlSettings() map[string]any {
	if d.lowCardinality() && !d.lowCardinalityNative() {
		return map[string]any{"allow_experimental_low_cardinality_type": 1}
	}
	return nil
}

func (d Dialect) sqlType(t colType) string {
	switch t {
	case tString:
		return "String"
	case tLowCard:
		if d.lowCardinality() {
			return "LowCardinality(String)"
		}
		return "String"
	case tTime:
		if d.dateTime64() {
			return "DateTime64(9, 'UTC')"
		}
		return "DateTime('UTC')"
	case tUInt8:
		return "UInt8"
	case tUInt16:
		return "UInt16"
	case tUInt32:
		return "UInt32"
	case tInt32:
		return "Int32"
	case tArrayString:
		return "Array(String)"
	}
	panic(fmt.Sprintf("colType %d", t))
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the names that go into DDL, where ClickHouse cannot bind
// parameters: they must be plain identifiers.
func (d Dialect) Validate() error {
	if !identRE.MatchString(d.Database) {
		return fmt.Errorf("database name %q: want letters, digits and _", d.Database)
	}
	if d.Cluster != "" && !identRE.MatchString(d.Cluster) {
		return fmt.Errorf("cluster name %q: want letters, digits and _", d.Cluster)
	}
	if d.RetentionDays < 0 {
		return fmt.Errorf("retention of %d days: want 0 (keep) or more", d.RetentionDays)
	}
	return nil
}

func (d Dialect) onCluster() string {
	if d.Cluster == "" {
		return ""
	}
	return " ON CLUSTER " + d.Cluster
}

// InsertTable is the table inserts go to: the Distributed table in cluster
// mode, the table itself otherwise.
func (d Dialect) InsertTable(name string) string { return d.Database + "." + name }

// storageTable is where rows are stored (the local table in cluster mode).
func (d Dialect) storageTable(name string) string {
	if d.Cluster != "" {
		return name + "_local"
	}
	return name
}

// createTable is the DDL of a table (and in cluster mode of its local
// tables and the Distributed table over them), at the given schema version.
func (d Dialect) createTable(t *table, version int) []string {
	var cols []string
	for _, c := range t.insertColumns(version) {
		cols = append(cols, "    "+c.name+" "+d.sqlType(c.typ))
	}
	cols = append(cols, "    inserted_at DateTime DEFAULT now()")
	engine := "ReplacingMergeTree"
	args := []string{}
	if d.Cluster != "" {
		engine = "ReplicatedReplacingMergeTree"
		args = append(args, fmt.Sprintf("'/clickhouse/tables/{shard}/%s/%s'", d.Database, d.storageTable(t.name)), "'{replica}'")
	}
	if t.version != "" {
		args = append(args, t.version)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s.%s%s (\n%s\n) ENGINE = %s(%s)\nPARTITION BY %s\nORDER BY (%s)",
		d.Database, d.storageTable(t.name), d.onCluster(), strings.Join(cols, ",\n"), engine, strings.Join(args, ", "),
		t.partitionBy, t.orderBy)
	if d.RetentionDays > 0 && d.ttl() {
		fmt.Fprintf(&b, "\nTTL %s + INTERVAL %d DAY", d.ttlTime(t.timeColumn), d.RetentionDays)
	}
	stmts := []string{b.String()}
	if d.Cluster != "" {
		stmts = append(stmts, d.distributedTable(t))
	}
	return stmts
}

// distributedTable is the cluster-mode table inserts and reads go through.
func (d Dialect) distributedTable(t *table) string {
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s%s AS %s.%s\nENGINE = Distributed(%s, %s, %s, %s)",
		d.Database, t.name, d.onCluster(), d.Database, d.storageTable(t.name), d.Cluster, d.Database, d.storageTable(t.name), t.shardBy)
}

func (d Dialect) ttlTime(col string) string {
	if d.dateTime64() {
		return "toDateTime(" + col + ")"
	}
	return col
}

// migrationsTable records applied migrations. It is a plain MergeTree on
// the server Apply talks to (ON CLUSTER: on every server); duplicates from a
// re-run or from two agents are harmless because the version read back is
// max(version).
func (d Dialect) migrationsTable() string {
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.schema_migrations%s (\n    version UInt32,\n    name String,\n    "+
		"applied_at DateTime DEFAULT now(),\n    replaywatch String\n) ENGINE = MergeTree ORDER BY version", d.Database, d.onCluster())
}

// Statements is every statement that takes an empty database to the current
// schema, for reading and for tests on engines without migration state.
func (d Dialect) Statements() []string {
	stmts := []string{fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %s%s", d.Database, d.onCluster()), d.migrationsTable()}
	for _, t := range tables {
		stmts = append(stmts, d.createTable(t, SchemaVersion)...)
	}
	return stmts
}

// Script is what `schema print` prints: a script for clickhouse-client
// --multiquery that takes an empty database to the current schema, usable
// as printed. It starts with the settings this server's DDL needs (18.16:
// allow_experimental_low_cardinality_type) and ends by recording every
// migration in schema_migrations, as Apply does, so that the sink and
// `schema status` accept the database. build names the replaywatch that
// printed it.
func (d Dialect) Script(build string) []string {
	var stmts []string
	settings := d.ddlSettings()
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		stmts = append(stmts, fmt.Sprintf("SET %s = %v", k, settings[k]))
	}
	stmts = append(stmts, d.Statements()...)
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace
	for _, m := range migrations {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO %s.schema_migrations (version, name, replaywatch) VALUES (%d, '%s', '%s')",
			d.Database, m.version, quote(m.name), quote(build)))
	}
	return stmts
}

// AppliedVersion is the highest migration recorded in the database, 0 for
// an empty one.
func AppliedVersion(ctx context.Context, db Execer, d Dialect) (int, error) {
	rows, err := db.QueryStrings(ctx, "SELECT toString(count()) FROM system.tables WHERE database = ? AND name = 'schema_migrations'", d.Database)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 || len(rows[0]) == 0 || rows[0][0] == "0" {
		return 0, nil
	}
	rows, err = db.QueryStrings(ctx, fmt.Sprintf("SELECT toString(max(version)) FROM %s.schema_migrations", d.Database))
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 || len(rows[0]) == 0 {
		return 0, nil
	}
	return strconv.Atoi(rows[0][0])
}

// Applied is one migration Apply ran.
type Applied struct {
	Version int
	Name    string
}

// Apply brings the database up to target (SchemaVersion when 0), running
// every migration after the recorded one. It is safe to run again and from
// several agents at once.
func Apply(ctx context.Context, db Execer, d Dialect, target int, build string) ([]Applied, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if target == 0 {
		target = SchemaVersion
	}
	if target < 0 || target > SchemaVersion {
		return nil, fmt.Errorf("schema version %d: this build knows 1 to %d", target, SchemaVersion)
	}
	exec := func(stmt string) error {
		if err := db.Exec(withDDLSettings(ctx, d), stmt); err != nil {
			return fmt.Errorf("%w\nin: %s", err, firstLine(stmt))
		}
		return nil
	}
	for _, stmt := range []string{fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %s%s", d.Database, d.onCluster()), d.migrationsTable()} {
		if err := exec(stmt); err != nil {
			if ok, cerr := alreadyDone(ctx, db, stmt, err); cerr != nil || !ok {
				return nil, err
			}
		}
	}
	current, err := AppliedVersion(ctx, db, d)
	if err != nil {
		return nil, err
	}
	if current > SchemaVersion {
		return nil, fmt.Errorf("database %s is at schema version %d, newer than this build's %d: upgrade replaywatch", d.Database, current, SchemaVersion)
	}
	var done []Applied
	for _, m := range migrations {
		if m.version <= current || m.version > target {
			continue
		}
		stmts, err := d.migrationStatements(ctx, db, m.version)
		if err != nil {
			return done, err
		}
		for _, stmt := range stmts {
			if err := exec(stmt); err != nil {
				if ok, cerr := alreadyDone(ctx, db, stmt, err); cerr == nil && ok {
					continue // another apply, running at the same time, did it
				}
				return done, fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
		}
		// INSERT ... SELECT: an INSERT ... VALUES through Exec makes 18.16
		// wait for data blocks that never come.
		if err := db.Exec(ctx, fmt.Sprintf("INSERT INTO %s.schema_migrations (version, name, replaywatch) SELECT toUInt32(?), ?, ?", d.Database),
			uint32(m.version), m.name, build); err != nil {
			return done, fmt.Errorf("recording migration %d: %w", m.version, err)
		}
		done = append(done, Applied{m.version, m.name})
	}
	return done, nil
}

// migrationStatements is what migration v runs on this server.
func (d Dialect) migrationStatements(ctx context.Context, db Execer, v int) ([]string, error) {
	var stmts []string
	// Tables born at v are created with the columns of v.
	for _, t := range tables {
		if t.since == v {
			stmts = append(stmts, d.createTable(t, v)...)
		}
	}
	// Columns added at v to older tables. 18.16 has no ADD COLUMN IF NOT
	// EXISTS, so look first; in cluster mode the Distributed table needs
	// the column too.
	for _, t := range tables {
		for _, c := range t.columns {
			if c.since != v || t.since >= v {
				continue
			}
			targets := []string{d.storageTable(t.name)}
			if d.Cluster != "" {
				targets = append(targets, t.name)
			}
			for _, name := range targets {
				has, err := hasColumn(ctx, db, d.Database, name, c.name)
				if err != nil {
					return nil, err
				}
				switch {
				case has:
				case name == t.name && d.Cluster != "":
					// A Distributed table over replicated shards
					// refuses ALTER ON CLUSTER; it holds no data
					// (inserts are synchronous), so it is made again
					// from the altered local table.
					stmts = append(stmts, fmt.Sprintf("DROP TABLE IF EXISTS %s.%s%s", d.Database, t.name, d.onCluster()), d.distributedTable(t))
				default:
					// New columns go before the meta columns (node,
					// source) that close every table.
					stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s%s ADD COLUMN %s %s AFTER %s",
						d.Database, name, d.onCluster(), c.name, d.sqlType(c.typ), previousColumn(t, c)))
				}
			}
		}
	}
	return stmts, nil
}

// addColumnStmt picks database, table and column out of the ADD COLUMN
// statements migrationStatements makes.
var addColumnStmt = regexp.MustCompile(`^ALTER TABLE ([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)(?: ON CLUSTER [^ ]+)? ADD COLUMN ([A-Za-z0-9_]+) `)

// alreadyDone says a migration statement that failed was done meanwhile by
// another apply (every agent of a DaemonSet with apply_schema applies at
// an upgrade): its column exists now (18.16 has no ADD COLUMN IF NOT
// EXISTS: the check before the ALTER can race, and the loser is told
// "column already exists", code 44), or its table or database ("already
// exists", codes 57 and 82, when two CREATE ... IF NOT EXISTS race).
func alreadyDone(ctx context.Context, db Execer, stmt string, err error) (bool, error) {
	if m := addColumnStmt.FindStringSubmatch(stmt); m != nil {
		return hasColumn(ctx, db, m[1], m[2], m[3])
	}
	var ex *ch.Exception
	if strings.HasPrefix(stmt, "CREATE ") && strings.Contains(stmt, " IF NOT EXISTS ") && errors.As(err, &ex) {
		return ex.Code == 57 || ex.Code == 82, nil
	}
	return false, nil
}

func previousColumn(t *table, c column) string {
	prev := ""
	for _, x := range t.columns {
		if x.name == c.name {
			return prev
		}
		prev = x.name
	}
	return prev
}

func hasColumn(ctx context.Context, db Execer, database, table, column string) (bool, error) {
	rows, err := db.QueryStrings(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ? AND name = ?", database, table, column)
	if err != nil {
		return false, err
	}
	return len(rows) > 0, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// ErrSchemaMissing says the database has not been migrated to what this
// build writes.
var ErrSchemaMissing = errors.New("schema out of date")

// CheckSchema fails with ErrSchemaMissing unless the database is at
// SchemaVersion.
func CheckSchema(ctx context.Context, db Execer, d Dialect) error {
	v, err := AppliedVersion(ctx, db, d)
	if err != nil {
		return err
	}
	if v != SchemaVersion {
		return fmt.Errorf("%w: database %s is at version %d, this build writes %d; run `replaywatch schema apply`", ErrSchemaMissing, d.Database, v, SchemaVersion)
	}
	return nil
}
