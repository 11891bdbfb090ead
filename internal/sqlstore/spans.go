package sqlstore

import (
	"context"
	"math"
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
// delivery rows they stand for, so that what follows in the transaction
// (a replay, a trim) sees every delivery as a row: the dialect's statement
// a fetch runs for expired spans, for all of them. A settle of one of their
// members either commits before (and is seen) or finds the span gone and
// settles the row.
func (s *Store) explodeSpans(ctx context.Context, t *writeTx, streamID, grp int64, p int) error {
	q := s.d.ExplodeSpans()
	if q == "" {
		return nil
	}
	_, err := t.exec(ctx, q, grp, streamID, []int32{int32(p)}, int64(math.MaxInt64))
	return err
}
