// Package postgres is rheo's PostgreSQL backend: every node of a service
// points at one database and the database arbitrates leases.
//
// Import it for its DSN registration:
//
//	import _ "github.com/rheo-go/rheo/backend/postgres"
//	client, err := rheo.Open(ctx, "postgres://user@host/db?sslmode=disable")
//
// or hand it a pool you own (it is borrowed, never closed):
//
//	b, err := postgres.New(pool, postgres.WithSchema("rheo"))
//	client := rheo.New(b)
//
// Tables live in one schema (default "rheo", see WithSchema); Migrate creates
// them under an advisory lock, and MigrationSQL prints the same DDL for
// users who run migrations with their own tool.
//
// The hot paths are single statements: an append of a batch allocates its
// sequences (one counter row per partition, locked until commit, so commit
// order equals sequence order), inserts the events and sends the NOTIFY in
// one round trip; a fetch claims with FOR UPDATE SKIP LOCKED in one round
// trip; a settle of a batch is one statement. Acked deliveries are deleted at
// once and the committed frontier is derived from the lowest pending
// delivery, so no row is shared by acking consumers. The other operations
// run on the SQL layer this backend shares with SQLite (internal/sqlstore).
//
// AppendTx appends inside the caller's own transaction (the transactional
// outbox). See docs/postgres.md for running several nodes on one database,
// indexes and autovacuum.
package postgres

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/rheo-go/rheo"
	rdsn "github.com/rheo-go/rheo/internal/dsn"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

func init() {
	rheo.Register("postgres", open)
	rheo.Register("postgresql", open)
}

// DefaultSchema is the schema the tables live in unless WithSchema says
// otherwise.
const DefaultSchema = "rheo"

// Option configures a Backend.
type Option func(*config)

type config struct {
	schema string
}

// WithSchema sets the schema holding rheo's tables (default "rheo"). It must
// be a plain identifier: a letter or underscore, then letters, digits or
// underscores, at most 58 bytes (the NOTIFY channel name adds a prefix and
// PostgreSQL names are limited to 63 bytes).
func WithSchema(name string) Option { return func(c *config) { c.schema = name } }

var schemaRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,57}$`)

// Backend is the PostgreSQL store. It is safe for concurrent use.
type Backend struct {
	pool   *pgxpool.Pool
	owned  bool // the pool was made by Open and is closed by Close
	schema string
	// q is the quoted schema followed by a dot, prefixed to every table.
	q string
	// channel is the NOTIFY channel of this schema.
	channel string

	db    *sql.DB // database/sql view of pool, for the shared SQL layer
	store *sqlstore.Store

	lis *listener
	statements

	cacheMu sync.RWMutex
	streams map[string]streamRef
	groups  map[[2]string]groupRef

	rrMu sync.Mutex
	rr   map[int64]int
	due  map[int64]bool // groups whose last claim found something due (see claim)

	closeOnce sync.Once
}

type streamRef struct {
	id    int64
	parts int
}

type groupRef struct {
	id          int64
	streamID    int64
	parts       int
	maxAttempts int
}

// New returns a backend over pool, which it borrows: Close leaves the pool
// open. Call Migrate (or rheo.Client.Migrate) before use.
func New(pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	if pool == nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "postgres: pool is nil")
	}
	cfg := config{schema: DefaultSchema}
	for _, o := range opts {
		o(&cfg)
	}
	if !schemaRE.MatchString(cfg.schema) {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument,
			"postgres: schema %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 58 bytes)", cfg.schema)
	}
	b := &Backend{
		pool:    pool,
		schema:  cfg.schema,
		q:       pgx.Identifier{cfg.schema}.Sanitize() + ".",
		channel: "rheo_" + cfg.schema,
		streams: map[string]streamRef{},
		groups:  map[[2]string]groupRef{},
		rr:      map[int64]int{},
		due:     map[int64]bool{},
	}
	b.prepareTexts()
	b.db = stdlib.OpenDBFromPool(pool)
	b.store = sqlstore.New(sqlstore.Config{
		Dialect: dialect{q: b.q},
		Write:   b.db,
		Read:    b.db,
		InTx: func(ctx context.Context, tx sqlstore.Execer, streams []string) error {
			for _, s := range streams {
				if _, err := tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", b.channel, s); err != nil {
					return err
				}
			}
			return nil
		},
		Retryable:      func(err error) bool { return rolledBack(err) || staleStatement(err) },
		StaleStatement: staleStatement,
	})
	b.lis = newListener(b)
	return b, nil
}

// Open creates a pool from a postgres:// or postgresql:// DSN and returns a
// backend that owns it (Close closes it). The DSN may carry a
// rheo_schema=NAME parameter choosing the schema (given once, not empty,
// percent-decoded); it is removed before the DSN reaches PostgreSQL. Any
// other parameter whose name starts with "rheo" is refused as a
// misspelling. Open does not migrate.
func Open(ctx context.Context, dsn string, opts ...Option) (*Backend, error) {
	dsn, schema, err := splitSchema(dsn)
	if err != nil {
		return nil, err
	}
	if schema != "" {
		opts = append([]Option{WithSchema(schema)}, opts...)
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "postgres: DSN does not parse: %v", parseError(dsn))
	}
	if atInHost(pcfg.ConnConfig) {
		// An '@' of the password left in the URL: the rest of the password
		// became the host name, which must not be printed.
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "postgres: DSN %s: its host name holds an '@': percent-encode any '@' in the user name or password (for example '@' as %%40)",
			rdsn.Redact(dsn))
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, classify(err, false, "postgres: open pool")
	}
	b, err := New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.owned = true
	return b, nil
}

// atInHost reports whether a host of c holds an '@' (a URL whose password
// holds an unencoded '@').
func atInHost(c *pgx.ConnConfig) bool {
	if strings.Contains(c.Host, "@") {
		return true
	}
	for _, f := range c.Fallbacks {
		if strings.Contains(f.Host, "@") {
			return true
		}
	}
	return false
}

func open(ctx context.Context, dsn string) (rheo.Backend, error) {
	b, err := Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// splitSchema removes the rheo_schema query parameter from dsn and returns
// it decoded ("" when the DSN has none); the other parameters reach pgx as
// they were. It refuses rheo_schema given twice or empty, and a parameter
// that starts with "rheo" but is not rheo_schema (a misspelling pgx would
// send to the server as a setting).
func splitSchema(dsn string) (string, string, error) {
	base, query, ok := strings.Cut(dsn, "?")
	if !ok {
		return dsn, "", nil
	}
	rest, params, err := rdsn.TakeParams(query, "rheo_schema")
	if err != nil {
		return "", "", rheo.Errorf(rheo.ErrInvalidArgument, "postgres DSN: %v", err)
	}
	if rest == "" {
		return base, params["rheo_schema"], nil
	}
	return base + "?" + rest, params["rheo_schema"], nil
}

// parseError says why dsn does not parse without showing its password.
func parseError(dsn string) error {
	return rdsn.ParseError(dsn, func(s string) error {
		_, err := pgxpool.ParseConfig(s)
		return err
	})
}

// Schema returns the schema holding the backend's tables.
func (b *Backend) Schema() string { return b.schema }

// Pool returns the pool the backend runs on.
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// Ping implements rheo.Backend.
//
// It connects (Open does not), then checks that the schema is migrated to
// the version this rheo needs: a wrong role or password, a missing
// database and a schema that was never migrated (or is behind) come back
// as rheo.ErrMisconfigured with what to do about it.
func (b *Backend) Ping(ctx context.Context) error {
	if err := b.pool.Ping(ctx); err != nil {
		return classify(err, false, "postgres: ping")
	}
	var shared, own int
	err := b.pool.QueryRow(ctx, b.sqlf(`SELECT (SELECT coalesce(max(version), 0) FROM {S}rheo_schema),
		(SELECT coalesce(max(version), 0) FROM {S}rheo_schema_postgres)`)).Scan(&shared, &own)
	if err != nil {
		return classify(err, false, "postgres: schema %q", b.schema)
	}
	ms, err := sqlstore.Migrations(dialect{})
	if err != nil {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "postgres: migrations")
	}
	wantShared, wantOwn := ms[len(ms)-1].Version, pgMigrations[len(pgMigrations)-1].version
	if shared < wantShared || own < wantOwn {
		return rheo.Errorf(rheo.ErrMisconfigured,
			"postgres: schema %q is at version %d.%d, this rheo needs %d.%d: run `rheo migrate --dsn DSN` or Client.Migrate",
			b.schema, shared, own, wantShared, wantOwn)
	}
	return nil
}

// Close stops the listening connection and, when the pool was made by Open,
// closes the pool. A borrowed pool stays open.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.lis.stop()
		b.store.Release()
		b.db.Close()
		if b.owned {
			b.pool.Close()
		}
	})
	return nil
}

// sqlf replaces every {S} in a statement with the quoted schema and a dot.
func (b *Backend) sqlf(s string) string { return requested(strings.ReplaceAll(s, "{S}", b.q)) }

var _ rheo.Backend = (*Backend)(nil)
var _ rheo.Notifier = (*Backend)(nil)
