package redis

import (
	"context"
	"math"
	"slices"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/match"
)

// scanChunk is how many entries one round trip of a query scan reads.
const scanChunk = 1000

// Query implements rheo.Backend. Redis keeps no secondary index, so a query
// scans the selected partitions by sequence range (XRANGE, or XREVRANGE for
// descending sequence order) in chunks of 1000 entries and filters in the
// client. In sequence order each partition stops after Limit matches; other
// orders read the whole range, keeping at most about 2×Limit candidates in
// memory. A call that would read more than the scan limit fails with
// rheo.ErrUnsupported (see WithQueryScanLimit).
func (b *Backend) Query(ctx context.Context, q rheo.QuerySpec) ([]rheo.Event, error) {
	st, err := b.Stream(ctx, q.Stream)
	if err != nil {
		return nil, err
	}
	base := b.streamBase(q.Stream)
	parts := q.Partitions
	if len(parts) == 0 {
		parts = make([]int, st.Partitions)
		for p := range parts {
			parts[p] = p
		}
	}
	perPart := math.MaxInt
	desc := false
	if q.OrderBy[0].Field == rheo.OrderSequence {
		perPart, desc = q.Limit, q.OrderBy[0].Desc
	}
	byOrder := func(a, b rheo.Event) int { return match.Compare(&a, &b, q.OrderBy) }
	var out []rheo.Event
	scanned := 0
	for _, p := range parts {
		if p < 0 || p >= len(st.HighWatermarks) { // a client's cached count may be out of date
			return nil, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, q.Stream, len(st.HighWatermarks))
		}
		lo := max(q.AfterSequence, q.After[p]) // exclusive
		hi := st.HighWatermarks[p]             // inclusive
		if q.UntilSequence > 0 {
			hi = min(hi, q.UntilSequence)
		}
		n := 0
		for lo < hi && n < perPart {
			count := int64(scanChunk)
			if b.scanLimit > 0 {
				if scanned >= b.scanLimit {
					return nil, rheo.Errorf(rheo.ErrUnsupported,
						"query of stream %q would scan more than %d entries (Redis has no secondary indexes); narrow it with Partitions, AfterSequence or UntilSequence",
						q.Stream, b.scanLimit)
				}
				count = min(count, int64(b.scanLimit-scanned))
			}
			dir := ""
			if desc {
				dir = "rev"
			}
			v, err := b.run(ctx, rangeScript, base, p, entryID(lo+1), entryID(hi), count, dir)
			if err != nil {
				return nil, b.readErr(err, "query stream %q partition %d", q.Stream, p)
			}
			evs, err := decodeEntries(q.Stream, p, v)
			if err != nil {
				return nil, rheo.Wrap(rheo.ErrBackendUnavailable, err, "redis: query stream %q", q.Stream)
			}
			if len(evs) == 0 {
				break
			}
			scanned += len(evs)
			for _, e := range evs {
				if n < perPart && match.Event(&e, &q.Query) {
					out = append(out, e)
					n++
				}
			}
			if desc {
				hi = evs[len(evs)-1].Sequence - 1
			} else {
				lo = evs[len(evs)-1].Sequence
			}
			if perPart == math.MaxInt && len(out) > 2*q.Limit+scanChunk {
				slices.SortFunc(out, byOrder)
				out = out[:q.Limit]
			}
		}
	}
	slices.SortFunc(out, byOrder)
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []rheo.Event{}
	}
	return out, nil
}
