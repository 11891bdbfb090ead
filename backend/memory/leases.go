package memory

import (
	"context"
	"slices"

	"github.com/rheo-go/rheo"
)

var _ rheo.LeaseLister = (*Backend)(nil)

// Leases implements rheo.LeaseLister. It walks the pending deliveries (the
// in-flight window), never the log.
func (b *Backend) Leases(_ context.Context, stream, group string, eventIDs []string, limit int) ([]rheo.Lease, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, g, err := b.group(stream, group)
	if err != nil {
		return nil, err
	}
	lease := func(p int, d *delivery) rheo.Lease {
		return rheo.Lease{
			Stream: stream, Group: group, ConsumerID: d.consumerID, Attempt: d.attempt,
			LeasedAt: d.leasedAt, ExpiresAt: d.expiresAt,
			Event: rheo.Event{ID: d.eventID, Stream: stream, Partition: p, Sequence: d.seq},
		}
	}
	var out []rheo.Lease
	if eventIDs != nil {
		// A filter, not a list of lookups: an ID that comes twice lists its
		// lease once.
		seen := make(map[string]bool, len(eventIDs))
		for _, id := range eventIDs {
			if seen[id] {
				continue
			}
			seen[id] = true
			at, ok := s.lookup(id)
			if !ok {
				continue
			}
			if d := g.parts[at.partition].dels[at.seq]; d != nil && d.status == leased {
				out = append(out, lease(at.partition, d))
			}
		}
		slices.SortFunc(out, func(a, b rheo.Lease) int {
			if a.Event.Partition != b.Event.Partition {
				return a.Event.Partition - b.Event.Partition
			}
			return int(a.Event.Sequence - b.Event.Sequence)
		})
		return out[:min(len(out), limit)], nil
	}
	for p, gp := range g.parts {
		gp.pending.Ascend(func(seq int64) bool {
			if d := gp.dels[seq]; d.status == leased {
				out = append(out, lease(p, d))
			}
			return len(out) < limit
		})
		if len(out) == limit {
			break
		}
	}
	return out, nil
}
