package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
)

// TestFetchProbesOnlyListedDueSets: a caught-up group of a stream of 1,024
// partitions, of which 4 get new events, asks after the due sets of the
// partitions its last fetch leased from, not after all 1,024; a group
// without the list (as one created by an earlier version) asks after
// every one, and still gets its events.
func TestFetchProbesOnlyListedDueSets(t *testing.T) {
	ctx := context.Background()
	probes := func(listed bool) int64 {
		rb, rc, c := countedGroup(t, 1024)
		if !listed {
			unlist(t, rb, rc, "g")
		}
		var n int64
		for range 3 {
			appendN(t, c, "s", 4, 100)
			fetchAck100(t, c)
			var err error
			n, err = rb.FetchDueProbes(ctx, "s")
			require.NoError(t, err)
		}
		return n
	}
	listed, unlisted := probes(true), probes(false)
	t.Logf("due sets a fetch asked after: %d with the list, %d without", listed, unlisted)
	require.LessOrEqual(t, listed, int64(4), "the partitions the fetch before leased from")
	require.GreaterOrEqual(t, unlisted, int64(1024))
}

// TestSettleTakesEmptiedDueSetsOffTheList: a settle that empties a
// partition's due set takes the partition off the group's list of those
// that may have one (dk), so that the next fetch from every partition of a
// wide stream does not ask after it; partitions still holding a lease stay
// listed.
func TestSettleTakesEmptiedDueSetsOffTheList(t *testing.T) {
	ctx := context.Background()
	rb, rc, c := countedGroup(t, 1024)
	appendN(t, c, "s", 100, 100) // one event in each of partitions 0-99
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 100)
	listed := func() []string {
		ps, err := rc.SMembers(ctx, rb.GroupKey("s", "g", "dk")).Result()
		require.NoError(t, err)
		return ps
	}
	require.Len(t, listed(), 100, "every partition leased from is listed")
	require.NoError(t, c.AckBatch(ctx, ls[1:]))
	require.Equal(t, []string{fmt.Sprint(ls[0].Event.Partition)}, listed(), "the partition still holding a lease")
	require.NoError(t, c.AckBatch(ctx, ls[:1]))
	require.Empty(t, listed())
	appendN(t, c, "s", 4, 4)
	again, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, again, 4)
	probes, err := rb.FetchDueProbes(ctx, "s")
	require.NoError(t, err)
	require.Zero(t, probes, "no due set left to ask after")
}

// unlist makes group g of stream s look created by an earlier version: no
// field dk in its watermarks, so no list of partitions with due sets.
func unlist(t *testing.T, rb *redis.Backend, rc goredis.UniversalClient, g string) {
	t.Helper()
	require.NoError(t, rc.HDel(context.Background(), rb.GroupKey("s", g, "m"), "dk").Err())
}

// TestDueSetsFoundOnWideStreams: on a stream of 1,024 partitions (where a
// fetch asks only after the due sets its group lists), every way a
// delivery becomes due again is found by a later fetch from every
// partition: a release (at once), an expired lease, a nack's delay, a
// replay of an acked event and a redrive of a dead letter, each in a
// partition no fetch leased from since its set went. The same on a group
// without the list.
func TestDueSetsFoundOnWideStreams(t *testing.T) {
	for _, listed := range []bool{true, false} {
		t.Run(map[bool]string{true: "listed", false: "unlisted"}[listed], func(t *testing.T) {
			ctx := context.Background()
			rb, rc := newBackend(t)
			clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			c := rheo.New(rb, rheo.WithClock(clk))
			require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1024}))
			require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 2}))
			if !listed {
				unlist(t, rb, rc, "g")
			}
			ids := map[int]string{}
			for _, p := range []int{100, 200, 300, 400, 500, 600} {
				e, err := c.Append(ctx, "s", rheo.Message{Partition: &p, Payload: []byte(`{}`)})
				require.NoError(t, err)
				ids[p] = e.ID
			}
			fetch := func() map[int]rheo.Lease {
				t.Helper()
				ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100, LeaseDuration: 30 * time.Second})
				require.NoError(t, err)
				got := map[int]rheo.Lease{}
				for _, l := range ls {
					got[l.Event.Partition] = l
				}
				return got
			}
			parts := func(m map[int]rheo.Lease) []int {
				var out []int
				for p := range m {
					out = append(out, p)
				}
				return out
			}
			first := fetch()
			require.ElementsMatch(t, []int{100, 200, 300, 400, 500, 600}, parts(first))
			require.NoError(t, c.Nack(ctx, first[100], "later", rheo.Delay(time.Minute)))
			require.NoError(t, c.Release(ctx, first[200]))
			// 300: its lease expires.
			require.NoError(t, c.Ack(ctx, first[400]))
			require.NoError(t, c.Ack(ctx, first[500]))
			require.NoError(t, c.Nack(ctx, first[600], "poison"))

			again := fetch()
			require.ElementsMatch(t, []int{200, 600}, parts(again), "the release and the nack at once")
			require.NoError(t, c.Ack(ctx, again[200]))
			require.NoError(t, c.Nack(ctx, again[600], "poison")) // its second attempt: dead-lettered
			require.Empty(t, fetch())

			clk.Advance(31 * time.Second)
			exp := fetch()
			require.ElementsMatch(t, []int{300}, parts(exp), "the expired lease")
			require.Equal(t, 2, exp[300].Attempt)
			require.NoError(t, c.Ack(ctx, exp[300]))

			clk.Advance(time.Minute)
			late := fetch()
			require.ElementsMatch(t, []int{100}, parts(late), "the nack, after its delay")
			require.NoError(t, c.Ack(ctx, late[100]))
			require.Empty(t, fetch())

			n, err := c.Replay(ctx, "s", "g", rheo.Events(ids[400]))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			re := fetch()
			require.ElementsMatch(t, []int{400}, parts(re), "the replayed event")
			require.NoError(t, c.Ack(ctx, re[400]))

			n, err = c.Redrive(ctx, "s", "g", ids[600])
			require.NoError(t, err)
			require.Equal(t, 1, n)
			rd := fetch()
			require.ElementsMatch(t, []int{600}, parts(rd), "the redriven dead letter")
			require.NoError(t, c.Ack(ctx, rd[600]))
			require.Empty(t, fetch())
		})
	}
}

// TestLagOfReopenedOnWideStreams: a replay of acked events in partitions of
// a stream of 1,024 lowers their frontiers in the lag, until they are
// acked again; on a group that lists those partitions (rk) and on one
// that does not.
func TestLagOfReopenedOnWideStreams(t *testing.T) {
	for _, listed := range []bool{true, false} {
		t.Run(map[bool]string{true: "listed", false: "unlisted"}[listed], func(t *testing.T) {
			ctx := context.Background()
			rb, rc := newBackend(t)
			c := rheo.New(rb)
			require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1024}))
			require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
			if !listed {
				unlist(t, rb, rc, "g")
			}
			ids := map[int]string{}
			for _, p := range []int{7, 500, 1023} {
				for range 3 {
					e, err := c.Append(ctx, "s", rheo.Message{Partition: &p, Payload: []byte(`{}`)})
					require.NoError(t, err)
					ids[p] = e.ID // the last of the three
				}
			}
			ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
			require.NoError(t, err)
			require.Len(t, ls, 9)
			require.NoError(t, c.AckBatch(ctx, ls))
			lag, err := c.Lag(ctx, "s", "g")
			require.NoError(t, err)
			require.Zero(t, lag.Total)

			n, err := c.Replay(ctx, "s", "g", rheo.Events(ids[500], ids[1023]))
			require.NoError(t, err)
			require.Equal(t, 2, n)
			lag, err = c.Lag(ctx, "s", "g")
			require.NoError(t, err)
			require.Equal(t, int64(2), lag.Total)
			require.Equal(t, int64(2), lag.Partitions[500].Frontier)
			require.Equal(t, int64(2), lag.Partitions[1023].Frontier)
			require.Equal(t, int64(3), lag.Partitions[7].Frontier)

			ls, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
			require.NoError(t, err)
			require.Len(t, ls, 2)
			require.NoError(t, c.AckBatch(ctx, ls))
			lag, err = c.Lag(ctx, "s", "g")
			require.NoError(t, err)
			require.Zero(t, lag.Total)
			if listed {
				n, err := rc.SCard(ctx, rb.GroupKey("s", "g", "rk")).Result()
				require.NoError(t, err)
				require.Zero(t, n, "the lag read dropped the partitions whose reopened sets went")
			}
		})
	}
}
