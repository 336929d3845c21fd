package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/replaywatch/replaywatch/detector"
)

// Delivery defaults, sized for ClickHouse's advice of large, infrequent
// inserts (at least ~1000 rows per insert, about one insert per second or
// fewer per table): a batch goes when it holds DefaultBatchRows rows or
// DefaultBatchBytes bytes, or DefaultFlushInterval after the last send.
const (
	DefaultBatchRows       = 50_000
	DefaultBatchBytes      = 16 << 20
	DefaultFlushInterval   = 5 * time.Second
	DefaultMaxRetries      = 4
	DefaultRetryBackoff    = 250 * time.Millisecond
	DefaultMaxRetryBackoff = 10 * time.Second
	DefaultInsertTimeout   = time.Minute
	DefaultCloseTimeout    = 30 * time.Second
	// DefaultQueueBatches full batches may wait for the sender before the
	// detector is made to wait (back-pressure, never loss).
	DefaultQueueBatches = 4
)

// Config says how the sink batches, retries and spools.
type Config struct {
	// Node names the agent or host writing (the node column); Source what
	// it reads (a capture file, an interface).
	Node, Source string

	BatchRows     int
	BatchBytes    int
	FlushInterval time.Duration
	// MaxRetries is how many times a failed insert is retried, with
	// exponential backoff from RetryBackoff up to MaxRetryBackoff, before
	// the batch goes to the spool.
	MaxRetries      int
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	InsertTimeout   time.Duration
	QueueBatches    int

	// SpoolDir holds batches the server could not take; required. Batches
	// left there by an earlier run are sent first.
	SpoolDir string
	// MaxSpoolBytes bounds the spool (DefaultMaxSpoolBytes). When it is
	// full, the sink stops taking records until the server drains it:
	// back-pressure, never loss. Only the final flush at Close may pass
	// the bound, so that a shutdown loses nothing either.
	MaxSpoolBytes int64
	// CloseTimeout bounds how long Close keeps trying to empty the spool
	// before leaving it for the next run (within Close's own deadline).
	CloseTimeout time.Duration

	// StoreArguments stores tool arguments in clear (unknown_outcomes.
	// arguments). Off by default: only their hash is stored.
	StoreArguments bool

	MeterProvider metric.MeterProvider
	Logger        *slog.Logger
}

// WithDefaults fills what is unset: a zero field takes its default (for
// MaxRetries, a negative one means none).
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.BatchRows, DefaultBatchRows)
	def(&c.BatchBytes, DefaultBatchBytes)
	def(&c.QueueBatches, DefaultQueueBatches)
	if c.MaxRetries < 0 {
		c.MaxRetries = 0
	} else if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	defDur(&c.FlushInterval, DefaultFlushInterval)
	defDur(&c.RetryBackoff, DefaultRetryBackoff)
	defDur(&c.MaxRetryBackoff, DefaultMaxRetryBackoff)
	defDur(&c.InsertTimeout, DefaultInsertTimeout)
	defDur(&c.CloseTimeout, DefaultCloseTimeout)
	if c.MaxSpoolBytes <= 0 {
		c.MaxSpoolBytes = DefaultMaxSpoolBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// inserter sends one batch; *Conn in production.
type inserter interface {
	insert(ctx context.Context, b *batch) error
}

// aborter is an inserter that can cut its connections mid-read: a server
// that stops answering (paused, blackholed) would otherwise hold an insert
// until its timeout, past a shutdown's budget. Inserts after abort fail at
// once.
type aborter interface {
	abort()
}

// Shutdown budget: MaxSpoolReserve is the most of Close's budget kept for
// writing what is unsent to the spool (a quarter of it, at most this);
// spoolAdoptInterval is how often a running sink looks for spool files of
// runs that ended.
const (
	MaxSpoolReserve    = 3 * time.Second
	spoolAdoptInterval = 5 * time.Second
)

// Sink writes the detector's findings, resume attempts, sessions and stream
// events to ClickHouse. It implements detector.Sink and detector.EventSink.
//
// Records are appended column-wise to one pending batch per table (under a
// mutex: the detector calls from its goroutine, a timer flushes from
// another). Full batches go through a bounded queue to one sender goroutine
// that inserts with retries, or spools to disk when the server cannot take
// them; while the spool holds anything, new batches queue behind it, so rows
// reach the server in the order they were accepted.
type Sink struct {
	cfg     Config
	ins     inserter
	version int
	sp      *spool
	m       *metrics
	log     *slog.Logger

	mu       sync.Mutex
	pending  map[*table]*batch
	lastRows map[*table]int // rows of each table's last full batch
	closed   bool

	queue     chan *batch
	stopTimer chan struct{}
	timerDone chan struct{}
	done      chan struct{}

	// corrupt lists the spool files set aside unread (own lock: the
	// sender records them while Flush may hold mu waiting for the queue).
	corruptMu sync.Mutex
	corrupt   []string
	rejected  []string // spool files of batches the server refused for good (under corruptMu)

	// blocked lists the tables whose oldest spooled batch failed since the
	// sender last backed off: their later batches wait, other tables' go
	// on (the sender goroutine's, then Close's).
	blocked map[string]bool

	// hurry is cancelled when Close's budget is nearly spent: inserts in
	// flight are cut (hurryNow aborts the inserter's connections) and
	// everything not yet sent goes to the spool.
	hurry       context.Context
	hurryNow    context.CancelFunc
	cancelHurry context.CancelFunc // hurryNow without the abort
	closeBy     atomic.Int64       // the shutdown's deadline, Unix nanoseconds; 0 before ShutdownBy or Close
	deadlineMu  sync.Mutex         // guards hurryAt and hurryTimer (ShutdownBy)
	hurryAt     time.Time
	hurryTimer  *time.Timer

	closing                    atomic.Bool
	written, spooled, replayed atomic.Int64
	lost                       atomic.Int64 // rows neither written nor spooled (the disk failed at shutdown)
	rejectedRows               atomic.Int64 // rows of batches the server refused for good, set aside
	failures                   atomic.Int64
	lastErr                    atomic.Value // string
	down                       bool         // sender goroutine only: last insert failed
}

// New checks that the database is at this build's schema version and
// starts a sink writing to it.
func New(ctx context.Context, conn *Conn, cfg Config) (*Sink, error) {
	if err := CheckSchema(ctx, conn, conn.Dialect()); err != nil {
		return nil, err
	}
	return newSink(conn, SchemaVersion, cfg)
}

// NewDeferred starts a sink for a server that could not be reached: every
// batch goes to the spool until a connection (and a schema check) succeeds,
// then the spool is sent in order. A run that starts during an outage loses
// nothing either.
func NewDeferred(o ConnectOptions, cfg Config) (*Sink, error) {
	return newSink(&deferredConn{opts: o}, SchemaVersion, cfg)
}

func newSink(ins inserter, version int, cfg Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	if cfg.SpoolDir == "" {
		return nil, errors.New("clickhouse sink: no spool directory")
	}
	// Spooled batches record where they go: a run writing elsewhere
	// (another server or database on a shared --spool-dir) leaves them.
	dest := ""
	if d, ok := ins.(interface{ destination() string }); ok {
		dest = d.destination()
	}
	sp, err := openSpool(cfg.SpoolDir, cfg.MaxSpoolBytes, dest)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.MeterProvider, sp)
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg: cfg, ins: ins, version: version, sp: sp, m: m, log: cfg.Logger,
		pending:   map[*table]*batch{},
		blocked:   map[string]bool{},
		lastRows:  map[*table]int{},
		queue:     make(chan *batch, cfg.QueueBatches),
		stopTimer: make(chan struct{}),
		timerDone: make(chan struct{}),
		done:      make(chan struct{}),
	}
	s.hurry, s.cancelHurry = context.WithCancel(context.Background())
	s.hurryNow = func() {
		s.cancelHurry()
		if a, ok := ins.(aborter); ok {
			a.abort()
		}
	}
	if st := sp.stats(); st.batches > 0 {
		s.log.Info("clickhouse sink: spool from an earlier run will be sent first", "dir", sp.dir, "batches", st.batches, "rows", st.rows)
	}
	if n, dests := sp.foreignBatches(); n > 0 {
		s.log.Warn("clickhouse sink: the spool holds batches of other destinations; left in place for a run that writes there", "dir", sp.root, "batches", n, "destinations", strings.Join(dests, " "), "this_destination", dest)
	}
	go s.send()
	go s.flushEvery()
	return s, nil
}

// pendingFor returns the pending batch of t; s.mu held.
func (s *Sink) pendingFor(t *table) *batch {
	b := s.pending[t]
	if b == nil {
		// Start at the size the table's last batch reached: growing a
		// batch of tens of thousands of rows from small copies every
		// column many times.
		b = newBatch(t, s.version, max(min(s.cfg.BatchRows, 1024), s.lastRows[t]))
		s.pending[t] = b
	}
	return b
}

// appended hands b to the sender when full; s.mu held. The queue send may
// block: that is the back-pressure.
func (s *Sink) appended(b *batch) {
	if b.rows >= s.cfg.BatchRows || b.bytes >= s.cfg.BatchBytes {
		delete(s.pending, b.table)
		s.lastRows[b.table] = b.rows
		s.queue <- b
	}
}

// add appends one record to its table's pending batch (write does the
// appending) and hands the batch on when full.
func (s *Sink) add(t *table, write func(b *batch)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	b := s.pendingFor(t)
	write(b)
	s.appended(b)
}

// Violation implements detector.Sink.
func (s *Sink) Violation(v *detector.Violation) {
	s.add(violationsTable, func(b *batch) { appendViolation(b, v, s.cfg.Node, s.cfg.Source) })
}

// Resume implements detector.Sink.
func (s *Sink) Resume(a *detector.ResumeAttempt) {
	s.add(resumesTable, func(b *batch) { appendResume(b, a, s.cfg.Node, s.cfg.Source) })
}

// Session implements detector.Sink.
func (s *Sink) Session(ss *detector.SessionSummary) {
	s.add(sessionsTable, func(b *batch) { appendSession(b, ss, s.cfg.Node, s.cfg.Source) })
}

// UnknownOutcome implements detector.Sink.
func (s *Sink) UnknownOutcome(u *detector.UnknownOutcome) {
	s.add(unknownOutcomesTable, func(b *batch) { appendUnknownOutcome(b, u, s.cfg.StoreArguments, s.cfg.Node, s.cfg.Source) })
}

// Unverifiable implements detector.Sink.
func (s *Sink) Unverifiable(u *detector.Unverifiable) {
	s.add(unverifiableTable, func(b *batch) { appendUnverifiable(b, u, s.cfg.Node, s.cfg.Source) })
}

// StreamEvent implements detector.EventSink.
func (s *Sink) StreamEvent(e *detector.StreamEvent) {
	s.add(streamEventsTable, func(b *batch) { appendStreamEvent(b, e, s.cfg.Node, s.cfg.Source) })
}

// Flush hands every pending batch to the sender now.
func (s *Sink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
}

func (s *Sink) flushLocked() {
	for _, t := range tables { // table order: findings before events
		if b := s.pending[t]; b != nil && b.rows > 0 {
			delete(s.pending, t)
			s.queue <- b
		}
	}
}

func (s *Sink) flushEvery() {
	defer close(s.timerDone)
	tick := time.NewTicker(s.cfg.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.Flush()
		case <-s.stopTimer:
			return
		}
	}
}

// send is the sender goroutine: spool first, then the queue.
func (s *Sink) send() {
	defer close(s.done)
	backoff := s.cfg.RetryBackoff
	var wait <-chan time.Time
	adopt := time.NewTicker(spoolAdoptInterval)
	defer adopt.Stop()
	for {
		if wait == nil && s.sp.stats().batches > 0 {
			if s.replayHead() {
				backoff = s.cfg.RetryBackoff
				continue
			}
			wait = time.After(backoff)
			backoff = min(2*backoff, s.cfg.MaxRetryBackoff)
		}
		select {
		case b, ok := <-s.queue:
			if !ok {
				return
			}
			s.deliver(b)
		case <-wait:
			wait = nil
		case <-adopt.C:
			// A run that ended while this one lives (an analyze next to
			// an agent) left its rows for someone to send.
			if n, err := s.sp.adopt(); err != nil {
				s.log.Error("clickhouse sink: cannot take over an ended run's spool", "err", err)
			} else if n > 0 {
				s.log.Info("clickhouse sink: took over the spool of an ended run", "batches", n, "dir", s.sp.dir)
			}
		}
	}
}

// deliver inserts b, or spools it when the server cannot take it or when
// older batches wait in the spool (order is kept).
func (s *Sink) deliver(b *batch) {
	if !s.sp.hasTable(b.table.name) {
		retries := s.cfg.MaxRetries
		if s.closing.Load() {
			retries = 0 // spool at once; Close retries from the spool while its budget lasts
		}
		if err := s.insertWithRetry(b, retries); err == nil {
			s.written.Add(int64(b.rows))
			s.m.addRows(b.table.name, "written", b.rows)
			return
		}
	}
	s.spoolPut(b)
}

// spoolPut writes b to the spool. When the spool is full it drains the head
// into the server first, waiting as long as that takes, except while
// closing or once the shutdown budget hurries: then the bound gives way, so
// that a shutdown loses nothing. A disk that fails is retried until Close's
// deadline, trying the server between tries (the spool's head first); past
// it the rows are counted lost (Report.Lost), the one way a row is lost.
func (s *Sink) spoolPut(b *batch) {
	backoff := s.cfg.RetryBackoff
	for {
		err := s.sp.put(b)
		if err == nil {
			s.spooled.Add(int64(b.rows))
			s.m.addRows(b.table.name, "spooled", b.rows)
			return
		}
		if errors.Is(err, errSpoolFull) {
			// Closing, or past the shutdown budget's hurry point (a
			// producer blocked here never lets Close begin): the bound
			// gives way, as nothing accepted may be lost.
			if s.closing.Load() || s.hurry.Err() != nil {
				s.sp.unbound()
				continue
			}
			if s.replayHead() {
				continue
			}
			s.log.Warn("clickhouse sink: spool full, waiting for the server", "spool_bytes", s.sp.stats().bytes)
		} else {
			// The disk failed; keep trying, the rows stay in memory.
			s.noteErr(err)
			s.log.Error("clickhouse sink: cannot write spool", "err", err)
			// The server may be back meanwhile: deliver what waits, the
			// spool's head first (order is kept), then b itself, which
			// also frees the disk.
			if s.sp.stats().batches > 0 {
				if s.replayHead() {
					continue
				}
			} else if s.insertWithRetry(b, 0) == nil {
				s.written.Add(int64(b.rows))
				s.m.addRows(b.table.name, "written", b.rows)
				return
			}
			if by := s.closeBy.Load(); by != 0 && time.Now().UnixNano() >= by {
				s.lost.Add(int64(b.rows))
				s.m.addRows(b.table.name, "lost", b.rows)
				s.log.Error("clickhouse sink: shutdown deadline reached; rows neither written nor spooled", "table", b.table.name, "rows", b.rows, "spool", s.sp.dir)
				return
			}
		}
		wait := backoff
		if by := s.closeBy.Load(); by != 0 {
			wait = max(min(wait, time.Until(time.Unix(0, by))), time.Millisecond)
		}
		time.Sleep(wait)
		backoff = min(2*backoff, s.cfg.MaxRetryBackoff)
	}
}

// replayHead sends the spool's oldest batch of a table not blocked; true
// when one was delivered (or set aside: unreadable, or refused for good by
// the server) and the next can follow at once. A batch that fails for a
// reason that may pass (the server down, overloaded) blocks its table
// until the sender backs off; the other tables' batches go on meanwhile.
// False when every table left in the spool is blocked: the caller backs
// off, and then every table is tried again.
func (s *Sink) replayHead() bool {
	for {
		delivered, tryNext := s.replayOne()
		if !tryNext {
			return delivered
		}
	}
}

func (s *Sink) replayOne() (delivered, tryNext bool) {
	b, f, err := s.sp.head(s.blocked)
	if errors.Is(err, errSpoolUnreadable) {
		// Not set aside: back off and try it again.
		s.noteErr(err)
		s.log.Warn("clickhouse sink: cannot open a spool file; trying again", "err", err)
		s.blocked[f.table] = true
		return false, true
	}
	if err != nil {
		s.m.corrupt.Add(context.Background(), 1)
		s.corruptMu.Lock()
		s.corrupt = append(s.corrupt, f.path)
		s.corruptMu.Unlock()
		s.noteErr(err)
		s.log.Error("clickhouse sink: unreadable spool file set aside", "err", err)
		return true, false
	}
	if b == nil {
		if s.sp.stats().batches > 0 {
			clear(s.blocked) // every table waits: back off, then try them all again
			return false, false
		}
		return true, false
	}
	if err := s.insertWithRetry(b, 0); err != nil {
		if refusedForGood(err) {
			s.rejectBatch(b, f, err)
			return true, false
		}
		s.blocked[b.table.name] = true
		return false, true
	}
	if err := s.sp.pop(f); err != nil {
		s.log.Error("clickhouse sink: cannot remove delivered spool file; it will be sent again (the table collapses duplicates)", "err", err)
	}
	s.written.Add(int64(b.rows))
	s.replayed.Add(int64(b.rows))
	s.m.addRows(b.table.name, "written", b.rows)
	s.m.addRows(b.table.name, "replayed", b.rows)
	if s.sp.stats().batches == 0 {
		s.log.Info("clickhouse sink: spool drained")
	}
	return true, false
}

// rejectBatch sets aside a spooled batch the server refused for good
// (refusedForGood): kept on disk as *.rejected, reported and counted, so
// that it blocks neither its table nor the next run.
func (s *Sink) rejectBatch(b *batch, f spoolFile, err error) {
	path, rerr := s.sp.reject(f)
	if rerr != nil {
		// Not renamed: keep it out of the way of this run at least, by
		// blocking only its table until the next backoff.
		s.blocked[b.table.name] = true
		s.noteErr(rerr)
		s.log.Error("clickhouse sink: cannot set aside a batch the server refused", "table", b.table.name, "err", rerr)
		return
	}
	s.m.rejected.Add(context.Background(), 1, s.m.tableSet[b.table.name])
	s.m.addRows(b.table.name, "rejected", b.rows)
	s.rejectedRows.Add(int64(b.rows))
	s.corruptMu.Lock()
	s.rejected = append(s.rejected, path)
	s.corruptMu.Unlock()
	s.log.Error("clickhouse sink: the server refused a batch for good; set aside, undelivered", "table", b.table.name, "rows", b.rows, "kept_as", path, "err", err)
}

// insertWithRetry inserts b, retrying transient failures up to retries
// times with exponential backoff.
func (s *Sink) insertWithRetry(b *batch, retries int) error {
	backoff := s.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		if err := s.hurry.Err(); err != nil {
			return fmt.Errorf("shutting down: %w", err) // spool, do not start what cannot end in time
		}
		ctx, cancel := context.WithTimeout(s.hurry, s.cfg.InsertTimeout)
		start := time.Now()
		err := s.insertParts(ctx, b)
		cancel()
		if err == nil {
			s.m.insertTook(b.table.name, time.Since(start))
			s.m.batch(b.table.name, "ok")
			if s.down {
				s.down = false
				s.log.Info("clickhouse sink: server reachable again")
			}
			return nil
		}
		s.m.batch(b.table.name, "failed")
		s.noteErr(err)
		if !s.down {
			s.down = true
			s.log.Warn("clickhouse sink: insert failed; retrying, then spooling to disk", "table", b.table.name, "rows", b.rows, "err", err)
		}
		if attempt >= retries || errors.Is(classify(err), errPermanent) {
			return err
		}
		s.m.retry(b.table.name)
		select {
		case <-time.After(backoff):
		case <-s.hurry.Done():
		}
		backoff = min(2*backoff, s.cfg.MaxRetryBackoff)
	}
}

// insertParts inserts b; when the server refuses it for spanning too many
// partitions (current ClickHouse allows max_partitions_per_insert_block,
// 100 by default, in one INSERT: a spool replayed after a long outage, or
// a capture of many days), it inserts b in parts of at most
// maxPartitionDays days each.
func (s *Sink) insertParts(ctx context.Context, b *batch) error {
	err := s.ins.insert(ctx, b)
	if !tooManyPartitions(err) {
		return err
	}
	parts := b.splitByDay(maxPartitionDays)
	if len(parts) < 2 {
		return err
	}
	s.log.Info("clickhouse sink: batch spans too many partitions; inserting it in parts", "table", b.table.name, "rows", b.rows, "parts", len(parts))
	for _, p := range parts {
		if err := s.ins.insert(ctx, p); err != nil {
			// A retry sends every part again: the table collapses the
			// parts already written.
			return err
		}
	}
	return nil
}

func (s *Sink) noteErr(err error) {
	s.failures.Add(1)
	s.lastErr.Store(err.Error())
}

// Report is what a sink did, for the end of a run.
type Report struct {
	Written  int64 // rows the server confirmed (including replayed ones)
	Replayed int64 // of which came from the spool
	Spooled  int64 // rows written to the spool at some point
	// Left is what stays in the spool for the next run, in SpoolDir (this
	// run's directory in the spool).
	LeftRows    int64
	LeftBatches int
	SpoolDir    string
	// Lost rows could be neither written nor spooled before Close's
	// deadline (the spool's disk failed).
	Lost int64
	// Rejected rows are in batches the server refused for good (a schema
	// that does not match, data it cannot take): set aside, renamed
	// *.rejected in the spool directory (RejectedFiles), undelivered.
	Rejected      int64
	RejectedFiles []string
	// ForeignBatches in the spool directory go to other destinations
	// (ForeignDestinations: servers and databases) than this run's: left
	// in place for a run that writes there.
	ForeignBatches      int
	ForeignDestinations []string
	Failures            int64
	LastError           string
	// CorruptFiles are spool files that could not be read back, set aside
	// (renamed *.corrupt) for a human: their rows were not delivered.
	CorruptFiles []string
}

// ShutdownBy announces the shutdown's deadline before Close: from the last
// quarter of the budget before it (at most MaxSpoolReserve) inserts and
// connects are cut and what is unsent goes to the spool. A pipeline
// draining into the sink at shutdown (the detector closing its sessions)
// would otherwise wait on the back-pressure of an insert a hung server
// holds, past the budget. It returns that moment; the earliest deadline
// announced holds.
func (s *Sink) ShutdownBy(deadline time.Time) time.Time {
	s.deadlineMu.Lock()
	defer s.deadlineMu.Unlock()
	if by := s.closeBy.Load(); by != 0 && by <= deadline.UnixNano() {
		return s.hurryAt
	}
	s.closeBy.Store(deadline.UnixNano())
	s.hurryAt = deadline.Add(-min(time.Until(deadline)/4, MaxSpoolReserve))
	if s.hurryTimer != nil {
		s.hurryTimer.Stop()
	}
	s.hurryTimer = time.AfterFunc(time.Until(s.hurryAt), s.hurryNow)
	return s.hurryAt
}

// Close flushes everything, waits for the sender, and tries for up to
// CloseTimeout to empty the spool, all before ctx's deadline (without one:
// CloseTimeout plus InsertTimeout). Nothing accepted is lost: what the
// server did not take by the last part of the budget (a quarter, at most
// MaxSpoolReserve) is spooled for the next run, and Report says so; inserts
// still in flight then are cut.
func (s *Sink) Close(ctx context.Context) Report {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.report()
	}
	s.closed = true
	s.mu.Unlock()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.cfg.CloseTimeout + s.cfg.InsertTimeout)
	}
	hurryAt := s.ShutdownBy(deadline)          // an earlier ShutdownBy holds
	stop := context.AfterFunc(ctx, s.hurryNow) // the caller gave up early
	defer stop()
	// Stop the timer before taking the lock again: a tick may be waiting
	// for it inside Flush.
	close(s.stopTimer)
	<-s.timerDone
	s.closing.Store(true)
	s.Flush()
	close(s.queue)
	<-s.done
	drainBy := time.Now().Add(s.cfg.CloseTimeout)
	if drainBy.After(hurryAt) {
		drainBy = hurryAt
	}
	backoff := s.cfg.RetryBackoff
	for s.sp.stats().batches > 0 && time.Now().Before(drainBy) && s.hurry.Err() == nil {
		if !s.replayHead() {
			time.Sleep(min(backoff, time.Until(drainBy)))
			backoff = min(2*backoff, s.cfg.MaxRetryBackoff)
		}
	}
	s.deadlineMu.Lock()
	s.hurryTimer.Stop() // nothing more is sent: the caller's connection stays usable
	s.deadlineMu.Unlock()
	s.cancelHurry()
	s.sp.close()
	s.m.reg.Unregister()
	return s.report()
}

func (s *Sink) report() Report {
	st := s.sp.stats()
	r := Report{
		Written: s.written.Load(), Replayed: s.replayed.Load(), Spooled: s.spooled.Load(),
		LeftRows: st.rows, LeftBatches: st.batches, SpoolDir: s.sp.dir, Failures: s.failures.Load(), Lost: s.lost.Load(),
	}
	s.corruptMu.Lock()
	r.CorruptFiles = slices.Clone(s.corrupt)
	r.RejectedFiles = slices.Clone(s.rejected)
	r.ForeignBatches, r.ForeignDestinations = s.sp.foreignBatches()
	r.Rejected = s.rejectedRows.Load()
	s.corruptMu.Unlock()
	if e, ok := s.lastErr.Load().(string); ok {
		r.LastError = e
	}
	return r
}

func (r Report) String() string {
	msg := fmt.Sprintf("%d rows written to ClickHouse", r.Written)
	if r.Replayed > 0 {
		msg += fmt.Sprintf(" (%d of them from the spool of an earlier run or outage)", r.Replayed)
	}
	if r.LeftRows > 0 {
		msg += fmt.Sprintf("; %d rows in %d batches kept in the spool %s and sent on the next run (last error: %s)", r.LeftRows, r.LeftBatches, r.SpoolDir, r.LastError)
	}
	if r.Lost > 0 {
		msg += fmt.Sprintf("; %d rows LOST: neither written nor spooled to %s before the shutdown deadline (last error: %s)", r.Lost, r.SpoolDir, r.LastError)
	}
	if r.ForeignBatches > 0 {
		msg += fmt.Sprintf("; %d batch(es) in the spool go to other destinations (%s) and were left for a run that writes there", r.ForeignBatches, strings.Join(r.ForeignDestinations, ", "))
	}
	if len(r.RejectedFiles) > 0 {
		msg += fmt.Sprintf("; %d rows in %d batch(es) REFUSED by the server for good and set aside, undelivered (rename to .batch to send again): %s", r.Rejected, len(r.RejectedFiles), strings.Join(r.RejectedFiles, ", "))
	}
	if len(r.CorruptFiles) > 0 {
		msg += fmt.Sprintf("; %d spool file(s) could not be read back and were set aside, undelivered: %s", len(r.CorruptFiles), strings.Join(r.CorruptFiles, ", "))
	}
	return msg
}
