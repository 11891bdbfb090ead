package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rheo-go/rheo"
)

// stream resolves a stream name to its id and partition count (cached:
// streams are never deleted and their partition count never changes).
func (b *Backend) stream(ctx context.Context, q pgx.Tx, name string) (streamRef, error) {
	b.cacheMu.RLock()
	r, ok := b.streams[name]
	b.cacheMu.RUnlock()
	if ok {
		return r, nil
	}
	const sql = `SELECT id, partitions FROM {S}rheo_streams WHERE name = $1`
	var row pgx.Row
	if q != nil {
		row = q.QueryRow(ctx, b.sqlf(sql), name)
	} else {
		row = b.pool.QueryRow(ctx, b.sqlf(sql), name)
	}
	if err := row.Scan(&r.id, &r.parts); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return r, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", name)
		}
		return r, classify(err, false, "postgres: stream %q", name)
	}
	b.cacheMu.Lock()
	b.streams[name] = r
	b.cacheMu.Unlock()
	return r, nil
}

// group resolves (stream, group) to ids (cached: groups are never deleted
// and their MaxAttempts never changes). A missing stream is reported first.
func (b *Backend) group(ctx context.Context, stream, name string) (groupRef, error) {
	k := [2]string{stream, name}
	b.cacheMu.RLock()
	g, ok := b.groups[k]
	b.cacheMu.RUnlock()
	if ok {
		return g, nil
	}
	s, err := b.stream(ctx, nil, stream)
	if err != nil {
		return g, err
	}
	g.streamID, g.parts = s.id, s.parts
	err = b.pool.QueryRow(ctx, b.sqlf(`SELECT id, max_attempts FROM {S}rheo_groups WHERE stream_id = $1 AND name = $2`),
		s.id, name).Scan(&g.id, &g.maxAttempts)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return g, rheo.Errorf(rheo.ErrGroupNotFound, "group %q on stream %q", name, stream)
		}
		return g, classify(err, false, "postgres: group %q on stream %q", name, stream)
	}
	b.cacheMu.Lock()
	b.groups[k] = g
	b.cacheMu.Unlock()
	return g, nil
}

// appendSQL appends a batch in one statement: existing IDs are read back,
// the new events' partitions get their counters raised (each counter row
// stays locked until commit, so commit order is sequence order), the events
// are inserted, and subscribers are notified on commit.
const appendSQL = `
WITH input AS (
	SELECT * FROM unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[])
		WITH ORDINALITY AS t(id, part, etype, ekey, ts, payload, metadata, i)
),
old AS (
	SELECT e.id, e.part, e.seq, e.etype, e.ekey, e.ts, e.payload, e.metadata
	FROM unnest($2::text[]) AS u(id) CROSS JOIN LATERAL (
		SELECT x.* FROM {S}rheo_events x WHERE x.stream_id = $1 AND x.id = u.id LIMIT 1
	) e
),
fresh AS (
	SELECT t.*, row_number() OVER (PARTITION BY t.part ORDER BY t.i) AS k
	FROM input t WHERE NOT EXISTS (SELECT 1 FROM old WHERE old.id = t.id)
),
counts AS (SELECT part, count(*) AS n FROM fresh GROUP BY part),
alloc AS (
	UPDATE {S}rheo_partitions p SET hwm = p.hwm + c.n
	FROM counts c WHERE p.stream_id = $1 AND p.part = c.part
	RETURNING p.part, p.hwm - c.n AS base
),
ins AS (
	INSERT INTO {S}rheo_events (stream_id, part, seq, id, etype, ekey, ts, payload, metadata)
	SELECT $1, f.part, a.base + f.k, f.id, f.etype, f.ekey, f.ts, f.payload::jsonb, f.metadata::jsonb
	FROM fresh f JOIN alloc a ON a.part = f.part
	RETURNING id, seq
),
note AS (SELECT pg_notify($9, $10) FROM (SELECT 1 FROM ins LIMIT 1) x)
SELECT id, seq, NULL::int, NULL::text, NULL::text, NULL::bigint, NULL::jsonb, NULL::jsonb FROM ins
UNION ALL
SELECT id, seq, part, etype, ekey, ts, payload, metadata FROM old
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM (SELECT count(*) AS c FROM note) z WHERE z.c < 0`

// Append implements rheo.Backend.
func (b *Backend) Append(ctx context.Context, stream string, evs []rheo.Event) ([]rheo.Event, error) {
	s, err := b.stream(ctx, nil, stream)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		out, err := b.appendIn(ctx, b.pool, s, stream, evs)
		if err != nil && attempt < 5 && retryable(err) {
			continue
		}
		if err != nil {
			return nil, classify(err, true, "postgres: append to stream %q", stream)
		}
		return out, nil
	}
}

// rowQuerier runs a statement returning rows: a pool or a transaction.
type rowQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (b *Backend) appendIn(ctx context.Context, q rowQuerier, s streamRef, stream string, evs []rheo.Event) ([]rheo.Event, error) {
	n := len(evs)
	ids := make([]string, n)
	parts := make([]int32, n)
	types := make([]string, n)
	keys := make([]string, n)
	ts := make([]int64, n)
	payloads := make([]string, n)
	metas := make([]*string, n)
	index := make(map[string]int, n)
	for i, e := range evs {
		if e.Partition < 0 || e.Partition >= s.parts {
			return nil, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", e.Partition, stream, s.parts)
		}
		ids[i], parts[i], types[i], keys[i] = e.ID, int32(e.Partition), e.Type, e.Key
		ts[i] = e.Timestamp.UnixMicro()
		payloads[i] = string(e.Payload)
		if len(e.Payload) == 0 {
			payloads[i] = "{}"
		}
		if e.Metadata != nil {
			m, err := json.Marshal(e.Metadata)
			if err != nil {
				return nil, rheo.Wrap(rheo.ErrInvalidArgument, err, "event %q metadata", e.ID)
			}
			ms := string(m)
			metas[i] = &ms
		}
		index[e.ID] = i
	}
	rows, err := q.Query(ctx, b.appendSQL, s.id, ids, parts, types, keys, ts, payloads, metas, b.channel, stream)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]rheo.Event, n)
	seen := 0
	for rows.Next() {
		var (
			id          string
			seq         int64
			part        *int32
			etype, ekey *string
			tsv         *int64
			payload     []byte
			meta        []byte
		)
		if err := rows.Scan(&id, &seq, &part, &etype, &ekey, &tsv, &payload, &meta); err != nil {
			return nil, err
		}
		i, ok := index[id]
		if !ok {
			continue
		}
		seen++
		if part == nil { // newly written
			e := evs[i]
			e.Stream, e.Sequence = stream, seq
			out[i] = e
			continue
		}
		e := rheo.Event{
			ID: id, Stream: stream, Partition: int(*part), Sequence: seq, Type: *etype, Key: *ekey,
			Timestamp: time.UnixMicro(*tsv).UTC(), Payload: json.RawMessage(payload),
		}
		if meta != nil {
			if err := json.Unmarshal(meta, &e.Metadata); err != nil {
				return nil, err
			}
		}
		out[i] = e
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if seen != n {
		return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "postgres: append to stream %q: %d of %d events confirmed", stream, seen, n)
	}
	return out, nil
}

// AppendTx appends msgs to stream inside the caller's transaction tx: the
// transactional outbox. The events exist if and only if tx commits, and
// waiting consumers are notified on commit. c must be a client over a
// *Backend; it validates the messages, assigns IDs and routes them exactly
// as AppendBatch does. Sequences are allocated inside tx: until tx ends, other
// appends to the same partitions wait (this is what keeps commit order equal
// to sequence order), so keep such transactions short.
//
// On error the transaction is in an aborted state and must be rolled back.
func AppendTx(ctx context.Context, c *rheo.Client, tx pgx.Tx, stream string, msgs []rheo.Message) ([]rheo.Event, error) {
	b, ok := c.Backend().(*Backend)
	if !ok {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "postgres: AppendTx needs a client over a postgres backend, not %T", c.Backend())
	}
	evs, err := c.PrepareAppend(ctx, stream, msgs)
	if err != nil || len(evs) == 0 {
		return evs, err
	}
	s, err := b.stream(ctx, tx, stream)
	if err != nil {
		return nil, err
	}
	out, err := b.appendIn(ctx, tx, s, stream, evs)
	if err != nil {
		return nil, classify(err, true, "postgres: append to stream %q in transaction", stream)
	}
	return out, nil
}
