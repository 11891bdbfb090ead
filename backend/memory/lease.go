package memory

import (
	"context"
	"slices"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/leaseerr"
)

const poisonReason = "max_attempts: lease expired"

// Fetch implements rheo.Backend: claimable deliveries first (they sit below
// the cursor), then events not yet offered, in sequence order per partition;
// the limit is shared across partitions round-robin, starting from a
// partition that rotates between fetches.
func (b *Backend) Fetch(_ context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, g, err := b.group(r.Stream, r.Group)
	if err == nil {
		err = checkParts[int](s, r.Stream, r.Partitions, nil)
	}
	if err != nil {
		return nil, err
	}
	k := len(r.Partitions)
	first := g.rr % k
	g.rr++
	quota := (r.Limit + k - 1) / k
	for _, p := range r.Partitions {
		g.parts[p].promote(r.Now, g.maxAttempts)
	}
	leases := make([]rheo.Lease, 0, min(r.Limit, 256))
	exhausted := make([]bool, k)
	for pass := 0; len(leases) < r.Limit; pass++ {
		progress := false
		for i := range k {
			if len(leases) >= r.Limit {
				break
			}
			j := (first + i) % k
			if exhausted[j] {
				continue
			}
			want := min(quota, r.Limit-len(leases))
			if pass > 0 {
				want = r.Limit - len(leases)
			}
			before := len(leases)
			leases = b.claim(s, g, r.Partitions[j], want, r, leases)
			if got := len(leases) - before; got < want {
				exhausted[j] = true
			} else if got > 0 {
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	slices.SortFunc(leases, func(a, b rheo.Lease) int {
		if a.Event.Partition != b.Event.Partition {
			return a.Event.Partition - b.Event.Partition
		}
		return int(a.Event.Sequence - b.Event.Sequence)
	})
	return leases, nil
}

// claim appends up to want leases of partition p to out.
func (b *Backend) claim(s *stream, g *group, p, want int, r rheo.FetchRequest, out []rheo.Lease) []rheo.Lease {
	gp := g.parts[p]
	got := 0
	for got < want {
		seq, ok := gp.ready.Min()
		if !ok {
			break
		}
		d := gp.dels[seq]
		// A clock set backwards can make a promoted delivery not claimable
		// after all: file it back.
		if (d.status == leased && d.expiresAt.After(r.Now)) || (d.status == available && d.availableAt.After(r.Now)) {
			gp.unindex(d)
			gp.index(d, r.Now)
			continue
		}
		gp.unindex(d)
		out = append(out, b.lease(s, g, p, d, r))
		got++
	}
	events := s.parts[p]
	for got < want && gp.cursor < events.len() {
		gp.cursor++
		d := &delivery{seq: gp.cursor, eventID: events.id(gp.cursor)}
		gp.dels[d.seq] = d
		out = append(out, b.lease(s, g, p, d, r))
		got++
	}
	return out
}

// lease claims the unindexed delivery d.
func (b *Backend) lease(s *stream, g *group, p int, d *delivery, r rheo.FetchRequest) rheo.Lease {
	d.status = leased
	d.attempt++
	d.leaseID = r.NewLeaseID()
	d.consumerID = r.ConsumerID
	d.leasedAt = r.Now
	d.expiresAt = r.Now.Add(r.LeaseDuration)
	d.availableAt = time.Time{}
	g.parts[p].index(d, r.Now)
	return rheo.Lease{
		ID: d.leaseID, Receipt: d.leaseID, Stream: r.Stream, Group: g.name, ConsumerID: d.consumerID,
		Attempt: d.attempt, LeasedAt: d.leasedAt, ExpiresAt: d.expiresAt,
		Event: s.parts[p].event(d.seq),
	}
}

// current returns the delivery that l currently holds, or a fencing error.
func current(g *group, l rheo.Lease) (*gpart, *delivery, error) {
	p := l.Event.Partition
	if p < 0 || p >= len(g.parts) {
		return nil, nil, leaseerr.Stale(l)
	}
	gp := g.parts[p]
	d := gp.dels[l.Event.Sequence]
	if d == nil || d.status != leased || d.leaseID != l.ID || d.eventID != l.Event.ID {
		return nil, nil, leaseerr.Stale(l)
	}
	if l.Receipt != d.leaseID {
		return nil, nil, leaseerr.Mismatch(l)
	}
	return gp, d, nil
}

// Renew implements rheo.Backend.
func (b *Backend) Renew(_ context.Context, l rheo.Lease, expiresAt, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, g, err := b.group(l.Stream, l.Group)
	if err != nil {
		return err
	}
	gp, d, err := current(g, l)
	if err != nil {
		return err
	}
	gp.unindex(d)
	d.expiresAt = expiresAt
	gp.index(d, now)
	return nil
}

// Settle implements rheo.Backend.
func (b *Backend) Settle(_ context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	b.mu.Lock()
	_, g, err := b.group(stream, group)
	if err != nil {
		b.mu.Unlock()
		return nil, err
	}
	errs := make([]error, len(reqs))
	wake := false
	touched := map[*gpart]bool{}
	for i, r := range reqs {
		if errs[i] = r.CheckKind(); errs[i] != nil {
			continue
		}
		gp, d, err := current(g, r.Lease)
		if err != nil {
			errs[i] = err
			continue
		}
		gp.unindex(d)
		d.leaseID, d.consumerID = "", ""
		switch r.Kind {
		case rheo.SettleAck:
			d.status = acked
		case rheo.SettleReject:
			d.status, d.reason, d.deadAt = dead, r.Reason, now
		case rheo.SettleRelease:
			d.status, d.availableAt = available, now
			d.attempt--
			wake = true
		case rheo.SettleNack:
			if d.attempt >= g.maxAttempts {
				d.status, d.reason, d.deadAt = dead, "max_attempts: "+r.Reason, now
			} else {
				d.status, d.reason, d.availableAt = available, r.Reason, r.AvailableAt
				wake = true
			}
		}
		gp.index(d, now)
		touched[gp] = true
	}
	for gp := range touched {
		gp.compact()
	}
	b.mu.Unlock()
	if wake {
		b.notify(stream)
	}
	return errs, nil
}
