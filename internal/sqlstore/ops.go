package sqlstore

import (
	"context"
	"math"
	"slices"

	"github.com/rheo-go/rheo"
)

// Due times. A delivery available at once (reopened, redriven, nacked
// without a delay) is stored below ReadySQL's bound, in an index of its own
// in sequence order; every other due time (a lease's expiry, a delayed
// nack's end) is stored as itself, at or above it, in an index of due times
// (TimedSQL). A nack that is due already when it is settled stores its time
// minus readyOffset, so that it is in the first index and still not due to
// a fetch whose clock is behind that time (a fetch compares it with its own
// clock minus readyOffset: readyDue); a reopened delivery stores dueNow,
// due to any clock. Real times (microseconds within some 70,000 years of
// 1970) never reach the bound. The predicates are SQL text, not parameters:
// a partial index is matched to a query by its predicate's text.
const (
	dueNow      = math.MinInt64 + 1
	readyOffset = 1 << 62
	// ReadySQL and TimedSQL are the predicates of the two indexes;
	// TimedBound is their bound, ReadyOffsetSQL is readyOffset.
	ReadySQL       = "due_at < " + TimedBound
	TimedSQL       = "due_at >= " + TimedBound
	TimedBound     = "-2305843009213693952"
	ReadyOffsetSQL = "4611686018427387904"
)

// readyDue is the bound a fetch at now compares the due times of
// deliveries available at once with.
func readyDue(now int64) int64 {
	if now < math.MinInt64+readyOffset {
		return math.MinInt64
	}
	return now - readyOffset
}

// reopenSet is the assignment that makes a delivery available again with
// attempts starting from 0 and any lease stale.
const reopenSet = "status = 0, attempt = 0, lease_id = NULL, consumer_id = NULL, leased_at = NULL, expires_at = NULL, " +
	"reason = NULL, dead_at = NULL, due_at = "

// unsee forgets the change count the group's last fetch recorded (see
// fetchCursors), before a replay or reset moves its cursors back: its next
// fetch from every partition reads every cursor. (Only on a store whose
// fetch is this package's: Config.Stamps.)
func (s *Store) unsee(ctx context.Context, t *writeTx, g groupRef) error {
	if !s.stamps {
		return nil
	}
	_, err := t.exec(ctx, "UPDATE rheo_groups SET seen = 0 WHERE id = ?", g.id)
	return err
}

// Replay implements rheo.Backend. FromSequence deletes the partition's
// deliveries above the sequence (their leases become stale and the events
// are offered again, fresh) and rewinds the cursor; Events upserts each
// named delivery the group was offered as available. The frontier, derived
// from pending deliveries, drops below every reopened one by itself.
func (s *Store) Replay(ctx context.Context, r rheo.ReplayRequest) (int, error) {
	var n int64
	err := s.write(ctx, "replay group "+quote(r.Group), func(t *writeTx) error {
		n = 0
		ref, g, err := s.group(ctx, t.execer, r.Stream, r.Group)
		if err != nil {
			return err
		}
		if err := s.unsee(ctx, t, g); err != nil {
			return err
		}
		for _, p := range sortedKeys(r.FromSequence) {
			if p < 0 || p >= ref.parts {
				return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, r.Stream, ref.parts)
			}
			from, err := s.clampStart(ctx, t.execer, ref, p, r.FromSequence[p])
			if err != nil {
				return err
			}
			var offered int64
			if err := t.queryRow(ctx, "SELECT offered FROM rheo_group_parts WHERE grp_id = ? AND part = ?"+s.d.LockRows(), g.id, p).Scan(&offered); err != nil {
				return err
			}
			if err := s.explodeSpans(ctx, t, ref.id, g.id, p); err != nil {
				return err
			}
			if _, err := t.exec(ctx, "DELETE FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND seq > ?", g.id, p, from); err != nil {
				return err
			}
			n += max(offered-from, 0)
			if from < offered {
				if _, err := t.exec(ctx, "UPDATE rheo_group_parts SET offered = ? WHERE grp_id = ? AND part = ?", from, g.id, p); err != nil {
					return err
				}
			}
		}
		byPart := map[int][]rheo.EventRef{}
		for _, e := range r.Events {
			if e.Partition < 0 || e.Partition >= ref.parts {
				return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", e.Partition, r.Stream, ref.parts)
			}
			byPart[e.Partition] = append(byPart[e.Partition], e)
		}
		for _, p := range sortedKeys(byPart) {
			var offered int64
			if err := t.queryRow(ctx, "SELECT offered FROM rheo_group_parts WHERE grp_id = ? AND part = ?"+s.d.LockRows(), g.id, p).Scan(&offered); err != nil {
				return err
			}
			if err := s.explodeSpans(ctx, t, ref.id, g.id, p); err != nil {
				return err
			}
			// Events not offered yet are left alone: they will be, fresh.
			refs := slices.DeleteFunc(byPart[p], func(e rheo.EventRef) bool { return e.Sequence > offered })
			slices.SortFunc(refs, func(a, b rheo.EventRef) int { return int(a.Sequence - b.Sequence) })
			refs = slices.CompactFunc(refs, func(a, b rheo.EventRef) bool { return a.Sequence == b.Sequence })
			n += int64(len(refs))
			for chunk := range slices.Chunk(refs, 200) {
				var b Builder
				b.S("INSERT INTO rheo_deliveries (grp_id, part, seq, event_id, status, attempt, due_at) VALUES ")
				for i, e := range chunk {
					if i > 0 {
						b.S(", ")
					}
					b.S("(").Arg(g.id).S(", ").Arg(p).S(", ").Arg(e.Sequence).S(", ").Arg(e.ID).S(", 0, 0, ").Arg(int64(dueNow)).S(")")
				}
				b.S(" ON CONFLICT (grp_id, part, seq) DO UPDATE SET " + reopenSet + "excluded.due_at")
				if _, err := t.exec(ctx, b.SQL(), b.Args()...); err != nil {
					return err
				}
			}
		}
		t.wake(r.Stream)
		return nil
	})
	return int(n), err
}

// Redrive implements rheo.Backend.
func (s *Store) Redrive(ctx context.Context, stream, group string, ids []string) (int, error) {
	var n int64
	err := s.write(ctx, "redrive group "+quote(group), func(t *writeTx) error {
		n = 0
		ref, g, err := s.group(ctx, t.execer, stream, group)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			res, err := t.exec(ctx, "UPDATE rheo_deliveries SET "+reopenSet+"? WHERE grp_id = ? AND status = 2", int64(dueNow), g.id)
			if err != nil {
				return err
			}
			if n, err = res.RowsAffected(); err != nil {
				return err
			}
		} else {
			for chunk := range slices.Chunk(ids, 500) {
				var b Builder
				b.S("UPDATE rheo_deliveries SET " + reopenSet).Arg(int64(dueNow)).S(" WHERE grp_id = ").Arg(g.id).
					S(" AND status = 2 AND EXISTS (SELECT 1 FROM rheo_events e WHERE e.stream_id = ").Arg(ref.id).
					S(" AND e.part = rheo_deliveries.part AND e.seq = rheo_deliveries.seq AND e.id IN (")
				List(&b, chunk).S("))")
				res, err := t.exec(ctx, b.SQL(), b.Args()...)
				if err != nil {
					return err
				}
				m, err := res.RowsAffected()
				if err != nil {
					return err
				}
				n += m
			}
		}
		if n > 0 {
			t.wake(stream)
		}
		return nil
	})
	return int(n), err
}

// ResetGroup implements rheo.Backend.
func (s *Store) ResetGroup(ctx context.Context, stream, group string, start map[int]int64) (int, error) {
	var n int64
	err := s.write(ctx, "reset group "+quote(group), func(t *writeTx) error {
		n = 0
		ref, g, err := s.group(ctx, t.execer, stream, group)
		if err != nil {
			return err
		}
		if err := s.unsee(ctx, t, g); err != nil {
			return err
		}
		for _, p := range sortedKeys(start) {
			if p < 0 || p >= ref.parts {
				return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, stream, ref.parts)
			}
			from, err := s.clampStart(ctx, t.execer, ref, p, start[p])
			if err != nil {
				return err
			}
			var offered int64
			if err := t.queryRow(ctx, "SELECT offered FROM rheo_group_parts WHERE grp_id = ? AND part = ?"+s.d.LockRows(), g.id, p).Scan(&offered); err != nil {
				return err
			}
			n += max(offered-from, 0)
			if _, err := t.exec(ctx, "UPDATE rheo_group_parts SET offered = ? WHERE grp_id = ? AND part = ?", from, g.id, p); err != nil {
				return err
			}
			// Spans first: a settle that moves a span's member to a row of its
			// own commits before (and its row is deleted next) or finds the
			// span gone.
			for _, q := range []string{"DELETE FROM rheo_spans WHERE grp_id = ? AND part = ?", "DELETE FROM rheo_deliveries WHERE grp_id = ? AND part = ?"} {
				if _, err := t.exec(ctx, q, g.id, p); err != nil {
					return err
				}
			}
		}
		t.wake(stream)
		return nil
	})
	return int(n), err
}
