package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/leaseerr"
	stored "github.com/rheo-go/rheo/internal/payload"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

const poisonReason = "max_attempts: lease expired"

// The poison sweep of fetchSQL ({SWEEP}): the expired leases at the
// attempt limit ($11) of a partition. With a limit above 1 they are in the
// index of leases past their first attempt (schema version 7), whose
// predicate (status = 1 AND attempt > 1) no other statement states, so
// the planner takes it for this one only; the due-time conditions are
// written so that they do not make the index of due times the cheaper
// path. With a limit of 1 every expired lease is at the limit: the due
// range is the sweep.
const (
	sweepRetried = `x.status = 1 AND x.attempt > 1 AND x.attempt >= $11
			AND x.due_at + 0 <= $5 AND x.due_at + 0 >= ` + sqlstore.TimedBound
	sweepDue = `x.due_at <= $5 AND x.{TIMED} AND x.status = 1 AND x.attempt >= $11`
)

// fetchSQL claims in one statement. Claimable deliveries come from two
// partial indexes, so that it reads none it cannot claim however many
// there are: those available at once (reopened, redriven, nacked without
// a delay: due below the bound of {READY}; see sqlstore.ReadySQL) a limit
// per partition in sequence order (oldr), and those due at a time that has
// come (expired leases, retries whose delay is over) from the index of due
// times: a capped range of it per partition (dc, $13 = sqlstore.DueCap),
// whose rows are the candidates where the partition has fewer due; where
// it has more (a fleet crashed holding many leases), the due ones among
// its first $13 pending deliveries in sequence order (oldt); only where
// fewer than the limit are due among those (delayed retries or leases in
// flight come first), the whole due range, sorted (oldw; its ORDER BY
// seq + 0 keeps the planner from walking the partition's deliveries in
// sequence order instead, past every lease in flight and every delayed
// retry). oldt locks its candidates by tuple ID, in a form (status + 0,
// due_at + 0, …) that leaves the planner no other path, whatever the
// statistics the generic plan was made from (often a connection's first
// fetch, on an empty table). Both kinds visit only the partitions that
// have such rows, found by a skip scan of each index (tp, rp): a fetch
// from many partitions of which few have deliveries makes a probe per
// partition that has some.
//
// It locks the group's cursor rows of the
// requested partitions that have events past the cursor (wk: the others
// have nothing for the cursor to advance over, and a fetch from many
// partitions of which few have new events locks, and then works through,
// only those few; gpt locks them with SKIP LOCKED, each by its key, so
// that a fetcher does not queue behind another one that is materializing
// the same partitions;
// only when it locked none and has no other delivery to claim does gpw
// wait for them, in the same statement, and then read each cursor as its
// holder left it), dead-letters every expired lease at
// the attempt limit in those partitions (R6; poison never takes a claim's
// place), takes up to Limit other claimable deliveries per partition with
// FOR UPDATE SKIP LOCKED (two fetchers never claim one row), adds events
// past the cursor, and shares Limit across the
// partitions the way every backend does: in a rotating order, each
// partition first gets up to its quota (Limit / partitions, rounded up),
// then what is left goes to each partition in turn, as much as it has —
// strict sequence order inside each. Events past the cursor are read a
// quota per partition first (fresh1): when the partitions' first shares
// (each one's candidates up to its quota) then add up to Limit (enough),
// the shares are those and nothing more is read (the usual case with a
// backlog: Limit events read, not Limit per partition); otherwise up to
// Limit per partition are read, as the shares may need, from the
// partitions that had their quota (more): one that had less has no more
// past the cursor, and fresh1 already holds all of it.
//
// $3 is the list of requested partitions, or NULL for every partition of
// the stream (see sqlstore.CoversAll): the statements then test no row
// against a list ({REQUESTED:col}, see requested).
// Offered deliveries always precede events past the cursor in sequence
// order, so the first rows of a partition are the same either way. Then it
// leases the kept rows, leases the fresh ones of each partition as one
// span (a row of rheo_spans instead of a delivery row each: see
// migrations/0004_spans.sql in internal/sqlstore; it returns the span's
// token, from which Go derives each member's lease ID), advances the
// cursors and returns the leases with their events: a fresh event's
// columns come along from the read that found it past the cursor (fresh1),
// a kept row's from one lookup each. The picked rows are numbered (i, the
// position of a lease ID in $8) from each partition's offset in the
// shares, without sorting them again. explodeFetchSQL, before
// it in the same transaction, has turned the spans whose lease expired
// into the delivery rows they stand for, which this statement then claims
// or dead-letters like any other.
//
// Rows it locks it updates by tuple ID (stable while the lock is held),
// never through a join with the deliveries table: planned from a queue
// table's stale statistics, such a join walked every delivery of the
// partition once per claimed row. setFetchGUCs rules out the plans a
// stale estimate would otherwise pick here (sequential scans, nested loops
// but for the LATERAL probes).
//
// A fetch that finds nothing due runs freshFetchSQL instead, built from
// the same parts (cursorsSQL, waitSQL, sharesSQL, leaseSQL, gotSpansSQL).
const fetchSQL = `
WITH RECURSIVE ` + probesSQL + `,
` + cursorsSQL + `,
tq AS (SELECT part FROM tp WHERE {REQUESTED:part}),
psel AS (
	SELECT d.tid FROM tq p CROSS JOIN LATERAL (
		SELECT x.ctid AS tid FROM {S}rheo_deliveries x
		WHERE x.grp_id = $1 AND x.part = p.part AND {SWEEP}
		FOR UPDATE SKIP LOCKED
	) d
),
poison AS (
	UPDATE {S}rheo_deliveries d SET status = 2, reason = $12, dead_at = $5,
		due_at = NULL, lease_id = NULL, consumer_id = NULL
	WHERE d.ctid = ANY(ARRAY(SELECT tid FROM psel))
	RETURNING d.seq
),
oldr AS (
	SELECT d.* FROM (SELECT part FROM rp WHERE {REQUESTED:part}) p CROSS JOIN LATERAL (
		SELECT x.part, x.seq, x.attempt, x.event_id, x.ctid AS tid FROM {S}rheo_deliveries x
		WHERE x.grp_id = $1 AND x.part = p.part AND x.status = 0 AND x.{READY} AND x.due_at <= $5 - {OFFSET}
		ORDER BY x.seq LIMIT $4
		FOR UPDATE SKIP LOCKED
	) d
),
dc AS MATERIALIZED (
	SELECT p.part, d.tid FROM tq p CROSS JOIN LATERAL (
		SELECT x.ctid AS tid FROM {S}rheo_deliveries x
		WHERE x.grp_id = $1 AND x.part = p.part AND x.due_at <= $5 AND x.{TIMED}
		ORDER BY x.due_at LIMIT $13
	) d
),
dn AS (SELECT part, count(*) >= $13 AS many FROM dc GROUP BY part),
oldt AS MATERIALIZED (
	SELECT d.* FROM dn p CROSS JOIN LATERAL (
		SELECT x.part, x.seq, x.attempt, x.event_id, x.ctid AS tid FROM {S}rheo_deliveries x
		WHERE x.ctid = ANY(CASE WHEN p.many THEN ARRAY(
				SELECT w.tid FROM (
					SELECT y.ctid AS tid, y.status, y.attempt, y.due_at FROM {S}rheo_deliveries y
					WHERE y.grp_id = $1 AND y.part = p.part AND y.status < 2
					ORDER BY y.seq LIMIT $13
				) w
				WHERE w.due_at <= $5 AND w.{TIMED} AND NOT (w.status = 1 AND w.attempt >= $11))
			ELSE ARRAY(SELECT tid FROM dc WHERE dc.part = p.part) END)
			AND x.grp_id + 0 = $1 AND x.part + 0 = p.part AND x.due_at + 0 <= $5 AND x.due_at + 0 >= ` + sqlstore.TimedBound + `
			AND x.status + 0 < 2 AND NOT (x.status = 1 AND x.attempt >= $11)
		ORDER BY x.seq LIMIT $4
		FOR UPDATE SKIP LOCKED
	) d
),
oldw AS (
	SELECT d.* FROM (
		SELECT part FROM dn WHERE many AND (SELECT count(*) FROM oldt WHERE oldt.part = dn.part) < $4
	) p CROSS JOIN LATERAL (
		SELECT x.part, x.seq, x.attempt, x.event_id, x.ctid AS tid FROM {S}rheo_deliveries x
		WHERE x.grp_id = $1 AND x.part = p.part AND x.due_at <= $5 AND x.{TIMED}
			AND x.status < 2 AND NOT (x.status = 1 AND x.attempt >= $11)
			AND x.ctid <> ALL(ARRAY(SELECT tid FROM oldt WHERE oldt.part = p.part))
		ORDER BY x.seq + 0 LIMIT $4
		FOR UPDATE SKIP LOCKED
	) d
),
old AS (
	SELECT part, seq, attempt, event_id, tid FROM (
		SELECT u.*, row_number() OVER (PARTITION BY u.part ORDER BY u.seq) AS k
		FROM (SELECT * FROM oldr UNION ALL SELECT * FROM oldt UNION ALL SELECT * FROM oldw) u
	) v WHERE v.k <= $4
),
` + waitSQL + `,
` + sharesSQL + `,
upd AS (
	UPDATE {S}rheo_deliveries d SET status = 1, attempt = d.attempt + 1, lease_id = ($8::text[])[pick.i],
		consumer_id = $7, leased_at = $5, expires_at = $6, due_at = $6
	FROM pick WHERE d.ctid = ANY(ARRAY(SELECT tid FROM pick WHERE NOT fresh)) AND NOT pick.fresh AND d.ctid = pick.tid
	RETURNING d.part, d.seq, d.attempt, d.lease_id
),
` + leaseSQL + `,
got AS (
	SELECT u.part, u.seq, u.attempt, u.lease_id, false AS span, e.id, e.etype, e.ekey, e.ts, e.payload, e.metadata
	FROM upd u CROSS JOIN LATERAL (
		SELECT x.id, x.etype, x.ekey, x.ts, x.payload, x.metadata FROM {S}rheo_events x
		WHERE x.stream_id = $2 AND x.part = u.part AND x.seq = u.seq LIMIT 1
	) e
	UNION ALL
` + gotSpansSQL + `
)
SELECT part, seq, attempt, lease_id, span, id, etype, ekey, ts, payload, metadata FROM got
ORDER BY part, seq`

// The parts of the claim statements (fetchSQL, freshFetchSQL) they share.
const (
	// probesSQL finds the partitions that have delivery rows due at a
	// time (tp) and available at once (rp), by a skip scan of each index:
	// a probe per partition that has some, one when none has.
	probesSQL = `tp(part) AS (
	SELECT (SELECT x.part FROM {S}rheo_deliveries x WHERE x.grp_id = $1 AND x.{TIMED} ORDER BY x.part LIMIT 1)
	UNION ALL
	SELECT (SELECT x.part FROM {S}rheo_deliveries x WHERE x.grp_id = $1 AND x.{TIMED} AND x.part > tp.part
		ORDER BY x.part LIMIT 1)
	FROM tp WHERE tp.part IS NOT NULL
),
rp(part) AS (
	SELECT (SELECT x.part FROM {S}rheo_deliveries x WHERE x.grp_id = $1 AND x.status = 0 AND x.{READY}
		ORDER BY x.part LIMIT 1)
	UNION ALL
	SELECT (SELECT x.part FROM {S}rheo_deliveries x WHERE x.grp_id = $1 AND x.status = 0 AND x.{READY}
		AND x.part > rp.part ORDER BY x.part LIMIT 1)
	FROM rp WHERE rp.part IS NOT NULL
)`
	// cursorsSQL locks the group's cursor rows (see fetchSQL); {DUE} is
	// the fresh form's condition that nothing is due.
	cursorsSQL = `wk AS (
	{WK}{DUE}
),
gpt AS (
	SELECT g.part, g.offered, g.tid FROM wk CROSS JOIN LATERAL (
		SELECT x.part, x.offered, x.ctid AS tid FROM {S}rheo_group_parts x WHERE x.grp_id = $1 AND x.part = wk.part
		FOR UPDATE SKIP LOCKED
	) g
)`
	// waitSQL waits for the cursors another fetcher holds.
	waitSQL = `gpw AS (
	SELECT part, offered, ctid AS tid FROM {S}rheo_group_parts
	WHERE grp_id = $1 AND part IN (SELECT part FROM wk)
		AND NOT EXISTS (SELECT 1 FROM gpt) AND NOT EXISTS (SELECT 1 FROM old)
	ORDER BY part FOR UPDATE
)`
	// sharesSQL reads the events past the cursors and picks the deliveries
	// and events the fetch leases (pick).
	sharesSQL = `gp AS (
	SELECT part, offered, tid FROM gpt UNION ALL SELECT part, offered, tid FROM gpw
),
fresh1 AS (
	SELECT e.*
	FROM gp CROSS JOIN LATERAL (
		SELECT x.part, x.seq, x.id, x.etype, x.ekey, x.ts, x.payload, x.metadata FROM {S}rheo_events x
		WHERE x.stream_id = $2 AND x.part = gp.part AND x.seq > gp.offered
		ORDER BY x.seq LIMIT $10::int
	) e
),
enough AS (
	SELECT coalesce(sum(least(c.n, $10::int)), 0) >= $4 AS ok
	FROM (
		SELECT part, count(*) AS n FROM (SELECT part FROM old UNION ALL SELECT part FROM fresh1) u GROUP BY part
	) c
),
more AS (
	SELECT part FROM fresh1 GROUP BY part HAVING count(*) >= $10::int
),
fresh AS (
	SELECT * FROM fresh1
	WHERE (SELECT ok FROM enough) OR part NOT IN (SELECT part FROM more)
	UNION ALL
	SELECT e.*
	FROM gp CROSS JOIN LATERAL (
		SELECT x.part, x.seq, x.id, x.etype, x.ekey, x.ts, x.payload, x.metadata FROM {S}rheo_events x
		WHERE x.stream_id = $2 AND x.part = gp.part AND x.seq > gp.offered
		ORDER BY x.seq LIMIT $4
	) e
	WHERE NOT (SELECT ok FROM enough) AND gp.part IN (SELECT part FROM more)
),
cand AS (
	SELECT c.*, row_number() OVER (PARTITION BY c.part ORDER BY c.seq) AS rn
	FROM (
		SELECT part, seq, attempt, event_id, false AS fresh, tid,
			NULL::text AS etype, NULL::text AS ekey, NULL::bigint AS ts, NULL::text AS payload, NULL::jsonb AS metadata
		FROM old
		UNION ALL
		SELECT part, seq, 0, id, true, NULL::tid, etype, ekey, ts, payload, metadata FROM fresh
	) c
),
cnt AS (
	SELECT part, (part - $9 + 1024) % 1024 AS ri, n, least($10::int, n) AS q
	FROM (SELECT part, count(*) AS n FROM cand GROUP BY part) c
),
base AS (
	SELECT part, ri, n, greatest(0, least(q, $4 - coalesce(sum(q) OVER w, 0))) AS b
	FROM cnt WINDOW w AS (ORDER BY ri ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
take AS (
	SELECT part, b + greatest(0, least(n - b,
		($4 - (SELECT sum(b) FROM base)) - coalesce(sum(n - b) OVER w, 0))) AS take
	FROM base WINDOW w AS (ORDER BY ri ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
share AS (
	SELECT part, take, coalesce(sum(take) OVER w, 0)::bigint AS off
	FROM take WINDOW w AS (ORDER BY part ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
pick AS (
	SELECT c.part, c.seq, c.attempt, c.event_id, c.fresh, c.tid, c.etype, c.ekey, c.ts, c.payload, c.metadata, s.off + c.rn AS i
	FROM cand c JOIN share s ON s.part = c.part WHERE c.rn <= s.take
)`
	// leaseSQL leases a partition's picked events as one span and
	// advances the cursors.
	leaseSQL = `ins AS (
	INSERT INTO {S}rheo_spans (grp_id, part, lo, hi, token, attempt, consumer_id, leased_at, expires_at, done, pending, low, ids)
	SELECT $1, part, min(seq), max(seq), ($8::text[])[min(i)], 1, $7, $5, $6, repeat('0', count(*)::int), count(*), min(seq),
		array_agg(hashtextextended(event_id, 0) ORDER BY seq)
	FROM pick WHERE fresh GROUP BY part
	RETURNING part, token
),
top AS (
	SELECT c.tid, c.part, max(p.seq) AS top FROM pick p JOIN gp c ON c.part = p.part WHERE p.fresh GROUP BY c.tid, c.part
),
adv AS (
	UPDATE {S}rheo_group_parts g SET offered = m.top
	FROM top m WHERE {ADV}
	RETURNING g.part
)`
	// gotSpansSQL returns the leases of the spans with their events.
	gotSpansSQL = `	SELECT p.part, p.seq, 1 AS attempt, ins.token AS lease_id, true AS span, p.event_id AS id,
		p.etype, p.ekey, p.ts, p.payload, p.metadata
	FROM pick p JOIN ins ON ins.part = p.part WHERE p.fresh`
)

// freshFetchSQL is the claim of a fetch that finds nothing due: no
// delivery it could re-lease or dead-letter in the requested partitions
// (due, with the conditions of fetchSQL's oldr and dc, from the same
// indexes). It then takes only events past the cursors, exactly as
// fetchSQL would (the same parts, with no old deliveries), in a statement
// about half its size: PostgreSQL initializes every node of a plan on
// each execution, which took a quarter of the server's CPU in a loop of
// fetches of 100 and their acks when every fetch ran fetchSQL. When
// something is due it claims nothing, locks no cursor (wk is empty) and
// returns one row of partition -1, and the fetch runs fetchSQL instead.
const freshFetchSQL = freshHeadSQL + `,
` + sharesSQL + `,
` + leaseSQL + `,
got AS (
` + gotSpansSQL + `
)
SELECT part, seq, attempt, lease_id, span, id, etype, ekey, ts, payload, metadata FROM got
UNION ALL SELECT -1, 0, 0, '', false, '', '', '', 0, NULL, NULL FROM due WHERE found
ORDER BY part, seq`

// lockCursorsSQL runs before freshFetchSQL, in its transaction: it locks
// the cursor rows freshFetchSQL would lock, or waits for them, by the same
// conditions ({NOW} is $4). The claim's snapshot, taken after, then sees
// each cursor as its last holder left it. Otherwise, a claim that found a
// cursor row updated since its snapshot (it waited for it, or another
// fetcher committed between its snapshot and its lock) rechecked the row
// (EvalPlanQual), which initializes every node of its plan again; a
// recheck of this statement's small plan costs little.
const lockCursorsSQL = freshHeadSQL + `
SELECT set_config('rheo.cursors', coalesce(string_agg(part::text, ','), ''), true)
FROM (SELECT part FROM gpt UNION ALL SELECT part FROM gpw) c`

// The partitions whose cursors a claim locks (wk, {WK} of cursorsSQL).
// fetchSQL and lockCursorsSQL find them: those of the request with events
// past the cursor, which reads every cursor row of the request.
// freshFetchSQL takes the ones lockCursorsSQL locked before it in the
// transaction, which it left in a setting of the transaction: the cursors
// stay as they were (it holds them), and the high watermarks only grow.
const (
	wkFind = `SELECT g.part FROM {S}rheo_group_parts g
	JOIN {S}rheo_partitions p ON p.stream_id = $2 AND p.part = g.part
	WHERE g.grp_id = $1 AND {REQUESTED:g.part} AND p.hwm > g.offered`
	// How the claim finds the cursor rows it advances ({ADV} of
	// leaseSQL). freshFetchSQL's rows were locked by the statement before
	// it, so its snapshot holds their last versions: it updates them by
	// tuple ID, reading no other cursor. fetchSQL locks them itself, after
	// its snapshot was taken: a row another fetcher updated in between is
	// locked in its newer version (EvalPlanQual), which that snapshot does
	// not see, so an update by its tuple ID in the same statement finds
	// nothing and the cursor stays behind (events went out twice in the
	// conformance suite's competing fetchers). It joins by key. (The
	// delivery rows it updates by tuple ID are safe from this: their
	// leases come from upd's RETURNING, so such a row is not claimed.)
	advByKey = `g.grp_id = $1 AND g.part = m.part`
	advByTID = `g.ctid = ANY(ARRAY(SELECT tid FROM top)) AND g.ctid = m.tid`
	wkLocked = `SELECT c.part FROM unnest(string_to_array(current_setting('rheo.cursors', true), ',')::int[]) AS c(part)
	WHERE true`
)

// freshHeadSQL is the head of freshFetchSQL and lockCursorsSQL: whether
// anything is due (due, probing only the partitions that have delivery
// rows, as fetchSQL does; {NOW} is the parameter of the fetch's time), no
// old deliveries, and the cursor rows, locked or waited for.
const freshHeadSQL = `
WITH RECURSIVE ` + probesSQL + `,
due AS (
	SELECT EXISTS (
		SELECT 1 FROM tp CROSS JOIN LATERAL (
			SELECT 1 FROM {S}rheo_deliveries x
			WHERE x.grp_id = $1 AND x.part = tp.part AND x.due_at <= {NOW} AND x.{TIMED} LIMIT 1
		) d WHERE {REQUESTED:tp.part}
	) OR EXISTS (
		SELECT 1 FROM rp CROSS JOIN LATERAL (
			SELECT 1 FROM {S}rheo_deliveries x
			WHERE x.grp_id = $1 AND x.part = rp.part AND x.status = 0 AND x.{READY} AND x.due_at <= {NOW} - {OFFSET} LIMIT 1
		) d WHERE {REQUESTED:rp.part}
	) AS found
),
old AS (
	SELECT NULL::int AS part, NULL::bigint AS seq, NULL::int AS attempt, NULL::text AS event_id, NULL::tid AS tid WHERE false
),
` + cursorsSQL + `,
` + waitSQL

// explodeSQL turns the spans of the requested partitions whose lease
// expired by $4, and spans whose members are all settled, into the leased
// delivery rows they stand for (so that the claim re-leases them, or
// dead-letters those at the attempt limit, as it would rows) and deletes
// them. A replay or a trim runs it for every span (internal/sqlstore
// explodeSpans), waiting for any span another transaction holds.
const explodeSQL = `
WITH x AS (
	DELETE FROM {S}rheo_spans s WHERE s.grp_id = $1 AND s.part = ANY($3::int[]) AND (s.expires_at <= $4 OR s.pending = 0)
	RETURNING s.*
)
` + explodeRowsSQL

// explodeFetchSQL is explodeSQL as a fetch runs it, before its claim and in
// its transaction: it skips the spans another transaction holds (another
// fetcher exploding them, a settle or a renewal of one of their members)
// instead of waiting for them. Two fetchers exploding overlapping sets of
// spans deadlocked (PostgreSQL broke the tie after its deadlock_timeout, a
// second, and the fetch was retried). A skipped span is left as it is: its
// holder settles or explodes it, or a later fetch does.
const explodeFetchSQL = `
WITH k AS (
	SELECT s.ctid AS tid FROM {S}rheo_spans s
	WHERE s.grp_id = $1 AND {REQUESTED:s.part} AND (s.expires_at <= $4 OR s.pending = 0)
	FOR UPDATE SKIP LOCKED
),
x AS (
	DELETE FROM {S}rheo_spans s WHERE s.ctid = ANY(ARRAY(SELECT tid FROM k))
	RETURNING s.*
)
` + explodeRowsSQL

// explodeRowsSQL inserts the delivery rows of the spans x deleted: one per
// member not yet settled, leased under the member's lease ID.
const explodeRowsSQL = `INSERT INTO {S}rheo_deliveries (grp_id, part, seq, event_id, status, attempt, lease_id, consumer_id, leased_at, expires_at, due_at)
SELECT x.grp_id, e.part, e.seq, e.id, 1, x.attempt, {MEMBER:x.token:e.seq} || '` + sqlstore.SpanReceipt + `', x.consumer_id, x.leased_at, x.expires_at, x.expires_at
FROM x CROSS JOIN LATERAL (
	SELECT e.part, e.seq, e.id FROM {S}rheo_events e
	WHERE e.stream_id = $2 AND e.part = x.part AND e.seq >= x.lo AND e.seq <= x.hi
	ORDER BY e.seq LIMIT x.hi - x.lo + 1
) e
WHERE x.pending > 0 AND substr(x.done, (e.seq - x.lo + 1)::int, 1) = '0'`

// The settings of a fetch's and a settle's transaction (SET LOCAL: they
// end with it).
const (
	setFetchGUCs = `SELECT set_config('synchronous_commit', 'off', true), set_config('enable_seqscan', 'off', true),
		set_config('enable_nestloop', 'off', true), set_config('jit', 'off', true),
		set_config('plan_cache_mode', 'force_generic_plan', true)`
	setSettleGUCs = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_nestloop', 'off', true),
		set_config('jit', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`
)

// Fetch implements rheo.Backend in one round trip. When another fetcher
// holds the cursors of every partition with new events and nothing else
// is claimable, the statement waits for them instead of returning
// empty-handed.
func (b *Backend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	var g groupRef
	leases, err := b.fetchGroup(ctx, r, &g)
	if err != nil || len(leases) > 0 {
		return leases, err
	}
	if moved, err := b.moved(ctx, r.Stream, r.Group, g); !moved {
		if leaseerr.Gone(err) {
			return nil, err
		}
		return leases, nil // (a failed check leaves the answer of the ids used)
	}
	return b.fetchGroup(ctx, r, &g)
}

func (b *Backend) fetchGroup(ctx context.Context, r rheo.FetchRequest, gOut *groupRef) ([]rheo.Lease, error) {
	g, err := b.group(ctx, r.Stream, r.Group)
	if err != nil {
		return nil, err
	}
	*gOut = g
	parts := make([]int32, len(r.Partitions))
	for i, p := range r.Partitions {
		if p < 0 || p >= g.parts {
			// The cached group may be of a stream another process has
			// since created again with more partitions.
			if moved, err := b.moved(ctx, r.Stream, r.Group, g); err != nil || moved {
				if err != nil {
					return nil, err
				}
				return b.fetchGroup(ctx, r, gOut)
			}
			return nil, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, r.Stream, g.parts)
		}
		parts[i] = int32(p)
	}
	ids := make([]string, r.Limit)
	for i := range ids {
		ids[i] = r.NewLeaseID()
	}
	first := parts[b.rotate(g.id, len(parts))]
	now := r.Now.UnixMicro()
	exp := r.Now.Add(r.LeaseDuration).UnixMicro()
	for attempt := 0; ; attempt++ {
		leases, err := b.claim(ctx, r, g, parts, ids, first, now, exp)
		if err == nil {
			return leases, nil
		}
		if attempt >= 5 || !retryable(err) {
			return nil, classify(err, true, "postgres: fetch from group %q of stream %q", r.Group, r.Stream)
		}
	}
}

// quota is a partition's first share of a fetch of limit from k
// partitions ($10 of fetchSQL): limit / k, rounded up.
func quota(limit, k int) int { return (limit + max(k, 1) - 1) / max(k, 1) }

// claim runs freshFetchSQL, or fetchSQL when something is due: at once
// when the group's last claim in this process found something due, and
// otherwise when freshFetchSQL reports it (a second round trip). A claim
// by fetchSQL that leases no delivery row sends the group's next one to
// freshFetchSQL again.
func (b *Backend) claim(ctx context.Context, r rheo.FetchRequest, g groupRef, parts []int32, ids []string,
	first int32, now, exp int64) ([]rheo.Lease, error) {
	b.rrMu.Lock()
	full := b.due[g.id]
	b.rrMu.Unlock()
	if !full {
		leases, got, err := b.fetch(ctx, r, g, parts, ids, first, now, exp, false)
		if err != nil || !got.due {
			return leases, err
		}
	}
	leases, got, err := b.fetch(ctx, r, g, parts, ids, first, now, exp, true)
	if err == nil {
		b.rrMu.Lock()
		b.due[g.id] = got.rows > 0
		b.rrMu.Unlock()
	}
	return leases, err
}

// claimed tells what a claim statement found besides its leases.
type claimed struct {
	due  bool // freshFetchSQL found something due and claimed nothing
	rows int  // leases of delivery rows (not of spans)
}

// fetch runs a claim statement (fetchSQL when full, freshFetchSQL after
// lockCursorsSQL otherwise) in a transaction of its own, in one round
// trip.
func (b *Backend) fetch(ctx context.Context, r rheo.FetchRequest, g groupRef, parts []int32, ids []string,
	first int32, now, exp int64, full bool) ([]rheo.Lease, claimed, error) {
	// The claim commits without waiting for its WAL flush (one round trip
	// for the whole transaction). That is safe: a claim lost to a server
	// crash only means its events are offered again (at-least-once), its
	// holders' settles come back stale, and any later durable commit (an
	// ack) flushes the WAL up to and including this claim first.
	//
	// Its plan is the cached generic one: the statement's shape (LATERAL
	// probes per partition) leaves the planner little to choose, and
	// planning it afresh for every call cost as much as running it.
	req := parts
	if sqlstore.CoversAll(r.Partitions, g.parts) {
		req = nil // $3: NULL, every partition
	}
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(setFetchGUCs)
	batch.Queue(b.explodeFetch, g.id, g.streamID, req, now)
	args := []any{g.id, g.streamID, req, r.Limit, now, exp, r.ConsumerID, ids, first, quota(r.Limit, len(parts))}
	switch {
	case !full:
		batch.Queue(b.lockCursors, g.id, g.streamID, req, now)
		batch.Queue(b.freshFetch, args...)
	case g.maxAttempts <= 1:
		batch.Queue(b.fetchSQL1, append(args, g.maxAttempts, poisonReason, sqlstore.DueCap(r.Limit))...)
	default:
		batch.Queue(b.fetchSQL, append(args, g.maxAttempts, poisonReason, sqlstore.DueCap(r.Limit))...)
	}
	batch.Queue("COMMIT")
	br := b.pool.SendBatch(ctx, batch)
	defer br.Close()
	for range batch.Len() - 2 { // every statement before the claim
		if _, err := br.Exec(); err != nil {
			return nil, claimed{}, err
		}
	}
	leases, got, err := b.scanLeases(br, r, now, exp)
	if err != nil {
		return nil, got, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, got, err
	}
	return leases, got, br.Close()
}

func (b *Backend) scanLeases(br pgx.BatchResults, r rheo.FetchRequest, now, exp int64) ([]rheo.Lease, claimed, error) {
	var got claimed
	rows, err := br.Query()
	if err != nil {
		return nil, got, err
	}
	defer rows.Close()
	leases := make([]rheo.Lease, 0, r.Limit)
	leasedAt := time.UnixMicro(now).UTC()
	expiresAt := time.UnixMicro(exp).UTC()
	var (
		part, att                int32
		seq, ts                  int64
		leaseID, id, etype, ekey string
		span                     bool
		payload, meta            []byte
	)
	dest := []any{&part, &seq, &att, &leaseID, &span, &id, &etype, &ekey, &ts, &payload, &meta}
	var member sqlstore.SpanIDs // of the last span's token, parsed once per span
	for rows.Next() {
		payload, meta = nil, nil
		if err := rows.Scan(dest...); err != nil {
			return nil, got, err
		}
		if part < 0 { // freshFetchSQL's row: something is due
			got.due = true
			continue
		}
		e := rheo.Event{
			ID: id, Stream: r.Stream, Partition: int(part), Sequence: seq, Type: etype, Key: ekey,
			Timestamp: time.UnixMicro(ts).UTC(), Payload: json.RawMessage(payload),
		}
		if meta != nil {
			if e.Metadata, err = stored.Metadata(meta); err != nil {
				return nil, got, err
			}
		}
		lid, receipt := leaseID, leaseID
		if span { // the span's token: the member's ID is derived from it
			if member.Token() != leaseID {
				member = sqlstore.NewSpanIDs(leaseID)
			}
			lid, receipt = member.Member(seq)
		} else {
			got.rows++
		}
		leases = append(leases, rheo.Lease{
			ID: lid, Receipt: receipt, Stream: r.Stream, Group: r.Group, ConsumerID: r.ConsumerID,
			Attempt: int(att), LeasedAt: leasedAt, ExpiresAt: expiresAt, Event: e,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, got, err
	}
	return leases, got, nil
}

// rotate returns which partition a group's next fetch serves first. It
// lives in this process only: fairness does not need agreement.
func (b *Backend) rotate(group int64, k int) int {
	b.rrMu.Lock()
	defer b.rrMu.Unlock()
	n := b.rr[group]
	b.rr[group] = n + 1
	return n % k
}

// renewSQL extends the current lease only.
const renewSQL = `UPDATE {S}rheo_deliveries SET expires_at = $5, due_at = $5
WHERE grp_id = $1 AND part = $2 AND seq = $3 AND status = 1 AND lease_id = $4 AND event_id = $6`

// renewSpanSQL extends the lease of a span's member ($7 is the span's
// token): the member leaves the span for a leased delivery row of its own,
// with the same lease ID and the new expiry.
const renewSpanSQL = `
WITH s AS (
	UPDATE {S}rheo_spans s SET done = overlay(s.done placing '1' from ($3 - s.lo + 1)::int for 1), pending = s.pending - 1,
		low = s.lo - 1 + coalesce((SELECT min(d.k) FROM unnest(string_to_array(s.done, NULL)) WITH ORDINALITY d(c, k)
			WHERE d.c = '0' AND d.k <> $3 - s.lo + 1), 0)
	WHERE s.grp_id = $1 AND s.part = $2 AND s.lo = (SELECT max(x.lo) FROM {S}rheo_spans x WHERE x.grp_id = $1 AND x.part = $2 AND x.lo <= $3)
		AND s.hi >= $3 AND s.token = $7
		AND substr(s.done, ($3 - s.lo + 1)::int, 1) = '0' AND s.ids[$3 - s.lo + 1] = hashtextextended($6, 0)
	RETURNING s.attempt, s.consumer_id, s.leased_at
)
INSERT INTO {S}rheo_deliveries (grp_id, part, seq, event_id, status, attempt, lease_id, consumer_id, leased_at, expires_at, due_at)
SELECT $1, $2, $3, $6, 1, attempt, $4, consumer_id, leased_at, $5, $5 FROM s`

// memberIDs replaces each {MEMBER:token:seq} of q with sqlstore.SpanLeaseID
// of those two columns, in SQL: the token with its last 48 bits XORed
// with the sequence's.
// requested expands {REQUESTED:col}: whether col is a partition the claim
// asked for ($3: the list, or NULL for every partition; a list is hashed
// once, not scanned per row as = ANY($3) would be).
func requested(q string) string {
	return requestedRE.ReplaceAllString(q, "($$3::int[] IS NULL OR ${1} IN (SELECT unnest($$3::int[])))")
}

var requestedRE = regexp.MustCompile(`\{REQUESTED:([\w.]+)\}`)

var memberRE = regexp.MustCompile(`\{MEMBER:([\w.]+):([\w.]+)\}`)

func memberIDs(q string) string {
	return memberRE.ReplaceAllString(q,
		"(left($1, 24) || lpad(to_hex(('x' || right($1, 12))::bit(48)::bigint # ($2 & 281474976710655)), 12, '0'))")
}

// Renew implements rheo.Backend.
func (b *Backend) Renew(ctx context.Context, l rheo.Lease, expiresAt, _ time.Time) error {
	var g groupRef
	err := b.renew(ctx, l, expiresAt, &g)
	if !leaseerr.Lost(err) {
		return err
	}
	if moved, gone := b.moved(ctx, l.Stream, l.Group, g); !moved {
		if leaseerr.Gone(gone) {
			return gone
		}
		return err // (a failed check leaves the answer of the ids used)
	}
	return b.renew(ctx, l, expiresAt, &g)
}

func (b *Backend) renew(ctx context.Context, l rheo.Lease, expiresAt time.Time, gOut *groupRef) error {
	g, err := b.group(ctx, l.Stream, l.Group)
	if err != nil {
		return err
	}
	*gOut = g
	tok, valid := spanTokenOf(l)
	if !valid {
		return b.staleOrMismatch(ctx, g, l)
	}
	// Rows hold a lease under its receipt (a span member's row too).
	args := []any{g.id, l.Event.Partition, l.Event.Sequence, l.Receipt, expiresAt.UnixMicro(), l.Event.ID}
	// A member of a span is renewed in the span; it may also have left it
	// for a row of its own (renewed before, or its span expired): the row
	// is tried after the span.
	renew := func(q string, args ...any) (bool, error) {
		tag, err := b.pool.Exec(ctx, q, args...)
		return err == nil && tag.RowsAffected() > 0, err
	}
	ok := false
	if tok != "" {
		ok, err = renew(b.renewSpanSQL, append(args, tok)...)
	}
	if !ok && err == nil {
		ok, err = renew(b.renewSQL, args...)
	}
	if err != nil {
		return classify(err, true, "postgres: renew lease %s in group %q", l.ID, l.Group)
	}
	if !ok {
		return b.staleOrMismatch(ctx, g, l)
	}
	return nil
}

// spanTokenOf returns the token of the span a lease was fetched in ("" for
// a delivery row's lease, and for an ID no span member has: such a lease is
// current nowhere), and false when its receipt is neither form.
func spanTokenOf(l rheo.Lease) (string, bool) {
	switch {
	case l.Receipt == l.ID:
		return "", true
	case sqlstore.IsSpanReceipt(l):
		return sqlstore.SpanToken(l.ID, l.Event.Sequence), true
	}
	return "", false
}

// settleSQL settles a batch in one statement: acks delete their rows (the
// frontier is derived from the pending rows, so compaction is immediate and
// no shared row is touched), nacks, rejects and releases update theirs,
// every request fenced on (status leased, lease ID, event ID). A nack or a
// release that makes work available notifies subscribers on commit.
//
// Each request finds its row by one primary-key probe (the LIMIT keeps the
// lateral subquery from being flattened into a join), and the DELETE and
// UPDATE then reach the rows by their tuple IDs. A join of the request list
// with the deliveries table instead is planned from the table's statistics,
// which for a queue table are nearly always stale: planned as if the group
// held one leased row, it walked every leased row of the group (and every
// deleted one not yet vacuumed) once per request. A row changed by another
// transaction between the probe and the write has a new tuple ID and is
// left alone (READ COMMITTED re-checks the tuple ID on the newer version);
// Settle then settles the requests this statement did not through
// settleJoinSQL, which re-checks the fence on the row's newest version.
const settleSQL = `
WITH r AS (
	SELECT * FROM unnest($3::int[], $4::bigint[], $5::text[], $6::text[], $7::int[], $8::text[], $9::bigint[], $13::text[])
		WITH ORDINALITY AS r(part, seq, lease_id, event_id, kind, reason, avail, tok, i)
),{SPANS}
k AS MATERIALIZED (
	SELECT r.i, r.kind, r.reason, r.avail, x.tid
	FROM (SELECT * FROM r WHERE r.i NOT IN (SELECT i FROM sp)) r CROSS JOIN LATERAL (
		SELECT d.ctid AS tid FROM {S}rheo_deliveries d
		WHERE d.grp_id = $1 AND d.part = r.part AND d.seq = r.seq
			AND d.status = 1 AND d.lease_id = r.lease_id AND d.event_id = r.event_id
		LIMIT 1
	) x
),
acked AS (
	DELETE FROM {S}rheo_deliveries d
	WHERE d.ctid = ANY(ARRAY(SELECT tid FROM k WHERE kind = 1))
	RETURNING d.ctid AS tid
),
other AS (
	UPDATE {S}rheo_deliveries d SET {SETTLED}
	FROM k
	WHERE d.ctid = ANY(ARRAY(SELECT tid FROM k WHERE kind <> 1)) AND k.kind <> 1 AND d.ctid = k.tid
	RETURNING k.i, d.status AS st
),
note AS (SELECT pg_notify($11, $12) FROM (SELECT 1 FROM other WHERE st = 0 UNION ALL SELECT 1 FROM spn WHERE st = 0 LIMIT 1) x)
SELECT min(k.i) FROM acked JOIN k ON k.tid = acked.tid AND k.kind = 1 GROUP BY k.tid
UNION ALL SELECT i FROM other
UNION ALL SELECT i FROM spr
UNION ALL SELECT NULL FROM (SELECT count(*) AS c FROM note) z WHERE z.c < 0`

// What a nack, a reject or a release leaves of a delivery ({R} is the
// request, {A} the attempt it was leased at, {O} the reason it holds): a
// nack below the attempt limit makes it available at the request's time, a
// release (kind 4) makes it available at once, due at the settle's time
// like a nack without a delay, with its reason as it was and its attempt
// one lower (the claim it hands back does not count); anything else
// dead-letters it. Acks (kind 1) never reach them.
const (
	settledStatus  = `CASE WHEN {R}.kind = 4 OR ({R}.kind = 2 AND {A} < $10::int) THEN 0 ELSE 2 END`
	settledAttempt = `CASE WHEN {R}.kind = 4 THEN {A} - 1 ELSE {A} END`
	settledReason  = `CASE WHEN {R}.kind = 4 THEN {O} WHEN {R}.kind = 2 AND {A} >= $10 THEN 'max_attempts: ' || {R}.reason ELSE {R}.reason END`
	settledDue     = `CASE WHEN {R}.kind = 4 THEN greatest($2::bigint - {OFFSET}, -9223372036854775807) WHEN {R}.kind = 2 AND {A} < $10 THEN CASE WHEN {R}.avail <= $2::bigint THEN greatest({R}.avail - {OFFSET}, -9223372036854775807) ELSE {R}.avail END END`
	settledDead    = `CASE WHEN {R}.kind = 4 OR ({R}.kind = 2 AND {A} < $10) THEN NULL ELSE $2::bigint END`
)

// settledSet writes them to a delivery row (d).
const settledSet = `
		status = ` + settledStatus + `, attempt = ` + settledAttempt + `, reason = ` + settledReason + `,
		due_at = ` + settledDue + `, dead_at = ` + settledDead + `,
		lease_id = NULL, consumer_id = NULL, expires_at = NULL`

// settleSpans settles the requests for members of spans (tok, the span's
// token, is set), part of both settle statements: sp1 finds each one's
// span (the only span that can hold a sequence is the one that starts
// closest below it: spans of a partition never overlap; reading the index
// backwards from the sequence finds it first, past none of the spans
// deleted since the last vacuum); sm reads each of those spans' members
// once (its event ID hashes and settled marks, unnested together, so a
// batch of m members of a span of n costs O(n + m), not a read of the
// whole arrays per request); sp keeps the requests whose member is still
// leased under the span and fenced on its event ID; spu marks the members
// of each span settled in one update that re-checks, on the span's newest
// version, that none of them was settled meanwhile (a concurrent settle of
// one of them leaves them all to the next statement); {SPANROWS} is how it
// finds the spans (spanTIDs in the first statement, the group's ID in the
// join statement that follows it); spn writes the
// delivery row of each nacked, rejected or released member, available
// again or dead as settledSet would make it (a member had no row, so no
// reason: a released one gets none); spr lists the requests settled.
const settleSpans = `
sp1 AS MATERIALIZED (
	SELECT r.i, r.kind, r.reason, r.avail, r.part, r.seq, r.event_id, r.tok, s.lo
	FROM r CROSS JOIN LATERAL (
		SELECT s.lo, s.hi, s.token FROM {S}rheo_spans s
		WHERE s.grp_id = $1 AND s.part = r.part AND s.lo <= r.seq
		ORDER BY s.lo DESC LIMIT 1
	) s
	WHERE r.tok <> '' AND s.hi >= r.seq AND s.token = r.tok
),
sm AS MATERIALIZED (
	SELECT s.tid, s.part, s.lo, s.attempt, s.leased_at, u.h, u.c, u.k
	FROM (SELECT DISTINCT part, lo FROM sp1) x CROSS JOIN LATERAL (
		SELECT s.ctid AS tid, s.part, s.lo, s.attempt, s.leased_at, s.ids, s.done FROM {S}rheo_spans s
		WHERE s.grp_id = $1 AND s.part = x.part AND s.lo = x.lo
		LIMIT 1
	) s
	CROSS JOIN LATERAL unnest(s.ids, string_to_array(s.done, NULL)) WITH ORDINALITY u(h, c, k)
),
sp AS MATERIALIZED (
	SELECT r.i, r.kind, r.reason, r.avail, r.part, r.seq, r.event_id, r.tok, r.lo, m.attempt, m.leased_at
	FROM sp1 r JOIN sm m ON m.part = r.part AND m.lo = r.lo AND m.k = r.seq - r.lo + 1
	WHERE m.c = '0' AND m.h = hashtextextended(r.event_id, 0)
),
sx AS (
	SELECT part, lo, tok, array_agg((seq - lo + 1)::int) AS pos, count(*)::int AS n FROM sp GROUP BY part, lo, tok
),
spu AS (
	UPDATE {S}rheo_spans s SET
		(done, low) = (
			SELECT string_agg(CASE WHEN q.k IS NULL THEN d.c ELSE '1' END, '' ORDER BY d.k),
				s.lo - 1 + coalesce(min(d.k) FILTER (WHERE d.c = '0' AND q.k IS NULL), 0)
			FROM unnest(string_to_array(s.done, NULL)) WITH ORDINALITY d(c, k)
			LEFT JOIN (SELECT DISTINCT unnest(sx.pos) AS k) q ON q.k = d.k),
		pending = s.pending - sx.n
	FROM sx
	WHERE {SPANROWS} AND s.part = sx.part AND s.lo = sx.lo AND s.token = sx.tok
		AND NOT EXISTS (SELECT 1 FROM unnest(string_to_array(s.done, NULL)) WITH ORDINALITY d(c, k)
			JOIN unnest(sx.pos) q(k) ON q.k = d.k WHERE d.c <> '0')
	RETURNING s.part, s.lo
),
spr AS (SELECT sp.* FROM sp JOIN spu ON spu.part = sp.part AND spu.lo = sp.lo),
spn AS (
	INSERT INTO {S}rheo_deliveries (grp_id, part, seq, event_id, status, attempt, leased_at, reason, due_at, dead_at)
	SELECT $1, spr.part, spr.seq, spr.event_id, ` + settledStatus + `, ` + settledAttempt + `, spr.leased_at,
		` + settledReason + `, ` + settledDue + `, ` + settledDead + `
	FROM spr WHERE spr.kind <> 1
	RETURNING status AS st
),`

// ackSpansSQL acks whole spans: each group ($3..$6, ordinal gi) names a
// span by partition, token and bounds, and the event IDs of its members
// in sequence order ($7 from off+1), one ack each. A span still holding
// all of them (pending equals its size), fenced on every event ID, is
// deleted: its members are acked. A span changed meanwhile keeps its tuple
// ID out of the delete, and its requests go to settleSQL.
const ackSpansSQL = `
WITH g AS (
	SELECT * FROM unnest($2::int[], $3::text[], $4::bigint[], $5::bigint[], $6::int[])
		WITH ORDINALITY AS g(part, tok, lo, hi, off, gi)
),
k AS MATERIALIZED (
	SELECT g.gi, x.tid FROM g CROSS JOIN LATERAL (
		SELECT s.ctid AS tid FROM {S}rheo_spans s
		WHERE s.grp_id = $1 AND s.part = g.part AND s.lo = g.lo AND s.token = g.tok AND s.hi = g.hi
			AND s.pending = g.hi - g.lo + 1
			AND s.ids = ARRAY(SELECT hashtextextended(u.e, 0)
				FROM unnest(($7::text[])[g.off + 1 : g.off + (g.hi - g.lo + 1)::int]) WITH ORDINALITY AS u(e, n) ORDER BY u.n)
		LIMIT 1
	) x
),
d AS (
	DELETE FROM {S}rheo_spans s WHERE s.ctid = ANY(ARRAY(SELECT tid FROM k))
	RETURNING s.ctid AS tid
)
SELECT k.gi FROM d JOIN k ON k.tid = d.tid`

// wholeSpans groups the acks of statement rows by the span their lease
// IDs name, and returns the groups that name every sequence from their
// lowest to their highest once (what an AckBatch of a fetch's leases
// holds), as the arguments of ackSpansSQL after the group ID, with the
// statement rows of each group.
func wholeSpans(parts []int32, seqs []int64, eventIDs []string, kinds []int32, toks []string) (args []any, rows [][]int) {
	type key struct {
		part int32
		tok  string
	}
	groups := map[key][]int{}
	var order []key
	for j, tok := range toks {
		if tok == "" || kinds[j] != int32(rheo.SettleAck) {
			continue
		}
		k := key{parts[j], tok}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], j)
	}
	var (
		gp       []int32
		gt       []string
		glo, ghi []int64
		off      []int32
		ids      []string
	)
	for _, k := range order {
		js := groups[k]
		slices.SortFunc(js, func(a, b int) int { return cmp.Compare(seqs[a], seqs[b]) })
		lo, hi := seqs[js[0]], seqs[js[len(js)-1]]
		if hi-lo+1 != int64(len(js)) {
			continue // not one request per sequence of a run
		}
		gp, gt, glo, ghi, off = append(gp, k.part), append(gt, k.tok), append(glo, lo), append(ghi, hi), append(off, int32(len(ids)))
		for _, j := range js {
			ids = append(ids, eventIDs[j])
		}
		rows = append(rows, js)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return []any{gp, gt, glo, ghi, off, ids}, rows
}

// ackSpans acks the whole spans of a settle batch (see wholeSpans) in one
// statement, marking the statement rows it settled in done.
func (b *Backend) ackSpans(ctx context.Context, g groupRef, parts []int32, seqs []int64, eventIDs []string, kinds []int32,
	toks []string, done []bool) error {
	args, rows := wholeSpans(parts, seqs, eventIDs, kinds, toks)
	if rows == nil {
		return nil
	}
	settled := make([]bool, len(rows))
	if err := b.settleTx(ctx, b.ackSpansSQL, append([]any{g.id}, args...), settled); err != nil {
		return err
	}
	for gi, ok := range settled {
		for _, j := range rows[gi] {
			done[j] = done[j] || ok
		}
	}
	return nil
}

// spanTIDs makes settleSpans' update reach the spans sm read by their
// tuple IDs, and only so (with the group's ID beside them, the planner
// may prefer a scan of the group's spans: the settle transaction plans
// without nested loops). A tuple ID names one version of a span of this
// group; on a newer version it no longer matches.
const spanTIDs = `s.ctid = ANY(ARRAY(SELECT DISTINCT tid FROM sm))`

// noSpans stands for settleSpans in settleRowsSQL, the settle statement of
// batches that name no span's member: the same statement without the work
// of spans.
const noSpans = `
sp AS (SELECT NULL::bigint AS i WHERE false),
spr AS (SELECT NULL::bigint AS i WHERE false),
spn AS (SELECT NULL::smallint AS st WHERE false),`

// settleJoinSQL settles the requests settleSQL left unsettled because
// their row changed under it, or that are stale: a join that re-checks
// the fence on the newest version of each row.
const settleJoinSQL = `
WITH r AS (
	SELECT * FROM unnest($3::int[], $4::bigint[], $5::text[], $6::text[], $7::int[], $8::text[], $9::bigint[], $13::text[])
		WITH ORDINALITY AS r(part, seq, lease_id, event_id, kind, reason, avail, tok, i)
),{SPANS}
acked AS (
	DELETE FROM {S}rheo_deliveries d USING r
	WHERE r.kind = 1 AND d.grp_id = $1 AND d.part = r.part AND d.seq = r.seq
		AND d.status = 1 AND d.lease_id = r.lease_id AND d.event_id = r.event_id
	RETURNING r.i
),
other AS (
	UPDATE {S}rheo_deliveries d SET {SETTLED}
	FROM r
	WHERE r.kind <> 1 AND d.grp_id = $1 AND d.part = r.part AND d.seq = r.seq
		AND d.status = 1 AND d.lease_id = r.lease_id AND d.event_id = r.event_id
	RETURNING r.i, d.status AS st
),
note AS (SELECT pg_notify($11, $12) FROM (SELECT 1 FROM other WHERE st = 0 UNION ALL SELECT 1 FROM spn WHERE st = 0 LIMIT 1) x)
SELECT i FROM acked
UNION ALL SELECT i FROM other
UNION ALL SELECT i FROM spr
UNION ALL SELECT NULL FROM (SELECT count(*) AS c FROM note) z WHERE z.c < 0`

// Settle implements rheo.Backend in one statement per batch.
func (b *Backend) Settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	var g groupRef
	errs, err := b.settleBatch(ctx, stream, group, reqs, now, &g)
	if err != nil || !slices.ContainsFunc(errs, leaseerr.Lost) {
		return errs, err
	}
	if moved, gone := b.moved(ctx, stream, group, g); !moved {
		if leaseerr.Gone(gone) && !slices.ContainsFunc(errs, leaseerr.Settled) {
			return nil, gone // nothing settled: the group is gone
		}
		return errs, nil // (a failed check leaves the answers of the ids used)
	}
	return b.settleBatch(ctx, stream, group, reqs, now, &g)
}

func (b *Backend) settleBatch(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time, gOut *groupRef) ([]error, error) {
	g, err := b.group(ctx, stream, group)
	if err != nil {
		return nil, err
	}
	*gOut = g
	errs := make([]error, len(reqs))
	n := len(reqs)
	parts := make([]int32, 0, n)
	seqs := make([]int64, 0, n)
	leaseIDs := make([]string, 0, n)
	eventIDs := make([]string, 0, n)
	kinds := make([]int32, 0, n)
	reasons := make([]string, 0, n)
	avail := make([]int64, 0, n)
	toks := make([]string, 0, n)
	at := make([]int, 0, n) // statement row -> request index
	// A lease named twice in one batch: the first request settles it, the
	// later ones are stale (as on every backend; one statement would
	// otherwise apply an ack and a nack of it at once, the ack winning).
	type position struct {
		part             int
		seq              int64
		receipt, eventID string
	}
	named := make(map[position]bool, n)
	for i, r := range reqs {
		l := r.Lease
		pos := position{l.Event.Partition, l.Event.Sequence, l.Receipt, l.Event.ID}
		tok, valid := spanTokenOf(l)
		kindErr := r.CheckKind()
		switch {
		case kindErr != nil:
			errs[i] = kindErr
			continue
		case named[pos]:
			errs[i] = leaseerr.Stale(l)
			continue
		case l.Event.Partition < 0 || l.Event.Partition >= g.parts:
			errs[i] = leaseerr.Stale(l)
			continue
		case !valid:
			errs[i] = b.staleOrMismatch(ctx, g, l)
			continue
		}
		named[pos] = true
		parts = append(parts, int32(l.Event.Partition))
		seqs = append(seqs, l.Event.Sequence)
		leaseIDs = append(leaseIDs, l.Receipt) // rows hold a lease under its receipt
		eventIDs = append(eventIDs, l.Event.ID)
		kinds = append(kinds, int32(r.Kind))
		reasons = append(reasons, r.Reason)
		avail = append(avail, r.AvailableAt.UnixMicro())
		toks = append(toks, tok)
		at = append(at, i)
	}
	if len(at) == 0 {
		return errs, nil
	}
	done := make([]bool, len(at))
	retrying := func(f func() error) error {
		for attempt := 0; ; attempt++ {
			err := f()
			if err != nil && attempt < 5 && retryable(err) {
				continue
			}
			return err
		}
	}
	left := func(span bool) bool {
		for j := range at {
			if !done[j] && (!span || toks[j] != "") {
				return true
			}
		}
		return false
	}
	// pass runs q on the requests not settled yet and reports whether it
	// settled any.
	pass := func(q string) (bool, error) {
		pick := func(j int) bool { return !done[j] }
		var idx []int
		for j := range at {
			if pick(j) {
				idx = append(idx, j)
			}
		}
		sub := make([]bool, len(idx))
		err := retrying(func() error {
			return b.settle(ctx, q, g, now, subset(parts, at, pick), subset(seqs, at, pick), subset(leaseIDs, at, pick),
				subset(eventIDs, at, pick), subset(kinds, at, pick), subset(reasons, at, pick), subset(avail, at, pick),
				subset(toks, at, pick), stream, sub)
		})
		progress := false
		for x, j := range idx {
			done[j] = sub[x]
			progress = progress || sub[x]
		}
		return progress, err
	}
	fail := func(err error) ([]error, error) {
		return nil, classify(err, true, "postgres: settle in group %q of stream %q", group, stream)
	}
	// Acks of whole spans first (an AckBatch of the leases of a fetch): a
	// delete of each span. What they leave goes through settleSQL, or the
	// same statement without the work of spans when it names none.
	if err := retrying(func() error { return b.ackSpans(ctx, g, parts, seqs, eventIDs, kinds, toks, done) }); err != nil {
		return fail(err)
	}
	if left(false) {
		q := b.settleRowsSQL
		if left(true) {
			q = b.settleSQL
		}
		if _, err := pass(q); err != nil {
			return fail(err)
		}
	}
	// What the probe-and-write statement left: requests whose row changed
	// under it (a renewal committed meanwhile) and stale ones. Each pass
	// settles what the one before left, until one settles nothing more: a
	// span's members settled in one update are all left to the next pass
	// when a concurrent settle took one of them, and a member may have
	// moved to a row (its span expired) after a pass's snapshot, which one
	// more pass sees.
	for again := false; left(false); {
		progress, err := pass(b.settleJoinSQL)
		if err != nil {
			return fail(err)
		}
		if !progress {
			if again || !left(true) {
				break
			}
			again = true
		}
	}
	for j, i := range at {
		if !done[j] {
			errs[i] = b.staleOrMismatch(ctx, g, reqs[i].Lease)
		}
	}
	return errs, nil
}

// otherReceiptSQL tells whether a lease is current under the receipt of
// the other kind ($4 the row's lease ID under it, $6 the span's token when
// that kind is a span's member).
const otherReceiptSQL = `
SELECT EXISTS (
	SELECT 1 FROM {S}rheo_deliveries d
	WHERE d.grp_id = $1 AND d.part = $2 AND d.seq = $3 AND d.status = 1 AND d.lease_id = $4 AND d.event_id = $5
) OR EXISTS (
	SELECT 1 FROM (
		SELECT s.* FROM {S}rheo_spans s WHERE s.grp_id = $1 AND s.part = $2 AND s.lo <= $3 ORDER BY s.lo DESC LIMIT 1
	) s
	WHERE $6 <> '' AND s.hi >= $3 AND s.token = $6 AND substr(s.done, ($3 - s.lo + 1)::int, 1) = '0'
		AND s.ids[$3 - s.lo + 1] = hashtextextended($5, 0)
)`

// staleOrMismatch is the error of a settle or renewal that found no
// current lease under l's receipt: ErrReceiptMismatch when l's ID names the
// current lease of its event under a receipt of another form (a row's
// lease given a span member's receipt, the reverse, or a receipt of
// neither form), as a backend with native receipts reports it, else
// ErrStaleLease. A failed lookup is ErrBackendUnavailable (or the
// context's error), never a verdict on the lease.
func (b *Backend) staleOrMismatch(ctx context.Context, g groupRef, l rheo.Lease) error {
	type form struct{ receipt, tok string }
	row := form{l.ID, ""}
	member := form{l.ID + sqlstore.SpanReceipt, sqlstore.SpanToken(l.ID, l.Event.Sequence)}
	forms := []form{row, member}
	switch l.Receipt {
	case row.receipt:
		forms = forms[1:]
	case member.receipt:
		forms = forms[:1]
	}
	for _, f := range forms {
		var current bool
		err := b.pool.QueryRow(ctx, b.otherReceiptSQL, g.id, l.Event.Partition, l.Event.Sequence, f.receipt, l.Event.ID, f.tok).Scan(&current)
		if err != nil {
			// Nothing was settled or renewed, but whether the lease is
			// stale is unknown: not a lost lease.
			return classify(err, false, "postgres: lease %s of event %q in group %q: not current under its receipt, and reading its event's lease failed",
				l.ID, l.Event.ID, l.Group)
		}
		if current {
			return leaseerr.Mismatch(l)
		}
	}
	return leaseerr.Stale(l)
}

// subset returns the elements of xs whose positions j satisfy keep(j).
func subset[T any](xs []T, at []int, keep func(int) bool) []T {
	out := make([]T, 0, len(xs))
	for j := range at {
		if keep(j) {
			out = append(out, xs[j])
		}
	}
	return out
}

func (b *Backend) settle(ctx context.Context, q string, g groupRef, now time.Time, parts []int32, seqs []int64, leaseIDs, eventIDs []string,
	kinds []int32, reasons []string, avail []int64, toks []string, stream string, done []bool) error {
	args := []any{g.id, now.UnixMicro(), parts, seqs, leaseIDs, eventIDs, kinds, reasons, avail, g.maxAttempts, b.channel, stream, toks}
	if q == b.settleJoinSQL {
		// Planned for its arguments on every call (an unnamed statement):
		// the generic plan PostgreSQL may switch a cached statement to after
		// five runs has been seen to halve the throughput of this join.
		rows, err := b.pool.Query(ctx, q, append([]any{pgx.QueryExecModeExec}, args...)...)
		if err != nil {
			return err
		}
		return scanSettled(rows, done)
	}
	// The probe-and-write statement reaches rows by tuple ID; with the
	// stale statistics of a queue table the planner may still prefer
	// reading the whole table to a tuple-ID lookup, or match the requests
	// with the rows they settled pair by pair, so sequential scans and
	// nested loops (but for the LATERAL probes, which can only be one) are
	// ruled out for this one transaction. (Ruling a plan out prices it
	// prohibitively, which would make PostgreSQL compile the statement with
	// its JIT: that is off too.) Its shape is fixed by the
	// LATERAL probes, so the cached generic plan is as good as a custom
	// one and saves planning it on every call.
	return b.settleTx(ctx, q, args, done)
}

// settleTx runs q in a transaction of its own with the settle settings,
// in one round trip, and marks in done the 1-based positions its rows
// return.
func (b *Backend) settleTx(ctx context.Context, q string, args []any, done []bool) error {
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(setSettleGUCs)
	batch.Queue(q, args...)
	batch.Queue("COMMIT")
	br := b.pool.SendBatch(ctx, batch)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	if err := scanSettled(rows, done); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	return br.Close()
}

func scanSettled(rows pgx.Rows, done []bool) error {
	defer rows.Close()
	for rows.Next() {
		var i int64
		if err := rows.Scan(&i); err != nil {
			return err
		}
		if i >= 1 && int(i) <= len(done) {
			done[i-1] = true
		}
	}
	return rows.Err()
}

// prepared statement texts, with the schema substituted once.
type statements struct {
	fetchSQL, fetchSQL1, freshFetch, lockCursors, explodeFetch, ackSpansSQL, renewSQL, renewSpanSQL, settleSQL, settleRowsSQL, settleJoinSQL, otherReceiptSQL, appendSQL, appendFastSQL string
}

func (b *Backend) prepareTexts() {
	due := strings.NewReplacer("{READY}", sqlstore.ReadySQL, "{TIMED}", sqlstore.TimedSQL, "{OFFSET}", sqlstore.ReadyOffsetSQL).Replace
	fetch := b.sqlf(due(memberIDs(strings.NewReplacer("{WK}", wkFind, "{ADV}", advByKey, "{DUE}", "").Replace(fetchSQL))))
	b.fetchSQL = strings.ReplaceAll(fetch, "{SWEEP}", sweepRetried)
	fresh := func(q, wk, now string) string {
		return b.sqlf(due(strings.NewReplacer("{WK}", wk, "{ADV}", advByTID, "{DUE}", " AND NOT (SELECT found FROM due)", "{NOW}", now).Replace(q)))
	}
	b.freshFetch = fresh(freshFetchSQL, wkLocked, "$5")
	b.lockCursors = fresh(lockCursorsSQL, wkFind, "$4")
	b.fetchSQL1 = strings.ReplaceAll(fetch, "{SWEEP}", due(sweepDue))
	b.renewSQL = b.sqlf(renewSQL)
	spans := strings.NewReplacer("{R}", "spr", "{A}", "spr.attempt", "{O}", "NULL::text").Replace(settleSpans)
	settle := func(q, r, spans string) string {
		set := strings.NewReplacer("{R}", r, "{A}", "d.attempt", "{O}", "d.reason").Replace(settledSet)
		return b.sqlf(due(strings.NewReplacer("{SETTLED}", set, "{SPANS}", spans).Replace(q)))
	}
	// The first statement updates the spans it read by tuple ID: one
	// changed meanwhile has a new one and is left to settleJoinSQL, which
	// re-checks the members on the span's newest version (as for rows).
	b.settleSQL = settle(settleSQL, "k", strings.ReplaceAll(spans, "{SPANROWS}", spanTIDs))
	b.settleRowsSQL = settle(settleSQL, "k", noSpans)
	b.settleJoinSQL = settle(settleJoinSQL, "r", strings.ReplaceAll(spans, "{SPANROWS}", "s.grp_id = $1"))
	b.explodeFetch = b.sqlf(memberIDs(explodeFetchSQL))
	b.ackSpansSQL = b.sqlf(ackSpansSQL)
	b.otherReceiptSQL = b.sqlf(otherReceiptSQL)
	b.renewSpanSQL = b.sqlf(renewSpanSQL)
	b.appendSQL = b.sqlf(appendSQL)
	b.appendFastSQL = b.sqlf(appendFastSQL)
}
