package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/leaseerr"
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
	id, _ := NewSpanIDs(token).Member(seq)
	return id
}

// SpanIDs derives the lease IDs and receipts of a span's members from its
// token, parsing the token once.
type SpanIDs struct {
	token string
	v     uint64 // the token's last 48 bits
	ok    bool   // the token has the shape of a UUID string
}

// Token is the span's token.
func (s SpanIDs) Token() string { return s.token }

// NewSpanIDs returns the IDs of the members of the span with token.
func NewSpanIDs(token string) SpanIDs {
	if len(token) != 36 {
		return SpanIDs{token: token}
	}
	v, ok := hex48(token[24:], false)
	return SpanIDs{token: token, v: v, ok: ok}
}

// Member returns the lease ID (SpanLeaseID) and the receipt (the ID and
// SpanReceipt) of member seq, as one allocation.
func (s SpanIDs) Member(seq int64) (id, receipt string) {
	if !s.ok {
		return s.token, s.token + SpanReceipt
	}
	var b [36 + len(SpanReceipt)]byte
	copy(b[:24], s.token[:24])
	x := s.v ^ (uint64(seq) & spanMask)
	for i := 35; i >= 24; i-- {
		b[i] = "0123456789abcdef"[x&15]
		x >>= 4
	}
	copy(b[36:], SpanReceipt)
	r := string(b[:])
	return r[:36], r
}

// hex48 parses 12 hexadecimal digits (in lower case only, when lower).
func hex48(s string, lower bool) (uint64, bool) {
	if len(s) != 12 {
		return 0, false
	}
	var v uint64
	for i := 0; i < 12; i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case !lower && 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// SpanToken inverts SpanLeaseID: the token of the span whose member seq
// would have lease ID id ("" when id is not of that shape). Only the
// exact spelling SpanLeaseID gives has a token: the same digits in another
// case are another lease ID, as they are on every store.
func SpanToken(id string, seq int64) string {
	if !spanShaped(id) {
		return ""
	}
	tok, _ := SpanIDs{token: id, v: mustHex48(id[24:]), ok: true}.Member(seq)
	return tok
}

// spanShaped reports whether id has the spelling of SpanLeaseID's lease
// IDs (36 characters, the last 12 lower-case hexadecimal digits), which
// every ID of that spelling is, for some token: SpanToken(id, seq) != "".
func spanShaped(id string) bool {
	if len(id) != 36 {
		return false
	}
	_, ok := hex48(id[24:], true)
	return ok
}

func mustHex48(s string) uint64 {
	v, _ := hex48(s, true)
	return v
}

// receiptOf is the receipt of member seq.
func receiptOf(s SpanIDs, seq int64) string {
	_, r := s.Member(seq)
	return r
}

// IsSpanReceipt reports whether l's receipt is its ID and SpanReceipt (the
// receipt of a lease fetched as a member of a span).
func IsSpanReceipt(l rheo.Lease) bool { return isSpanReceiptOf(l.Receipt, l.ID) }

// isSpanReceiptOf reports whether receipt is id and SpanReceipt.
func isSpanReceiptOf(receipt, id string) bool {
	return len(receipt) == len(id)+len(SpanReceipt) && strings.HasPrefix(receipt, id) && strings.HasSuffix(receipt, SpanReceipt)
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
		sps, err := s.spans(ctx, t, grp, []int{p}, "")
		if err != nil {
			return err
		}
		return s.explode(ctx, t, streamID, grp, sps)
	}
	_, err := t.exec(ctx, q, grp, streamID, []int32{int32(p)}, int64(math.MaxInt64))
	return err
}

// This package's own Fetch (SQLite's) writes spans too, and keeps them
// simpler than PostgreSQL's: a span is acked whole (deleted) or, before
// anything else changes one of its members (a nack, reject, release or
// renewal of one, an ack of part of it, its lease's expiry, a replay or
// trim), turned into the delivery rows it stands for. So its members are
// always all still leased under it ('0' each in done).

// span is a row of rheo_spans.
type span struct {
	part                int
	lo, hi              int64
	token               string
	attempt             int
	consumer            sql.NullString
	leasedAt, expiresAt int64
	done                string
	digest              sql.NullInt64 // spanDigest of its members' event IDs (NULL before schema version 5)
	rowid               int64         // SQLite's rowid, when read (see scanSpans)
}

// spanDigest is the digest a span keeps of its members' event IDs, given
// in sequence order: the first 8 bytes of the SHA-256 of each ID preceded
// by its length. A whole ack checks the IDs it names against it instead of
// reading every member's event.
func spanDigest(ids []string) int64 {
	// One buffer hashed at once (writing each ID to a hash.Hash copied
	// it), kept for the next digest: a fetch and a whole ack each take
	// one, of up to a span's members.
	bp := digestBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	for _, id := range ids {
		buf = binary.AppendUvarint(buf, uint64(len(id)))
		buf = append(buf, id...)
	}
	sum := sha256.Sum256(buf)
	if cap(buf) <= maxDigestBuf {
		*bp = buf
		digestBufs.Put(bp)
	}
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// SpanDigest is spanDigest, for the backends' tests.
func SpanDigest(ids []string) int64 { return spanDigest(ids) }

// digestBufs holds spanDigest's buffers; one over maxDigestBuf (a span
// of thousands of long IDs) is left to the collector.
var digestBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxDigestBuf = 64 << 10

// spans reads the spans of group grp in parts (nil: in every partition)
// that also meet cond (an SQL condition with args for its placeholders; ""
// for all), in partition and sequence order.
func (s *Store) spans(ctx context.Context, t *writeTx, grp int64, parts []int, cond string, args ...any) ([]span, error) {
	var b Builder
	b.S("SELECT part, lo, hi, token, attempt, consumer_id, leased_at, expires_at, done, digest FROM rheo_spans WHERE grp_id = ").Arg(grp)
	if parts != nil {
		inParts(&b, parts)
	}
	if cond != "" {
		b.S(" AND " + cond)
	}
	b.S(" ORDER BY part, lo")
	for _, a := range args {
		b.args = append(b.args, a)
	}
	rows, err := t.query(ctx, b.SQL(), b.Args()...)
	if err != nil {
		return nil, err
	}
	return scanSpans(rows, false)
}

// scanSpans reads the rows of spans' columns, and SQLite's rowid after
// them when rowid.
func scanSpans(rows *sql.Rows, rowid bool) ([]span, error) {
	defer rows.Close()
	var out []span
	for rows.Next() {
		var sp span
		dest := []any{&sp.part, &sp.lo, &sp.hi, &sp.token, &sp.attempt, &sp.consumer, &sp.leasedAt, &sp.expiresAt, &sp.done, &sp.digest}
		if rowid {
			dest = append(dest, &sp.rowid)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	return out, rows.Err()
}

// memberEventIDs returns the IDs of the events of span sp, by sequence.
func (s *Store) memberEventIDs(ctx context.Context, t *writeTx, streamID int64, sp span) (map[int64]string, error) {
	rows, err := t.query(ctx, "SELECT seq, id FROM rheo_events WHERE stream_id = ? AND part = ? AND seq >= ? AND seq <= ?",
		streamID, sp.part, sp.lo, sp.hi)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ids := make(map[int64]string, sp.hi-sp.lo+1)
	for rows.Next() {
		var seq int64
		var id string
		if err := rows.Scan(&seq, &id); err != nil {
			return nil, err
		}
		ids[seq] = id
	}
	return ids, rows.Err()
}

// explode replaces spans by the leased delivery rows of their members
// still leased, each under its member's receipt, and deletes them.
func (s *Store) explode(ctx context.Context, t *writeTx, streamID, grp int64, sps []span) error {
	for _, sp := range sps {
		ids, err := s.memberEventIDs(ctx, t, streamID, sp)
		if err != nil {
			return err
		}
		var seqs []int64
		for seq := sp.lo; seq <= sp.hi; seq++ {
			if k := seq - sp.lo; k < int64(len(sp.done)) && sp.done[k] == '0' && ids[seq] != "" {
				seqs = append(seqs, seq)
			}
		}
		member := NewSpanIDs(sp.token)
		for chunk := range slices.Chunk(seqs, materializeChunk) {
			var b Builder
			b.S("INSERT INTO rheo_deliveries (grp_id, part, seq, event_id, status, attempt, lease_id, consumer_id, leased_at, expires_at, due_at) VALUES ")
			for i, seq := range chunk {
				if i > 0 {
					b.S(", ")
				}
				b.S("(").Arg(grp).S(", ").Arg(sp.part).S(", ").Arg(seq).S(", ").Arg(ids[seq]).S(", 1, ").Arg(sp.attempt).S(", ").
					Arg(receiptOf(member, seq)).S(", ").Arg(sp.consumer).S(", ").Arg(sp.leasedAt).S(", ").
					Arg(sp.expiresAt).S(", ").Arg(sp.expiresAt).S(")")
			}
			if _, err := t.exec(ctx, b.SQL(), b.Args()...); err != nil {
				return err
			}
		}
		if _, err := t.exec(ctx, "DELETE FROM rheo_spans WHERE grp_id = ? AND part = ? AND lo = ?", grp, sp.part, sp.lo); err != nil {
			return err
		}
	}
	return nil
}

// receiptValid reports whether a lease's receipt has one of the two forms
// this package gives: its ID (a delivery row's lease) or its ID and
// SpanReceipt (a span member's).
func receiptValid(l rheo.Lease) bool {
	return l.Receipt == l.ID || (IsSpanReceipt(l) && spanShaped(l.ID))
}

// spanOf returns the span of sps that holds lease l as a member still
// leased under it: the one whose run covers its sequence and whose token
// its ID derives from.
func spanOf(sps []span, l rheo.Lease) (int, bool) {
	if !spanShaped(l.ID) {
		return 0, false
	}
	// The last 48 bits of the token (SpanToken(l.ID, seq)), whose first
	// 24 characters are the ID's.
	seq := l.Event.Sequence
	want := mustHex48(l.ID[24:]) ^ (uint64(seq) & spanMask)
	for j, sp := range sps {
		if sp.lo <= seq && seq <= sp.hi && len(sp.token) == 36 && sp.token[:24] == l.ID[:24] && sp.done[seq-sp.lo] == '0' {
			if v, ok := hex48(sp.token[24:], true); ok && v == want {
				return j, true
			}
		}
	}
	return 0, false
}

// spanHolding reads the span of group grp that holds lease l as a member
// still leased under it (see spanOf), if there is one.
func (s *Store) spanHolding(ctx context.Context, t *writeTx, grp int64, l rheo.Lease) (span, bool, error) {
	sps, err := s.spans(ctx, t, grp, []int{l.Event.Partition}, "lo <= ? AND hi >= ?", l.Event.Sequence, l.Event.Sequence)
	if err != nil {
		return span{}, false, err
	}
	j, ok := spanOf(sps, l)
	if !ok {
		return span{}, false, nil
	}
	return sps[j], true, nil
}

// staleOrMismatch is the error of a settle or renewal of l that found no
// current lease under its receipt: ErrReceiptMismatch when the lease is
// current under the other form of receipt (or under its ID, given a
// receipt of neither form), ErrStaleLease otherwise.
func (s *Store) staleOrMismatch(ctx context.Context, t *writeTx, streamID int64, g groupRef, l rheo.Lease) error {
	var n int
	err := t.queryRow(ctx, "SELECT COUNT(*) FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND seq = ? AND status = 1 "+
		"AND lease_id IN (?, ?) AND event_id = ?",
		g.id, l.Event.Partition, l.Event.Sequence, l.ID, l.ID+SpanReceipt, l.Event.ID).Scan(&n)
	if err != nil {
		return err
	}
	if n == 0 {
		sp, ok, err := s.spanHolding(ctx, t, g.id, l)
		if err != nil {
			return err
		}
		if ok {
			ids, err := s.memberEventIDs(ctx, t, streamID, sp)
			if err != nil {
				return err
			}
			if ids[l.Event.Sequence] == l.Event.ID {
				n = 1
			}
		}
	}
	if n == 0 {
		return leaseerr.Stale(l)
	}
	return leaseerr.Mismatch(l)
}
