// Package sqlite is rheo's embedded, durable backend: one SQLite file,
// through modernc.org/sqlite (pure Go, no cgo).
//
// Import it for its DSN registration:
//
//	import _ "github.com/rheo-go/rheo/backend/sqlite"
//	client, err := rheo.Open(ctx, "sqlite:orders.db")
//
// or open it directly with options:
//
//	b, err := sqlite.Open(ctx, "orders.db", sqlite.WithSynchronous(sqlite.SynchronousFull))
//	client := rheo.New(b)
//
// The DSN form accepts the same settings as query parameters:
// sqlite:PATH?synchronous=full&busy_timeout=10s.
//
// # Connections and processes
//
// The file runs in WAL mode. Every write goes through one writer connection
// whose transactions begin IMMEDIATE: writers in this process queue for it,
// and writers in other processes wait on SQLite's write lock (up to the busy
// timeout), so claims and settles stay atomic and leases exclusive even when
// several OS processes open the same file and compete on one group. Reads
// that need no transaction (Read, Query, Lag, stats) use a small pool of
// read-only connections and never wait for writers.
//
// # Durability
//
// The synchronous setting is always set explicitly (drivers differ in
// their default):
//
//   - SynchronousNormal (default): a committed transaction survives the
//     crash or SIGKILL of any process using the file. A power loss or OS
//     crash may roll back the last transactions committed before it, never
//     corrupting the file.
//   - SynchronousFull: every commit is fsynced to the WAL before it
//     returns, so commits also survive power loss and OS crashes, at the
//     cost of one fsync per write transaction.
//
// # Wakeups
//
// Backend implements rheo.Notifier. Commits in this process wake local
// waiters at once. Commits by other processes are noticed by polling
// PRAGMA data_version (a read of shared memory, no file I/O) every 50ms,
// and only while someone in this process is subscribed.
//
// Schema and SQL are shared with the PostgreSQL backend through
// internal/sqlstore; see that package for the data model.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rheo-go/rheo"
	rdsn "github.com/rheo-go/rheo/internal/dsn"
	"github.com/rheo-go/rheo/internal/notify"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

func init() {
	rheo.Register("sqlite", OpenDSN)
}

// Synchronous is SQLite's synchronous setting: what a commit survives.
type Synchronous int

const (
	// SynchronousNormal survives process crashes; a power loss may roll
	// back the latest commits (never corrupting the file).
	SynchronousNormal Synchronous = iota
	// SynchronousFull also survives power loss: one fsync per commit.
	SynchronousFull
)

func (s Synchronous) String() string {
	if s == SynchronousFull {
		return "FULL"
	}
	return "NORMAL"
}

type options struct {
	sync        Synchronous
	busyTimeout time.Duration
	readers     int
	poll        time.Duration
	migrate     bool
}

// Option configures Open.
type Option func(*options)

// WithSynchronous sets the durability of commits (default SynchronousNormal).
func WithSynchronous(s Synchronous) Option { return func(o *options) { o.sync = s } }

// WithBusyTimeout sets how long a write waits for another process holding
// the file's write lock before failing with ErrBackendUnavailable
// (default 5s; 0 does not wait, and Open refuses a negative one).
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busyTimeout = d } }

// WithReaders sets the size of the read-only connection pool (default 4).
func WithReaders(n int) Option { return func(o *options) { o.readers = n } }

// WithPollInterval sets how often a subscribed Backend checks for commits
// by other processes (default 50ms).
func WithPollInterval(d time.Duration) Option { return func(o *options) { o.poll = d } }

// WithoutMigrate makes Open leave the schema alone; call Migrate yourself.
func WithoutMigrate() Option { return func(o *options) { o.migrate = false } }

// Backend is the SQLite store. It implements rheo.Backend and rheo.Notifier.
type Backend struct {
	*sqlstore.Store
	path string
	opts options
	w, r *sql.DB

	hub      notify.Hub
	pollMu   sync.Mutex
	stopPoll context.CancelFunc
	pollDone chan struct{}

	ckpt     chan struct{}
	ckptStop context.CancelFunc
	ckptDone chan struct{}

	closeOnce sync.Once
}

var (
	_ rheo.Backend  = (*Backend)(nil)
	_ rheo.Notifier = (*Backend)(nil)
)

// Open opens (creating if needed) the SQLite database at path and, unless
// WithoutMigrate is given, brings its schema up to date.
func Open(ctx context.Context, path string, opts ...Option) (*Backend, error) {
	o := options{busyTimeout: 5 * time.Second, readers: 4, poll: 50 * time.Millisecond, migrate: true}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "sqlite: empty database path")
	}
	if o.busyTimeout < 0 {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "sqlite: busy timeout %v is negative (want a duration such as 5s; 0 does not wait)", o.busyTimeout)
	}
	if path == ":memory:" || strings.HasPrefix(path, "file::memory:") {
		// Every connection would see a database of its own.
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "sqlite: %q is not a file; use a file path, or the memory: backend for an in-process store", path)
	}
	if o.readers < 1 {
		o.readers = 1
	}
	if o.poll <= 0 {
		o.poll = 50 * time.Millisecond
	}
	pragmas := func(extra ...string) string {
		q := url.Values{}
		q.Add("_pragma", "busy_timeout("+strconv.FormatInt(o.busyTimeout.Milliseconds(), 10)+")")
		q.Add("_pragma", "synchronous("+o.sync.String()+")")
		q.Add("_pragma", "foreign_keys(0)")
		// Statement journals (every multi-row statement inside a
		// transaction writes one) stay in memory instead of a temp file.
		q.Add("_pragma", "temp_store(MEMORY)")
		q.Add("_pragma", "cache_size(-16384)")
		// Checkpoints run on a connection of their own, off the commit
		// path (see checkpointer); the automatic one in the committing
		// connection is only a backstop if that falls far behind.
		q.Add("_pragma", "wal_autocheckpoint(20000)")
		for _, e := range extra {
			k, v, _ := strings.Cut(e, "=")
			q.Add(k, v)
		}
		return "file:" + uriPath.Replace(path) + "?" + q.Encode()
	}
	w, err := sql.Open("sqlite", pragmas())
	if err != nil {
		return nil, openError(err, path)
	}
	// One writer connection: writes in this process queue here instead of
	// contending for the file lock.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	// WAL mode is a property of the file: set once, it holds for every
	// connection and process.
	if _, err := w.ExecContext(ctx, "PRAGMA journal_mode = WAL"); err != nil {
		w.Close()
		return nil, openError(err, path)
	}
	// The poller holds one reader connection while anyone is subscribed.
	r, err := sql.Open("sqlite", pragmas("_pragma=query_only(1)"))
	if err != nil {
		w.Close()
		return nil, openError(err, path)
	}
	r.SetMaxOpenConns(o.readers + 1)
	r.SetMaxIdleConns(o.readers + 1)
	b := &Backend{path: path, opts: o, w: w, r: r}
	b.hub.OnFirst, b.hub.OnLast = b.startPoller, b.stopPoller
	b.Store = sqlstore.New(sqlstore.Config{Dialect: dialect{}, Write: w, SingleWriter: true, Stamps: true, Read: r, PrepareReads: true,
		Changed: b.hub.Signal, Committed: b.committed})
	if err := b.startCheckpointer(pragmas()); err != nil {
		b.Close()
		return nil, err
	}
	if o.migrate {
		if err := b.Migrate(ctx); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// openError is the error of an Open that failed: ErrMisconfigured with
// what to fix when the file cannot be opened or written, else
// ErrBackendUnavailable.
// (Only here: the same codes later, on a store that opened, can pass, as
// when the process runs out of file descriptors.)
func openError(err error, path string) error {
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() {
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_CANTOPEN_ISDIR, sqlite3.SQLITE_CANTOPEN_FULLPATH:
			return rheo.Wrap(rheo.ErrMisconfigured, err, "sqlite: open %s: SQLite cannot open the file: "+
				"check that it is a file (not a directory), that its directory exists, and that this process may read and write there", path)
		case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_READONLY_DIRECTORY:
			return rheo.Wrap(rheo.ErrMisconfigured, err, "sqlite: open %s: the database file, its directory or its -wal and -shm files "+
				"are read-only to this process: rheo keeps SQLite in WAL mode, which writes them even to read", path)
		}
	}
	return rheo.Wrap(rheo.ErrBackendUnavailable, err, "sqlite: open %s", path)
}

// uriPath escapes the characters that SQLite's URI syntax would read as a
// query, a fragment or an escape, so "file:PATH" names exactly the file PATH
// (a '#' would otherwise cut the name and drop every pragma after it).
var uriPath = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")

// OpenDSN opens a "sqlite:PATH[?synchronous=normal|full&busy_timeout=DURATION]"
// DSN. It is the OpenFunc registered for the "sqlite" scheme. Each parameter
// may be given once, with a value (busy_timeout not negative); any other
// parameter is refused.
func OpenDSN(ctx context.Context, dsn string) (rheo.Backend, error) {
	rest, ok := strings.CutPrefix(dsn, "sqlite:")
	if !ok {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "DSN %q is not sqlite:PATH", dsn)
	}
	path, query, _ := strings.Cut(rest, "?")
	var opts []Option
	if query != "" {
		rest, params, err := rdsn.TakeParams(query, "synchronous", "busy_timeout")
		if err != nil {
			return nil, rheo.Errorf(rheo.ErrInvalidArgument, "DSN %q: %v", dsn, err)
		}
		if rest != "" {
			k, _, _ := strings.Cut(strings.Split(rest, "&")[0], "=")
			return nil, rheo.Errorf(rheo.ErrInvalidArgument, "DSN %q: unknown parameter %q (want synchronous, busy_timeout)", dsn, k)
		}
		if v, ok := params["synchronous"]; ok {
			switch strings.ToLower(v) {
			case "normal":
				opts = append(opts, WithSynchronous(SynchronousNormal))
			case "full":
				opts = append(opts, WithSynchronous(SynchronousFull))
			default:
				return nil, rheo.Errorf(rheo.ErrInvalidArgument, "DSN %q: synchronous=%q (want normal or full)", dsn, v)
			}
		}
		if v, ok := params["busy_timeout"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, rheo.Wrap(rheo.ErrInvalidArgument, err, "DSN %q: busy_timeout", dsn)
			}
			if d < 0 {
				return nil, rheo.Errorf(rheo.ErrInvalidArgument, "DSN %q: busy_timeout=%s is negative (want a duration such as 5s; 0 does not wait)", dsn, v)
			}
			opts = append(opts, WithBusyTimeout(d))
		}
	}
	if path == "" {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "DSN %q has no path (want sqlite:PATH)", dsn)
	}
	return Open(ctx, path, opts...)
}

// Path returns the database file's path.
func (b *Backend) Path() string { return b.path }

// Settings describes the connection settings, for benchmarks and logs.
func (b *Backend) Settings() string {
	return fmt.Sprintf("journal_mode=WAL synchronous=%s busy_timeout=%s writers=1 readers=%d",
		b.opts.sync, b.opts.busyTimeout, b.opts.readers)
}

// Close stops the wakeup poller and closes the connections.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.stopPoller()
		if b.ckptStop != nil {
			b.ckptStop()
			<-b.ckptDone
		}
		b.Store.Release()
		err = b.r.Close()
		if werr := b.w.Close(); err == nil {
			err = werr
		}
	})
	return err
}

// Subscribe implements rheo.Notifier. Commits in this process signal at
// once; while anyone is subscribed, a poller notices other processes' commits.
func (b *Backend) Subscribe(stream string) (<-chan struct{}, func()) {
	return b.hub.Subscribe(stream)
}

func (b *Backend) startPoller() {
	b.pollMu.Lock()
	defer b.pollMu.Unlock()
	if b.stopPoll != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.stopPoll, b.pollDone = cancel, make(chan struct{})
	// The baseline is taken before Subscribe returns, so that a commit by
	// another process right after it is noticed.
	p := b.newPoller(ctx)
	go p.run(ctx, b.pollDone)
}

func (b *Backend) stopPoller() {
	b.pollMu.Lock()
	stop, done := b.stopPoll, b.pollDone
	b.stopPoll, b.pollDone = nil, nil
	b.pollMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// poller notices commits by other processes: PRAGMA data_version changes
// when another connection committed, and then the per-stream change
// counters say which streams to wake.
type poller struct {
	b       *Backend
	conn    *sql.Conn
	version int64
	seen    map[string]int64
	ok      bool // the baseline was read
}

func (b *Backend) newPoller(ctx context.Context) *poller {
	p := &poller{b: b, version: -1, seen: map[string]int64{}}
	conn, err := b.r.Conn(ctx)
	if err != nil {
		return p
	}
	p.conn = conn
	p.ok = p.check(ctx, false)
	return p
}

// check reads data_version and, when it moved, the change counters,
// signalling the streams whose counter moved (or every stream when wake).
func (p *poller) check(ctx context.Context, wake bool) bool {
	var v int64
	if err := p.conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
		return false
	}
	if v == p.version {
		return true
	}
	rows, err := p.conn.QueryContext(ctx, "SELECT name, changes FROM rheo_streams")
	if err != nil {
		return false
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if rows.Scan(&name, &n) != nil {
			return false
		}
		if old, seen := p.seen[name]; wake || (seen && old != n) || (!seen && p.version != -1) {
			p.b.hub.Signal(name)
		}
		p.seen[name] = n
	}
	if rows.Err() != nil {
		return false
	}
	p.version = v
	return true
}

func (p *poller) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	if p.conn == nil {
		return
	}
	defer p.conn.Close()
	t := time.NewTicker(p.b.opts.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Without a baseline, a commit may have been missed: wake everyone
		// once (a spurious wakeup only costs a fetch).
		p.ok = p.check(ctx, !p.ok)
	}
}

// checkpointEvery is the least time between two background checkpoints:
// each one fsyncs the database file, so they are batched.
const checkpointEvery = 100 * time.Millisecond

// startCheckpointer runs WAL checkpoints on a connection of its own, after
// commits and at most every checkpointEvery, so that copying WAL pages back
// into the database never lengthens a commit. PASSIVE checkpoints never
// block readers or writers, in this process or others.
func (b *Backend) startCheckpointer(dsn string) error {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "sqlite: open %s", b.path)
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithCancel(context.Background())
	b.ckpt, b.ckptStop, b.ckptDone = make(chan struct{}, 1), cancel, make(chan struct{})
	go func() {
		defer close(b.ckptDone)
		defer db.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.ckpt:
			}
			db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
			t := time.NewTimer(checkpointEvery)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// committed asks the checkpointer for a checkpoint (coalescing requests).
func (b *Backend) committed() {
	select {
	case b.ckpt <- struct{}{}:
	default:
	}
}
