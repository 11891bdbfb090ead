package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

// migrationLockKey32 and the schema's hash form the advisory lock every
// Migrate of that schema takes (transaction scoped), so that processes
// starting together migrate one at a time.
const migrationLockKey32 = "1919444335" // "rheo" in ASCII

// pgMigrations are PostgreSQL-only additions to the shared schema, versioned
// separately (table rheo_schema_postgres) so that the shared migrations keep
// their own numbering.
var pgMigrations = []struct {
	version int
	stmts   []string
}{
	{1, []string{
		// Metadata filters compile to containment (@>), which this serves.
		`CREATE INDEX IF NOT EXISTS rheo_events_metadata ON rheo_events USING gin (metadata jsonb_path_ops)`,
		// Payload filters compile to containment plus an exact path test.
		`CREATE INDEX IF NOT EXISTS rheo_events_payload ON rheo_events USING gin (payload jsonb_path_ops)`,
		// The events table is insert-only: the deliveries table's eager
		// vacuum settings (shared DDL) are not for it.
		`ALTER TABLE rheo_events RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay)`,
		// Dead letters are listed in (partition, sequence) order.
		`CREATE INDEX IF NOT EXISTS rheo_deliveries_dead ON rheo_deliveries (grp_id, part, seq) WHERE status = 2`,
	}},
	{2, []string{
		// Appends to a partition serialize on its counter row, and index
		// maintenance is most of what an append does while it holds the
		// row. This version replaced the two JSON indexes by one GIN index
		// over both columns; since version 5 that index is optional
		// (CreatePayloadIndex), so an upgrade no longer builds it here only
		// for version 5 to drop it.
		`DROP INDEX IF EXISTS rheo_events_payload`,
		`DROP INDEX IF EXISTS rheo_events_metadata`,
		// IDs, types and keys compare bytewise in their indexes, whatever
		// the database's locale: cheaper than a locale's collation, equal
		// for equality, and the order queries already sort by (COLLATE "C").
		// No table rewrite; the indexes on these columns are rebuilt.
		`ALTER TABLE rheo_events ALTER COLUMN id TYPE text COLLATE "C", ALTER COLUMN etype TYPE text COLLATE "C", ALTER COLUMN ekey TYPE text COLLATE "C"`,
	}},
	{3, []string{
		// Payloads come back byte-identical to what Append returned, as on
		// every other store: the column keeps the appended text, and the
		// optional GIN index (and payload filters) use its jsonb cast. Rows
		// written before this version keep jsonb's rendering of their
		// payload. (This version rebuilt the GIN index on the cast; see
		// version 2.)
		`DROP INDEX IF EXISTS rheo_events_json`,
		`ALTER TABLE rheo_events ALTER COLUMN payload TYPE text USING payload::text`,
	}},
	{4, []string{
		// A span fences each member on its event ID as a delivery row
		// does: ids[k] is hashtextextended(event ID, 0) of member lo+k-1.
		`ALTER TABLE rheo_spans ADD COLUMN IF NOT EXISTS ids BIGINT[]`,
	}},
	{5, []string{
		// The GIN index over payloads and metadata is opt-in
		// (CreatePayloadIndex): every append paid for its entries, about a
		// quarter of an append's time, for filters most streams never run.
		// Payload and metadata filters still work without it, reading the
		// stream's events.
		`DROP INDEX IF EXISTS rheo_events_json`,
	}},
}

// payloadIndexSQL is the optional GIN index that payload and metadata
// filters use (CreatePayloadIndex); {S} is the quoted schema and a dot.
const payloadIndexSQL = `CREATE INDEX CONCURRENTLY IF NOT EXISTS rheo_events_json ON {S}rheo_events
	USING gin ((payload::jsonb) jsonb_path_ops, metadata jsonb_path_ops)`

// PayloadIndexSQL returns the statement CreatePayloadIndex runs for schema
// (DefaultSchema when empty), for users who apply migrations with their own
// tool. It builds the index without blocking appends (CREATE INDEX
// CONCURRENTLY), so it must run outside a transaction.
func PayloadIndexSQL(schema string) (string, error) {
	schema, err := scriptSchema(schema)
	if err != nil {
		return "", err
	}
	return strings.ReplaceAll(payloadIndexSQL, "{S}", pgx.Identifier{schema}.Sanitize()+"."), nil
}

// payloadIndexLock is the session advisory lock (with the schema's hash)
// that serializes CreatePayloadIndex calls of one schema: two concurrent
// builds of an index on one table deadlock in PostgreSQL. It is not
// Migrate's lock, whose waiters a build holding it would wait for.
const payloadIndexLock = "1919444336"

// CreatePayloadIndex builds the GIN index that serves Query.Payload and
// Query.Metadata filters (containment on the payload's jsonb form and on
// the metadata), unless it exists. Without it those filters read every
// event of the stream that the query's other filters leave; with it each
// append also writes the index entries of its payload and metadata (with
// small JSON payloads, appends ran at about 0.7–0.8 of their rate without
// it; docs/performance-log.md, "The payload index"). Run it once per schema, after Migrate; it does
// not block appends while it builds, and later migrations leave it in
// place. Drop it with DROP INDEX CONCURRENTLY rheo_events_json in the
// backend's schema.
//
// Calls for one schema from several processes take turns (the others wait
// for the first build, then find the index). A build that failed or was
// cancelled leaves an invalid index behind, which the planner never uses:
// the next call drops it and builds it again.
func (b *Backend) CreatePayloadIndex(ctx context.Context) error {
	err := b.createPayloadIndex(ctx)
	if err != nil {
		return classify(err, false, "postgres: create the payload index in schema %q", b.schema)
	}
	return nil
}

func (b *Backend) createPayloadIndex(ctx context.Context) error {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	lockArgs := []any{pgx.QueryExecModeSimpleProtocol, b.schema}
	// Tried, not waited for: a session waiting for the lock would be a
	// transaction whose snapshot the holder's CREATE INDEX CONCURRENTLY
	// waits to end, a deadlock.
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		var locked bool
		err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock("+payloadIndexLock+", hashtext($1))", lockArgs...).Scan(&locked)
		if err != nil {
			return err
		}
		if locked {
			break
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(wait):
		}
	}
	defer func() {
		// Unlocked with a context of its own: ctx may be what ended the
		// build. A connection that cannot unlock is closed, which unlocks.
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock("+payloadIndexLock+", hashtext($1))", lockArgs...); err != nil {
			_ = conn.Conn().Close(uctx)
		}
	}()
	for attempt := 0; ; attempt++ {
		if _, err := conn.Exec(ctx, b.sqlf(payloadIndexSQL), pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
		var valid bool
		err := conn.QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i
			WHERE i.indexrelid = to_regclass($1)`, pgx.QueryExecModeSimpleProtocol, b.q+"rheo_events_json").Scan(&valid)
		if err != nil {
			return err
		}
		if valid {
			return nil
		}
		if attempt > 0 {
			return rheo.Errorf(rheo.ErrBackendUnavailable, "the index rheo_events_json was built but is not valid")
		}
		// Left by a build that did not finish: drop it, build it again.
		if _, err := conn.Exec(ctx, b.sqlf("DROP INDEX CONCURRENTLY IF EXISTS {S}rheo_events_json"), pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
	}
}

// script is the whole migration as statements, in order, for schema. It is
// idempotent: every version is applied only when the version tables say it
// is missing.
func script(schema string) ([]string, error) {
	ms, err := sqlstore.Migrations(dialect{})
	if err != nil {
		return nil, err
	}
	qs := pgx.Identifier{schema}.Sanitize()
	out := []string{
		// One lock per schema: migrations of different schemas do not wait
		// for each other. The schema is a validated identifier.
		fmt.Sprintf("SELECT pg_advisory_xact_lock(%s, hashtext('%s'))", migrationLockKey32, schema),
		"CREATE SCHEMA IF NOT EXISTS " + qs,
		"SET LOCAL search_path TO " + qs,
		"CREATE TABLE IF NOT EXISTS rheo_schema (version INTEGER PRIMARY KEY)",
		"CREATE TABLE IF NOT EXISTS rheo_schema_postgres (version INTEGER PRIMARY KEY)",
	}
	for _, m := range ms {
		// A version may have no statement here (the dialect maps it to
		// nothing): it is recorded all the same.
		body := ""
		for _, st := range m.Statements {
			body += st + ";\n\t"
		}
		out = append(out, fmt.Sprintf(
			"DO $rheo$ BEGIN IF NOT EXISTS (SELECT 1 FROM rheo_schema WHERE version = %d) THEN\n\t%sINSERT INTO rheo_schema (version) VALUES (%d);\nEND IF; END $rheo$",
			m.Version, body, m.Version))
	}
	for _, m := range pgMigrations {
		body := strings.Join(m.stmts, ";\n\t")
		out = append(out, fmt.Sprintf(
			"DO $rheo$ BEGIN IF NOT EXISTS (SELECT 1 FROM rheo_schema_postgres WHERE version = %d) THEN\n\t%s;\n\tINSERT INTO rheo_schema_postgres (version) VALUES (%d);\nEND IF; END $rheo$",
			m.version, body, m.version))
	}
	return out, nil
}

// MigrationSQL returns the SQL that Migrate runs for schema (DefaultSchema
// when empty), as one script to run in a single transaction, for users who
// apply migrations with their own tool. It is idempotent and takes the same
// advisory lock as Migrate, so the two can be mixed.
func MigrationSQL(schema string) (string, error) {
	schema, err := scriptSchema(schema)
	if err != nil {
		return "", err
	}
	stmts, err := script(schema)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("-- rheo PostgreSQL schema " + schema + "; run in one transaction.\nBEGIN;\n")
	for _, s := range stmts {
		b.WriteString(s)
		b.WriteString(";\n")
	}
	b.WriteString("COMMIT;\n")
	return b.String(), nil
}

// MigrationSQLForDSN is MigrationSQL for the schema a postgres:// or
// postgresql:// DSN names (its rheo_schema parameter, DefaultSchema when
// absent). It does not connect.
func MigrationSQLForDSN(dsn string) (string, error) { return forDSN(dsn, MigrationSQL) }

// PayloadIndexSQLForDSN is PayloadIndexSQL for the schema a postgres:// or
// postgresql:// DSN names. It does not connect.
func PayloadIndexSQLForDSN(dsn string) (string, error) { return forDSN(dsn, PayloadIndexSQL) }

// forDSN runs a script builder for the schema dsn names.
func forDSN(dsn string, build func(schema string) (string, error)) (string, error) {
	_, schema, err := splitSchema(dsn)
	if err != nil {
		return "", err
	}
	return build(schema)
}

// scriptSchema is the schema a printed script is for: DefaultSchema when
// empty, and a plain identifier.
func scriptSchema(schema string) (string, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if !schemaRE.MatchString(schema) {
		return "", rheo.Errorf(rheo.ErrInvalidArgument, "postgres: schema %q is not a plain identifier", schema)
	}
	return schema, nil
}

// Migrate implements rheo.Backend: it creates the schema and applies the
// missing migrations in one transaction under an advisory lock, so it is
// idempotent and safe when several processes run it at once.
func (b *Backend) Migrate(ctx context.Context) error {
	stmts, err := script(b.schema)
	if err != nil {
		return rheo.Wrap(rheo.ErrBackendUnavailable, err, "postgres: migrate")
	}
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s, pgx.QueryExecModeSimpleProtocol); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return classify(err, true, "postgres: migrate schema %q", b.schema)
	}
	return nil
}
