package sqlstore

import (
	"context"
	"slices"
	"strings"

	"github.com/rheo-go/rheo"
)

var orderCols = map[string]string{
	rheo.OrderSequence: "seq", rheo.OrderTimestamp: "ts", rheo.OrderPartition: "part",
	rheo.OrderID: "id", rheo.OrderType: "etype", rheo.OrderKey: "ekey",
}

// BuildQuery compiles a validated query into one SELECT of eventCols. Type,
// key, time window and partition filters are plain column predicates that
// the events indexes serve; metadata and payload filters go through the
// dialect's JSON functions.
func BuildQuery(d Dialect, streamID int64, q rheo.QuerySpec) *Builder {
	b := &Builder{}
	b.S("SELECT " + eventCols + " FROM rheo_events WHERE stream_id = ").Arg(streamID)
	if q.Type != "" {
		b.S(" AND etype = ").Arg(q.Type)
	}
	if q.Key != "" {
		b.S(" AND ekey = ").Arg(q.Key)
	}
	if len(q.Partitions) > 0 {
		b.S(" AND part IN (")
		List(b, q.Partitions).S(")")
	}
	if !q.From.IsZero() {
		b.S(" AND ts >= ").Arg(micros(q.From))
	}
	if !q.To.IsZero() {
		b.S(" AND ts <= ").Arg(micros(q.To))
	}
	if q.AfterSequence > 0 {
		b.S(" AND seq > ").Arg(q.AfterSequence)
	}
	if q.UntilSequence > 0 {
		b.S(" AND seq <= ").Arg(q.UntilSequence)
	}
	for _, p := range sortedKeys(q.After) {
		if s := q.After[p]; s > q.AfterSequence {
			b.S(" AND NOT (part = ").Arg(p).S(" AND seq <= ").Arg(s).S(")")
		}
	}
	keys := make([]string, 0, len(q.Metadata))
	for k := range q.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.S(" AND ")
		d.MetadataEq(b, "metadata", k, q.Metadata[k])
	}
	paths := make([]string, 0, len(q.Payload))
	for p := range q.Payload {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		b.S(" AND ")
		d.PayloadEq(b, "payload", strings.Split(p, "."), q.Payload[p])
	}
	b.S(" ORDER BY ")
	order := q.OrderBy
	if len(order) == 0 {
		order = []rheo.Order{rheo.Asc(rheo.OrderSequence)}
	}
	for i, o := range order {
		if i > 0 {
			b.S(", ")
		}
		col := orderCols[o.Field]
		b.S(col)
		switch col {
		case "id", "etype", "ekey":
			b.S(d.TextOrder())
		}
		if o.Desc {
			b.S(" DESC")
		}
	}
	// Ties break by (sequence, partition), as in every backend.
	b.S(", seq, part LIMIT ").Arg(q.Limit)
	return b
}

// Query implements rheo.Backend.
func (s *Store) Query(ctx context.Context, q rheo.QuerySpec) ([]rheo.Event, error) {
	var out []rheo.Event
	err := s.again(ctx, s.reader(), q.Stream, func(ref streamRef) (bool, error) {
		for _, p := range q.Partitions {
			if p < 0 || p >= ref.parts {
				return false, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, q.Stream, ref.parts)
			}
		}
		b := BuildQuery(s.d, ref.id, q)
		// Query shapes vary without bound: run them unprepared and uncached.
		rows, err := s.r.QueryContext(ctx, s.d.Rebind(b.SQL()), b.Args()...)
		if err != nil {
			return false, err
		}
		out, err = scanEvents(rows, q.Stream, []rheo.Event{})
		return len(out) > 0, err
	})
	if err != nil {
		return nil, s.classify(err, "query stream %q", q.Stream)
	}
	return out, nil
}
