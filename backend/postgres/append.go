package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rheo-go/rheo"
	stored "github.com/rheo-go/rheo/internal/payload"
)

// stream resolves a stream name to its id and partition count, cached: a
// stream's partition count never changes, but another process may delete
// it and create another under the name, which appends check for (errMoved).
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

// forget drops the cached ids of a stream and its groups (group == ""), or
// of one group.
func (b *Backend) forget(stream, group string) {
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	if group != "" {
		delete(b.groups, [2]string{stream, group})
		return
	}
	delete(b.streams, stream)
	for k := range b.groups {
		if k[0] == stream {
			delete(b.groups, k)
		}
	}
}

// moved reports whether the group that g, cached, stood for is no longer
// there under its name: another process deleted it or its stream (and
// maybe created another under the name). It resolves the names afresh,
// which refreshes the cache, and returns ErrStreamNotFound or
// ErrGroupNotFound when they are gone. Fetch, Settle and Renew call it
// when what they found could come from such ids (nothing to fetch, a lease
// that is not current) and run again when it reports true.
func (b *Backend) moved(ctx context.Context, stream, group string, g groupRef) (bool, error) {
	b.forget(stream, group) // (the stream's other groups keep theirs)
	now, err := b.group(ctx, stream, group)
	return err == nil && now.id != g.id, err
}

// restream is what an append that failed with err under the cached stream
// s does next: when err says the stream may be out of date (gone: errMoved;
// or refusing a partition: another process may have created it again with
// more), the name is resolved afresh (q: in that transaction, or nil), and
// again reports whether to append once more under now.
func (b *Backend) restream(ctx context.Context, q pgx.Tx, stream string, s streamRef, err error) (now streamRef, again bool, _ error) {
	if !errors.Is(err, errMoved) && !errors.Is(err, rheo.ErrInvalidPartition) {
		return s, false, nil
	}
	b.forget(stream, "")
	now, rerr := b.stream(ctx, q, stream)
	if rerr != nil {
		return s, false, rerr
	}
	return now, errors.Is(err, errMoved) || now.id != s.id, nil
}

// errMoved: an append found no counters under the cached id of its stream,
// which another process deleted: it runs again with the name resolved
// afresh.
var errMoved = errors.New("the stream's cached id is gone")

// group resolves (stream, group) to ids, cached: a group's id and
// MaxAttempts never change, but another process may delete it and create
// another under the name, which Fetch, Settle and Renew check for (moved).
// A missing stream is reported first.
func (b *Backend) group(ctx context.Context, stream, name string) (groupRef, error) {
	k := [2]string{stream, name}
	b.cacheMu.RLock()
	g, ok := b.groups[k]
	b.cacheMu.RUnlock()
	if ok {
		return g, nil
	}
	// Both names afresh, in one round trip: the cached stream may be one
	// another process has deleted.
	var id, maxAttempts *int64
	err := b.pool.QueryRow(ctx, b.sqlf(`SELECT s.id, s.partitions, g.id, g.max_attempts FROM {S}rheo_streams s
		LEFT JOIN {S}rheo_groups g ON g.stream_id = s.id AND g.name = $2 WHERE s.name = $1`),
		stream, name).Scan(&g.streamID, &g.parts, &id, &maxAttempts)
	if errors.Is(err, pgx.ErrNoRows) {
		b.forget(stream, "")
		return g, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", stream)
	}
	if err != nil {
		return g, classify(err, false, "postgres: group %q of stream %q", name, stream)
	}
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	b.streams[stream] = streamRef{id: g.streamID, parts: g.parts}
	if id == nil {
		return g, rheo.Errorf(rheo.ErrGroupNotFound, "group %q of stream %q", name, stream)
	}
	g.id, g.maxAttempts = *id, int(*maxAttempts)
	b.groups[k] = g
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
	SELECT $1, f.part, a.base + f.k, f.id, f.etype, f.ekey, f.ts, f.payload, f.metadata::jsonb
	FROM fresh f JOIN alloc a ON a.part = f.part
	RETURNING id, seq
),
note AS (SELECT pg_notify($9, $10) FROM (SELECT 1 FROM ins LIMIT 1) x)
SELECT id, seq, NULL::int, NULL::text, NULL::text, NULL::bigint, NULL::text, NULL::jsonb FROM ins
UNION ALL
SELECT id, seq, part, etype, ekey, ts, payload, metadata FROM old
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM (SELECT count(*) AS c FROM note) z WHERE z.c < 0`

// appendFastSQL is the append of a batch whose IDs are all new (the usual
// case: IDs generated by the client): each event's rank within its
// partition comes from the client, so the statement only raises the
// counters, inserts and notifies. An ID the stream already holds makes it
// fail on the unique index (rolling everything back) and the batch is
// appended again with appendSQL, which reads stored IDs back.
//
// The counter rows stay locked from the UPDATE until commit, and other
// appends to those partitions wait for them: the input is therefore
// unpacked and its metadata parsed first (the materialized input feeds the
// blocking count that the UPDATE joins), so that the lock covers only the
// counter update, the inserts and the commit.
//
// Its parameters' and results' types are spelt out in pg_catalog's terms:
// the fast path encodes the parameters and decodes the results itself
// (wire.go), so a search_path or a column type must not change them.
const appendFastSQL = `
WITH input AS MATERIALIZED (
	SELECT t.id, t.part, t.etype, t.ekey, t.ts, t.payload, t.metadata::pg_catalog.jsonb AS metadata, t.k
	FROM unnest($2::pg_catalog.text[], $3::pg_catalog.int4[], $4::pg_catalog.text[], $5::pg_catalog.text[], $6::pg_catalog.int8[],
		$7::pg_catalog.text[], $8::pg_catalog.text[], $11::pg_catalog.int4[])
		AS t(id, part, etype, ekey, ts, payload, metadata, k)
),
counts AS (SELECT part, count(*) AS n FROM input GROUP BY part),
alloc AS (
	UPDATE {S}rheo_partitions p SET hwm = p.hwm + c.n
	FROM counts c
	WHERE p.stream_id = $1::pg_catalog.int8 AND p.part = c.part
	RETURNING p.part, p.hwm - c.n AS base
),
ins AS (
	INSERT INTO {S}rheo_events (stream_id, part, seq, id, etype, ekey, ts, payload, metadata)
	SELECT $1, t.part, a.base + t.k, t.id, t.etype, t.ekey, t.ts, t.payload, t.metadata
	FROM input t JOIN alloc a ON a.part = t.part
	RETURNING 1
),
note AS (SELECT pg_notify($9::pg_catalog.text, $10::pg_catalog.text) FROM (SELECT 1 FROM ins LIMIT 1) x)
SELECT a.part::pg_catalog.int4, a.base::pg_catalog.int8, (SELECT count(*) FROM ins)::pg_catalog.int8, (SELECT count(*) FROM note)::pg_catalog.int8
FROM alloc a`

// Append implements rheo.Backend.
func (b *Backend) Append(ctx context.Context, stream string, evs []rheo.Event) ([]rheo.Event, error) {
	s, err := b.stream(ctx, nil, stream)
	if err != nil {
		return nil, err
	}
	out, err := b.appendFast(ctx, s, stream, evs)
	if now, again, rerr := b.restream(ctx, nil, stream, s, err); rerr != nil {
		return nil, rerr
	} else if again {
		s = now
		out, err = b.appendFast(ctx, s, stream, evs)
	}
	if err == nil {
		return out, nil
	}
	if !retryable(err) {
		return nil, classify(err, true, "postgres: append to stream %q", stream)
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

// appendFast runs appendFastSQL; a unique violation on an event ID means
// the batch holds a stored ID and the caller falls back to appendSQL.
func (b *Backend) appendFast(ctx context.Context, s streamRef, stream string, evs []rheo.Event) ([]rheo.Event, error) {
	n := len(evs)
	// Each event's rank within its partition in the batch.
	count := make([]int32, s.parts)
	ranks := make([]int32, n)
	touched := 0
	for i, e := range evs {
		if e.Partition < 0 || e.Partition >= s.parts {
			return nil, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", e.Partition, stream, s.parts)
		}
		if count[e.Partition] == 0 {
			touched++
		}
		count[e.Partition]++
		ranks[i] = count[e.Partition]
	}
	base := make(map[int32]int64, touched)
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	conn := c.Conn()
	wc := wireConnOf(conn)
	var inserted int64
	if wc.path != wireOff {
		inserted, err = b.appendFastWire(ctx, conn, wc, s, stream, evs, ranks, base)
		if errors.Is(err, errWireTypes) {
			// Nothing was sent: this connection's server resolves the
			// statement's types otherwise; pgx encodes for them.
			wc.path = wireOff
		}
	}
	if wc.path == wireOff {
		inserted, err = b.appendFastPgx(ctx, conn, s, stream, evs, ranks, base)
	}
	if err != nil {
		return nil, err
	}
	if inserted == 0 && len(base) == 0 {
		return nil, errMoved // no counters under the stream's cached id
	}
	if inserted != int64(n) || len(base) != touched {
		return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "postgres: append to stream %q: %d of %d events confirmed", stream, inserted, n)
	}
	out := make([]rheo.Event, n)
	for i, e := range evs {
		e.Stream = stream
		e.Sequence = base[int32(e.Partition)] + int64(ranks[i])
		out[i] = e
	}
	return out, nil
}

// appendFastOIDs are the types of appendFastSQL's parameters, in order.
var appendFastOIDs = []uint32{oidInt8, oidTextArray, oidInt4Array, oidTextArray, oidTextArray, oidInt8Array,
	oidTextArray, oidTextArray, oidText, oidText, oidInt4Array}

var emptyPayload = []byte("{}")

// appendFastWire runs appendFastSQL with parameters it encodes itself (see
// wire.go), records each partition's base sequence and returns how many
// events were inserted.
func (b *Backend) appendFastWire(ctx context.Context, conn *pgx.Conn, wc *wireConn, s streamRef, stream string, evs []rheo.Event, ranks []int32, base map[int32]int64) (int64, error) {
	n := len(evs)
	metas := make([][]byte, n)
	for i, e := range evs {
		if e.Metadata == nil {
			continue
		}
		m, err := json.Marshal(e.Metadata)
		if err != nil {
			return 0, rheo.Wrap(rheo.ErrInvalidArgument, err, "event %q metadata", e.ID)
		}
		metas[i] = m
	}
	w := getWire()
	defer putWire(w)
	w.int8(s.id)
	w.stringArray(n, func(i int) string { return evs[i].ID })
	w.int4Array(n, func(i int) int32 { return int32(evs[i].Partition) })
	w.stringArray(n, func(i int) string { return evs[i].Type })
	w.stringArray(n, func(i int) string { return evs[i].Key })
	w.int8Array(n, func(i int) int64 { return evs[i].Timestamp.UnixMicro() })
	w.textArray(n, func(i int) []byte {
		if len(evs[i].Payload) == 0 {
			return emptyPayload
		}
		return evs[i].Payload
	})
	w.textArray(n, func(i int) []byte { return metas[i] })
	w.text(b.channel)
	w.text(stream)
	w.int4Array(n, func(i int) int32 { return ranks[i] })
	var inserted int64
	err := wireQuery(ctx, conn, wc, b.appendFastSQL, appendFastOIDs, w, func(v [][]byte) error {
		if len(v) != 4 || len(v[0]) != 4 || len(v[1]) != 8 || len(v[2]) != 8 {
			// The statement's casts fix these types; rows that differ
			// came from a statement that ran, and committed.
			return rheo.Errorf(rheo.ErrAmbiguous, "postgres: append to stream %q: unexpected result row, the events may have been written", stream)
		}
		base[int32(binary.BigEndian.Uint32(v[0]))] = int64(binary.BigEndian.Uint64(v[1]))
		inserted = int64(binary.BigEndian.Uint64(v[2]))
		return nil
	})
	return inserted, err
}

// appendFastPgx runs appendFastSQL on conn through pgx's own encoding (a
// connection with a query tracer).
func (b *Backend) appendFastPgx(ctx context.Context, conn *pgx.Conn, s streamRef, stream string, evs []rheo.Event, ranks []int32, base map[int32]int64) (int64, error) {
	a, err := columns(s, stream, evs)
	if err != nil {
		return 0, err
	}
	rows, err := conn.Query(ctx, b.appendFastSQL, s.id, a.ids, a.parts, a.types, a.keys, a.ts, a.payloads, a.metas,
		b.channel, stream, ranks)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var inserted int64
	for rows.Next() {
		var p int32
		var bs, n, notified int64
		if err := rows.Scan(&p, &bs, &n, &notified); err != nil {
			return 0, err
		}
		base[p], inserted = bs, n
	}
	return inserted, rows.Err()
}

// appendCols are a batch's columns, as statement arrays.
type appendCols struct {
	ids, types, keys, payloads []string
	parts                      []int32
	ts                         []int64
	metas                      []*string
}

func columns(s streamRef, stream string, evs []rheo.Event) (appendCols, error) {
	n := len(evs)
	a := appendCols{
		ids: make([]string, n), parts: make([]int32, n), types: make([]string, n), keys: make([]string, n),
		ts: make([]int64, n), payloads: make([]string, n), metas: make([]*string, n),
	}
	for i, e := range evs {
		if e.Partition < 0 || e.Partition >= s.parts {
			return a, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", e.Partition, stream, s.parts)
		}
		a.ids[i], a.parts[i], a.types[i], a.keys[i] = e.ID, int32(e.Partition), e.Type, e.Key
		a.ts[i] = e.Timestamp.UnixMicro()
		a.payloads[i] = string(e.Payload)
		if len(e.Payload) == 0 {
			a.payloads[i] = "{}"
		}
		if e.Metadata != nil {
			m, err := json.Marshal(e.Metadata)
			if err != nil {
				return a, rheo.Wrap(rheo.ErrInvalidArgument, err, "event %q metadata", e.ID)
			}
			ms := string(m)
			a.metas[i] = &ms
		}
	}
	return a, nil
}

// rowQuerier runs a statement returning rows: a pool or a transaction.
type rowQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (b *Backend) appendIn(ctx context.Context, q rowQuerier, s streamRef, stream string, evs []rheo.Event) ([]rheo.Event, error) {
	n := len(evs)
	a, err := columns(s, stream, evs)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, n)
	for i, e := range evs {
		index[e.ID] = i
	}
	rows, err := q.Query(ctx, b.appendSQL, s.id, a.ids, a.parts, a.types, a.keys, a.ts, a.payloads, a.metas, b.channel, stream)
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
			if e.Metadata, err = stored.Metadata(meta); err != nil {
				return nil, err
			}
		}
		out[i] = e
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if seen == 0 && n > 0 {
		return nil, errMoved // neither stored nor appended: no counters under the stream's cached id
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
	if now, again, rerr := b.restream(ctx, tx, stream, s, err); rerr != nil {
		return nil, rerr
	} else if again {
		s = now
		out, err = b.appendIn(ctx, tx, s, stream, evs)
	}
	if errors.Is(err, rheo.ErrInvalidPartition) && refreshCount(ctx, c, stream) {
		// Or with fewer than the client routed by: reading the stream's
		// state refreshes the client's count, and the messages are routed
		// again by it.
		if evs, err = c.PrepareAppend(ctx, stream, msgs); err != nil {
			return nil, err
		}
		out, err = b.appendIn(ctx, tx, s, stream, evs)
	}
	if err != nil {
		return nil, classify(err, true, "postgres: append to stream %q in transaction", stream)
	}
	return out, nil
}

// refreshCount refreshes c's partition count of stream (Client.Stream
// does) and reports whether it read one.
func refreshCount(ctx context.Context, c *rheo.Client, stream string) bool {
	_, err := c.Stream(ctx, stream)
	return err == nil
}
