package mongo

import (
	"context"

	"github.com/rheo-go/rheo"
)

var _ rheo.LeaseLister = (*Backend)(nil)

// Leases implements rheo.LeaseLister from each partition's current state
// version (one read per partition, plus the listed events).
func (b *Backend) Leases(ctx context.Context, stream, group string, eventIDs []string, limit int) ([]rheo.Lease, error) {
	s, g, err := b.group(ctx, stream, group)
	if err != nil {
		return nil, err
	}
	want, cache, err := b.positions(ctx, s, eventIDs)
	if err != nil {
		return nil, err
	}
	if eventIDs == nil {
		want = nil // every lease; an empty, non-nil eventIDs lists none
	}
	out := []rheo.Lease{}
	for p := 0; p < s.Partitions && len(out) < limit; p++ {
		if want != nil && want[p] == nil {
			continue
		}
		_, st, err := b.state(ctx, g, p)
		if err != nil {
			return nil, err
		}
		for _, d := range st.Dels {
			if len(out) >= limit {
				break
			}
			if d.Status != stLeased || (want != nil && !want[p][d.Seq]) {
				continue
			}
			evs, err := cache.readRange(ctx, p, d.Seq, d.Seq)
			if err != nil {
				return nil, err
			}
			out = append(out, rheo.Lease{
				ID: d.Lease, Stream: stream, Group: group, ConsumerID: d.Consumer, Attempt: d.Attempt,
				LeasedAt: fromMicros(d.LeasedAt), ExpiresAt: fromMicros(d.ExpiresAt), Event: evs[0],
			})
		}
	}
	return out, nil
}

// positions materializes the stream's log and finds the named events: by
// partition, the sequences of those that exist. It returns the cache it
// read them through.
func (b *Backend) positions(ctx context.Context, s *streamDoc, ids []string) (map[int]map[int64]bool, *batchCache, error) {
	n, _, err := b.batchHead(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	if err := b.materialize(ctx, s, n); err != nil {
		return nil, nil, err
	}
	cache := b.newBatchCache(s)
	want := map[int]map[int64]bool{}
	for _, id := range ids {
		e, err := cache.byID(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if e == nil {
			continue
		}
		if want[e.Partition] == nil {
			want[e.Partition] = map[int64]bool{}
		}
		want[e.Partition][e.Sequence] = true
	}
	return want, cache, nil
}
