package sqlstore

import (
	"context"
	"database/sql"
	"strconv"
)

// A span (table rheo_spans, schema version 4) stands for the leased
// delivery rows of a run of fresh events one fetch claimed together; see
// migrations/0004_spans.sql. A backend that writes spans settles and
// renews their members itself; the shared operations read spans where
// they read leased rows (lag, counts, lease listings) and turn them into
// rows before anything else changes their partition (replay, trim).

// spanCols and spanMember read the members of spans still leased (s)
// with their events (e), in the columns of a leased delivery row.
const (
	spanCols   = "SELECT e.part, e.seq, e.id, s.consumer_id, s.attempt, s.leased_at, s.expires_at FROM rheo_spans s"
	spanMember = "substr(s.done, CAST(e.seq - s.lo + 1 AS INTEGER), 1) = '0'"
)

// SpanReceipt ends the receipt of a lease fetched as a member of a span
// (a delivery row's lease has its ID as receipt). A member that moved to a
// delivery row of its own keeps its receipt there, as the row's lease ID:
// a settle matches a row by the receipt it was given, so a lease never
// settles under a receipt of the other kind.
const SpanReceipt = "+span"

// spanMask covers the last 12 hex digits of a token.
const spanMask = 1<<48 - 1

// SpanLeaseID is the lease ID of the member seq of the span with token
// (a UUID string in lower case): the token with its last 48 bits XORed
// with the sequence's. It is a UUID string too, fresh for every claim as
// the token is, and distinct for every member of one span.
func SpanLeaseID(token string, seq int64) string {
	if len(token) != 36 {
		return token
	}
	v, err := strconv.ParseUint(token[24:], 16, 64)
	if err != nil {
		return token
	}
	x := strconv.FormatUint(v^(uint64(seq)&spanMask), 16)
	return token[:24] + "000000000000"[len(x):] + x
}

// SpanToken inverts SpanLeaseID: the token of the span whose member seq
// would have lease ID id ("" when id is not of that shape).
func SpanToken(id string, seq int64) string {
	if len(id) != 36 {
		return ""
	}
	if _, err := strconv.ParseUint(id[24:], 16, 64); err != nil {
		return ""
	}
	return SpanLeaseID(id, seq)
}

// explodeSpans replaces the spans of group grp in partition p by the
// delivery rows they stand for (lease ID: the member's receipt), so that what follows in the transaction
// (a replay, a trim) sees every delivery as a row. The spans are locked
// first: a settle of one of their members either commits before (and is
// seen) or finds the span gone and settles the row.
func (s *Store) explodeSpans(ctx context.Context, t *writeTx, streamID, grp int64, p int) error {
	type span struct {
		lo, hi, leasedAt, expiresAt int64
		token, done                 string
		attempt                     int
		consumer                    sql.NullString
	}
	rows, err := t.query(ctx, "SELECT lo, hi, token, attempt, consumer_id, leased_at, expires_at, done FROM rheo_spans "+
		"WHERE grp_id = ? AND part = ? AND pending > 0 ORDER BY lo"+s.d.LockRows(), grp, p)
	if err != nil {
		return err
	}
	var spans []span
	for rows.Next() {
		var x span
		if err := rows.Scan(&x.lo, &x.hi, &x.token, &x.attempt, &x.consumer, &x.leasedAt, &x.expiresAt, &x.done); err != nil {
			rows.Close()
			return err
		}
		spans = append(spans, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, x := range spans {
		evs, err := t.query(ctx, "SELECT seq, id FROM rheo_events WHERE stream_id = ? AND part = ? AND seq >= ? AND seq <= ? ORDER BY seq",
			streamID, p, x.lo, x.hi)
		if err != nil {
			return err
		}
		var b Builder
		n := 0
		b.S("INSERT INTO rheo_deliveries (grp_id, part, seq, event_id, status, attempt, lease_id, consumer_id, leased_at, expires_at, due_at) VALUES ")
		for evs.Next() {
			var seq int64
			var id string
			if err := evs.Scan(&seq, &id); err != nil {
				evs.Close()
				return err
			}
			if k := seq - x.lo; k >= int64(len(x.done)) || x.done[k] != '0' {
				continue
			}
			if n > 0 {
				b.S(", ")
			}
			n++
			b.S("(").Arg(grp).S(", ").Arg(p).S(", ").Arg(seq).S(", ").Arg(id).S(", 1, ").Arg(x.attempt).S(", ").
				Arg(SpanLeaseID(x.token, seq)+SpanReceipt).S(", ").Arg(x.consumer).S(", ").Arg(x.leasedAt).S(", ").
				Arg(x.expiresAt).S(", ").Arg(x.expiresAt).S(")")
		}
		evs.Close()
		if err := evs.Err(); err != nil {
			return err
		}
		if n > 0 {
			if _, err := t.exec(ctx, b.SQL(), b.Args()...); err != nil {
				return err
			}
		}
	}
	_, err = t.exec(ctx, "DELETE FROM rheo_spans WHERE grp_id = ? AND part = ?", grp, p)
	return err
}
