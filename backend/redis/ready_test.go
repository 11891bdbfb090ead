package redis_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/rheotest"
)

// countingBackend fetches through an instrumented copy of the fetch script
// and keeps how many elements the last fetch sent to or read from Redis.
type countingBackend struct {
	*redis.Backend
	touched int64
}

func (c *countingBackend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	ls, n, err := c.FetchCounted(ctx, r)
	c.touched = n
	return ls, err
}

// countedGroup creates, on a backend of its own fetched through
// countingBackend (so that its FetchStreams and FetchDueProbes count),
// stream "s" of parts partitions and its group "g".
func countedGroup(t *testing.T, parts int) (*redis.Backend, goredis.UniversalClient, *rheo.Client) {
	t.Helper()
	ctx := context.Background()
	rb, rc := newBackend(t)
	c := rheo.New(&countingBackend{Backend: rb})
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	return rb, rc, c
}

// fetchAck100 fetches 100 leases of group "g" of stream "s", which must
// all be there, and acks them.
func fetchAck100(t *testing.T, c *rheo.Client) []rheo.Lease {
	t.Helper()
	ctx := context.Background()
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 100)
	require.NoError(t, c.AckBatch(ctx, ls))
	return ls
}

// backlogFetchCost builds a group with a backlog of n deliveries of one kind
// on one partition (reopened: acked, then replayed; expired: leases that
// expired; due: nacked with a delay that has passed), claims the first 10
// of them, then returns what the next fetch of 10 touched. Both fetches
// must claim the lowest sequences, in order.
func backlogFetchCost(t *testing.T, kind string, n int) int64 {
	t.Helper()
	rb, _ := newBackend(t)
	be := &countingBackend{Backend: rb}
	clk := clock.NewFrozen(epoch)
	c := rheo.New(be, rheo.WithClock(clk))
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	appendN(t, c, "s", 1, n)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 5}))
	for done := 0; done < n; {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1000, LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.NotEmpty(t, ls)
		switch kind {
		case "reopened":
			require.NoError(t, c.AckBatch(ctx, ls))
		case "due":
			for _, l := range ls {
				require.NoError(t, c.Nack(ctx, l, "later", rheo.Delay(time.Hour)))
			}
		}
		done += len(ls)
	}
	attempt := 2
	switch kind {
	case "reopened":
		k, err := c.Replay(ctx, "s", "g", rheo.Matching(rheo.Query{Type: "t"}))
		require.NoError(t, err)
		require.Equal(t, n, k)
		attempt = 1
	case "expired":
		clk.Advance(2 * time.Minute)
	case "due":
		clk.Advance(2 * time.Hour)
	}
	appendN(t, c, "s", 1, 10) // new events wait behind the backlog
	var touched int64
	for round := range 2 {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10, LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, ls, 10)
		for i, l := range ls {
			require.Equal(t, int64(round*10+i+1), l.Event.Sequence, "%s: lowest sequences first", kind)
			require.Equal(t, attempt, l.Attempt)
		}
		touched = be.touched
		require.NoError(t, c.AckBatch(ctx, ls))
	}
	return touched
}

// TestFetchCostIndependentOfBacklog: a fetch claims the first deliveries
// of a partition's backlog of claimable ones without reading the rest.
// Earlier versions read and sorted every due delivery of the partition on
// every fetch (a ZRANGEBYSCORE of the whole due set and an HMGET of every
// member), so draining a backlog of n cost time quadratic in n. The signal
// is deterministic: how many elements the fetch script sends to and reads
// from Redis, counted by an instrumented copy of the script; it must not
// grow with the backlog (20 times larger here). Deliveries that become due
// together are moved into the ready set by the first fetch after (once
// each), so the second fetch is measured.
func TestFetchCostIndependentOfBacklog(t *testing.T) {
	for _, kind := range []string{"reopened", "expired", "due"} {
		t.Run(kind, func(t *testing.T) {
			small := backlogFetchCost(t, kind, 200)
			big := backlogFetchCost(t, kind, 4000)
			t.Logf("%s: a fetch of 10 touched %d elements with 200 in the backlog, %d with 4,000", kind, small, big)
			require.Less(t, big, int64(1000), "a fetch of 10 reads a bounded part of the backlog")
			require.LessOrEqual(t, big, small+small/4, "a fetch's cost does not grow with the backlog")
		})
	}
}

// dropReadySets deletes what earlier versions never wrote (the ready sets
// and the watermarks): the store is then as an earlier version left it.
func dropReadySets(t *testing.T, rc goredis.UniversalClient, gb string, parts int) {
	t.Helper()
	keys := []string{gb + "m"}
	for p := range parts {
		keys = append(keys, fmt.Sprintf("%sa:%d", gb, p))
	}
	require.NoError(t, rc.Del(context.Background(), keys...).Err())
}

// checkReadySets checks the layout of docs/redis.md: where partition p has a
// watermark m, its ready set a:<p> holds exactly the members of d:<p> due by
// m, none of them a lease at the attempt limit (poison is buried when it
// becomes due, never made ready); without one it has no ready set.
func checkReadySets(t *testing.T, rc goredis.UniversalClient, gb string, parts, maxAttempts int, at string) {
	t.Helper()
	ctx := context.Background()
	for p := range parts {
		ps := strconv.Itoa(p)
		ready, err := rc.ZRange(ctx, gb+"a:"+ps, 0, -1).Result()
		require.NoError(t, err)
		m, err := rc.HGet(ctx, gb+"m", ps).Result()
		if err == goredis.Nil {
			require.Empty(t, ready, "%s: partition %d has a ready set but no watermark", at, p)
			continue
		}
		require.NoError(t, err)
		due := dueBy(t, rc, gb, ps, m)
		require.Equal(t, due, seqs(t, ready), "%s: partition %d: ready set against the due set by the watermark %s", at, p, m)
		if len(ready) == 0 {
			continue
		}
		vals, err := rc.HMGet(ctx, gb+"l:"+ps, ready...).Result()
		require.NoError(t, err)
		for i, v := range vals {
			s, _ := v.(string)
			lid, rest, _ := strings.Cut(s, ":")
			att, _, _ := strings.Cut(rest, ":")
			n, err := strconv.Atoi(att)
			require.NoError(t, err, "%s: partition %d, sequence %s: lease %q", at, p, ready[i], s)
			require.False(t, lid != "" && n >= maxAttempts, "%s: partition %d: poison %s (%q) is ready", at, p, ready[i], s)
		}
	}
}

// dueBy returns the sequences of d:<p> due by the watermark m, sorted, by
// their exact due times: a score past 2^53 stands for the time in x:<p>
// that rounds to it (see due_range in scripts.go).
func dueBy(t *testing.T, rc goredis.UniversalClient, gb, ps, m string) []int64 {
	t.Helper()
	ctx := context.Background()
	wm, err := strconv.ParseInt(m, 10, 64)
	require.NoError(t, err)
	zs, err := rc.ZRangeWithScores(ctx, gb+"d:"+ps, 0, -1).Result()
	require.NoError(t, err)
	exact, err := rc.HGetAll(ctx, gb+"x:"+ps).Result()
	require.NoError(t, err)
	out := []int64{}
	for _, z := range zs {
		ss := z.Member.(string)
		if math.IsInf(z.Score, 1) {
			continue // DUE_PIN
		}
		due := int64(z.Score)
		if x, ok := exact[ss]; ok {
			n, err := strconv.ParseInt(x, 10, 64)
			require.NoError(t, err)
			if float64(n) == z.Score {
				due = n
			}
		}
		if due <= wm {
			n, err := strconv.ParseInt(ss, 10, 64)
			require.NoError(t, err)
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// seqs returns the sequences ss, sorted.
func seqs(t *testing.T, ss []string) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		out[i] = n
	}
	slices.Sort(out)
	return out
}

// TestReadySetsAgreeWithMemory drives Redis and the memory backend with the
// same random operations under a clock that jumps back and forth (as the
// clocks of several processes disagree; rheotest.RunClockSkew), now and
// then deletes the ready sets and watermarks (a store written by an
// earlier version), and checks the ready sets' layout after every step.
func TestReadySetsAgreeWithMemory(t *testing.T) {
	agreeWithMemory(t, rheotest.ClockSkewOptions{Seeds: 6, Steps: 300})
}

// TestReadySetsAgreeWithMemoryFarFuture is TestReadySetsAgreeWithMemory
// with the clock past 2^53 µs since 1970 (where a float64 holds every
// second microsecond only), moved to the microsecond: due times,
// watermarks and lease expiries must still be exact.
func TestReadySetsAgreeWithMemoryFarFuture(t *testing.T) {
	agreeWithMemory(t, rheotest.ClockSkewOptions{
		Seeds: 4, Steps: 300,
		Epoch: time.Date(2260, 1, 1, 0, 0, 0, 1000, time.UTC), Microseconds: true,
	})
}

// agreeWithMemory runs rheotest.RunClockSkew on Redis with opts, dropping
// the ready sets now and then and checking their layout after every step.
func agreeWithMemory(t *testing.T, opts rheotest.ClockSkewOptions) {
	const parts, maxAttempts = 2, 2 // those of rheotest.RunClockSkew
	rc := testClient(t)
	group := func(b rheo.Backend) string { return b.(*redis.Backend).KeyPrefix() + "{s}:g:g:" }
	opts.Op = func(t *testing.T, b rheo.Backend) string {
		dropReadySets(t, rc, group(b), parts)
		return "drop ready sets"
	}
	opts.Check = func(t *testing.T, b rheo.Backend, at string) {
		checkReadySets(t, rc, group(b), parts, maxAttempts, at)
	}
	rheotest.RunClockSkew(t, func(t testing.TB) rheo.Backend {
		rb, _ := newBackend(t)
		return rb
	}, opts)
}

// TestRenewBehindWatermark: a lease renewed from a clock behind the last
// fetch's, to an expiry that fetch had already passed, is due at once; at
// its attempt limit it is poison, so the next fetch buries it rather than
// claiming it again (as on the memory backend), even though no fetch moves
// the due times it has already passed.
func TestRenewBehindWatermark(t *testing.T) {
	rb, rc := newBackend(t)
	for _, be := range []rheo.Backend{rb, memory.New()} {
		clk := clock.NewFrozen(epoch)
		c := rheo.New(be, rheo.WithClock(clk))
		ctx := context.Background()
		require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
		appendN(t, c, "s", 1, 2)
		require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 1}))
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: 30 * time.Second})
		require.NoError(t, err)
		require.Len(t, ls, 1)
		clk.Set(epoch.Add(10 * time.Second))
		_, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: 30 * time.Second})
		require.NoError(t, err)
		clk.Set(epoch.Add(-5 * time.Second)) // another process's clock
		_, err = c.Renew(ctx, ls[0], time.Second)
		require.NoError(t, err)
		if be == rb {
			checkReadySets(t, rc, rb.KeyPrefix()+"{s}:g:g:", 1, 1, "after the renewal")
		}
		clk.Set(epoch.Add(10 * time.Second))
		again, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
		require.NoError(t, err)
		require.Empty(t, again, "%T", be)
		dl, err := c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		require.Len(t, dl, 1, "%T", be)
		require.Equal(t, ls[0].Event.ID, dl[0].EventID)
		require.Equal(t, "max_attempts: lease expired", dl[0].Reason)
	}
}
