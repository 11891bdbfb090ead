package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/rheo-go/rheo"
)

// tombstonePrefix starts the name of a deleted stream. It holds control
// characters, which no stream name a caller gives may contain, so a
// tombstone never answers a lookup; it keeps the row (and so the id) so that
// an id a process still caches is never reused for another stream.
const tombstonePrefix = "\x01deleted\x01"

// forget drops a stream's (or, with group != "", one group's) cached ids.
func (s *Store) forget(ref streamRef, stream, group string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if group != "" {
		delete(s.groups, groupKey{ref.id, group})
		return
	}
	delete(s.streams, stream)
	for k := range s.groups {
		if k.stream == ref.id {
			delete(s.groups, k)
		}
	}
}

// DeleteGroup implements rheo.Backend. The group's row stays as a tombstone
// (stream_id = -id), so its id is never reused.
func (s *Store) DeleteGroup(ctx context.Context, stream, group string) error {
	var ref streamRef
	err := s.write(ctx, "delete group "+quote(group), func(t *writeTx) error {
		r, g, err := s.group(ctx, t.execer, stream, group)
		if err != nil {
			return err
		}
		ref = r
		// A cached id may belong to a group deleted by another process.
		var live int64
		if err := t.queryRow(ctx, "SELECT stream_id FROM rheo_groups WHERE id = ?"+s.d.LockRows(), g.id).Scan(&live); err != nil || live != r.id {
			s.forget(r, stream, group)
			return rheo.Errorf(rheo.ErrGroupNotFound, "group %q of stream %q", group, stream)
		}
		for _, q := range []string{
			"DELETE FROM rheo_spans WHERE grp_id = ?", // first: see ResetGroup
			"DELETE FROM rheo_deliveries WHERE grp_id = ?",
			"DELETE FROM rheo_group_parts WHERE grp_id = ?",
			"UPDATE rheo_groups SET stream_id = -id WHERE id = ?",
		} {
			if _, err := t.exec(ctx, q, g.id); err != nil {
				return err
			}
		}
		t.wake(stream)
		return nil
	})
	if err == nil {
		s.forget(ref, stream, group)
	}
	return err
}

// DeleteStream implements rheo.Backend: events, partitions, groups and
// their deliveries go; the stream's and groups' rows stay as tombstones.
func (s *Store) DeleteStream(ctx context.Context, stream string) error {
	var ref streamRef
	err := s.write(ctx, "delete stream "+quote(stream), func(t *writeTx) error {
		// Never trust the cache here: the stream may be gone already.
		r, err := s.liveStream(ctx, t.execer, stream)
		if err != nil {
			return err
		}
		ref = r
		groups := "SELECT id FROM rheo_groups WHERE stream_id = ?"
		for _, q := range []string{
			"DELETE FROM rheo_spans WHERE grp_id IN (" + groups + ")", // first: see ResetGroup
			"DELETE FROM rheo_deliveries WHERE grp_id IN (" + groups + ")",
			"DELETE FROM rheo_group_parts WHERE grp_id IN (" + groups + ")",
			"UPDATE rheo_groups SET stream_id = -id WHERE stream_id = ?",
			"DELETE FROM rheo_events WHERE stream_id = ?",
			"DELETE FROM rheo_partitions WHERE stream_id = ?",
			"DELETE FROM rheo_trimmed WHERE stream_id = ?",
		} {
			if _, err := t.exec(ctx, q, r.id); err != nil {
				return err
			}
		}
		if _, err := t.exec(ctx, "UPDATE rheo_streams SET name = ?, partitions = 0, retention_owner = NULL WHERE id = ?",
			tombstonePrefix+strconv.FormatInt(r.id, 10), r.id); err != nil {
			return err
		}
		t.wake(stream)
		return nil
	})
	s.forget(ref, stream, "")
	return err
}

// liveStream looks a stream up by name, bypassing the cache.
func (s *Store) liveStream(ctx context.Context, x execer, name string) (streamRef, error) {
	var ref streamRef
	var created int64
	err := x.queryRow(ctx, "SELECT id, partitions, created_at FROM rheo_streams WHERE name = ?"+s.d.LockRows(), name).
		Scan(&ref.id, &ref.parts, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return ref, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", name)
	}
	ref.created = fromMicros(created)
	return ref, err
}

// SetRetention implements rheo.Backend.
func (s *Store) SetRetention(ctx context.Context, stream string, r rheo.Retention) error {
	return s.write(ctx, "set retention of stream "+quote(stream), func(t *writeTx) error {
		res, err := t.exec(ctx, "UPDATE rheo_streams SET max_age = ?, max_events = ?, interest = ? WHERE name = ?",
			int64(r.MaxAge), r.MaxEvents, boolInt(r.Interest), stream)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return notFoundOr(err, stream)
		}
		return nil
	})
}

func notFoundOr(err error, stream string) error {
	if err != nil {
		return err
	}
	return rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", stream)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// LeaseRetention implements rheo.Backend.
func (s *Store) LeaseRetention(ctx context.Context, stream, owner string, now, until time.Time) (bool, error) {
	held := false
	err := s.write(ctx, "retention lease of stream "+quote(stream), func(t *writeTx) error {
		res, err := t.exec(ctx, "UPDATE rheo_streams SET retention_owner = ?, retention_until = ? WHERE name = ? "+
			"AND (retention_owner IS NULL OR retention_owner = ? OR retention_until <= ?)",
			owner, micros(until), stream, owner, micros(now))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			held = true
			return nil
		}
		_, err = s.liveStream(ctx, t.execer, stream)
		return err
	})
	return held, err
}

// retentionInfo reads the mutable part of a stream: its retention policy
// and, per partition, its trimmed sequence.
func (s *Store) retentionInfo(ctx context.Context, x execer, ref streamRef) (rheo.Retention, []int64, error) {
	var r rheo.Retention
	var age int64
	var interest int
	if err := x.queryRow(ctx, "SELECT max_age, max_events, interest FROM rheo_streams WHERE id = ?", ref.id).
		Scan(&age, &r.MaxEvents, &interest); err != nil {
		return r, nil, err
	}
	r.MaxAge, r.Interest = time.Duration(age), interest != 0
	trimmed := make([]int64, ref.parts)
	rows, err := x.query(ctx, "SELECT part, through FROM rheo_trimmed WHERE stream_id = ?", ref.id)
	if err != nil {
		return r, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		var th int64
		if err := rows.Scan(&p, &th); err != nil {
			return r, nil, err
		}
		if p >= 0 && p < len(trimmed) {
			trimmed[p] = th
		}
	}
	return r, trimmed, rows.Err()
}

// trimmedThrough reads one partition's trimmed sequence.
func (s *Store) trimmedThrough(ctx context.Context, x execer, ref streamRef, p int) (int64, error) {
	var th int64
	err := x.queryRow(ctx, "SELECT through FROM rheo_trimmed WHERE stream_id = ? AND part = ?", ref.id, p).Scan(&th)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return th, err
}

// clampStart raises a start sequence below the partition's trimmed
// sequence to it: a group never starts inside a removed range.
func (s *Store) clampStart(ctx context.Context, x execer, ref streamRef, p int, start int64) (int64, error) {
	th, err := s.trimmedThrough(ctx, x, ref, p)
	return max(start, th), err
}

// Trim implements rheo.Backend.
func (s *Store) Trim(ctx context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	var res rheo.TrimResult
	err := s.write(ctx, "trim stream "+quote(r.Stream), func(t *writeTx) error {
		res = rheo.TrimResult{}
		ref, err := s.stream(ctx, t.execer, r.Stream)
		if err != nil {
			return err
		}
		p := r.Partition
		if p < 0 || p >= ref.parts {
			return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, r.Stream, ref.parts)
		}
		// The trimmed row serialises trims of the partition; appends never
		// touch it.
		if _, err := t.exec(ctx, "INSERT INTO rheo_trimmed (stream_id, part, through) VALUES (?, ?, 0) ON CONFLICT (stream_id, part) DO NOTHING", ref.id, p); err != nil {
			return err
		}
		var trimmed, hwm int64
		if err := t.queryRow(ctx, "SELECT through FROM rheo_trimmed WHERE stream_id = ? AND part = ?"+s.d.LockRows(), ref.id, p).Scan(&trimmed); err != nil {
			return err
		}
		if err := t.queryRow(ctx, "SELECT hwm FROM rheo_partitions WHERE stream_id = ? AND part = ?", ref.id, p).Scan(&hwm); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", r.Stream)
			}
			return err
		}
		res.TrimmedThrough = trimmed
		through := min(r.Through, hwm, trimmed+int64(r.Limit))
		if through <= trimmed {
			return nil
		}
		// Lock the groups' cursors of the partition (replays and resets
		// take the same locks), then read their frontiers afresh.
		type gstate struct {
			id, offered int64
		}
		var gs []gstate
		rows, err := t.query(ctx, "SELECT grp_id, offered FROM rheo_group_parts WHERE part = ? AND grp_id IN "+
			"(SELECT id FROM rheo_groups WHERE stream_id = ?) ORDER BY grp_id"+s.d.LockRows(), p, ref.id)
		if err != nil {
			return err
		}
		for rows.Next() {
			var g gstate
			if err := rows.Scan(&g.id, &g.offered); err != nil {
				rows.Close()
				return err
			}
			gs = append(gs, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if !r.Force {
			for _, g := range gs {
				var pending, spanned sql.NullInt64
				if err := t.queryRow(ctx, "SELECT (SELECT MIN(seq) FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND status < 2), "+
					"(SELECT MIN(low) FROM rheo_spans WHERE grp_id = ? AND part = ? AND pending > 0)", g.id, p, g.id, p).Scan(&pending, &spanned); err != nil {
					return err
				}
				through = min(through, frontier(g.offered, pending, spanned))
			}
			if through <= trimmed {
				return nil
			}
		}
		// Something goes: the spans of the partition become rows first, so
		// that what follows counts and removes deliveries as rows.
		for _, g := range gs {
			if err := s.explodeSpans(ctx, t, ref.id, g.id, p); err != nil {
				return err
			}
		}
		for _, g := range gs {
			var n, dead int64
			if err := t.queryRow(ctx, "SELECT COUNT(*), COALESCE(SUM(CASE WHEN status = 2 THEN 1 ELSE 0 END), 0) "+
				"FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND seq <= ?", g.id, p, through).Scan(&n, &dead); err != nil {
				return err
			}
			if n > 0 {
				if _, err := t.exec(ctx, "DELETE FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND seq <= ?", g.id, p, through); err != nil {
					return err
				}
			}
			skipped := n // acked deliveries have no row: every row is unacked
			if g.offered < through {
				skipped += through - max(g.offered, trimmed)
				if _, err := t.exec(ctx, "UPDATE rheo_group_parts SET offered = ? WHERE grp_id = ? AND part = ?", through, g.id, p); err != nil {
					return err
				}
			}
			if skipped > 0 {
				if _, err := t.exec(ctx, "UPDATE rheo_groups SET skipped = skipped + ? WHERE id = ?", skipped, g.id); err != nil {
					return err
				}
			}
			res.Skipped += skipped
			res.DeadLetters += dead
		}
		del, err := t.exec(ctx, "DELETE FROM rheo_events WHERE stream_id = ? AND part = ? AND seq > ? AND seq <= ?", ref.id, p, trimmed, through)
		if err != nil {
			return err
		}
		if res.Removed, err = del.RowsAffected(); err != nil {
			return err
		}
		if _, err := t.exec(ctx, "UPDATE rheo_trimmed SET through = ? WHERE stream_id = ? AND part = ?", through, ref.id, p); err != nil {
			return err
		}
		res.TrimmedThrough = through
		if r.Force {
			t.wake(r.Stream)
		}
		return nil
	})
	return res, err
}
