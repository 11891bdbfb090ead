package memory

import (
	"context"
	"math"
	"slices"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/match"
)

// Query implements rheo.Backend by scanning the selected partitions within
// their sequence bounds; it has no secondary indexes.
func (b *Backend) Query(_ context.Context, q rheo.QuerySpec) ([]rheo.Event, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, err := b.stream(q.Stream)
	if err != nil {
		return nil, err
	}
	if err := checkParts[int](s, q.Stream, q.Partitions, nil); err != nil {
		return nil, err
	}
	parts := q.Partitions
	if len(parts) == 0 {
		parts = make([]int, len(s.parts))
		for p := range parts {
			parts[p] = p
		}
	}
	// In sequence order no partition contributes more than Limit events to
	// a page, so each scan can stop there.
	perPart := math.MaxInt
	desc := false
	if q.OrderBy[0].Field == rheo.OrderSequence {
		perPart, desc = q.Limit, q.OrderBy[0].Desc
	}
	var out []rheo.Event
	for _, p := range parts {
		evs := s.parts[p]
		lo := max(q.AfterSequence, q.After[p], evs.trimmed) // exclusive
		hi := evs.len()                                     // inclusive
		if q.UntilSequence > 0 {
			hi = min(hi, q.UntilSequence)
		}
		if lo >= hi { // (lo+1 could overflow)
			continue
		}
		n := 0
		for i := lo + 1; i <= hi && n < perPart; i++ {
			seq := i
			if desc {
				seq = hi - (i - lo - 1)
			}
			e := evs.view(seq)
			if match.Event(&e, &q.Query) {
				out = append(out, clone(e))
				n++
			}
		}
	}
	slices.SortFunc(out, func(a, b rheo.Event) int { return match.Compare(&a, &b, q.OrderBy) })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []rheo.Event{}
	}
	return out, nil
}
