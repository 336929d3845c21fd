package clickhouse

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/detector"
)

// colType is a column's logical type; Dialect turns it into SQL.
type colType uint8

const (
	tString      colType = iota + 1
	tLowCard             // LowCardinality(String) where the server has it: few distinct values (kinds, servers, nodes)
	tTime                // DateTime64(9, 'UTC'); DateTime('UTC') before 20.1 (seconds)
	tUInt8               // booleans too: Bool arrived in 21.12
	tUInt16              // HTTP status, small counts
	tUInt32              // counts
	tInt32               // positions (-1: unknown)
	tArrayString         // JSON-RPC ids, violation ids
)

// goType is the Go slice element each column type is appended as; the
// driver maps it onto both the old and the new SQL type.
func (t colType) goType() reflect.Type {
	switch t {
	case tString, tLowCard:
		return reflect.TypeFor[string]()
	case tTime:
		return reflect.TypeFor[time.Time]()
	case tUInt8:
		return reflect.TypeFor[uint8]()
	case tUInt16:
		return reflect.TypeFor[uint16]()
	case tUInt32:
		return reflect.TypeFor[uint32]()
	case tInt32:
		return reflect.TypeFor[int32]()
	case tArrayString:
		return reflect.TypeFor[[]string]()
	}
	panic(fmt.Sprintf("colType %d", t))
}

// column is one column of a table and, for record columns, how to read its
// value from a record. Meta columns (node, source) have no getter: the sink
// fills them.
type column struct {
	name string
	typ  colType
	// since is the schema version that added the column (0: the table's).
	since int
}

// Meta columns close every table: which agent wrote the row (node) and what
// it was reading (source: a file name or an interface, the sink's
// Config.Source). They are not part of any sorting key, so the same finding
// seen by two agents, or by two runs over one file, collapses into one row.
// Which kind of input that was (pcap, live, otlp) is the record's own
// source_kind column (sourceKindColumn), not a meta column: the pipeline sets
// it on each record, and one agent reads both packets and spans.
var metaColumns = []column{{name: "node", typ: tLowCard}, {name: "source", typ: tString}}

// sourceKindColumn closes every table's record columns: the input the record
// came from, detector.SourcePcap, SourceLive or SourceOTLP (few values, so
// LowCardinality). Rows written before schema version 4 have "".
var sourceKindColumn = column{name: "source_kind", typ: tLowCard, since: 4}

// table describes one table of the schema: its columns in insert order, and
// the keys chosen for the queries the dashboards run (see the comments on
// each table below).
type table struct {
	name    string
	since   int // schema version that created it
	columns []column
	// orderBy is the sorting key and therefore the deduplication key of
	// ReplacingMergeTree: it must hold the deterministic row id.
	orderBy string
	// partitionBy is by day of the record's own time, never the insert
	// time: a re-sent row must land in the partition its first copy is in,
	// or ReplacingMergeTree cannot collapse them. Daily partitions are also
	// the retention unit on servers without TTL.
	partitionBy string
	timeColumn  string // the column retention looks at
	// version is ReplacingMergeTree's version column ("" keeps any copy:
	// copies are identical).
	version string
	// shardBy is the Distributed table's sharding expression: by session,
	// so one session's rows (its timeline) stay on one shard.
	shardBy string
}

// insertColumns is the column list of an INSERT: clickhouse-go's batches
// work on 18.16 only when the INSERT names its columns.
func (t *table) insertColumns(version int) []column {
	var cols []column
	for _, c := range t.columns {
		if c.since <= version {
			cols = append(cols, c)
		}
	}
	return append(cols, metaColumns...)
}

func (t *table) columnList(version int) string {
	cols := t.insertColumns(version)
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// The tables. Orders are chosen for three kinds of query:
//   - recent findings by kind, severity, server over a time range: the day
//     partitions prune the range; kind leads the violations key;
//   - one session's timeline (its events, resumes, findings): session_id
//     leads every other key, so a session is a few adjacent granules;
//   - rates over time: partition pruning plus a scan of few columns.
var (
	violationsTable = &table{
		name: "violations", since: 1,
		columns: []column{
			{name: "id", typ: tString}, {name: "kind", typ: tLowCard}, {name: "severity", typ: tLowCard},
			{name: "time", typ: tTime}, {name: "session_id", typ: tString}, {name: "new_session_id", typ: tString},
			{name: "last_event_id", typ: tString}, {name: "first_event_id", typ: tString}, {name: "stream_id", typ: tString},
			{name: "protocol_version", typ: tLowCard}, {name: "client", typ: tString}, {name: "server", typ: tLowCard},
			{name: "jsonrpc_ids", typ: tArrayString}, {name: "tool", typ: tLowCard}, {name: "explanation", typ: tString},
			{name: "evidence", typ: tString}, {name: "confidence", typ: tLowCard},
			sourceKindColumn,
		},
		// Violations are few; kind first serves "by kind" panels and
		// alert queries, session_id next serves the session dashboard.
		orderBy: "kind, session_id, id", partitionBy: "toYYYYMMDD(time)", timeColumn: "time", shardBy: "sipHash64(session_id)",
	}
	resumesTable = &table{
		name: "resumes", since: 1,
		columns: []column{
			{name: "id", typ: tString}, {name: "time", typ: tTime}, {name: "session_id", typ: tString},
			{name: "response_session_id", typ: tString}, {name: "last_event_id", typ: tString},
			{name: "first_event_id", typ: tString}, {name: "stream_id", typ: tString}, {name: "status", typ: tUInt16},
			{name: "outcome", typ: tLowCard}, {name: "reason", typ: tString}, {name: "protocol_version", typ: tLowCard},
			{name: "client", typ: tString}, {name: "server", typ: tLowCard}, {name: "replayed", typ: tUInt32},
			{name: "violation_ids", typ: tArrayString},
			sourceKindColumn,
		},
		orderBy: "session_id, id", partitionBy: "toYYYYMMDD(time)", timeColumn: "time", shardBy: "sipHash64(session_id)",
	}
	sessionsTable = &table{
		name: "sessions", since: 1,
		columns: []column{
			{name: "session_id", typ: tString}, {name: "server", typ: tLowCard}, {name: "client", typ: tString},
			{name: "protocol_version", typ: tLowCard}, {name: "first_seen", typ: tTime}, {name: "last_seen", typ: tTime},
			{name: "start_seen", typ: tUInt8}, {name: "requests", typ: tUInt32}, {name: "events", typ: tUInt32},
			{name: "streams", typ: tUInt32}, {name: "resumes", typ: tUInt32}, {name: "violations", typ: tUInt32},
			{name: "ended", typ: tLowCard}, {name: "previous_session_id", typ: tString}, {name: "link_confidence", typ: tLowCard},
			sourceKindColumn,
		},
		// One row per session and server; a later summary of the same
		// session (an agent that saw more of it) replaces an earlier one.
		orderBy: "session_id, server", partitionBy: "toYYYYMMDD(first_seen)", timeColumn: "last_seen", version: "last_seen",
		shardBy: "sipHash64(session_id)",
	}
	unknownOutcomesTable = &table{
		name: "unknown_outcomes", since: 1,
		columns: []column{
			{name: "id", typ: tString}, {name: "time", typ: tTime}, {name: "session_id", typ: tString},
			{name: "jsonrpc_id", typ: tString}, {name: "method", typ: tLowCard}, {name: "tool", typ: tLowCard},
			{name: "arguments_hash", typ: tString}, {name: "called_at", typ: tTime}, {name: "client", typ: tString},
			{name: "server", typ: tLowCard}, {name: "reason", typ: tString}, {name: "reissued_in_session", typ: tString},
			// Tool arguments in clear, only when the operator opted in
			// (--store-arguments); empty otherwise.
			{name: "arguments", typ: tString, since: 3},
			sourceKindColumn,
		},
		orderBy: "session_id, id", partitionBy: "toYYYYMMDD(time)", timeColumn: "time", shardBy: "sipHash64(session_id)",
	}
	unverifiableTable = &table{
		name: "unverifiable", since: 1,
		columns: []column{
			{name: "id", typ: tString}, {name: "time", typ: tTime}, {name: "session_id", typ: tString},
			{name: "client", typ: tString}, {name: "server", typ: tLowCard}, {name: "reason", typ: tString},
			{name: "check_name", typ: tLowCard},
			sourceKindColumn,
		},
		orderBy: "session_id, id", partitionBy: "toYYYYMMDD(time)", timeColumn: "time", shardBy: "sipHash64(session_id)",
	}
	// streamEventsTable is the high-volume one: a row per SSE event. Its
	// payload is a hash only.
	streamEventsTable = &table{
		name: "stream_events", since: 2,
		columns: []column{
			{name: "id", typ: tString}, {name: "time", typ: tTime}, {name: "session_id", typ: tString},
			{name: "stream_id", typ: tString}, {name: "event_id", typ: tString}, {name: "position", typ: tInt32},
			{name: "delivery", typ: tUInt16}, {name: "resumed", typ: tUInt8}, {name: "priming", typ: tUInt8},
			{name: "method", typ: tLowCard}, {name: "jsonrpc_id", typ: tString}, {name: "messages", typ: tUInt16},
			{name: "data_bytes", typ: tUInt32}, {name: "data_hash", typ: tString}, {name: "client", typ: tString},
			{name: "server", typ: tLowCard},
			sourceKindColumn,
		},
		orderBy: "session_id, id", partitionBy: "toYYYYMMDD(time)", timeColumn: "time", shardBy: "sipHash64(session_id)",
	}
)

// Tables lists every data table in creation order.
var tables = []*table{violationsTable, resumesTable, sessionsTable, unknownOutcomesTable, unverifiableTable, streamEventsTable}

// TableNames are the data tables' names, for tests and tools.
func TableNames() []string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.name
	}
	return names
}

// batch is the rows of one table waiting to be inserted, column by column:
// clickhouse-go appends a whole column slice at once, which is several times
// faster than appending row by row.
type batch struct {
	table   *table
	version int // schema version the columns follow
	// cols holds a pointer to one typed slice per insert column (*[]string,
	// *[]time.Time, ...), meta columns last. Pointers, because putting a
	// grown slice back into an interface would allocate on every value.
	cols  []any
	rows  int
	bytes int // approximate payload, for size-based flushing and spool accounting
}

func newBatch(t *table, version int, capacity int) *batch {
	cols := t.insertColumns(version)
	b := &batch{table: t, version: version, cols: make([]any, len(cols))}
	for i, c := range cols {
		p := reflect.New(reflect.SliceOf(c.typ.goType()))
		p.Elem().Set(reflect.MakeSlice(p.Elem().Type(), 0, capacity))
		b.cols[i] = p.Interface()
	}
	return b
}

// column is column i's values (a []string, []time.Time, ...).
func (b *batch) column(i int) any { return reflect.ValueOf(b.cols[i]).Elem().Interface() }

// values is every column's values, in insert order.
func (b *batch) values() []any {
	v := make([]any, len(b.cols))
	for i := range b.cols {
		v[i] = b.column(i)
	}
	return v
}

// rowWriter appends one row's values in column order.
type rowWriter struct {
	b *batch
	i int
}

func (w *rowWriter) str(s string) {
	p := w.b.cols[w.i].(*[]string)
	*p = append(*p, s)
	w.b.bytes += len(s)
	w.i++
}

func (w *rowWriter) time(t time.Time) {
	p := w.b.cols[w.i].(*[]time.Time)
	*p = append(*p, t.UTC())
	w.b.bytes += 8
	w.i++
}

func (w *rowWriter) u8(v bool) {
	var x uint8
	if v {
		x = 1
	}
	p := w.b.cols[w.i].(*[]uint8)
	*p = append(*p, x)
	w.b.bytes++
	w.i++
}

func (w *rowWriter) u16(v int) {
	p := w.b.cols[w.i].(*[]uint16)
	*p = append(*p, uint16(clamp(v, 0, 1<<16-1)))
	w.b.bytes += 2
	w.i++
}

func (w *rowWriter) u32(v int) {
	p := w.b.cols[w.i].(*[]uint32)
	*p = append(*p, uint32(clamp(v, 0, 1<<32-1)))
	w.b.bytes += 4
	w.i++
}

func (w *rowWriter) i32(v int32) {
	p := w.b.cols[w.i].(*[]int32)
	*p = append(*p, v)
	w.b.bytes += 4
	w.i++
}

func (w *rowWriter) strs(v []string) {
	if v == nil {
		v = []string{}
	}
	p := w.b.cols[w.i].(*[][]string)
	*p = append(*p, v)
	for _, s := range v {
		w.b.bytes += len(s) + 1
	}
	w.i++
}

// sourceKind writes the source_kind column (sourceKindColumn) where the
// batch's schema version has it: a batch spooled by a build before version 4
// is sent without it, and the server fills "".
func (w *rowWriter) sourceKind(kind string) {
	if w.b.version >= sourceKindColumn.since {
		w.str(kind)
	}
}

// done closes the row: the meta columns, and the row count.
func (w *rowWriter) done(node, source string) {
	w.str(node)
	w.str(source)
	if w.i != len(w.b.cols) {
		panic(fmt.Sprintf("%s: row has %d values for %d columns", w.b.table.name, w.i, len(w.b.cols)))
	}
	w.b.rows++
}

func clamp(v, lo, hi int) int { return min(max(v, lo), hi) }

// The appenders below write one record as one row, in the column order of
// the table definitions above (tables_test.go checks the two agree).

func appendViolation(b *batch, v *detector.Violation, node, source string) {
	w := rowWriter{b: b}
	w.str(v.ID)
	w.str(string(v.Kind))
	w.str(string(v.Severity))
	w.time(v.Time)
	w.str(v.SessionID)
	w.str(v.NewSessionID)
	w.str(v.LastEventID)
	w.str(v.FirstEventID)
	w.str(v.StreamID)
	w.str(v.ProtocolVersion)
	w.str(v.Client)
	w.str(v.Server)
	w.strs(v.JSONRPCIDs)
	w.str(v.Tool)
	w.str(v.Explanation)
	w.str(evidenceJSON(v.Evidence))
	w.str(v.Confidence)
	w.sourceKind(v.Source)
	w.done(node, source)
}

func appendResume(b *batch, a *detector.ResumeAttempt, node, source string) {
	w := rowWriter{b: b}
	w.str(a.ID)
	w.time(a.Time)
	w.str(a.SessionID)
	w.str(a.ResponseSession)
	w.str(a.LastEventID)
	w.str(a.FirstEventID)
	w.str(a.StreamID)
	w.u16(a.Status)
	w.str(string(a.Outcome))
	w.str(a.Reason)
	w.str(a.ProtocolVersion)
	w.str(a.Client)
	w.str(a.Server)
	w.u32(a.Replayed)
	w.strs(a.ViolationIDs)
	w.sourceKind(a.Source)
	w.done(node, source)
}

func appendSession(b *batch, s *detector.SessionSummary, node, source string) {
	w := rowWriter{b: b}
	w.str(s.SessionID)
	w.str(s.Server)
	w.str(s.Client)
	w.str(s.ProtocolVersion)
	w.time(s.FirstSeen)
	w.time(s.LastSeen)
	w.u8(s.StartSeen)
	w.u32(s.Requests)
	w.u32(s.Events)
	w.u32(s.Streams)
	w.u32(s.Resumes)
	w.u32(s.Violations)
	w.str(s.Ended)
	w.str(s.PreviousSession)
	w.str(s.LinkConfidence)
	w.sourceKind(s.Source)
	w.done(node, source)
}

// appendUnknownOutcome stores arguments only when the operator opted in
// (storeArguments); the detector has them only then too.
func appendUnknownOutcome(b *batch, u *detector.UnknownOutcome, storeArguments bool, node, source string) {
	w := rowWriter{b: b}
	w.str(u.ID)
	w.time(u.Time)
	w.str(u.SessionID)
	w.str(u.JSONRPCID)
	w.str(u.Method)
	w.str(u.Tool)
	w.str(u.ArgsHash)
	w.time(u.CalledAt)
	w.str(u.Client)
	w.str(u.Server)
	w.str(u.Reason)
	w.str(u.ReissuedInSession)
	if b.version >= 3 {
		args := ""
		if storeArguments {
			args = u.Arguments
		}
		w.str(args)
	}
	w.sourceKind(u.Source)
	w.done(node, source)
}

func appendUnverifiable(b *batch, u *detector.Unverifiable, node, source string) {
	w := rowWriter{b: b}
	w.str(u.ID)
	w.time(u.Time)
	w.str(u.SessionID)
	w.str(u.Client)
	w.str(u.Server)
	w.str(u.Reason)
	w.str(u.Check)
	w.sourceKind(u.Source)
	w.done(node, source)
}

func appendStreamEvent(b *batch, e *detector.StreamEvent, node, source string) {
	w := rowWriter{b: b}
	w.str(e.ID)
	w.time(e.Time)
	w.str(e.SessionID)
	w.str(e.StreamID)
	w.str(e.EventID)
	w.i32(e.Position)
	w.u16(e.Delivery)
	w.u8(e.Resumed)
	w.u8(e.Priming)
	w.str(e.Method)
	w.str(e.JSONRPCID)
	w.u16(e.Messages)
	w.u32(e.DataBytes)
	w.str(e.DataHash)
	w.str(e.Client)
	w.str(e.Server)
	w.sourceKind(e.Source)
	w.done(node, source)
}

// evidenceJSON is the evidence list as JSON text, the shape the JSON Lines
// output uses. Invalid UTF-8 in a detail becomes U+FFFD (JSON text must be
// UTF-8); the raw values stay exact in the row's own columns.
func evidenceJSON(ev []detector.Evidence) string {
	if len(ev) == 0 {
		return "[]"
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return "[]" // Evidence has only strings, ints and times: cannot fail
	}
	return string(b)
}

// InsertColumns names the columns an insert into table writes, in order, at
// the current schema version (for tools that load the same rows another
// way, such as the benchmark's clickhouse-client file); nil for an unknown
// table.
func InsertColumns(table string) []string {
	t := tableNamed(table)
	if t == nil {
		return nil
	}
	var names []string
	for _, c := range t.insertColumns(SchemaVersion) {
		names = append(names, c.name)
	}
	return names
}

// maxPartitionDays is how many days of rows one part of a batch split for
// the server's partitions-per-insert limit holds (splitByDay): the tables
// are partitioned by day in the server's time zone, so a UTC day meets at
// most two partitions, and 40 days stay under the default limit of 100.
const maxPartitionDays = 40

// partitionColumn is the column the table is partitioned by (its
// partitionBy is toYYYYMMDD(column)); -1 when it is not found.
func (b *batch) partitionColumn() int {
	name := strings.TrimSuffix(strings.TrimPrefix(b.table.partitionBy, "toYYYYMMDD("), ")")
	for i, c := range b.table.insertColumns(b.version) {
		if c.name == name && c.typ.goType() == reflect.TypeOf(time.Time{}) {
			return i
		}
	}
	return -1
}

// splitByDay splits b into batches of rows of at most days distinct UTC
// days each, rows of a day together and in their order; b itself when it
// cannot be split.
func (b *batch) splitByDay(days int) []*batch {
	pc := b.partitionColumn()
	if pc < 0 || b.rows == 0 {
		return []*batch{b}
	}
	times := b.column(pc).([]time.Time)
	var order []string // the days the rows span
	rowsOf := map[string][]int{}
	for r, t := range times {
		d := t.UTC().Format("20060102")
		if _, ok := rowsOf[d]; !ok {
			order = append(order, d)
		}
		rowsOf[d] = append(rowsOf[d], r)
	}
	if len(order) <= days {
		return []*batch{b}
	}
	slices.Sort(order)
	var parts []*batch
	for len(order) > 0 {
		n := min(days, len(order))
		var rows []int
		for _, d := range order[:n] {
			rows = append(rows, rowsOf[d]...)
		}
		slices.Sort(rows)
		parts = append(parts, b.subset(rows))
		order = order[n:]
	}
	return parts
}

// subset is a batch of b's rows at the given indexes.
func (b *batch) subset(rows []int) *batch {
	p := &batch{table: b.table, version: b.version, cols: make([]any, len(b.cols)), rows: len(rows)}
	if b.rows > 0 {
		p.bytes = int(int64(b.bytes) * int64(len(rows)) / int64(b.rows))
	}
	for i := range b.cols {
		src := reflect.ValueOf(b.cols[i]).Elem()
		dst := reflect.MakeSlice(src.Type(), len(rows), len(rows))
		for j, r := range rows {
			dst.Index(j).Set(src.Index(r))
		}
		ptr := reflect.New(src.Type())
		ptr.Elem().Set(dst)
		p.cols[i] = ptr.Interface()
	}
	return p
}
