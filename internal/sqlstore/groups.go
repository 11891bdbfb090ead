package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rheo-go/rheo"
)

// Delivery statuses. Acked deliveries are deleted at once, so they have no
// status: a sequence at or below the group's cursor without a row is acked.
const (
	statusAvailable = 0
	statusLeased    = 1
	statusDead      = 2
)

// group resolves (stream, group) afresh; a missing stream is reported
// first. Another process may have deleted either and created another under
// the name, so only the hot paths use the cache (cachedGroup), and check
// what they find (moved). What it finds refreshes the cache.
func (s *Store) group(ctx context.Context, x execer, stream, group string) (streamRef, groupRef, error) {
	ref, err := s.stream(ctx, x, stream)
	if err != nil {
		return ref, groupRef{}, err
	}
	return s.lookupGroup(ctx, x, ref, stream, group)
}

// cachedGroup is group from the cache when it holds the ids: for the hot
// paths (fetch, settle, renew), which call moved when what they find could
// come from ids another process has since deleted.
func (s *Store) cachedGroup(ctx context.Context, x execer, stream, group string) (streamRef, groupRef, error) {
	s.cacheMu.RLock()
	ref, ok := s.streams[stream]
	g, gok := s.groups[groupKey{ref.id, group}]
	s.cacheMu.RUnlock()
	if ok && gok {
		return ref, g, nil
	}
	return s.group(ctx, x, stream, group) // (the cached stream may be gone)
}

func (s *Store) lookupGroup(ctx context.Context, x execer, ref streamRef, stream, group string) (streamRef, groupRef, error) {
	k := groupKey{ref.id, group}
	var g groupRef
	err := x.queryRow(ctx, "SELECT id, max_attempts FROM rheo_groups WHERE stream_id = ? AND name = ?", ref.id, group).
		Scan(&g.id, &g.maxAttempts)
	if errors.Is(err, sql.ErrNoRows) {
		s.cacheMu.Lock()
		delete(s.groups, k)
		s.cacheMu.Unlock()
		return ref, g, rheo.Errorf(rheo.ErrGroupNotFound, "group %q of stream %q", group, stream)
	}
	if err != nil {
		return ref, g, err
	}
	s.cacheMu.Lock()
	s.groups[k] = g
	s.cacheMu.Unlock()
	return ref, g, nil
}

// moved reports whether the stream, and the group when group != "", that
// the cached ids ref and g stood for are no longer there under their names
// (another process deleted them, and maybe created others under the
// names): it resolves the names afresh, which refreshes the cache, and
// returns ErrStreamNotFound or ErrGroupNotFound when they are gone. A hot
// path calls it when what it found could come from such ids (nothing to
// fetch, read or settle), and runs again when it reports true.
func (s *Store) moved(ctx context.Context, x execer, stream, group string, ref streamRef, g groupRef) (bool, error) {
	if group == "" {
		now, err := s.stream(ctx, x, stream)
		return err == nil && now.id != ref.id, err
	}
	nowRef, nowG, err := s.group(ctx, x, stream, group)
	return err == nil && (nowRef.id != ref.id || nowG.id != g.id), err
}

// CreateGroup implements rheo.Backend.
func (s *Store) CreateGroup(ctx context.Context, spec rheo.GroupSpec) error {
	return s.write(ctx, "create group "+quote(spec.Group), func(t *writeTx) error {
		ref, err := s.stream(ctx, t.execer, spec.Stream)
		if err != nil {
			return err
		}
		var id int64
		err = t.queryRow(ctx, "INSERT INTO rheo_groups (stream_id, name, max_attempts, created_at) VALUES (?, ?, ?, ?) "+
			"ON CONFLICT (stream_id, name) DO NOTHING RETURNING id",
			ref.id, spec.Group, spec.MaxAttempts, micros(spec.CreatedAt)).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return rheo.Errorf(rheo.ErrAlreadyExists, "group %q of stream %q", spec.Group, spec.Stream)
		}
		if err != nil {
			return err
		}
		_, trimmed, err := s.retentionInfo(ctx, t.execer, ref)
		if err != nil {
			return err
		}
		return insertPerPartition(ctx, t, "rheo_group_parts (grp_id, part, offered)", id, ref.parts,
			func(p int) int64 { return max(spec.Start[p], trimmed[p]) })
	})
}

// ListGroups implements rheo.Backend.
func (s *Store) ListGroups(ctx context.Context, stream string) ([]string, error) {
	x := s.reader()
	ref, err := s.stream(ctx, x, stream)
	if err != nil {
		return nil, s.classify(err, "list groups of stream %q", stream)
	}
	rows, err := x.query(ctx, "SELECT name FROM rheo_groups WHERE stream_id = ?", ref.id)
	if err != nil {
		return nil, s.classify(err, "list groups of stream %q", stream)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, s.classify(err, "list groups of stream %q", stream)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, s.classify(err, "list groups of stream %q", stream)
	}
	slices.SortFunc(out, strings.Compare)
	return out, nil
}

// LagSQL reads, for a group (arguments: the group's id five times, its
// stream's id, the group's id twice more), rows of four kinds: 0, one row
// whose fourth column lists the group's partitions with their cursors as
// "part:offered,…" (read by eachPair: one row instead of one per
// partition, which a stream of many partitions reads faster), NULL when
// the group has no cursor rows (it is gone); 3, one row that lists the
// stream's partitions with their high watermarks the same way; 1, a
// partition and the lowest sequence of its pending delivery rows, for the
// partitions that have any; 2, the same for members of spans. The
// frontier is the lower of the two pending ones minus one, or the cursor.
// The two lists are read each in its own walk of its table's key, not
// joined row by row: a join looked up each partition's counter by its key
// (1,024 searches), which cost twice the two walks. Both are read through
// their key's index whatever the statistics say (gathered on a store of
// one stream, they make a scan of every stream's counters look as cheap).
//
// The partitions with pending rows are found by a walk of the index from
// partition to partition (pd, ps), one probe each plus one, so that a
// group caught up on 1,024 partitions costs two probes, not 2,048, while a
// partition with a long backlog still costs one probe, not a scan. Spans
// of a partition do not overlap, so the first pending one (by lo) holds
// its lowest pending member.
const LagSQL = "WITH RECURSIVE " +
	"pd(part) AS (SELECT (SELECT MIN(d.part) FROM rheo_deliveries d WHERE d.grp_id = ? AND d.status < 2) " +
	"UNION ALL SELECT (SELECT MIN(d.part) FROM rheo_deliveries d WHERE d.grp_id = ? AND d.status < 2 AND d.part > pd.part) " +
	"FROM pd WHERE pd.part IS NOT NULL), " +
	"ps(part) AS (SELECT (SELECT MIN(s.part) FROM rheo_spans s WHERE s.grp_id = ? AND s.pending > 0) " +
	"UNION ALL SELECT (SELECT MIN(s.part) FROM rheo_spans s WHERE s.grp_id = ? AND s.pending > 0 AND s.part > ps.part) " +
	"FROM ps WHERE ps.part IS NOT NULL) " +
	"SELECT 0, 0, 0, (SELECT string_agg(g.part || ':' || g.offered, ',') " +
	"FROM rheo_group_parts g INDEXED BY sqlite_autoindex_rheo_group_parts_1 WHERE g.grp_id = ?) " +
	"UNION ALL SELECT 3, 0, 0, (SELECT string_agg(p.part || ':' || p.hwm, ',') " +
	"FROM rheo_partitions p INDEXED BY sqlite_autoindex_rheo_partitions_1 WHERE p.stream_id = ?) " +
	"UNION ALL SELECT 1, pd.part, (SELECT MIN(d.seq) FROM rheo_deliveries d WHERE d.grp_id = ? " +
	"AND d.part = pd.part AND d.status < 2), NULL FROM pd WHERE pd.part IS NOT NULL " +
	"UNION ALL SELECT 2, ps.part, (SELECT s.low FROM rheo_spans s WHERE s.grp_id = ? " +
	"AND s.part = ps.part AND s.pending > 0 ORDER BY s.lo LIMIT 1), NULL FROM ps WHERE ps.part IS NOT NULL"

// LagPartsSQL reads what LagSQL does for the partitions given as a JSON
// array (arguments: the array, the group's id, its stream's id), one row
// per partition the group and the stream both have: partition, cursor,
// high watermark, the lowest pending sequence of its delivery rows and of
// its spans' members (NULL when none). Each is a probe of a key, so a read
// of k partitions costs k probes of each table, whatever the stream holds:
// CROSS JOIN holds SQLite to that order (left to itself, it walked every
// cursor of the group and every stream's counters, then the list). The
// rows come in the list's order, sorted as the caller gives it.
const LagPartsSQL = "SELECT g.part, g.offered, p.hwm, " +
	"(SELECT MIN(d.seq) FROM rheo_deliveries d WHERE d.grp_id = g.grp_id AND d.part = g.part AND d.status < 2), " +
	"(SELECT s.low FROM rheo_spans s WHERE s.grp_id = g.grp_id AND s.part = g.part AND s.pending > 0 ORDER BY s.lo LIMIT 1) " +
	"FROM json_each(?) j " +
	"CROSS JOIN rheo_group_parts g ON g.grp_id = ? AND g.part = j.value " +
	"CROSS JOIN rheo_partitions p ON p.stream_id = ? AND p.part = j.value"

// frontier is the committed frontier of a partition: the sequence before
// the lowest pending one, of a delivery row or of a span's member, or the
// cursor when none is pending.
func frontier(offered int64, pending, spanned sql.NullInt64) int64 {
	if spanned.Valid && (!pending.Valid || spanned.Int64 < pending.Int64) {
		pending = spanned
	}
	if pending.Valid {
		return pending.Int64 - 1
	}
	return offered
}

// PartitionLag is a partition's lag from its cursor, its high watermark
// and the lowest pending sequences of its delivery rows and of its spans'
// members (see frontier). PostgreSQL's own lag read shares it.
func PartitionLag(part int, offered, hwm int64, pending, spanned sql.NullInt64) rheo.PartitionLag {
	f := frontier(offered, pending, spanned)
	return rheo.PartitionLag{Partition: part, Frontier: f, HighWatermark: hwm, Lag: max(hwm-f, 0)}
}

// Lag implements rheo.Backend in one statement, on the ids the store
// has cached for the stream and the group. A group that is gone has no
// cursor rows, so a statement on stale ids finds none: the ids are then
// looked up again, which also tells a missing stream from a missing group.
func (s *Store) Lag(ctx context.Context, stream, group string, partitions []int) ([]rheo.PartitionLag, error) {
	x := s.reader()
	read := func(ref streamRef, g groupRef) ([]rheo.PartitionLag, error) {
		if partitions != nil {
			return s.lagOf(ctx, x, ref.id, g.id, partitions)
		}
		return s.lag(ctx, x, ref.id, g.id)
	}
	ref, g, err := s.cachedGroup(ctx, x, stream, group)
	if err != nil {
		return nil, s.classify(err, "lag of group %q", group)
	}
	out, err := read(ref, g)
	if err == nil && len(out) == 0 {
		if ref, g, err = s.group(ctx, x, stream, group); err == nil {
			out, err = read(ref, g)
		}
	}
	if err != nil {
		return nil, s.classify(err, "lag of group %q", group)
	}
	return out, nil
}

// lagOf is lag for the given partitions (LagPartsSQL).
func (s *Store) lagOf(ctx context.Context, x execer, streamID, groupID int64, partitions []int) ([]rheo.PartitionLag, error) {
	list := make([]byte, 0, 8*len(partitions))
	list = append(list, '[')
	for i, p := range partitions {
		if i > 0 {
			list = append(list, ',')
		}
		list = strconv.AppendInt(list, int64(p), 10)
	}
	list = append(list, ']')
	rows, err := x.query(ctx, LagPartsSQL, string(list), groupID, streamID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]rheo.PartitionLag, 0, len(partitions))
	for rows.Next() {
		var part int
		var offered, hwm int64
		var pending, spanned sql.NullInt64
		if err := rows.Scan(&part, &offered, &hwm, &pending, &spanned); err != nil {
			return nil, err
		}
		out = append(out, PartitionLag(part, offered, hwm, pending, spanned))
	}
	return out, rows.Err()
}

func (s *Store) lag(ctx context.Context, x execer, streamID, groupID int64) ([]rheo.PartitionLag, error) {
	g := groupID
	rows, err := x.query(ctx, LagSQL, g, g, g, g, g, streamID, g, g)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type lowest struct {
		kind, part int
		seq        int64
	}
	type cursor struct {
		part    int
		offered int64
	}
	var cursors []cursor
	var hwm []int64 // by partition; -1: none read
	var pending []lowest
	for rows.Next() {
		var kind, part int
		var seq sql.NullInt64
		var list sql.RawBytes
		if err := rows.Scan(&kind, &part, &seq, &list); err != nil {
			return nil, err
		}
		var err error
		switch kind {
		case 0:
			err = eachPair(list, func(part int, offered int64) { cursors = append(cursors, cursor{part, offered}) })
		case 3:
			err = eachPair(list, func(part int, h int64) {
				for len(hwm) <= part {
					hwm = append(hwm, -1)
				}
				hwm[part] = h
			})
		default:
			pending = append(pending, lowest{kind, part, seq.Int64})
		}
		if err != nil {
			return nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// (A cursor of a partition without a counter, which no store holds,
	// is left out, as a join would.)
	cursors = slices.DeleteFunc(cursors, func(c cursor) bool { return c.part >= len(hwm) || hwm[c.part] < 0 })
	slices.SortFunc(cursors, func(a, b cursor) int { return a.part - b.part })
	low := make([][2]sql.NullInt64, len(cursors)) // per cursor: lowest delivery row, lowest span member
	for _, l := range pending {
		if i, ok := slices.BinarySearchFunc(cursors, l.part, func(c cursor, p int) int { return c.part - p }); ok {
			low[i][l.kind-1] = sql.NullInt64{Int64: l.seq, Valid: true}
		}
	}
	out := make([]rheo.PartitionLag, len(cursors))
	for i, c := range cursors {
		out[i] = PartitionLag(c.part, c.offered, hwm[c.part], low[i][0], low[i][1])
	}
	return out, nil
}

// eachPair calls fn with each partition and number of LagSQL's lists
// "part:n,part:n,…" (non-negative decimal integers), read in place.
func eachPair(b []byte, fn func(part int, n int64)) error {
	bad := func() error { return fmt.Errorf("malformed partition list at %q", b) }
	for len(b) > 0 {
		var v [2]int64
		for j := range v {
			k := 0
			for ; k < len(b) && k < 19 && '0' <= b[k] && b[k] <= '9'; k++ {
				v[j] = v[j]*10 + int64(b[k]-'0')
			}
			if k == 0 || (j == 0 && v[0] > math.MaxInt32) {
				return bad()
			}
			b = b[k:]
			if j == 0 {
				if len(b) == 0 || b[0] != ':' {
					return bad()
				}
				b = b[1:]
			}
		}
		fn(int(v[0]), v[1])
		if len(b) > 0 {
			if b[0] != ',' || len(b) == 1 {
				return bad()
			}
			b = b[1:]
		}
	}
	return nil
}

// GroupStatsSQL counts, for a group (arguments: its stream's id, then its
// id four times), its available, leased and dead deliveries, the events
// of its partitions not offered yet, the events trims skipped (NULL if
// the group is gone) and the members still leased under spans.
const GroupStatsSQL = "SELECT " +
	"COALESCE(SUM(CASE WHEN d.status = 0 THEN 1 ELSE 0 END), 0), " +
	"COALESCE(SUM(CASE WHEN d.status = 1 THEN 1 ELSE 0 END), 0), " +
	"COALESCE(SUM(CASE WHEN d.status = 2 THEN 1 ELSE 0 END), 0), " +
	"(SELECT COALESCE(SUM(CASE WHEN p.hwm > gp.offered THEN p.hwm - gp.offered ELSE 0 END), 0) " +
	"FROM rheo_group_parts gp JOIN rheo_partitions p ON p.stream_id = ? AND p.part = gp.part WHERE gp.grp_id = ?), " +
	"(SELECT skipped FROM rheo_groups WHERE id = ?), " +
	"(SELECT COALESCE(SUM(s.pending), 0) FROM rheo_spans s WHERE s.grp_id = ?) " +
	"FROM rheo_deliveries d WHERE d.grp_id = ?"

// GroupStats implements rheo.Backend.
func (s *Store) GroupStats(ctx context.Context, stream, group string, _ time.Time) (rheo.GroupStats, error) {
	var st rheo.GroupStats
	x := s.reader()
	ref, g, err := s.group(ctx, x, stream, group)
	if err != nil {
		return st, s.classify(err, "stats of group %q", group)
	}
	// One statement: the deliveries by status, the events not offered yet,
	// and what trims skipped.
	var unofferedN int64
	var skipped sql.NullInt64
	var spanned int64
	err = x.queryRow(ctx, GroupStatsSQL, ref.id, g.id, g.id, g.id, g.id).
		Scan(&st.Available, &st.Inflight, &st.DeadLetters, &unofferedN, &skipped, &spanned)
	if err != nil {
		return st, s.classify(err, "stats of group %q", group)
	}
	st.Inflight += spanned
	st.Available += unofferedN
	st.Skipped = skipped.Int64
	st.MaxAttempts = g.maxAttempts
	return st, nil
}

// DeadLetters implements rheo.Backend.
func (s *Store) DeadLetters(ctx context.Context, stream, group, after string, limit int) ([]rheo.DeadLetter, error) {
	x := s.reader()
	ref, g, err := s.group(ctx, x, stream, group)
	if err != nil {
		return nil, s.classify(err, "dead letters of group %q", group)
	}
	fromPart, fromSeq := 0, int64(0)
	if after != "" {
		err := x.queryRow(ctx, "SELECT d.part, d.seq FROM rheo_events e JOIN rheo_deliveries d "+
			"ON d.grp_id = ? AND d.part = e.part AND d.seq = e.seq AND d.status = 2 WHERE e.stream_id = ? AND e.id = ?",
			g.id, ref.id, after).Scan(&fromPart, &fromSeq)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, rheo.Errorf(rheo.ErrCursorNotFound, "event %q is not a dead letter of group %q of stream %q", after, group, stream)
		}
		if err != nil {
			return nil, s.classify(err, "dead letters of group %q", group)
		}
	}
	rows, err := x.query(ctx, "SELECT d.attempt, d.reason, d.dead_at, "+eventColsOf("e")+
		" FROM rheo_deliveries d JOIN rheo_events e ON e.stream_id = ? AND e.part = d.part AND e.seq = d.seq"+
		" WHERE d.grp_id = ? AND d.status = 2 AND (d.part > ? OR (d.part = ? AND d.seq > ?))"+
		" ORDER BY d.part, d.seq LIMIT ?", ref.id, g.id, fromPart, fromPart, fromSeq, limit)
	if err != nil {
		return nil, s.classify(err, "dead letters of group %q", group)
	}
	defer rows.Close()
	out := []rheo.DeadLetter{}
	for rows.Next() {
		var dl rheo.DeadLetter
		var reason sql.NullString
		var deadAt sql.NullInt64
		var sc eventScan
		if err := rows.Scan(append([]any{&dl.Attempts, &reason, &deadAt}, sc.dest()...)...); err != nil {
			return nil, s.classify(err, "dead letters of group %q", group)
		}
		e, err := sc.event(stream)
		if err != nil {
			return nil, s.classify(err, "dead letters of group %q", group)
		}
		dl.EventID, dl.Partition, dl.Sequence, dl.Event = e.ID, e.Partition, e.Sequence, e
		dl.Reason, dl.DeadLetteredAt = reason.String, nullMicros(deadAt)
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, s.classify(err, "dead letters of group %q", group)
	}
	return out, nil
}
