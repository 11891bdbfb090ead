package memory

import (
	"context"
	"time"

	"github.com/rheo-go/rheo"
)

// Lag implements rheo.Backend.
func (b *Backend) Lag(_ context.Context, stream, group string, partitions []int) ([]rheo.PartitionLag, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, g, err := b.group(stream, group)
	if err != nil {
		return nil, err
	}
	one := func(p int) rheo.PartitionLag {
		return rheo.PartitionLag{Partition: p, Frontier: g.parts[p].frontier(), HighWatermark: s.parts[p].len()}
	}
	if partitions == nil {
		out := make([]rheo.PartitionLag, len(g.parts))
		for p := range g.parts {
			out[p] = one(p)
		}
		return out, nil
	}
	out := make([]rheo.PartitionLag, 0, len(partitions))
	for _, p := range partitions {
		if p >= 0 && p < len(g.parts) {
			out = append(out, one(p))
		}
	}
	return out, nil
}

// GroupStats implements rheo.Backend.
func (b *Backend) GroupStats(_ context.Context, stream, group string, _ time.Time) (rheo.GroupStats, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, g, err := b.group(stream, group)
	if err != nil {
		return rheo.GroupStats{}, err
	}
	var st rheo.GroupStats
	for p, gp := range g.parts {
		st.Inflight += gp.nLeased
		st.Available += gp.nAvailable + max(s.parts[p].len()-gp.cursor, 0)
		st.DeadLetters += int64(gp.dead.Len())
	}
	st.Skipped, st.MaxAttempts = g.skipped, g.maxAttempts
	return st, nil
}

// DeadLetters implements rheo.Backend.
func (b *Backend) DeadLetters(_ context.Context, stream, group, after string, limit int) ([]rheo.DeadLetter, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, g, err := b.group(stream, group)
	if err != nil {
		return nil, err
	}
	start := pos{0, 0}
	if after != "" {
		at, ok := s.lookup(after)
		if ok {
			d := g.parts[at.partition].dels[at.seq]
			ok = d != nil && d.status == dead
		}
		if !ok {
			return nil, rheo.Errorf(rheo.ErrCursorNotFound, "event %q is not a dead letter of group %q of stream %q", after, group, stream)
		}
		start = pos{at.partition, at.seq + 1}
	}
	out := []rheo.DeadLetter{}
	for p := start.partition; p < len(g.parts) && len(out) < limit; p++ {
		from := int64(0)
		if p == start.partition {
			from = start.seq
		}
		gp := g.parts[p]
		gp.dead.AscendGreaterOrEqual(from, func(seq int64) bool {
			d := gp.dels[seq]
			e := s.parts[p].event(seq)
			out = append(out, rheo.DeadLetter{
				EventID: e.ID, Partition: p, Sequence: seq, Attempts: d.attempt,
				Reason: d.reason, DeadLetteredAt: d.deadAt, Event: e,
			})
			return len(out) < limit
		})
	}
	return out, nil
}

// Replay implements rheo.Backend.
func (b *Backend) Replay(_ context.Context, r rheo.ReplayRequest) (int, error) {
	b.mu.Lock()
	s, g, err := b.group(r.Stream, r.Group)
	if err == nil {
		parts := make([]int, len(r.Events))
		for i, ref := range r.Events {
			parts[i] = ref.Partition
		}
		err = checkParts(s, r.Stream, parts, r.FromSequence)
	}
	if err != nil {
		b.mu.Unlock()
		return 0, err
	}
	n := 0
	for p, from := range r.FromSequence {
		gp := g.parts[p]
		from = max(from, s.parts[p].trimmed)
		n += int(max(gp.cursor-from, 0))
		for seq, d := range gp.dels {
			if seq > from {
				gp.unindex(d)
				delete(gp.dels, seq)
			}
		}
		gp.cursor = min(gp.cursor, from)
	}
	for _, ref := range r.Events {
		gp := g.parts[ref.Partition]
		if ref.Sequence > gp.cursor || ref.Sequence <= s.parts[ref.Partition].trimmed {
			continue // not offered yet (it will be, fresh), or trimmed away
		}
		d := gp.dels[ref.Sequence]
		if d == nil {
			d = &delivery{seq: ref.Sequence, eventID: s.parts[ref.Partition].id(ref.Sequence)}
			gp.dels[d.seq] = d
		}
		gp.reopen(d, time.Time{})
		n++
	}
	b.mu.Unlock()
	b.notify(r.Stream)
	return n, nil
}

// Redrive implements rheo.Backend.
func (b *Backend) Redrive(_ context.Context, stream, group string, ids []string) (int, error) {
	b.mu.Lock()
	s, g, err := b.group(stream, group)
	if err != nil {
		b.mu.Unlock()
		return 0, err
	}
	var todo []pos
	if len(ids) == 0 {
		for p, gp := range g.parts {
			gp.dead.Ascend(func(seq int64) bool {
				todo = append(todo, pos{p, seq})
				return true
			})
		}
	} else {
		for _, id := range ids {
			if at, ok := s.lookup(id); ok {
				todo = append(todo, at)
			}
		}
	}
	n := 0
	for _, at := range todo {
		gp := g.parts[at.partition]
		if d := gp.dels[at.seq]; d != nil && d.status == dead {
			gp.reopen(d, time.Time{})
			n++
		}
	}
	b.mu.Unlock()
	if n > 0 {
		b.notify(stream)
	}
	return n, nil
}

// ResetGroup implements rheo.Backend.
func (b *Backend) ResetGroup(_ context.Context, stream, group string, start map[int]int64) (int, error) {
	b.mu.Lock()
	s, g, err := b.group(stream, group)
	if err == nil {
		err = checkParts(s, stream, nil, start)
	}
	if err != nil {
		b.mu.Unlock()
		return 0, err
	}
	n := 0
	for p, from := range start {
		from = max(from, s.parts[p].trimmed)
		n += int(max(g.parts[p].cursor-from, 0))
		g.parts[p] = newGpart(from)
	}
	b.mu.Unlock()
	b.notify(stream)
	return n, nil
}
