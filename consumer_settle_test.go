package rheo_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// batchLog records the Limit of every fetch, and the lease IDs of every
// fetch that returned leases and of every settle call.
type batchLog struct {
	rheo.Backend

	mu      sync.Mutex
	limits  []int
	fetches [][]string
	settles [][]string
}

func (b *batchLog) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	b.mu.Lock()
	b.limits = append(b.limits, r.Limit)
	b.mu.Unlock()
	ls, err := b.Backend.Fetch(ctx, r)
	if len(ls) > 0 {
		ids := make([]string, len(ls))
		for i, l := range ls {
			ids[i] = l.ID
		}
		b.mu.Lock()
		b.fetches = append(b.fetches, ids)
		b.mu.Unlock()
	}
	return ls, err
}

func (b *batchLog) Settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.Lease.ID
	}
	b.mu.Lock()
	b.settles = append(b.settles, ids)
	b.mu.Unlock()
	return b.Backend.Settle(ctx, stream, group, reqs, now)
}

// settledIn maps each lease ID to the index of the settle call that held it.
func (b *batchLog) settledIn() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := map[string]int{}
	for i, ids := range b.settles {
		for _, id := range ids {
			in[id] = i
		}
	}
	return in
}

// With quick handlers the consumer keeps more than one fetch in flight, and
// its handlers finish the leases of one fetch while those of the next are
// under way. The settler sends the settles of each fetch together, in one
// backend call, as soon as the fetch's last one arrives (stores that lease a
// fetch's events as one span settle a whole one cheaply), never a part of
// one while it waits for nothing longer than the rest of that fetch: with
// its linger made endless, every settle call here must hold whole fetches.
func TestSettlesGoOutByWholeFetches(t *testing.T) {
	const n = 3000
	b := &batchLog{Backend: memory.New()}
	c, _ := streamOn(t, b, rheo.GroupConfig{}, n)
	var handled atomic.Int64
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 4,
		Handler: func(context.Context, rheo.Event) error { handled.Add(1); return nil }})
	require.NoError(t, err)
	rheo.SetSettleLingerForTest(k, time.Hour, time.Hour)
	stop := runUntilStopped(k)
	waitFor(t, "every event handled", func() bool { return handled.Load() == n })
	require.NoError(t, k.Drain(context.Background()))
	require.NoError(t, stop())

	in := b.settledIn()
	require.Len(t, in, n, "every lease settled once")
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Greater(t, len(b.fetches), 2, "the test needs fetches in flight together")
	for i, ids := range b.fetches {
		call := in[ids[0]]
		for _, id := range ids {
			require.Equal(t, call, in[id], "fetch %d (%d leases) settled in more than one call", i, len(ids))
		}
	}
	require.Less(t, len(b.settles), len(b.fetches)+1, "at most one settle call per fetch")
}

// A settle waits for the rest of its fetch only while other settles keep
// arriving: when one handler stalls, the settles of the fetch's other leases
// go out after the linger, and the stalled lease's once it is done.
func TestSettlesOfAPartOfAFetchGoOutWhenAHandlerStalls(t *testing.T) {
	const n = 10
	b := &batchLog{Backend: memory.New()}
	c, evs := streamOn(t, b, rheo.GroupConfig{}, n)
	stalled := evs[n/2].ID
	release := make(chan struct{})
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 2, MaxInflight: n,
		Handler: func(ctx context.Context, e rheo.Event) error {
			if e.ID == stalled {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		}})
	require.NoError(t, err)
	stop := runUntilStopped(k)
	acked := func() int { return len(b.settledIn()) }
	waitFor(t, "the other leases of the fetch acked", func() bool { return acked() == n-1 })
	close(release)
	waitFor(t, "the stalled lease acked", func() bool { return acked() == n })
	require.NoError(t, stop())
}
