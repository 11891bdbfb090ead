package sqlstore

import (
	"context"
	"database/sql"
	"slices"

	"github.com/rheo-go/rheo"
)

// Leases implements rheo.LeaseLister: leased rows of the deliveries table
// and leased members of spans (the in-flight window), by primary key; an
// event ID is resolved through the events' ID index first, so neither
// form scans the log.
func (s *Store) Leases(ctx context.Context, stream, group string, eventIDs []string, limit int) ([]rheo.Lease, error) {
	x := s.reader()
	ref, g, err := s.group(ctx, x, stream, group)
	if err != nil {
		return nil, s.classify(err, "leases of group %q", group)
	}
	const cols = "SELECT d.part, d.seq, d.event_id, d.consumer_id, d.attempt, d.leased_at, d.expires_at FROM rheo_deliveries d"
	out := []rheo.Lease{}
	scan := func(rows *sql.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var l rheo.Lease
			var consumer sql.NullString
			var leasedAt, expiresAt sql.NullInt64
			if err := rows.Scan(&l.Event.Partition, &l.Event.Sequence, &l.Event.ID, &consumer, &l.Attempt, &leasedAt, &expiresAt); err != nil {
				return err
			}
			l.Stream, l.Group, l.Event.Stream = stream, group, stream
			l.ConsumerID, l.LeasedAt, l.ExpiresAt = consumer.String, nullMicros(leasedAt), nullMicros(expiresAt)
			out = append(out, l)
		}
		return rows.Err()
	}
	if eventIDs == nil {
		rows, err := x.query(ctx, "SELECT * FROM ("+cols+" WHERE d.grp_id = ? AND d.status = 1 UNION ALL "+spanCols+
			" JOIN rheo_events e ON e.stream_id = ? AND e.part = s.part AND e.seq >= s.lo AND e.seq <= s.hi"+
			" WHERE s.grp_id = ? AND s.pending > 0 AND "+spanMember+") l ORDER BY 1, 2 LIMIT ?", g.id, ref.id, g.id, limit)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			return nil, s.classify(err, "leases of group %q", group)
		}
		return out, nil
	}
	// A filter, not a list of lookups: an ID that comes twice lists its
	// lease once (and an empty, non-nil list lists none).
	seen := make(map[string]bool, len(eventIDs))
	for _, id := range eventIDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		rows, err := x.query(ctx, cols+" JOIN rheo_events e ON e.stream_id = ? AND e.id = ?"+
			" WHERE d.grp_id = ? AND d.part = e.part AND d.seq = e.seq AND d.status = 1 UNION ALL "+spanCols+
			" JOIN rheo_events e ON e.stream_id = ? AND e.id = ?"+
			" WHERE s.grp_id = ? AND s.part = e.part AND s.lo <= e.seq AND s.hi >= e.seq AND s.pending > 0 AND "+spanMember,
			ref.id, id, g.id, ref.id, id, g.id)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			return nil, s.classify(err, "leases of group %q", group)
		}
	}
	slices.SortFunc(out, func(a, b rheo.Lease) int {
		if a.Event.Partition != b.Event.Partition {
			return a.Event.Partition - b.Event.Partition
		}
		return int(a.Event.Sequence - b.Event.Sequence)
	})
	return out[:min(len(out), limit)], nil
}
