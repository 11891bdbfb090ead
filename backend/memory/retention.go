package memory

import (
	"context"
	"time"

	"github.com/google/btree"

	"github.com/rheo-go/rheo"
)

// DeleteGroup implements rheo.Backend.
func (b *Backend) DeleteGroup(_ context.Context, stream, group string) error {
	b.mu.Lock()
	s, _, err := b.group(stream, group)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	delete(s.groups, group)
	b.mu.Unlock()
	b.notify(stream)
	return nil
}

// DeleteStream implements rheo.Backend.
func (b *Backend) DeleteStream(_ context.Context, stream string) error {
	b.mu.Lock()
	if _, err := b.stream(stream); err != nil {
		b.mu.Unlock()
		return err
	}
	delete(b.streams, stream)
	b.mu.Unlock()
	b.notify(stream) // wake waiters so they see it is gone
	return nil
}

// SetRetention implements rheo.Backend.
func (b *Backend) SetRetention(_ context.Context, stream string, r rheo.Retention) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.stream(stream)
	if err != nil {
		return err
	}
	s.info.Retention = r
	return nil
}

// LeaseRetention implements rheo.Backend.
func (b *Backend) LeaseRetention(_ context.Context, stream, owner string, now, until time.Time) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.stream(stream)
	if err != nil {
		return false, err
	}
	if s.leaseOwner != "" && s.leaseOwner != owner && s.leaseUntil.After(now) {
		return false, nil
	}
	s.leaseOwner, s.leaseUntil = owner, until
	return true, nil
}

// Trim implements rheo.Backend.
func (b *Backend) Trim(_ context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.stream(r.Stream)
	if err == nil {
		err = checkParts[int](s, r.Stream, []int{r.Partition}, nil)
	}
	if err != nil {
		return rheo.TrimResult{}, err
	}
	l := s.parts[r.Partition]
	through := min(r.Through, l.n, l.trimmed+int64(r.Limit))
	if !r.Force {
		for _, g := range s.groups {
			through = min(through, g.parts[r.Partition].frontier())
		}
	}
	res := rheo.TrimResult{TrimmedThrough: l.trimmed}
	if through <= l.trimmed {
		return res, nil
	}
	for _, g := range s.groups {
		skipped, dead := g.parts[r.Partition].trim(l.trimmed, through)
		g.skipped += skipped
		res.Skipped += skipped
		res.DeadLetters += dead
	}
	res.Removed = through - l.trimmed
	l.trim(through, func(id string) {
		s.ids.remove(id)
		s.idDeletes++
	})
	s.compactIDs()
	res.TrimmedThrough = through
	return res, nil
}

// trim deletes the group's delivery records at or below through and raises
// its cursor there; it returns how many of the removed events (above
// trimmed) the group had not acked, and how many of them were dead letters.
func (g *gpart) trim(trimmed, through int64) (skipped, deadN int64) {
	var seqs []int64
	for _, idx := range []*btree.BTreeG[int64]{g.pending, g.acked, g.dead} {
		idx.AscendLessThan(through+1, func(seq int64) bool {
			seqs = append(seqs, seq)
			return true
		})
	}
	for _, seq := range seqs {
		d := g.dels[seq]
		if d.status != acked {
			skipped++
		}
		if d.status == dead {
			deadN++
		}
		g.unindex(d)
		delete(g.dels, seq)
	}
	if g.cursor < through {
		skipped += through - max(g.cursor, trimmed)
		g.cursor = through
	}
	return skipped, deadN
}

// compactIDs rebuilds the ID index once it has lost more entries than it
// holds: a Go map never shrinks on delete, and a trimmed stream deletes
// forever.
func (s *stream) compactIDs() {
	if s.idDeletes < 1024 || s.idDeletes < int64(s.ids.len()) {
		return
	}
	s.ids, s.idDeletes = s.ids.compacted(), 0
}
