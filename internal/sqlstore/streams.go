package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rheo-go/rheo"
)

// cachedStream is stream from the cache when it holds the name: for the
// hot paths, which check what they find (see moved). A stream's id and
// partition count never change, but another process may delete the
// stream and create another under its name.
func (s *Store) cachedStream(ctx context.Context, x execer, name string) (streamRef, error) {
	s.cacheMu.RLock()
	ref, ok := s.streams[name]
	s.cacheMu.RUnlock()
	if ok {
		return ref, nil
	}
	return s.stream(ctx, x, name)
}

// stream resolves a stream name afresh; what it finds refreshes the cache.
func (s *Store) stream(ctx context.Context, x execer, name string) (streamRef, error) {
	var ref streamRef
	var created int64
	err := x.queryRow(ctx, "SELECT id, partitions, created_at FROM rheo_streams WHERE name = ?", name).
		Scan(&ref.id, &ref.parts, &created)
	if errors.Is(err, sql.ErrNoRows) {
		s.cacheMu.Lock()
		delete(s.streams, name)
		s.cacheMu.Unlock()
		return ref, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", name)
	}
	if err != nil {
		return ref, err
	}
	ref.created = fromMicros(created)
	s.cacheMu.Lock()
	s.streams[name] = ref
	s.cacheMu.Unlock()
	return ref, nil
}

// CreateStream implements rheo.Backend.
func (s *Store) CreateStream(ctx context.Context, info rheo.StreamInfo) error {
	return s.write(ctx, "create stream "+quote(info.Name), func(t *writeTx) error {
		var id int64
		r := info.Retention
		err := t.queryRow(ctx, "INSERT INTO rheo_streams (name, partitions, created_at, max_age, max_events, interest) VALUES (?, ?, ?, ?, ?, ?) "+
			"ON CONFLICT (name) DO NOTHING RETURNING id", info.Name, info.Partitions, micros(info.CreatedAt),
			int64(r.MaxAge), r.MaxEvents, boolInt(r.Interest)).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return rheo.Errorf(rheo.ErrAlreadyExists, "stream %q", info.Name)
		}
		if err != nil {
			return err
		}
		return insertPerPartition(ctx, t, "rheo_partitions (stream_id, part, hwm)", id, info.Partitions,
			func(int) int64 { return 0 })
	})
}

// Stream implements rheo.Backend.
func (s *Store) Stream(ctx context.Context, stream string) (rheo.StreamState, error) {
	x := s.reader()
	ref, err := s.stream(ctx, x, stream)
	if err != nil {
		return rheo.StreamState{}, s.classify(err, "stream %q", stream)
	}
	hw, err := s.highWatermarks(ctx, x, ref)
	if err != nil {
		return rheo.StreamState{}, s.classify(err, "stream %q", stream)
	}
	ret, trimmed, err := s.retentionInfo(ctx, x, ref)
	if err != nil {
		return rheo.StreamState{}, s.classify(err, "stream %q", stream)
	}
	return rheo.StreamState{
		StreamInfo:     rheo.StreamInfo{Name: stream, Partitions: ref.parts, CreatedAt: ref.created, Retention: ret},
		HighWatermarks: hw,
		TrimmedThrough: trimmed,
	}, nil
}

func (s *Store) highWatermarks(ctx context.Context, x execer, ref streamRef) ([]int64, error) {
	rows, err := x.query(ctx, "SELECT part, hwm FROM rheo_partitions WHERE stream_id = ? ORDER BY part", ref.id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	hw := make([]int64, ref.parts)
	for rows.Next() {
		var p int
		var h int64
		if err := rows.Scan(&p, &h); err != nil {
			return nil, err
		}
		if p >= 0 && p < len(hw) {
			hw[p] = h
		}
	}
	return hw, rows.Err()
}

// ListStreams implements rheo.Backend.
func (s *Store) ListStreams(ctx context.Context) ([]rheo.StreamInfo, error) {
	rows, err := s.reader().query(ctx, "SELECT name, partitions, created_at, max_age, max_events, interest FROM rheo_streams WHERE partitions > 0")
	if err != nil {
		return nil, s.classify(err, "list streams")
	}
	defer rows.Close()
	out := []rheo.StreamInfo{}
	for rows.Next() {
		var in rheo.StreamInfo
		var created, age int64
		var interest int
		if err := rows.Scan(&in.Name, &in.Partitions, &created, &age, &in.Retention.MaxEvents, &interest); err != nil {
			return nil, s.classify(err, "list streams")
		}
		in.CreatedAt = fromMicros(created)
		in.Retention.MaxAge, in.Retention.Interest = time.Duration(age), interest != 0
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, s.classify(err, "list streams")
	}
	// Sorted here, bytewise, rather than by a collation that varies with
	// the database's locale.
	slices.SortFunc(out, func(a, b rheo.StreamInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// appendChunk is the most events one INSERT carries: a fixed size keeps
// the number of distinct statement shapes (and cached statements) small.
const appendChunk = 100

// errKnownID aborts an optimistic append that met an existing event ID.
var errKnownID = errors.New("an event ID is already stored")

// Append implements rheo.Backend. It first inserts optimistically, as if
// every ID were new (the common case, and one index probe per event
// cheaper); when the unique index on IDs objects, the transaction rolls
// back and runs again, looking the IDs up first and returning the stored
// events in place of the known ones.
func (s *Store) Append(ctx context.Context, stream string, events []rheo.Event) ([]rheo.Event, error) {
	out, err := s.appendTx(ctx, stream, events, false)
	if errors.Is(err, rheo.ErrInvalidPartition) {
		// The cached stream may be one another process has deleted and
		// created again with more partitions than the cache says.
		s.cacheMu.Lock()
		delete(s.streams, stream)
		s.cacheMu.Unlock()
		err = errMoved
	}
	if errors.Is(err, errMoved) {
		out, err = s.appendTx(ctx, stream, events, false)
	}
	if errors.Is(err, errKnownID) {
		out, err = s.appendTx(ctx, stream, events, true)
	}
	return out, err
}

// errMoved: an append found no counters under the cached id of its stream,
// which another process deleted (see moved).
var errMoved = errors.New("the stream's cached id is gone")

// again runs read with the stream's cached ids, and once more when it found
// nothing and the stream has moved (see moved).
func (s *Store) again(ctx context.Context, x execer, stream string, read func(ref streamRef) (found bool, err error)) error {
	ref, err := s.cachedStream(ctx, x, stream)
	if err != nil {
		return err
	}
	if found, err := read(ref); err != nil || found {
		return err
	}
	if moved, err := s.moved(ctx, x, stream, "", ref, groupRef{}); err != nil || !moved {
		return err
	}
	ref, err = s.cachedStream(ctx, x, stream)
	if err != nil {
		return err
	}
	_, err = read(ref)
	return err
}

func (s *Store) appendTx(ctx context.Context, stream string, events []rheo.Event, lookup bool) ([]rheo.Event, error) {
	out := slices.Clone(events)
	err := s.write(ctx, "append to stream "+quote(stream), func(t *writeTx) error {
		ref, err := s.cachedStream(ctx, t.execer, stream)
		if err != nil {
			return err
		}
		stored := map[string]rheo.Event{}
		if lookup {
			if stored, err = s.eventsByID(ctx, t.execer, stream, ref, events); err != nil {
				return err
			}
		}
		counts := map[int]int64{}
		fresh := make([]int, 0, len(out))
		for i := range out {
			if e, ok := stored[out[i].ID]; ok {
				out[i] = e
				continue
			}
			if out[i].Partition < 0 || out[i].Partition >= ref.parts {
				return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", out[i].Partition, stream, ref.parts)
			}
			counts[out[i].Partition]++
			fresh = append(fresh, i)
		}
		if len(fresh) == 0 {
			return nil
		}
		// Reserve sequences in every partition at once, and stamp the
		// partitions with the stream's change count after this append
		// (see AdvanceHeadsSQL). SQLite's single writer needs no lock
		// order.
		next := make(map[int]int64, len(counts))
		var heads jsonBuf
		for _, p := range sortedKeys(counts) {
			heads = heads.key(p).int(counts[p])
		}
		rows, err := t.query(ctx, AdvanceHeadsSQL, ref.id, heads.end('}'), stream)
		if err != nil {
			return err
		}
		for rows.Next() {
			var p int
			var hwm int64
			if err := rows.Scan(&p, &hwm); err != nil {
				rows.Close()
				return err
			}
			next[p] = hwm - counts[p] + 1
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(next) != len(counts) {
			// The cached id is of a stream another process deleted (its
			// counters went with it): the append runs again with the
			// name resolved afresh.
			s.forget(ref, stream, "")
			return errMoved
		}
		for _, i := range fresh {
			out[i].Sequence = next[out[i].Partition]
			next[out[i].Partition]++
		}
		// Rows go in partition by partition, each in sequence order, so
		// that a partition's events of one append sit side by side in the
		// table: on SQLite their rowids follow each other, and a fetch
		// steps from one to the next instead of searching the table's
		// B-tree for each (see docs/performance-log.md, "Appends store a
		// partition's events side by side").
		slices.SortStableFunc(fresh, func(a, b int) int { return cmp.Compare(out[a].Partition, out[b].Partition) })
		for chunk := range slices.Chunk(fresh, appendChunk) {
			var b Builder
			b.S(s.d.InsertMany() + " INTO rheo_events (stream_id, part, seq, id, etype, ekey, ts, payload, metadata) VALUES ")
			for j, i := range chunk {
				e := &out[i]
				meta, err := encodeMeta(e.Metadata)
				if err != nil {
					return rheo.Wrap(rheo.ErrInvalidArgument, err, "event %q metadata", e.ID)
				}
				if j > 0 {
					b.S(", ")
				}
				b.S("(").Arg(ref.id).S(", ").Arg(e.Partition).S(", ").Arg(e.Sequence).S(", ").Arg(e.ID).S(", ").
					Arg(e.Type).S(", ").Arg(e.Key).S(", ").Arg(micros(e.Timestamp)).S(", ").Arg(string(e.Payload)).S(", ").
					Arg(meta).S(")")
			}
			if _, err := t.exec(ctx, b.SQL(), b.Args()...); err != nil {
				if s.d.IsUniqueViolation(err) {
					if !lookup {
						return errKnownID
					}
					// Another writer stored one of these IDs between our
					// lookup and insert (not possible on SQLite's single
					// writer): report it as retryable.
					return rheo.Wrap(rheo.ErrBackendUnavailable, err, "concurrent append of the same event ID")
				}
				return err
			}
		}
		t.wake(stream)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AdvanceHeadsSQL reserves the sequences of an append (arguments: the
// stream's id, a JSON object of partition to count of events, and the
// stream's name) and returns each partition's new high watermark. It stamps
// each partition with the stream's change count after the append (the
// append wakes the stream, which adds one to it before the commit), so that
// a fetch that recorded the count it saw (rheo_groups.seen) reads only the
// partitions stamped after it (see fetchCursors). It is an upsert driven by
// the JSON, so that each partition's row is found by its key (an UPDATE …
// FROM was planned as a walk of the stream's partitions, reading the JSON
// for each); it inserts nothing, since every partition of a stream has its
// row, and the stream must still be the one of that id, name and number of
// partitions: when it is not (another process deleted it), fewer rows
// come back than partitions were named.
const AdvanceHeadsSQL = "INSERT INTO rheo_partitions (stream_id, part, hwm, stamp) " +
	"SELECT ?1, CAST(key AS INTEGER), value, (SELECT changes + 1 FROM rheo_streams WHERE id = ?1) FROM json_each(?2) " +
	"WHERE EXISTS (SELECT 1 FROM rheo_streams WHERE id = ?1 AND name = ?3 AND partitions > CAST(key AS INTEGER)) " +
	"ON CONFLICT (stream_id, part) DO UPDATE SET hwm = hwm + excluded.hwm, stamp = excluded.stamp RETURNING part, hwm"

// eventsByID returns the stored events of the stream among events' IDs.
func (s *Store) eventsByID(ctx context.Context, x execer, stream string, ref streamRef, events []rheo.Event) (map[string]rheo.Event, error) {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	found, err := s.events(ctx, x, stream, ref, ids)
	if err != nil {
		return nil, err
	}
	m := make(map[string]rheo.Event, len(found))
	for _, e := range found {
		m[e.ID] = e
	}
	return m, nil
}

func (s *Store) events(ctx context.Context, x execer, stream string, ref streamRef, ids []string) ([]rheo.Event, error) {
	var out []rheo.Event
	for chunk := range slices.Chunk(ids, appendChunk) {
		var b Builder
		b.S("SELECT " + eventCols + " FROM rheo_events WHERE stream_id = ").Arg(ref.id).S(" AND id IN (")
		List(&b, chunk).S(")")
		rows, err := x.query(ctx, b.SQL(), b.Args()...)
		if err != nil {
			return nil, err
		}
		if out, err = scanEvents(rows, stream, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Read implements rheo.Backend.
func (s *Store) Read(ctx context.Context, stream string, partition int, after int64, limit int) ([]rheo.Event, error) {
	var out []rheo.Event
	err := s.again(ctx, s.reader(), stream, func(ref streamRef) (bool, error) {
		if partition < 0 || partition >= ref.parts {
			return false, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", partition, stream, ref.parts)
		}
		rows, err := s.reader().query(ctx, "SELECT "+eventCols+" FROM rheo_events WHERE stream_id = ? AND part = "+PartParam+" AND seq > ? ORDER BY seq LIMIT ?",
			ref.id, partition, after, limit)
		if err != nil {
			return false, err
		}
		out, err = scanEvents(rows, stream, make([]rheo.Event, 0, min(limit, 256)))
		return len(out) > 0, err
	})
	if err != nil {
		return nil, s.classify(err, "read stream %q partition %d", stream, partition)
	}
	return out, nil
}

// Events implements rheo.Backend.
func (s *Store) Events(ctx context.Context, stream string, ids []string) ([]rheo.Event, error) {
	var out []rheo.Event
	err := s.again(ctx, s.reader(), stream, func(ref streamRef) (bool, error) {
		var err error
		out, err = s.events(ctx, s.reader(), stream, ref, ids)
		return len(out) > 0 || len(ids) == 0, err
	})
	if err != nil {
		return nil, s.classify(err, "events of stream %q", stream)
	}
	if out == nil {
		out = []rheo.Event{}
	}
	return out, nil
}

func sortedKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func quote(s string) string { return strconv.Quote(s) }

// insertPerPartition inserts one row (owner, partition, value(partition))
// for each of n partitions into target ("table (col, col, col)"), in
// statements of at most 256 rows.
func insertPerPartition(ctx context.Context, t *writeTx, target string, owner int64, n int, value func(p int) int64) error {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	for chunk := range slices.Chunk(parts, 256) {
		var b Builder
		b.S("INSERT INTO " + target + " VALUES ")
		for i, p := range chunk {
			if i > 0 {
				b.S(", ")
			}
			b.S("(").Arg(owner).S(", ").Arg(p).S(", ").Arg(value(p)).S(")")
		}
		if _, err := t.exec(ctx, b.SQL(), b.Args()...); err != nil {
			return err
		}
	}
	return nil
}
