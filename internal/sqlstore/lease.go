package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/leaseerr"
)

const poisonReason = "max_attempts: lease expired"

// claimable is a delivery row that Fetch may lease.
type claimable struct {
	seq     int64
	attempt int
	eventID string
}

// Fetch implements rheo.Backend. In one write transaction it dead-letters
// expired leases at the attempt limit (R6), reads the claimable deliveries
// (available and due, or leased and expired: below the cursor), shares the
// limit across partitions round-robin from a rotating first partition,
// claims those rows and materializes the events past the cursor directly as
// leased deliveries.
func (s *Store) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	var ref streamRef
	var g groupRef
	leases, err := s.fetch(ctx, r, &ref, &g)
	if err != nil || len(leases) > 0 {
		return leases, err
	}
	if moved, err := s.moved(ctx, s.reader(), r.Stream, r.Group, ref, g); err != nil || !moved {
		if leaseerr.Gone(err) {
			return nil, err
		}
		return leases, nil // (a failed check leaves the answer of the ids used)
	}
	return s.fetch(ctx, r, &ref, &g)
}

func (s *Store) fetch(ctx context.Context, r rheo.FetchRequest, refOut *streamRef, gOut *groupRef) ([]rheo.Lease, error) {
	var leases []rheo.Lease
	err := s.write(ctx, "fetch from group "+quote(r.Group), func(t *writeTx) error {
		leases = leases[:0]
		ref, g, err := s.cachedGroup(ctx, t.execer, r.Stream, r.Group)
		if err != nil {
			return err
		}
		*refOut, *gOut = ref, g
		for _, p := range r.Partitions {
			if p < 0 || p >= ref.parts {
				return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, r.Stream, ref.parts)
			}
		}
		now := micros(r.Now)
		k := len(r.Partitions)
		idx := make(map[int]int, k) // partition -> index in r.Partitions
		for i, p := range r.Partitions {
			idx[p] = i
		}

		// The cursors of the partitions with events past them, with their
		// high watermarks. The others have no events to materialize: a
		// fetch from many partitions of which few have new events reads
		// those few.
		offered, hwm := make([]int64, k), make([]int64, k)
		// The partitions asked for, nil when they are all the stream's:
		// statements then name none (a list of them all costs more than
		// it saves; see MaxPlannedParams).
		listed := r.Partitions
		if CoversAll(r.Partitions, ref.parts) {
			listed = nil
		}
		st, err := s.fetchCursors(ctx, t, ref, g, listed, func(p int, o, h int64) {
			offered[idx[p]], hwm[idx[p]] = o, h
		})
		if err != nil {
			return err
		}

		// The spans whose lease expired become the leased rows they stand
		// for, which the claim below then takes again or dead-letters.
		if expired, err := s.spans(ctx, t, g.id, listed, "expires_at <= ?", now); err != nil {
			return err
		} else if err := s.explode(ctx, t, ref.id, g.id, expired); err != nil {
			return err
		}

		// Which of the partitions have deliveries due at a time (leased or
		// delayed) and which have deliveries available at once.
		timed, ready, err := s.dueParts(ctx, t, g.id, idx)
		if err != nil {
			return err
		}

		// R6: expired leases at the limit become dead letters, not claims.
		if len(timed) > 0 {
			var b Builder
			b.S("UPDATE rheo_deliveries SET status = 2, reason = ").Arg(poisonReason).S(", dead_at = ").Arg(now).
				S(", due_at = NULL, lease_id = NULL, consumer_id = NULL WHERE grp_id = ").Arg(g.id)
			// (due_at + 0: through the index of leases by attempt, which
			// holds few at the limit, rather than the range of every
			// expired lease in the index of due times.)
			inParts(&b, timed).S(" AND due_at + 0 <= ").Arg(now).S(" AND " + TimedSQL + " AND status = 1 AND attempt >= ").Arg(g.maxAttempts)
			if _, err := t.exec(ctx, b.SQL(), b.Args()...); err != nil {
				return err
			}
		}

		// Claimable rows, at most Limit per partition, in sequence order.
		existing, err := s.claimable(ctx, t, g.id, timed, ready, r.Partitions, idx, now, r.Limit)
		if err != nil {
			return err
		}

		// Share the limit: a quota per partition first, then leftovers, in
		// a rotating order so no partition's backlog starves another.
		avail := make([]int64, k)
		for i := range k {
			avail[i] = int64(len(existing[i])) + max(hwm[i]-offered[i], 0)
		}
		take := make([]int64, k)
		first := s.rotate(g.id, k)
		remaining := int64(r.Limit)
		quota := (remaining + int64(k) - 1) / int64(k)
		for pass := 0; remaining > 0; pass++ {
			progress := false
			for j := range k {
				i := (first + j) % k
				want := remaining
				if pass == 0 {
					want = min(quota, remaining)
				}
				n := min(want, avail[i]-take[i])
				if n > 0 {
					take[i] += n
					remaining -= n
					progress = true
				}
			}
			if !progress {
				break
			}
		}

		leaseIDs := func() string { return r.NewLeaseID() }
		exp := micros(r.Now.Add(r.LeaseDuration))
		leases = slices.Grow(leases, int(int64(r.Limit)-remaining)) // what the claims below append, at once
		var runs []freshRun
		for i, p := range r.Partitions {
			if take[i] == 0 {
				continue
			}
			old := existing[i][:min(int64(len(existing[i])), take[i])]
			if fresh := take[i] - int64(len(old)); fresh > 0 {
				runs = append(runs, freshRun{p: p, cursor: offered[i], n: fresh})
			}
			var err error
			if leases, err = s.claimExisting(ctx, t, r, ref, g, p, old, now, exp, leaseIDs, leases); err != nil {
				return err
			}
		}
		if st.use {
			// Whether this fetch leaves a new event behind: if not, the
			// next one reads only the partitions appended to after now.
			drained := true
			for i := range k {
				old := min(int64(len(existing[i])), take[i])
				if offered[i]+take[i]-old < hwm[i] {
					drained = false
					break
				}
			}
			if drained && st.seen != st.changes {
				if _, err := t.exec(ctx, "UPDATE rheo_groups SET seen = ? WHERE id = ?", st.changes, g.id); err != nil {
					return err
				}
			}
		}
		if len(runs) == 0 {
			return nil
		}
		reclaimed := len(leases)
		if len(runs) > int(fewRuns.Load()) {
			leases, err = s.materializeRuns(ctx, t, r, ref, g, runs, now, exp, leaseIDs, leases)
		} else {
			for _, run := range runs {
				if leases, err = s.materialize(ctx, t, r, ref, g, run.p, run.cursor, run.n, now, exp, leaseIDs, leases); err != nil {
					break
				}
			}
		}
		if err == nil && reclaimed > 0 {
			// In the order of one partition after another, each one's
			// deliveries claimed again before its new events.
			slices.SortStableFunc(leases, func(a, b rheo.Lease) int {
				return cmp.Compare(idx[a.Event.Partition], idx[b.Event.Partition])
			})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if leases == nil {
		leases = []rheo.Lease{}
	}
	return leases, nil
}

// stamped is what fetchCursors read of a stream's change count and a
// group's seen count (see fetchCursors), when use is set.
type stamped struct {
	use           bool
	changes, seen int64
}

// fetchCursors calls fn with the cursor and high watermark of each
// partition of listed (nil: every partition of the stream) that has events
// past the group's cursor, in partition order.
//
// A fetch from every partition of a stream with more than fewRuns of them
// reads only the partitions stamped after the change count that the
// group's last fetch to leave no new event behind recorded (rheo_groups.seen,
// which AdvanceHeadsSQL's stamps outrun): every other partition had no
// event past the cursor then, and has none now. seen is 0 when not known
// (a group or stream from before schema version 8, a replay or a reset
// since): then, and for fetches from some partitions, every cursor is
// read. It returns what it read of the counts, for the fetch to record
// (see fetch).
func (s *Store) fetchCursors(ctx context.Context, t *writeTx, ref streamRef, g groupRef, listed []int, fn func(p int, offered, hwm int64)) (stamped, error) {
	var st stamped
	if listed == nil && ref.parts > int(fewRuns.Load()) {
		err := t.queryRow(ctx, "SELECT s.changes, g.seen FROM rheo_streams s CROSS JOIN rheo_groups g WHERE s.id = ? AND g.id = ?",
			ref.id, g.id).Scan(&st.changes, &st.seen)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return st, err
		}
		// (No row: the stream or group is gone; the cursors read none.)
		st.use = err == nil
	}
	var rows *sql.Rows
	var err error
	if st.use && st.seen > 0 {
		stampReads.Add(1)
		rows, err = t.query(ctx, StampedCursorsSQL, ref.id, g.id, st.seen)
	} else {
		var b Builder
		b.S("SELECT g.part, g.offered, p.hwm FROM rheo_group_parts g JOIN rheo_partitions p ON p.stream_id = ").Arg(ref.id).
			S(" AND p.part = g.part WHERE g.grp_id = ").Arg(g.id).S(" AND p.hwm > g.offered")
		if listed != nil {
			b.S(" AND g.part IN (")
			List(&b, listed).S(")")
		}
		b.S(" ORDER BY g.part" + s.d.LockRows())
		rows, err = t.query(ctx, b.SQL(), b.Args()...)
	}
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		var o, h int64
		if err := rows.Scan(&p, &o, &h); err != nil {
			return st, err
		}
		fn(p, o, h)
	}
	return st, rows.Err()
}

// StampedCursorsSQL is fetchCursors' statement for the partitions stamped
// since the group's seen count (arguments: the stream's id, the group's id,
// the count). It reads the stream's partitions in order, not the group's
// cursors first: the stamps sort out most of them, and a cursor is read by
// its key for the few left.
const StampedCursorsSQL = "SELECT p.part, g.offered, p.hwm FROM rheo_partitions p CROSS JOIN rheo_group_parts g " +
	"ON g.grp_id = ?2 AND g.part = p.part WHERE p.stream_id = ?1 AND p.stamp > ?3 AND p.hwm > g.offered ORDER BY p.part"

// stampReads counts the fetches that read only the partitions stamped
// since their group's seen count (see fetchCursors), for tests.
var stampReads atomic.Int64

// StampReads returns how many fetches read only the partitions stamped
// since their group's seen count, in this process.
func StampReads() int64 { return stampReads.Load() }

// rotate returns the index of the partition a group's next fetch serves
// first. It lives in this process only: fairness does not need agreement.
func (s *Store) rotate(group int64, k int) int {
	s.rrMu.Lock()
	defer s.rrMu.Unlock()
	n := s.rr[group]
	s.rr[group] = n + 1
	return n % k
}

// CoversAll reports whether parts (valid partitions) are every one of a
// stream's n partitions, each once. A fetch from all of them names none in
// its statements (PostgreSQL's passes NULL for the list).
func CoversAll(parts []int, n int) bool {
	if len(parts) != n {
		return false
	}
	seen := make([]bool, n)
	for _, p := range parts {
		if seen[p] {
			return false
		}
		seen[p] = true
	}
	return true
}

// claimable returns the first limit claimable deliveries of each of parts
// (indexed by idx) in sequence order: those available at once (status 0,
// below ReadySQL's bound: reopened, redriven, nacked without a delay; see
// dueNow), a limit per
// partition read from their own index in sequence order, merged with those
// due at a time that has come (expired leases, delayed retries whose delay
// is over), read from the index of due times. ready and timed are the
// partitions of parts that have rows of each kind (see dueParts). Neither
// read passes over deliveries that are not claimable, however many there
// are: a backlog of reopened deliveries costs a fetch a limit's worth of
// rows per partition, a backlog of delayed retries or of leases in flight
// nothing.
func (s *Store) claimable(ctx context.Context, t *writeTx, grp int64, timed, ready, parts []int, idx map[int]int, now int64, limit int) ([][]claimable, error) {
	out := make([][]claimable, len(parts))
	scan := func(b *Builder) error {
		rows, err := t.query(ctx, b.SQL(), b.Args()...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p int
			var c claimable
			if err := rows.Scan(&p, &c.seq, &c.attempt, &c.eventID); err != nil {
				return err
			}
			out[idx[p]] = append(out[idx[p]], c)
		}
		return rows.Err()
	}
	if err := timedClaimable(grp, timed, idx, now, limit, out, scan); err != nil {
		return nil, err
	}
	// Of those available at once, the first limit of each partition (the
	// first of their index).
	if err := eachPart(ready, scan, func(b *Builder, p int) {
		b.S("SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ").Arg(grp).S(" AND part = ").Part(p).
			S(" AND status = 0 AND " + ReadySQL + " AND due_at <= ").Arg(readyDue(now)).S(" ORDER BY seq LIMIT ").Arg(limit)
	}); err != nil {
		return nil, err
	}
	for i, cs := range out {
		if len(cs) > 1 {
			slices.SortFunc(cs, func(a, b claimable) int { return cmp.Compare(a.seq, b.seq) })
		}
		out[i] = cs[:min(len(cs), limit)]
	}
	return out, nil
}

// timedClaimable adds to out (by idx) the first limit deliveries of each
// of parts in sequence order among those due at a time that has come
// (expired leases, delayed retries whose delay is over), reading no more
// than a bounded number of rows per partition unless it must:
//
//   - a capped range of the due-time index (at most DueCap(limit) rows): a
//     partition with fewer due deliveries than that is done, its due
//     deliveries all read (a few leases in flight, retries delayed past
//     now: the range stops at now);
//   - in a partition with more (many leases expired at once: a crashed
//     fleet), the first DueCap(limit) pending deliveries in sequence order:
//     if limit of them are due they are the answer;
//   - else the whole due range, sorted (many due, but behind more that
//     are not: delayed retries, or leases claimed again and not yet
//     settled, as while a consumer works through such a backlog).
//
// Before, every fetch read and sorted the whole due range, so that a
// partition with N expired leases cost every fetch O(N) until they were
// claimed again; the last step still does.
// The conformance case many_expired_leases_are_claimed_in_sequence_order
// (rheotest) takes each step.
func timedClaimable(grp int64, parts []int, idx map[int]int, now int64, limit int,
	out [][]claimable, scan func(*Builder) error) error {
	if len(parts) == 0 {
		return nil
	}
	k := DueCap(limit)
	// A capped range of the index of due times.
	if err := eachPart(parts, scan, func(b *Builder, p int) {
		b.S("SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ").Arg(grp).S(" AND part = ").Part(p).
			S(" AND " + TimedSQL + " AND due_at <= ").Arg(now).S(" LIMIT ").Arg(k)
	}); err != nil {
		return err
	}
	var many []int
	for _, p := range parts {
		if len(out[idx[p]]) >= k {
			many = append(many, p)
			out[idx[p]] = out[idx[p]][:0]
		}
	}
	if len(many) == 0 {
		return nil
	}
	// The first pending deliveries in sequence order.
	if err := eachPart(many, scan, func(b *Builder, p int) {
		b.S("SELECT part, seq, attempt, event_id FROM (SELECT part, seq, attempt, event_id, due_at FROM rheo_deliveries WHERE grp_id = ").Arg(grp).
			S(" AND part = ").Part(p).S(" AND status < 2 ORDER BY seq LIMIT ").Arg(k).
			S(") WHERE " + TimedSQL + " AND due_at <= ").Arg(now).S(" LIMIT ").Arg(limit)
	}); err != nil {
		return err
	}
	var scattered []int
	for _, p := range many {
		if len(out[idx[p]]) < limit {
			scattered = append(scattered, p)
			out[idx[p]] = out[idx[p]][:0]
		}
	}
	// The whole due range, sorted (seq + 0: the range of the due-time
	// index, rather than the partition's deliveries in sequence order).
	return eachPart(scattered, scan, func(b *Builder, p int) {
		b.S("SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ").Arg(grp).S(" AND part = ").Part(p).
			S(" AND " + TimedSQL + " AND due_at <= ").Arg(now).S(" ORDER BY seq + 0 LIMIT ").Arg(limit)
	})
}

// eachPart runs q's query for each of parts, as subqueries joined by UNION
// ALL, as many a statement as fit in MaxPlannedParams parameters, and
// hands each statement to scan.
func eachPart(parts []int, scan func(*Builder) error, q func(b *Builder, p int)) error {
	var b Builder
	arms := 0
	for _, p := range parts {
		var arm Builder
		arm.S("SELECT * FROM (")
		q(&arm, p)
		arm.S(")")
		if arms > 0 && len(b.args)+len(arm.args) > MaxPlannedParams {
			if err := scan(&b); err != nil {
				return err
			}
			b, arms = Builder{}, 0
		}
		if arms > 0 {
			b.S(" UNION ALL ")
		}
		b.S(arm.SQL())
		b.args = append(b.args, arm.args...)
		arms++
	}
	if arms == 0 {
		return nil
	}
	return scan(&b)
}

// MaxPlannedParams bounds the parameters of a statement whose parameters
// SQLite's planner compares with columns (ranges, keys, times), such as
// eachPart's. SQLite keeps track of those parameters in a 32-bit mask
// whose last bit stands for every parameter past the 31st, and prepares a
// statement again whenever one of them is bound to a new value: a
// statement of 200 partitions' reads, with the time of each fetch past
// its 31st parameter, would be parsed and planned on every fetch.
const MaxPlannedParams = 32

// DueCap is how many due deliveries of a partition a fetch of limit reads
// before it looks for them in sequence order instead (and how many pending
// deliveries it reads in sequence order before it reads them all).
func DueCap(limit int) int { return 2*limit + 16 }

// dueParts returns, in partition order, the partitions among idx's keys in
// which group grp has deliveries due at a time (leased, or nacked with a
// delay: timed) and those in which it has deliveries available at once
// (ready): one statement of two skip scans of the indexes made for them,
// one index probe per partition found (usually few: those with leases in
// flight), not one per partition asked for.
func (s *Store) dueParts(ctx context.Context, t *writeTx, grp int64, idx map[int]int) (timed, ready []int, err error) {
	skip := func(b *Builder, name, cond string) {
		b.S(name + "(part) AS (SELECT (SELECT MIN(part) FROM rheo_deliveries WHERE grp_id = ").Arg(grp).
			S(" AND " + cond + ") UNION ALL SELECT (SELECT MIN(part) FROM rheo_deliveries WHERE grp_id = ").Arg(grp).
			S(" AND " + cond + " AND part > " + name + ".part) FROM " + name + " WHERE " + name + ".part IS NOT NULL)")
	}
	var b Builder
	b.S("WITH RECURSIVE ")
	skip(&b, "t", TimedSQL)
	b.S(", ")
	skip(&b, "r", "status = 0 AND "+ReadySQL)
	b.S(" SELECT 0, part FROM t WHERE part IS NOT NULL UNION ALL SELECT 1, part FROM r WHERE part IS NOT NULL")
	rows, err := t.query(ctx, b.SQL(), b.Args()...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, p int
		if err := rows.Scan(&kind, &p); err != nil {
			return nil, nil, err
		}
		if _, ok := idx[p]; !ok {
			continue
		}
		if kind == 0 {
			timed = append(timed, p)
		} else {
			ready = append(ready, p)
		}
	}
	return timed, ready, rows.Err()
}

// nackDue is the due time a nack at now stores: its time minus readyOffset
// when the delivery is available already (see dueNow), its own time when
// it is delayed.
func nackDue(avail, now int64) int64 {
	if avail <= now {
		return max(readyDue(avail), dueNow)
	}
	return avail
}

func inParts(b *Builder, parts []int) *Builder {
	if len(parts) == 1 {
		return b.S(" AND part = ").Part(parts[0])
	}
	b.S(" AND part IN (")
	return List(b, parts).S(")")
}

// claimExisting leases the claimable rows cs of partition p. A row whose
// guarded UPDATE matches nothing was taken meanwhile (possible only where
// writers run concurrently) and is skipped: fewer leases, never two.
func (s *Store) claimExisting(ctx context.Context, t *writeTx, r rheo.FetchRequest, ref streamRef, g groupRef, p int,
	cs []claimable, now, exp int64, newID func() string, out []rheo.Lease) ([]rheo.Lease, error) {
	if len(cs) == 0 {
		return out, nil
	}
	type claimed struct {
		c  claimable
		id string
	}
	// One guarded UPDATE per chunk: each row gets its own lease ID, and
	// RETURNING tells which rows it claimed.
	got := make([]claimed, 0, len(cs))
	for chunk := range slices.Chunk(cs, 200) {
		ids := make(map[int64]claimed, len(chunk))
		seqs := make([]int64, len(chunk))
		var b Builder
		b.S("UPDATE rheo_deliveries SET status = 1, attempt = attempt + 1, lease_id = CASE seq")
		for i, c := range chunk {
			id := newID()
			ids[c.seq], seqs[i] = claimed{c, id}, c.seq
			b.S(" WHEN ").Arg(c.seq).S(" THEN ").Arg(id)
		}
		b.S(" END, consumer_id = ").Arg(r.ConsumerID).S(", leased_at = ").Arg(now).S(", expires_at = ").Arg(exp).
			S(", due_at = ").Arg(exp).S(" WHERE grp_id = ").Arg(g.id).S(" AND part = ").Arg(p).S(" AND seq IN (")
		List(&b, seqs).S(") AND due_at <= ").Arg(now).S(" RETURNING seq")
		rows, err := t.query(ctx, b.SQL(), b.Args()...)
		if err != nil {
			return out, err
		}
		for rows.Next() {
			var seq int64
			if err := rows.Scan(&seq); err != nil {
				rows.Close()
				return out, err
			}
			if c, ok := ids[seq]; ok {
				got = append(got, c)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, err
		}
	}
	slices.SortFunc(got, func(a, b claimed) int { return cmp.Compare(a.c.seq, b.c.seq) })
	if len(got) == 0 {
		return out, nil
	}
	seqs := make([]int64, len(got))
	for i, c := range got {
		seqs[i] = c.c.seq
	}
	var b Builder
	b.S("SELECT " + eventCols + " FROM rheo_events WHERE stream_id = ").Arg(ref.id).S(" AND part = ").Arg(p).S(" AND seq IN (")
	List(&b, seqs).S(")")
	rows, err := t.query(ctx, b.SQL(), b.Args()...)
	if err != nil {
		return out, err
	}
	evs, err := scanEvents(rows, r.Stream, make([]rheo.Event, 0, len(seqs)))
	if err != nil {
		return out, err
	}
	bySeq := make(map[int64]rheo.Event, len(evs))
	for _, e := range evs {
		bySeq[e.Sequence] = e
	}
	for _, c := range got {
		e, ok := bySeq[c.c.seq]
		if !ok {
			return out, rheo.Errorf(rheo.ErrBackendUnavailable, "event %d/%d of stream %q is missing", p, c.c.seq, r.Stream)
		}
		out = append(out, lease(r, c.id, c.c.attempt+1, now, exp, e))
	}
	return out, nil
}

func lease(r rheo.FetchRequest, id string, attempt int, now, exp int64, e rheo.Event) rheo.Lease {
	return rheo.Lease{
		ID: id, Receipt: id, Stream: r.Stream, Group: r.Group, ConsumerID: r.ConsumerID,
		Attempt: attempt, LeasedAt: fromMicros(now), ExpiresAt: fromMicros(exp), Event: e,
	}
}

// materializeChunk bounds the rows of one delivery INSERT (11 parameters each).
const materializeChunk = 100

// materialize leases the next n events of partition p past the cursor as
// one span (see spans.go): each member's lease ID derives from the span's
// token, its receipt is that ID and SpanReceipt. It advances the cursor.
func (s *Store) materialize(ctx context.Context, t *writeTx, r rheo.FetchRequest, ref streamRef, g groupRef, p int,
	cursor, n, now, exp int64, newID func() string, out []rheo.Lease) ([]rheo.Lease, error) {
	rows, err := t.query(ctx, "SELECT "+runCols+" FROM rheo_events WHERE stream_id = ? AND part = "+PartParam+" AND seq > ? AND seq <= ? ORDER BY seq",
		ref.id, p, cursor, cursor+n)
	if err != nil {
		return out, err
	}
	// The events are scanned into the leases they go out in (no second
	// copy of each). The range holds n rows (checked below), so they are
	// cursor+1 … cursor+n.
	start := len(out)
	out, err = scanRun(rows, r.Stream, p, cursor+1, out, func(e rheo.Event) rheo.Lease { return rheo.Lease{Event: e} })
	if err != nil {
		return out, err
	}
	if got := int64(len(out) - start); got != n {
		return out, rheo.Errorf(rheo.ErrBackendUnavailable, "stream %q partition %d: %d events past sequence %d, want %d", r.Stream, p, got, cursor, n)
	}
	tok := newID()
	digest := spanLeases(r, tok, now, exp, out[start:], make([]string, 0, n))
	if _, err := t.exec(ctx, "INSERT INTO rheo_spans (grp_id, part, lo, hi, token, attempt, consumer_id, leased_at, expires_at, done, pending, low, digest) "+
		"VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)",
		g.id, p, cursor+1, cursor+n, tok, r.ConsumerID, now, exp, strings.Repeat("0", int(n)), n, cursor+1, digest); err != nil {
		return out, err
	}
	if _, err := t.exec(ctx, "UPDATE rheo_group_parts SET offered = ? WHERE grp_id = ? AND part = ?", cursor+n, g.id, p); err != nil {
		return out, err
	}
	return out, nil
}

// spanLeases makes ls, a run's events in sequence order, the leases of
// the members of span tok, and returns the span's digest of their event
// IDs (collected in ids, a buffer).
func spanLeases(r rheo.FetchRequest, tok string, now, exp int64, ls []rheo.Lease, ids []string) int64 {
	member := NewSpanIDs(tok)
	for i := range ls {
		l := &ls[i]
		id, receipt := member.Member(l.Event.Sequence)
		*l = lease(r, id, 1, now, exp, l.Event)
		l.Receipt = receipt
		ids = append(ids, l.Event.ID)
	}
	return spanDigest(ids)
}

// freshRun is the run of the n new events past cursor that a fetch leases
// from partition p.
type freshRun struct {
	p         int
	cursor, n int64
}

// jsonBuf builds the JSON parameters that json_each reads: an object of
// integers keyed by partition (or by a partition and a second integer,
// "p:v"), or an array of integers. Members are never arrays: json_each
// returns an array member as JSON text, which each ->> then parses again,
// where an integer member is a plain number.
type jsonBuf []byte

// next opens the object or array (open) or separates its next member.
func (j jsonBuf) next(open byte) jsonBuf {
	if len(j) == 0 {
		return append(j, open)
	}
	return append(j, ',')
}

// key opens the object or separates its next member, and writes key p.
func (j jsonBuf) key(p int) jsonBuf { return append(j.keyOpen(p), '"', ':') }

// pairKey is key with the key "p:v", whose integers SQL reads as
// CAST(key AS INTEGER) (the longest prefix that is one) and
// CAST(substr(key, instr(key, ':') + 1) AS INTEGER).
func (j jsonBuf) pairKey(p int, v int64) jsonBuf {
	return append(strconv.AppendInt(append(j.keyOpen(p), ':'), v, 10), '"', ':')
}

// keyOpen opens the object or separates its next member, and writes the
// start of a key: its quote and p.
func (j jsonBuf) keyOpen(p int) jsonBuf {
	return strconv.AppendInt(append(j.next('{'), '"'), int64(p), 10)
}

func (j jsonBuf) int(v int64) jsonBuf { return strconv.AppendInt(j, v, 10) }

// end closes the object or array (close) of at least one member.
func (j jsonBuf) end(close byte) string { return string(append(j, close)) }

// materializeRuns is materialize for the runs of several partitions, in a
// few statements for all of them instead of three each (a fetch from many
// partitions takes a few events from each): one reads the events and one
// advances the cursors, each given the runs as one JSON object of
// partition to count or to cursor (SQLite's json_each, whose rows are
// then plain numbers), so that their text and parameters do not change
// with the number of runs (see MaxPlannedParams); the spans are written
// by multi-row INSERTs of up to spanChunk rows.
func (s *Store) materializeRuns(ctx context.Context, t *writeTx, r rheo.FetchRequest, ref streamRef, g groupRef, runs []freshRun,
	now, exp int64, newID func() string, out []rheo.Lease) ([]rheo.Lease, error) {
	// Each event goes to its place in out: run after run (the run of
	// partition p from first[at[p]]), in sequence order within each,
	// whatever order the rows come in.
	start := len(out)
	at := make(map[int]int, len(runs))
	first := make([]int, len(runs))
	var counts, cursors jsonBuf
	total := 0
	for k, run := range runs {
		at[run.p], first[k] = k, start+total
		counts = counts.key(run.p).int(run.n)
		cursors = cursors.key(run.p).int(run.cursor + run.n)
		total += int(run.n)
	}
	out = slices.Grow(out, total)[:start+total]
	got := make([]int64, len(runs))
	rows, err := t.query(ctx, MaterializeRunsSQL, counts.end('}'), g.id, ref.id)
	if err != nil {
		return out[:start], err
	}
	var sc eventScan
	sc.joined = true
	dest := []any{&sc.part, &sc.seq, &sc.head, &sc.ts, &sc.payload, &sc.meta}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return out[:start], err
		}
		k, ok := at[sc.part]
		var j int64
		if ok {
			j = sc.seq - runs[k].cursor - 1
			ok = j >= 0 && j < runs[k].n
		}
		if !ok {
			rows.Close()
			return out[:start], rheo.Errorf(rheo.ErrBackendUnavailable, "stream %q partition %d: event %d read for no run", r.Stream, sc.part, sc.seq)
		}
		if sc.id, sc.etype, sc.ekey, ok = splitHead(sc.head); !ok {
			rows.Close()
			return out[:start], fmt.Errorf("event %d/%d: malformed row", sc.part, sc.seq)
		}
		e, err := sc.event(r.Stream)
		if err != nil {
			rows.Close()
			return out[:start], err
		}
		out[first[k]+int(j)] = rheo.Lease{Event: e}
		got[k]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out[:start], err
	}

	var spans Builder
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := t.exec(ctx, spans.SQL(), spans.Args()...)
		spans, n = Builder{}, 0
		return err
	}
	ids := make([]string, 0, total)
	for k, run := range runs {
		if got[k] != run.n {
			return out[:start], rheo.Errorf(rheo.ErrBackendUnavailable, "stream %q partition %d: %d events past sequence %d, want %d",
				r.Stream, run.p, got[k], run.cursor, run.n)
		}
		tok := newID()
		digest := spanLeases(r, tok, now, exp, out[first[k]:first[k]+int(run.n)], ids[:0])
		if n == 0 {
			spans.S("INSERT INTO rheo_spans (grp_id, part, lo, hi, token, attempt, consumer_id, leased_at, expires_at, done, pending, low, digest) VALUES ")
		} else {
			spans.S(", ")
		}
		spans.S("(").Arg(g.id).S(", ").Arg(run.p).S(", ").Arg(run.cursor + 1).S(", ").Arg(run.cursor + run.n).S(", ").Arg(tok).S(", 1, ").
			Arg(r.ConsumerID).S(", ").Arg(now).S(", ").Arg(exp).S(", ").Arg(strings.Repeat("0", int(run.n))).S(", ").Arg(run.n).S(", ").
			Arg(run.cursor + 1).S(", ").Arg(digest).S(")")
		if n++; n == spanChunk {
			if err := flush(); err != nil {
				return out[:start], err
			}
		}
	}
	if err := flush(); err != nil {
		return out[:start], err
	}
	if _, err := t.exec(ctx, AdvanceCursorsSQL, cursors.end('}'), g.id); err != nil {
		return out[:start], err
	}
	return out, nil
}

// fewRuns is the most runs a fetch materializes one at a time: three
// prepared statements a run cost less than materializeRuns' statements
// for a few runs (a fetch of 100 from 4 partitions: 308 µs against 356
// in BenchmarkFetchAckFresh), and more for many (from 1,024 partitions,
// about 95 runs of one event: 2.2–2.3 ms against 1.7–1.9).
var fewRuns atomic.Int64

func init() { fewRuns.Store(8) }

// SetFewRuns sets fewRuns and returns the function that restores it, for
// tests that take materializeRuns' path on narrow streams.
func SetFewRuns(n int) (restore func()) {
	old := fewRuns.Swap(int64(n))
	return func() { fewRuns.Store(old) }
}

// spanChunk bounds the rows of one multi-row INSERT of spans (13
// parameters each).
const spanChunk = 32

// The statements of materializeRuns (SQLite's: no other dialect runs this
// Fetch). The events' columns are named with their table, as json_each has
// an id column of its own; the upsert of the cursors finds each by its key
// (every one exists: the fetch read them in its transaction).
const (
	MaterializeRunsSQL = "WITH r(part, n) AS MATERIALIZED (SELECT CAST(key AS INTEGER), value FROM json_each(?1)) " +
		"SELECT e.part, e.seq, concat_ws('" + runSep + "', e.id, e.etype, e.ekey), e.ts, e.payload, e.metadata " +
		"FROM r CROSS JOIN rheo_group_parts g ON g.grp_id = ?2 AND g.part = r.part " +
		"CROSS JOIN rheo_events e ON e.stream_id = ?3 AND e.part = r.part AND e.seq > g.offered AND e.seq <= g.offered + r.n"
	AdvanceCursorsSQL = "INSERT INTO rheo_group_parts (grp_id, part, offered) SELECT ?2, CAST(key AS INTEGER), value FROM json_each(?1) WHERE true " +
		"ON CONFLICT (grp_id, part) DO UPDATE SET offered = excluded.offered"
)

// Renew implements rheo.Backend.
func (s *Store) Renew(ctx context.Context, l rheo.Lease, expiresAt, _ time.Time) error {
	var ref streamRef
	var g groupRef
	err := s.renew(ctx, l, expiresAt, &ref, &g)
	if !leaseerr.Lost(err) {
		return err
	}
	if moved, gone := s.moved(ctx, s.reader(), l.Stream, l.Group, ref, g); !moved {
		if leaseerr.Gone(gone) {
			return gone
		}
		return err // (a failed check leaves the answer of the ids used)
	}
	return s.renew(ctx, l, expiresAt, &ref, &g)
}

func (s *Store) renew(ctx context.Context, l rheo.Lease, expiresAt time.Time, refOut *streamRef, gOut *groupRef) error {
	return s.write(ctx, "renew lease "+l.ID, func(t *writeTx) error {
		ref, g, err := s.cachedGroup(ctx, t.execer, l.Stream, l.Group)
		if err != nil {
			return err
		}
		*refOut, *gOut = ref, g
		if !receiptValid(l) {
			return s.staleOrMismatch(ctx, t, ref.id, g, l)
		}
		if l.Receipt != l.ID { // a span's member: the span becomes rows first
			sp, ok, err := s.spanHolding(ctx, t, g.id, l)
			if err != nil {
				return err
			}
			if ok {
				if err := s.explode(ctx, t, ref.id, g.id, []span{sp}); err != nil {
					return err
				}
			}
		}
		exp := micros(expiresAt)
		res, err := t.exec(ctx, "UPDATE rheo_deliveries SET expires_at = ?, due_at = ? "+
			"WHERE grp_id = ? AND part = ? AND seq = ? AND status = 1 AND lease_id = ? AND event_id = ?",
			exp, exp, g.id, l.Event.Partition, l.Event.Sequence, l.Receipt, l.Event.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.staleOrMismatch(ctx, t, ref.id, g, l)
		}
		return nil
	})
}

// settleRow is a delivery row as Settle reads it.
type settleRow struct {
	status  int
	leaseID sql.NullString
	eventID string
	attempt int
}

// Settle implements rheo.Backend. Per partition it reads the named rows
// once, fences every request in Go (same transaction, so nothing moves
// underneath), deletes the acked rows in one statement (acked deliveries
// are compacted at once; the frontier is derived from what stays pending)
// and updates nacked and dead-lettered rows one by one.
func (s *Store) Settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	var ref streamRef
	var g groupRef
	errs, err := s.settle(ctx, stream, group, reqs, now, &ref, &g)
	if err != nil || !slices.ContainsFunc(errs, leaseerr.Lost) {
		return errs, err
	}
	if moved, gone := s.moved(ctx, s.reader(), stream, group, ref, g); !moved {
		if leaseerr.Gone(gone) && !slices.ContainsFunc(errs, leaseerr.Settled) {
			return nil, gone // nothing settled: the group is gone
		}
		return errs, nil // (a failed check leaves the answers of the ids used)
	}
	return s.settle(ctx, stream, group, reqs, now, &ref, &g)
}

func (s *Store) settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time, refOut *streamRef, gOut *groupRef) ([]error, error) {
	errs := make([]error, len(reqs))
	err := s.write(ctx, "settle in group "+quote(group), func(t *writeTx) error {
		ref, g, err := s.cachedGroup(ctx, t.execer, stream, group)
		if err != nil {
			return err
		}
		*refOut, *gOut = ref, g
		byPart := map[int][]int{}
		for i, r := range reqs {
			errs[i] = nil
			if errs[i] = r.CheckKind(); errs[i] != nil {
				continue
			}
			p := r.Lease.Event.Partition
			if p < 0 || p >= ref.parts {
				errs[i] = leaseerr.Stale(r.Lease)
				continue
			}
			byPart[p] = append(byPart[p], i)
		}
		nowUS := micros(now)
		parts := sortedKeys(byPart)
		if err := s.settleAllSpans(ctx, t, ref.id, g, parts, reqs, byPart); err != nil {
			return err
		}
		for _, p := range parts {
			idx := byPart[p]
			if len(idx) == 0 {
				continue
			}
			seqs := make([]int64, 0, len(idx))
			for _, i := range idx {
				seqs = append(seqs, reqs[i].Lease.Event.Sequence)
			}
			slices.Sort(seqs)
			seqs = slices.Compact(seqs)
			var b Builder
			b.S("SELECT seq, status, lease_id, event_id, attempt FROM rheo_deliveries WHERE grp_id = ").Arg(g.id).
				S(" AND part = ").Arg(p).S(" AND seq IN (")
			List(&b, seqs).S(")" + s.d.LockRows())
			rows, err := t.query(ctx, b.SQL(), b.Args()...)
			if err != nil {
				return err
			}
			cur := make(map[int64]*settleRow, len(seqs))
			for rows.Next() {
				var seq int64
				var sr settleRow
				if err := rows.Scan(&seq, &sr.status, &sr.leaseID, &sr.eventID, &sr.attempt); err != nil {
					rows.Close()
					return err
				}
				cur[seq] = &sr
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			var acks []int64
			for _, i := range idx {
				l := reqs[i].Lease
				row := cur[l.Event.Sequence]
				if row == nil || row.status != statusLeased || row.eventID != l.Event.ID ||
					(row.leaseID.String != l.ID && !isSpanReceiptOf(row.leaseID.String, l.ID)) {
					errs[i] = leaseerr.Stale(l)
					continue
				}
				if row.leaseID.String != l.Receipt || !receiptValid(l) {
					errs[i] = leaseerr.Mismatch(l)
					continue
				}
				row.status = -1 // settled: a second request for it in this batch is stale
				switch reqs[i].Kind {
				case rheo.SettleAck:
					acks = append(acks, l.Event.Sequence)
				case rheo.SettleReject:
					err = s.deadLetter(ctx, t, g, p, l.Event.Sequence, reqs[i].Reason, nowUS)
				case rheo.SettleNack:
					if row.attempt >= g.maxAttempts {
						err = s.deadLetter(ctx, t, g, p, l.Event.Sequence, "max_attempts: "+reqs[i].Reason, nowUS)
						break
					}
					_, err = t.exec(ctx, "UPDATE rheo_deliveries SET status = 0, reason = ?, due_at = ?, lease_id = NULL, consumer_id = NULL, "+
						"expires_at = NULL WHERE grp_id = ? AND part = ? AND seq = ?",
						reqs[i].Reason, nackDue(micros(reqs[i].AvailableAt), nowUS), g.id, p, l.Event.Sequence)
					t.wake(stream)
				case rheo.SettleRelease:
					_, err = t.exec(ctx, "UPDATE rheo_deliveries SET status = 0, attempt = attempt - 1, due_at = ?, lease_id = NULL, "+
						"consumer_id = NULL, expires_at = NULL WHERE grp_id = ? AND part = ? AND seq = ?",
						nackDue(nowUS, nowUS), g.id, p, l.Event.Sequence)
					t.wake(stream)
				}
				if err != nil {
					return err
				}
			}
			for chunk := range slices.Chunk(acks, 500) {
				var b Builder
				b.S("DELETE FROM rheo_deliveries WHERE grp_id = ").Arg(g.id).S(" AND part = ").Arg(p).S(" AND seq IN (")
				List(&b, chunk).S(")")
				if _, err := t.exec(ctx, b.SQL(), b.Args()...); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

func (s *Store) deadLetter(ctx context.Context, t *writeTx, g groupRef, p int, seq int64, reason string, now int64) error {
	_, err := t.exec(ctx, "UPDATE rheo_deliveries SET status = 2, reason = ?, dead_at = ?, due_at = NULL, lease_id = NULL, "+
		"consumer_id = NULL WHERE grp_id = ? AND part = ? AND seq = ?", reason, now, g.id, p, seq)
	return err
}

// settleAllSpans settles, in each of parts, the requests of byPart[p] that
// name members of spans (settleSpans), and leaves in byPart[p] the
// requests for the delivery rows. A settle naming spans in more than
// fewRuns partitions (an ack of a fetch from many) reads their spans in
// one statement, given the partitions' ranges of sequences as one JSON
// object, and deletes the wholly acked ones in one more, instead of two
// statements per partition.
func (s *Store) settleAllSpans(ctx context.Context, t *writeTx, streamID int64, g groupRef, parts []int,
	reqs []rheo.SettleRequest, byPart map[int][]int) error {
	type spanned struct {
		p      int
		lo, hi int64
	}
	var ranged []spanned
	for _, p := range parts {
		if lo, hi, ok := spanRange(reqs, byPart[p]); ok {
			ranged = append(ranged, spanned{p, lo, hi})
		}
	}
	if len(ranged) <= int(fewRuns.Load()) {
		for _, sr := range ranged {
			rest, err := s.settleSpans(ctx, t, streamID, g, sr.p, sr.lo, sr.hi, reqs, byPart[sr.p])
			if err != nil {
				return err
			}
			byPart[sr.p] = rest
		}
		return nil
	}
	var ranges jsonBuf // {"p:hi": lo, ...}
	for _, sr := range ranged {
		ranges = ranges.pairKey(sr.p, sr.hi).int(sr.lo)
	}
	rows, err := t.query(ctx, SpansOfRangesSQL, g.id, ranges.end('}'))
	if err != nil {
		return err
	}
	all, err := scanSpans(rows, true)
	if err != nil {
		return err
	}
	var gone jsonBuf // [rowid, ...]
	var explode []span
	for k := 0; k < len(all); {
		p := all[k].part
		j := k
		for j < len(all) && all[j].part == p {
			j++
		}
		rest, whole, exp, err := s.sortSpans(ctx, t, streamID, all[k:j], reqs, byPart[p])
		if err != nil {
			return err
		}
		byPart[p] = rest
		explode = append(explode, exp...)
		for _, sp := range whole {
			gone = gone.next('[').int(sp.rowid)
		}
		k = j
	}
	if len(gone) > 0 {
		if _, err := t.exec(ctx, DeleteSpansSQL, g.id, gone.end(']')); err != nil {
			return err
		}
	}
	return s.explode(ctx, t, streamID, g.id, explode)
}

// The statements of settleAllSpans (SQLite's, as materializeRuns'). The
// ranges, {"p:hi": lo, ...}, are materialized first, so each range's
// numbers are read out of its JSON once, not once per span visited; the
// spans read are deleted by their rowids (stable within the write
// transaction), a JSON array of integers. Each range had been a JSON
// array [lo, hi] and each deletion a pair [p, lo], which json_each
// returned as text for ->> to parse: a fifth of an ack from 95 partitions.
const (
	SpansOfRangesSQL = "WITH r(part, lo, hi) AS MATERIALIZED (SELECT CAST(key AS INTEGER), value, CAST(substr(key, instr(key, ':') + 1) AS INTEGER) FROM json_each(?2)) " +
		"SELECT s.part, s.lo, s.hi, s.token, s.attempt, s.consumer_id, s.leased_at, s.expires_at, s.done, s.digest, s.rowid " +
		"FROM r CROSS JOIN rheo_spans s ON s.grp_id = ?1 AND s.part = r.part AND s.lo <= r.hi AND s.hi >= r.lo ORDER BY s.part, s.lo"
	DeleteSpansSQL = "DELETE FROM rheo_spans WHERE rowid IN (SELECT value FROM json_each(?2)) AND grp_id = ?1"
)

// spanRange returns the lowest and highest sequences that the requests of
// idx name under span-shaped lease IDs, and false when none does.
func spanRange(reqs []rheo.SettleRequest, idx []int) (lo, hi int64, ok bool) {
	lo, hi = int64(math.MaxInt64), int64(math.MinInt64)
	for _, i := range idx {
		if l := &reqs[i].Lease; spanShaped(l.ID) {
			lo, hi = min(lo, l.Event.Sequence), max(hi, l.Event.Sequence)
		}
	}
	return lo, hi, lo <= hi
}

// settleSpans settles the requests of idx (partition p) that name members
// of spans, from lo to hi (spanRange): the acks of every member of a span, each once, delete it; any
// other request for a member turns its span into rows first. It returns
// the requests left for the delivery rows: all but the whole acks.
func (s *Store) settleSpans(ctx context.Context, t *writeTx, streamID int64, g groupRef, p int, lo, hi int64,
	reqs []rheo.SettleRequest, idx []int) ([]int, error) {
	sps, err := s.spans(ctx, t, g.id, []int{p}, "lo <= ? AND hi >= ?", hi, lo)
	if err != nil || len(sps) == 0 {
		return idx, err
	}
	rest, whole, explode, err := s.sortSpans(ctx, t, streamID, sps, reqs, idx)
	if err != nil {
		return nil, err
	}
	for _, sp := range whole {
		if _, err := t.exec(ctx, "DELETE FROM rheo_spans WHERE grp_id = ? AND part = ? AND lo = ?", g.id, p, sp.lo); err != nil {
			return nil, err
		}
	}
	if err := s.explode(ctx, t, streamID, g.id, explode); err != nil {
		return nil, err
	}
	return rest, nil
}

// sortSpans tells, of the spans sps of one partition, those the requests
// of idx ack whole (to be deleted) from those they name otherwise (to be
// turned into rows first), and returns the requests left for the
// delivery rows: all but the whole acks.
func (s *Store) sortSpans(ctx context.Context, t *writeTx, streamID int64, sps []span,
	reqs []rheo.SettleRequest, idx []int) (rest []int, whole, explode []span, err error) {
	named := make([][]int, len(sps)) // requests per span, as positions in idx
	for k, i := range idx {
		if j, ok := spanOf(sps, reqs[i].Lease); ok {
			named[j] = append(named[j], k)
		}
	}
	acked, nwhole := make([]bool, len(idx)), 0 // by position in idx
	for j, sp := range sps {
		ks := named[j]
		if len(ks) == 0 {
			continue
		}
		if ok, err := s.wholeAck(ctx, t, streamID, sp, reqs, idx, ks); err != nil {
			return nil, nil, nil, err
		} else if !ok {
			explode = append(explode, sp)
			continue
		}
		whole = append(whole, sp)
		for _, k := range ks {
			acked[k] = true
		}
		nwhole += len(ks)
	}
	if nwhole == 0 {
		return idx, whole, explode, nil
	}
	rest = make([]int, 0, len(idx)-nwhole)
	for k, i := range idx {
		if !acked[k] {
			rest = append(rest, i)
		}
	}
	return rest, whole, explode, nil
}

// wholeAck reports whether the requests reqs[idx[k]] for k in ks are acks
// of every member of span sp, each once, each under its receipt and with
// its event's ID.
func (s *Store) wholeAck(ctx context.Context, t *writeTx, streamID int64, sp span, reqs []rheo.SettleRequest, idx, ks []int) (bool, error) {
	if int64(len(ks)) != sp.hi-sp.lo+1 {
		return false, nil
	}
	seen := make([]bool, len(ks))
	for _, k := range ks {
		i := idx[k]
		l := &reqs[i].Lease
		m := l.Event.Sequence - sp.lo // the member's place in the span
		if reqs[i].Kind != rheo.SettleAck || seen[m] || !IsSpanReceipt(*l) {
			return false, nil
		}
		seen[m] = true
	}
	if sp.digest.Valid {
		named := make([]string, len(ks))
		for _, k := range ks {
			l := &reqs[idx[k]].Lease
			named[l.Event.Sequence-sp.lo] = l.Event.ID
		}
		return spanDigest(named) == sp.digest.Int64, nil
	}
	ids, err := s.memberEventIDs(ctx, t, streamID, sp)
	if err != nil {
		return false, err
	}
	for _, k := range ks {
		if l := &reqs[idx[k]].Lease; ids[l.Event.Sequence] != l.Event.ID {
			return false, nil
		}
	}
	return true, nil
}
