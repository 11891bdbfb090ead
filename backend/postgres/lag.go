package postgres

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

// lagSQL reads, for group $1 of stream $2, per partition its cursor, its
// high watermark, and the lowest pending sequence of its delivery rows and
// of its spans' members (NULL when none is pending). The frontier is the
// lower of the two minus one, or the cursor.
//
// The partitions with pending rows are found by a walk of each index from
// partition to partition (pd, ps): each step is one probe that returns the
// next such partition together with its lowest pending sequence (the
// index is ordered by partition, then sequence; a partition's spans do not
// overlap, so its first pending one by lo holds its lowest pending
// member). A group caught up on every partition costs two probes; one
// with pending rows everywhere, a probe per partition and index; a
// partition with a long backlog, one probe, never a scan. The frontier is
// sqlstore.PartitionLag's, as SQLite's.
const lagSQL = `
WITH RECURSIVE pd(part, seq) AS (
	(SELECT d.part, d.seq FROM {S}rheo_deliveries d
	WHERE d.grp_id = $1 AND d.status < 2 ORDER BY d.part, d.seq LIMIT 1)
	UNION ALL
	SELECT n.part, n.seq FROM pd CROSS JOIN LATERAL (
		SELECT d.part, d.seq FROM {S}rheo_deliveries d
		WHERE d.grp_id = $1 AND d.status < 2 AND d.part > pd.part ORDER BY d.part, d.seq LIMIT 1
	) n
),
ps(part, low) AS (
	(SELECT s.part, s.low FROM {S}rheo_spans s
	WHERE s.grp_id = $1 AND s.pending > 0 ORDER BY s.part, s.lo LIMIT 1)
	UNION ALL
	SELECT n.part, n.low FROM ps CROSS JOIN LATERAL (
		SELECT s.part, s.low FROM {S}rheo_spans s
		WHERE s.grp_id = $1 AND s.pending > 0 AND s.part > ps.part ORDER BY s.part, s.lo LIMIT 1
	) n
)
SELECT g.part, g.offered, p.hwm, pd.seq, ps.low
FROM {S}rheo_group_parts g
JOIN {S}rheo_partitions p ON p.stream_id = $2 AND p.part = g.part
LEFT JOIN pd ON pd.part = g.part
LEFT JOIN ps ON ps.part = g.part
WHERE g.grp_id = $1
ORDER BY g.part`

// lagPartsSQL reads what lagSQL does for the partitions of array $3 (sorted),
// each by a probe of every table's key: a scalar subquery per value, which
// the planner cannot turn into a scan of the group's cursors or the
// stream's counters (a join did, bounding them by the group and stream
// alone when the statistics were missing or stale: 1,024 rows read for 4).
// A partition the group or the stream lacks comes back with NULLs, and is
// left out.
const lagPartsSQL = `
SELECT a.part,
	(SELECT g.offered FROM {S}rheo_group_parts g WHERE g.grp_id = $1 AND g.part = a.part),
	(SELECT p.hwm FROM {S}rheo_partitions p WHERE p.stream_id = $2 AND p.part = a.part),
	(SELECT d.seq FROM {S}rheo_deliveries d
	WHERE d.grp_id = $1 AND d.part = a.part AND d.status < 2 ORDER BY d.seq LIMIT 1),
	(SELECT s.low FROM {S}rheo_spans s
	WHERE s.grp_id = $1 AND s.part = a.part AND s.pending > 0 ORDER BY s.lo LIMIT 1)
FROM unnest($3::int[]) WITH ORDINALITY AS a(part, i)
ORDER BY a.i`

// Lag implements rheo.Backend in one statement on the group's cached ids.
// A group that is gone has no cursor rows, so a statement on stale ids
// finds none: the names are then resolved again (moved), which also tells
// a missing stream from a missing group.
func (b *Backend) Lag(ctx context.Context, stream, group string, partitions []int) ([]rheo.PartitionLag, error) {
	for attempt := 0; ; attempt++ {
		g, err := b.group(ctx, stream, group)
		if err != nil {
			return nil, err
		}
		out, err := b.lag(ctx, g, partitions)
		if err != nil {
			return nil, classify(err, false, "postgres: lag of group %q of stream %q", group, stream)
		}
		if len(out) > 0 || attempt > 0 {
			return out, nil
		}
		if _, err := b.moved(ctx, stream, group, g); err != nil {
			return nil, err
		}
	}
}

func (b *Backend) lag(ctx context.Context, g groupRef, partitions []int) ([]rheo.PartitionLag, error) {
	q, args, n := b.sqlf(lagSQL), []any{g.id, g.streamID}, g.parts
	if partitions != nil {
		q, args, n = b.sqlf(lagPartsSQL), append(args, partitions), len(partitions)
	}
	for attempt := 0; ; attempt++ {
		out := make([]rheo.PartitionLag, 0, n)
		var part int32
		var offered, hwm, pending, spanned sql.NullInt64
		rows, err := b.pool.Query(ctx, q, args...)
		if err == nil {
			_, err = pgx.ForEachRow(rows, []any{&part, &offered, &hwm, &pending, &spanned}, func() error {
				if offered.Valid && hwm.Valid {
					out = append(out, sqlstore.PartitionLag(int(part), offered.Int64, hwm.Int64, pending, spanned))
				}
				return nil
			})
		}
		if err != nil && attempt == 0 && staleStatement(err) {
			continue // pgx dropped the stale statement: prepare it anew
		}
		return out, err
	}
}
