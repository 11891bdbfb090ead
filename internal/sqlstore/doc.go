// Package sqlstore is rheo's SQL backend logic, written once for SQLite
// and PostgreSQL: the schema (embedded, versioned migrations), query
// building, and the claim, settle, frontier, replay and reset logic. A
// backend package supplies connections and a Dialect, and gets a *Store
// that implements every rheo.Backend method but Close.
//
// # Data model
//
//   - rheo_streams(id, name, partitions, created_at, changes): streams are
//     interned to integer ids so rows and indexes carry integers. changes
//     grows in every transaction that may make work claimable (appends,
//     nacks, replays, redrives, resets), a cheap cross-process signal.
//   - rheo_partitions(stream_id, part, hwm, stamp): the sequence allocator
//     per partition, which is also its high watermark. Append reserves a
//     block with UPDATE … RETURNING (PostgreSQL, in ascending partition
//     order) or one upsert for all its partitions (SQLite,
//     AdvanceHeadsSQL), which also sets stamp: the stream's change count
//     after the append (schema version 8; PostgreSQL leaves it 0).
//   - rheo_events(stream_id, part, seq, id, etype, ekey, ts, payload,
//     metadata): primary key (stream_id, part, seq), unique (stream_id, id)
//     for idempotent appends, indexes on (stream_id, ts), (stream_id, etype)
//     and (stream_id, ekey) for the common query filters.
//   - rheo_groups(id, stream_id, name, max_attempts, created_at, seen):
//     seen (schema version 8, SQLite) is the stream's change count when
//     the group's last fetch from every partition left no new event
//     behind, so that the next one reads only the partitions stamped
//     after it; 0 when not known (see fetchCursors).
//   - rheo_group_parts(grp_id, part, offered): the materialization cursor.
//   - rheo_deliveries(grp_id, part, seq, event_id, status, attempt, lease_id,
//     consumer_id, leased_at, expires_at, due_at, reason, dead_at): only
//     pending deliveries (available, leased) and dead letters. An ack
//     deletes its row at once, so the table is bounded by the in-flight
//     window plus dead letters (SPEC R9). due_at is when a pending row
//     becomes claimable (the nack's availability, or the lease's expiry).
//   - rheo_spans(grp_id, part, lo, hi, token, attempt, consumer_id,
//     leased_at, expires_at, done, pending, low, digest): a run of fresh
//     events one fetch leased together in a partition, one row instead of a
//     leased delivery row each (see spans.go). Readers of leased rows read
//     spans too. digest (SQLite's spans, from schema version 5) is
//     spanDigest of the members' event IDs, which a whole ack checks instead
//     of reading the members' events.
//
// Every sequence at or below a group's cursor without a delivery row (or
// a span that holds it) was acked (or precedes the group's start), so the
// committed frontier needs no bookkeeping: it is the sequence before the
// lowest pending delivery, or the cursor when nothing is pending, read
// through a partial index on pending rows and the spans' low columns. Holes block it by construction; dead letters do not.
//
// Times are integer microseconds since the epoch (exact for the facade's
// microsecond times, and ordered). Payloads and metadata are JSON text
// returned byte-identical.
//
// This package's Fetch, Settle and Renew are SQLite's (PostgreSQL has its
// own, in single statements). Fetch runs in one write transaction: turn
// the spans whose lease expired into leased rows, dead-letter expired
// leases at the attempt limit (R6), read claimable rows (due_at <= now, at
// most Limit per partition, by sequence), share the limit across
// partitions round-robin from a rotating first partition, claim rows with
// guarded UPDATEs, then lease the events past the cursor of each partition
// as one span and advance the cursor. Settle deletes each span whose every
// member the batch acks (each once, under its receipt, with its event's
// ID: checked against the span's digest), turns any other span a request
// names into rows, then reads the named rows of each partition once,
// fences every request (status leased, same lease ID and receipt, same
// event), deletes acked rows with one DELETE and updates nacked and
// dead-lettered rows.
//
// # Writing SQL for both databases
//
// Shared SQL uses `?` placeholders (Dialect.Rebind turns them into `$n`)
// and only the subset both databases speak: ON CONFLICT … DO NOTHING / DO
// UPDATE with excluded, RETURNING, window functions, row-value-free
// predicates. Everything else goes through Dialect: DDL types ({IDPK},
// {TEXT}, {JSON}, {TABLEOPTS}), row locks (LockRows), text ordering, the
// migration lock, JSON predicates for metadata and payload filters, and
// error classification (unique violations, ambiguous commits). Names and
// values reach SQL only as bind parameters.
//
// # Using it from PostgreSQL
//
// A PostgreSQL backend (pgx v5) wraps the user's pool with
// stdlib.OpenDBFromPool and passes it as Config.Write and Config.Read with
// SingleWriter false: write transactions then run concurrently through
// BeginTx, and pgx caches prepared statements itself. Its Dialect should:
//
//   - Rebind with DollarRebind;
//   - map {IDPK} to BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, {TEXT}
//     to TEXT, and {JSON} to json (jsonb would reorder keys and lose the
//     byte-identical payload; filters can cast, col::jsonb);
//   - return " FOR UPDATE" from LockRows: Fetch locks the group's cursor
//     rows (in partition order) before touching deliveries, so fetchers of
//     one group serialise per partition and never claim a row twice;
//     Settle locks the delivery rows it fences; every transaction takes
//     locks in the order cursors, then deliveries, so none deadlock;
//   - map {LEASES_BY_ATTEMPT} to "" (the index is for this package's own
//     fetch; PostgreSQL's planner took it for settles of leased rows) and
//     {RETRIED_LEASES} to its own fetch's index of leases retried;
//   - return ` COLLATE "C"` from TextOrder (bytewise order, like Go);
//   - take pg_advisory_xact_lock in MigrationLock;
//   - compile MetadataEq as col->>$k = $v and PayloadEq as
//     (col::jsonb #> $path::text[]) = $v::jsonb (jsonb compares 2 and 2.0
//     as equal, and never a number with a string);
//   - classify SQLSTATE 23505 as a unique violation, and a connection lost
//     during COMMIT as ambiguous.
//
// Config.InTx is where PostgreSQL sends pg_notify for the streams a
// transaction woke, so the notification commits with the change; tables
// live in the connection's search_path, so a schema per test isolates tests.
package sqlstore
