package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/payload"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Config is what a backend hands to New.
type Config struct {
	Dialect Dialect
	// Write runs every write transaction.
	Write *sql.DB
	// SingleWriter pins one connection of Write and runs every write
	// transaction on it, one at a time, as BEGIN IMMEDIATE … COMMIT issued
	// by hand, with statements prepared once on that connection (SQLite: it
	// serialises writers in this process and, through the write lock that
	// BEGIN IMMEDIATE takes, across processes). Without it, write
	// transactions run concurrently on the pool with BeginTx (PostgreSQL).
	SingleWriter bool
	// Read serves reads that need no transaction; it may be Write.
	Read *sql.DB
	// PrepareReads prepares each statement run on Read once, as a
	// database/sql statement kept for the Store's life (SQLite: its read
	// pool keeps its connections, and its driver keeps no statements of its
	// own). Leave it off where the driver caches statements per connection
	// and Read keeps no idle connections (PostgreSQL through
	// stdlib.OpenDBFromPool): there a database/sql statement is prepared
	// again, run and deallocated on every call, three round trips and a
	// fresh plan where one round trip does.
	PrepareReads bool
	// StaleStatement, when set, reports errors after which a read that ran
	// on a statement the driver cached may simply run again: the statement
	// no longer fits the tables (PostgreSQL: "cached plan must not change
	// result type" after a column's type changed) or is gone, and the
	// driver dropped it from its cache on the error (pgx does).
	StaleStatement func(error) bool
	// InTx, when set, runs inside each write transaction that may have made
	// work claimable on the given streams, just before COMMIT (PostgreSQL
	// sends its NOTIFY here, so the signal commits with the change).
	InTx func(ctx context.Context, x Execer, streams []string) error
	// Stamps is set by a backend whose appends and fetches are this
	// package's (SQLite): they keep the partitions' stamps and the
	// groups' seen counts of schema version 8 (see fetchCursors), which
	// Replay and ResetGroup then clear. A backend with its own fetch
	// leaves them unread, and Replay and ResetGroup leave them alone.
	Stamps bool
	// Changed, when set, is called after such a transaction committed
	// (in-process wakeups).
	Changed func(stream string)
	// Committed, when set, is called after every committed write
	// transaction (SQLite schedules WAL checkpoints from it).
	Committed func()
	// Retryable, when set, reports errors after which the database rolled
	// a write transaction back on its own and running it again may succeed
	// (PostgreSQL: a deadlock it broke, a serialization failure). Write
	// transactions run concurrently with fetches that lock the same rows
	// in another order, so such an error is an accident of timing, not an
	// outcome to report.
	Retryable func(error) bool
}

// maxTxAttempts bounds how often a write transaction runs when Retryable
// says it may run again.
const maxTxAttempts = 10

// Store implements rheo.Backend on a SQL database, except Close: the
// backend owns the connections. See the package documentation.
type Store struct {
	d       Dialect
	w, r    *sql.DB
	single  bool
	stamps  bool
	inTx    func(ctx context.Context, x Execer, streams []string) error
	changed func(stream string)
	commit  func()
	retry   func(error) bool

	rebound sync.Map // query -> rebound query

	// The pinned writer connection (SingleWriter) and its statements.
	wmu    sync.Mutex
	wconn  *sql.Conn
	wstmts map[string]*sql.Stmt

	prepReads bool
	stale     func(error) bool
	rstmtMu   sync.Mutex
	rstmts    map[string]*sql.Stmt

	cacheMu sync.RWMutex
	streams map[string]streamRef
	groups  map[groupKey]groupRef

	rrMu sync.Mutex
	rr   map[int64]int // per group: rotates the first partition a fetch serves
}

type streamRef struct {
	id      int64
	parts   int
	created time.Time
}

type groupKey struct {
	stream int64
	name   string
}

type groupRef struct {
	id          int64
	maxAttempts int
}

// New returns a Store over the connections in cfg.
func New(cfg Config) *Store {
	r := cfg.Read
	if r == nil {
		r = cfg.Write
	}
	return &Store{
		d: cfg.Dialect, w: cfg.Write, r: r, single: cfg.SingleWriter, stamps: cfg.Stamps, inTx: cfg.InTx, changed: cfg.Changed, commit: cfg.Committed,
		retry: cfg.Retryable, prepReads: cfg.PrepareReads, stale: cfg.StaleStatement,
		wstmts:  map[string]*sql.Stmt{},
		rstmts:  map[string]*sql.Stmt{},
		streams: map[string]streamRef{},
		groups:  map[groupKey]groupRef{},
		rr:      map[int64]int{},
	}
}

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.d }

// Release closes the prepared statements and the pinned writer connection.
// Call it before closing the pools.
func (s *Store) Release() {
	s.wmu.Lock()
	s.dropWriter()
	s.wmu.Unlock()
	s.rstmtMu.Lock()
	for _, st := range s.rstmts {
		st.Close()
	}
	s.rstmts = map[string]*sql.Stmt{}
	s.rstmtMu.Unlock()
}

// dropWriter forgets the pinned connection (after Release or an error that
// may have broken it), giving it back to the pool. The caller holds wmu.
func (s *Store) dropWriter() { s.releaseWriter(false) }

// discardWriter forgets the pinned connection and makes the pool close it
// instead of taking it back, for a connection that may still be inside a
// transaction (closing it rolls that back). The caller holds wmu.
func (s *Store) discardWriter() { s.releaseWriter(true) }

func (s *Store) releaseWriter(discard bool) {
	for _, st := range s.wstmts {
		st.Close()
	}
	s.wstmts = map[string]*sql.Stmt{}
	if s.wconn != nil {
		if discard {
			_ = s.wconn.Raw(func(any) error { return driver.ErrBadConn })
		}
		s.wconn.Close()
		s.wconn = nil
	}
}

// WithWriter runs f on s's pinned writer connection (SingleWriter), between
// transactions: for tests and diagnostics that look at the connection
// itself, such as the state of its prepared statements.
func WithWriter(s *Store, f func(*sql.Conn) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wconn == nil {
		return rheo.Errorf(rheo.ErrInvalidArgument, "sqlstore: no pinned writer connection (not SingleWriter, or nothing written yet)")
	}
	return f(s.wconn)
}

// maxCachedStatements bounds each statement cache; statements built with
// IN lists vary in shape, so a cache must not grow without bound.
const maxCachedStatements = 512

func (s *Store) rebind(q string) string {
	if v, ok := s.rebound.Load(q); ok {
		return v.(string)
	}
	r := s.d.Rebind(q)
	s.rebound.Store(q, r)
	return r
}

// Execer runs statements written with `?` placeholders inside a write
// transaction (or, for reads, on the read pool).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// execer runs statements on the pinned writer connection (prepared once and
// cached), in a pooled transaction, or on the read pool.
type execer struct {
	s    *Store
	conn *sql.Conn
	tx   *sql.Tx
	db   *sql.DB
}

// prepared returns a cached statement for q, or nil to run q unprepared.
func (x execer) prepared(ctx context.Context, q string) *sql.Stmt {
	switch {
	case x.conn != nil: // the caller holds wmu
		if st, ok := x.s.wstmts[q]; ok {
			return st
		}
		if len(x.s.wstmts) >= maxCachedStatements {
			return nil
		}
		st, err := x.conn.PrepareContext(ctx, q)
		if err != nil {
			return nil
		}
		x.s.wstmts[q] = st
		return st
	case x.db != nil && x.s.prepReads:
		x.s.rstmtMu.Lock()
		defer x.s.rstmtMu.Unlock()
		if st, ok := x.s.rstmts[q]; ok {
			return st
		}
		if len(x.s.rstmts) >= maxCachedStatements {
			return nil
		}
		st, err := x.db.PrepareContext(ctx, q)
		if err != nil {
			return nil
		}
		x.s.rstmts[q] = st
		return st
	}
	return nil // pooled transactions and unprepared reads: the driver caches (pgx does)
}

func (x execer) raw() Execer {
	switch {
	case x.conn != nil:
		return x.conn
	case x.tx != nil:
		return x.tx
	}
	return x.db
}

func (x execer) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	q = x.s.rebind(q)
	if st := x.prepared(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return x.raw().ExecContext(ctx, q, args...)
}

func (x execer) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	q = x.s.rebind(q)
	if st := x.prepared(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	rows, err := x.raw().QueryContext(ctx, q, args...)
	if err != nil && x.again(err) {
		return x.raw().QueryContext(ctx, q, args...)
	}
	return rows, err
}

func (x execer) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	q = x.s.rebind(q)
	if st := x.prepared(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	r := x.raw().QueryRowContext(ctx, q, args...)
	if err := r.Err(); err != nil && x.again(err) {
		return x.raw().QueryRowContext(ctx, q, args...)
	}
	return r
}

// again reports that a read on the read pool failed on a statement the
// driver has since dropped (Config.StaleStatement), so that running it
// once more prepares it anew. Statements of a write transaction are run
// again with the whole transaction (Config.Retryable).
func (x execer) again(err error) bool {
	return x.db != nil && x.s.stale != nil && x.s.stale(err)
}

func (s *Store) reader() execer { return execer{s: s, db: s.r} }

// writeTx is one write transaction: statements and the streams to signal.
type writeTx struct {
	execer
	woke []string
}

// wake records that the transaction may make work claimable on stream.
func (t *writeTx) wake(stream string) {
	if !slices.Contains(t.woke, stream) {
		t.woke = append(t.woke, stream)
	}
}

// write runs fn in a write transaction. Driver errors are classified: any
// failure before COMMIT is ErrBackendUnavailable (nothing was written), a
// failed COMMIT is ErrAmbiguous when the dialect says it may have landed.
// A transaction the database rolled back for a retryable reason (see
// Config.Retryable) runs again from the start, fn included, so fn must
// derive everything it writes and returns from what it reads.
func (s *Store) write(ctx context.Context, what string, fn func(t *writeTx) error) error {
	for attempt := 1; ; attempt++ {
		retry, err := s.writeOnce(ctx, what, fn)
		if !retry || attempt == maxTxAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// writeOnce runs one write transaction; retry reports that it was rolled
// back for a reason Config.Retryable accepts.
func (s *Store) writeOnce(ctx context.Context, what string, fn func(t *writeTx) error) (retry bool, err error) {
	t := &writeTx{execer: execer{s: s}}
	var commit, rollback func() error
	if s.single {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		if s.wconn == nil {
			c, err := s.w.Conn(ctx)
			if err != nil {
				return false, s.classify(err, "%s: connect", what)
			}
			s.wconn = c
		}
		c := s.wconn
		if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			// A context that ends while the driver runs BEGIN can make it
			// report the end after SQLite began the transaction; back in
			// the pool, the connection would fail every later BEGIN. It is
			// closed instead (which rolls back whatever began), and a
			// fresh one is taken next time.
			s.discardWriter()
			return false, s.classify(err, "%s: begin", what)
		}
		t.conn = c
		commit = func() error { _, err := c.ExecContext(context.Background(), "COMMIT"); return err }
		rollback = func() error {
			if _, err := c.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				s.discardWriter() // it may still be inside the transaction
				return err
			}
			return nil
		}
	} else {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return false, s.classify(err, "%s: begin", what)
		}
		t.tx = tx
		commit, rollback = tx.Commit, tx.Rollback
	}
	if err := s.run(ctx, t, fn); err != nil {
		rollback()
		return s.retry != nil && s.retry(err), s.classify(err, "%s", what)
	}
	if err := commit(); err != nil {
		rollback()
		if s.d.CommitAmbiguous(err) {
			return false, rheo.Wrap(rheo.ErrAmbiguous, err, "%s: commit", what)
		}
		return false, s.classify(err, "%s: commit", what)
	}
	if s.commit != nil {
		s.commit()
	}
	if s.changed != nil {
		for _, st := range t.woke {
			s.changed(st)
		}
	}
	return false, nil
}

// run runs fn and then the change signals of the streams it woke.
func (s *Store) run(ctx context.Context, t *writeTx, fn func(t *writeTx) error) error {
	if err := fn(t); err != nil {
		return err
	}
	if len(t.woke) == 0 {
		return nil
	}
	for _, st := range t.woke {
		if _, err := t.exec(ctx, "UPDATE rheo_streams SET changes = changes + 1 WHERE name = ?", st); err != nil {
			return err
		}
	}
	if s.inTx != nil {
		return s.inTx(ctx, t.raw(), t.woke)
	}
	return nil
}

var sentinels = []error{
	rheo.ErrStreamNotFound, rheo.ErrGroupNotFound, rheo.ErrAlreadyExists, rheo.ErrInvalidPartition,
	rheo.ErrInvalidArgument, rheo.ErrStaleLease, rheo.ErrReceiptMismatch, rheo.ErrCursorNotFound,
	rheo.ErrConfirmRequired, rheo.ErrNoEventsInRange, rheo.ErrUnsupported, rheo.ErrBackendUnavailable,
	rheo.ErrAmbiguous, rheo.ErrClosed, rheo.ErrMisconfigured,
}

// classify returns err unchanged when it already speaks rheo's vocabulary,
// and otherwise wraps it as ErrBackendUnavailable (the store did not do
// what was asked; nothing partial was committed).
func (s *Store) classify(err error, format string, args ...any) error {
	if errors.Is(err, errKnownID) {
		return err
	}
	for _, k := range sentinels {
		if errors.Is(err, k) {
			return err
		}
	}
	if fix := s.d.Misconfigured(err); fix != "" {
		return rheo.Wrap(rheo.ErrMisconfigured, err, "%s: %s: %s", s.d.Name(), fmt.Sprintf(format, args...), fix)
	}
	return rheo.Wrap(rheo.ErrBackendUnavailable, err, "%s: %s", s.d.Name(), fmt.Sprintf(format, args...))
}

// Ping checks the store answers and is migrated to the version this rheo
// needs (rheo.ErrMisconfigured, naming the fix, when it is not).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return s.classify(err, "ping")
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	ms, err := Migrations(s.d)
	if err != nil {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "migrations")
	}
	if want := ms[len(ms)-1].Version; v < want {
		return rheo.Errorf(rheo.ErrMisconfigured, "%s: the store is at schema version %d, this rheo needs %d: run `rheo migrate --dsn DSN` or Client.Migrate",
			s.d.Name(), v, want)
	}
	return nil
}

// Migrations returns the schema migrations, in version order, with the
// dialect's types substituted. Version n is the file whose name starts with
// n (e.g. 0001_init.sql).
func Migrations(d Dialect) ([]Migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	pairs := []string{}
	for k, v := range d.Types() {
		pairs = append(pairs, k, v)
	}
	rep := strings.NewReplacer(pairs...)
	out := make([]Migration, 0, len(files))
	for _, f := range files {
		base := strings.TrimPrefix(f, "migrations/")
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version prefix", f)
		}
		raw, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var stmts []string
		for _, st := range strings.Split(stripComments(string(raw)), ";") {
			// A dialect may map a statement's token to nothing.
			if st = strings.TrimSpace(rep.Replace(st)); st != "" {
				stmts = append(stmts, st)
			}
		}
		out = append(out, Migration{Version: v, Name: base, Statements: stmts})
	}
	return out, nil
}

// Migration is one schema version.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// Migrate applies the migrations the database lacks, in one transaction,
// recording each version in rheo_schema. Running it again is a no-op.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := Migrations(s.d)
	if err != nil {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "migrate")
	}
	return s.write(ctx, "migrate", func(t *writeTx) error {
		x := t.raw()
		if l := s.d.MigrationLock(); l != "" {
			if _, err := x.ExecContext(ctx, l); err != nil {
				return err
			}
		}
		if _, err := x.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS rheo_schema (version INTEGER PRIMARY KEY)"); err != nil {
			return err
		}
		var cur int
		if err := x.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM rheo_schema").Scan(&cur); err != nil {
			return err
		}
		for _, m := range ms {
			if m.Version <= cur {
				continue
			}
			for _, st := range m.Statements {
				if _, err := x.ExecContext(ctx, st); err != nil {
					return fmt.Errorf("migration %s: %w", m.Name, err)
				}
			}
			if _, err := x.ExecContext(ctx, s.rebind("INSERT INTO rheo_schema (version) VALUES (?)"), m.Version); err != nil {
				return err
			}
		}
		return nil
	})
}

// SchemaVersion returns the highest applied migration (0 before Migrate).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.r.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM rheo_schema").Scan(&v)
	if err != nil {
		return 0, s.classify(err, "schema version")
	}
	return v, nil
}

// Times are stored as integer microseconds since the epoch: exact for the
// facade's microsecond times, and ordered like the times themselves.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// eventCols are the columns scanEvent reads, in order.
const eventCols = "id, part, seq, etype, ekey, ts, payload, metadata"

// eventColsOf is eventCols qualified by a table alias.
func eventColsOf(alias string) string {
	return alias + ".id, " + alias + ".part, " + alias + ".seq, " + alias + ".etype, " + alias + ".ekey, " +
		alias + ".ts, " + alias + ".payload, " + alias + ".metadata"
}

// runCols are eventCols without part and seq: enough for a run of one
// partition's consecutive sequences, whose positions the reader knows (see
// scanRun). The ID, type and key come as one text, joined by a control
// character (which none of them may hold): one column read instead of
// three, where SQLite's driver takes the connection's mutex three times
// and allocates twice for each text column (see docs/performance-log.md,
// "Appends store a partition's events side by side").
const runCols = "concat_ws('" + runSep + "', id, etype, ekey), ts, payload, metadata"

// runSep joins the ID, type and key in runCols' first column.
const runSep = "\x1f"

// eventScan holds the scan targets of one event row.
type eventScan struct {
	id, etype, ekey string
	head            string // runCols' ID, type and key, joined (when joined)
	joined          bool   // the row is runCols' (scanRun)
	part            int
	seq, ts         int64
	payload         []byte
	meta            []byte
	step            int64 // added to seq before each row of a run (scanRun)
}

func (e *eventScan) dest() []any {
	return []any{&e.id, &e.part, &e.seq, &e.etype, &e.ekey, &e.ts, &e.payload, &e.meta}
}

func (e *eventScan) event(stream string) (rheo.Event, error) {
	ev := rheo.Event{
		ID: e.id, Stream: stream, Partition: e.part, Sequence: e.seq, Type: e.etype, Key: e.ekey,
		Timestamp: fromMicros(e.ts), Payload: json.RawMessage(e.payload),
	}
	if e.meta != nil {
		var err error
		if ev.Metadata, err = payload.Metadata(e.meta); err != nil {
			return ev, fmt.Errorf("event %q: metadata: %w", e.id, err)
		}
	}
	return ev, nil
}

func scanEvents(rows *sql.Rows, stream string, out []rheo.Event) ([]rheo.Event, error) {
	return scanInto(rows, stream, out, func(e rheo.Event) rheo.Event { return e })
}

// scanInto appends to out each event row (eventCols), as wrap makes it.
func scanInto[T any](rows *sql.Rows, stream string, out []T, wrap func(rheo.Event) T) ([]T, error) {
	var sc eventScan
	return scanRows(rows, stream, &sc, sc.dest(), out, wrap)
}

// scanRun appends to out each row (runCols) of a run of partition part's
// events in sequence order from first, as wrap makes it. The caller checks
// that the run has no gap (it read a range of sequences and counts the
// rows): four columns where scanInto reads eight.
func scanRun[T any](rows *sql.Rows, stream string, part int, first int64, out []T, wrap func(rheo.Event) T) ([]T, error) {
	sc := eventScan{part: part, seq: first - 1, step: 1, joined: true}
	return scanRows(rows, stream, &sc, []any{&sc.head, &sc.ts, &sc.payload, &sc.meta}, out, wrap)
}

// scanRows scans each row into dest (sc's fields) and appends the event
// sc then holds to out, as wrap makes it.
func scanRows[T any](rows *sql.Rows, stream string, sc *eventScan, dest []any, out []T, wrap func(rheo.Event) T) ([]T, error) {
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return out, err
		}
		sc.seq += sc.step
		if sc.joined {
			var ok bool
			if sc.id, sc.etype, sc.ekey, ok = splitHead(sc.head); !ok {
				return out, fmt.Errorf("event %d/%d: malformed row", sc.part, sc.seq)
			}
		}
		e, err := sc.event(stream)
		if err != nil {
			return out, err
		}
		out = append(out, wrap(e))
	}
	return out, rows.Err()
}

// splitHead splits runCols' first column into the ID, type and key it
// joins (substrings: no copies).
func splitHead(h string) (id, etype, ekey string, ok bool) {
	id, rest, ok1 := strings.Cut(h, runSep)
	etype, ekey, ok2 := strings.Cut(rest, runSep)
	return id, etype, ekey, ok1 && ok2
}

// encodeMeta stores nil metadata as NULL and anything else as a JSON object,
// so that events come back as they went in.
func encodeMeta(m map[string]string) (any, error) {
	if m == nil {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}
