package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
)

// pelSizes is the size of group g's pending-entries list on each of the
// parts partition streams of stream s.
func pelSizes(t *testing.T, rc goredis.UniversalClient, b *redis.Backend, s, g string, parts int) []int64 {
	t.Helper()
	out := make([]int64, parts)
	for p := range parts {
		pel, err := rc.XPending(context.Background(), fmt.Sprintf("%s{%s}:s:%d", b.KeyPrefix(), s, p), g).Result()
		require.NoError(t, err)
		out[p] = pel.Count
	}
	return out
}

// TestPendingEntriesListStaysEmpty: the lease table is the record of what
// is offered, so fetches leave the group's pending-entries list empty,
// whether they claim fresh events, expired leases, nacked, redriven or
// replayed deliveries; the cursor (the group's last-delivered ID) still moves, and
// every claim still returns its event.
func TestPendingEntriesListStaysEmpty(t *testing.T) {
	b, rc := newBackend(t)
	c, clk, ls := leased(t, b, "log", "g", 2, 40, 5, time.Second, "w1")
	ctx := context.Background()
	empty := []int64{0, 0}
	require.Equal(t, empty, pelSizes(t, rc, b, "log", "g", 2), "fresh leases")
	lag, err := c.Lag(ctx, "log", "g")
	require.NoError(t, err)
	require.EqualValues(t, 40, lag.Total, "offered, none terminal")

	// Half expire, a quarter are nacked, the rest acked.
	require.NoError(t, c.AckBatch(ctx, ls[:10]))
	for _, l := range ls[10:20] {
		require.NoError(t, c.Nack(ctx, l, "again"))
	}
	clk.Advance(2 * time.Second)
	again, err := c.Fetch(ctx, "log", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, again, 30)
	for _, l := range again {
		require.Equal(t, 2, l.Attempt)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, l.Event.Sequence*2-2+int64(l.Event.Partition)), string(l.Event.Payload), "a claimed-again lease carries its event")
	}
	require.Equal(t, empty, pelSizes(t, rc, b, "log", "g", 2), "claimed again")
	require.NoError(t, c.AckBatch(ctx, again[1:]))

	// A dead letter redriven and an acked event replayed by ID are
	// reopened where they are (the cursor stays), then claimed again.
	require.NoError(t, c.Reject(ctx, again[0], "bad"))
	n, err := c.Redrive(ctx, "log", "g", again[0].Event.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = c.Replay(ctx, "log", "g", rheo.Events(ls[0].Event.ID))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	back, err := c.Fetch(ctx, "log", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{again[0].Event.ID, ls[0].Event.ID}, []string{back[0].Event.ID, back[1].Event.ID})
	for _, l := range back {
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, l.Event.Sequence*2-2+int64(l.Event.Partition)), string(l.Event.Payload))
	}
	require.Equal(t, empty, pelSizes(t, rc, b, "log", "g", 2), "redriven and replayed by ID")
	require.NoError(t, c.AckBatch(ctx, back))

	// A replay reopens them all; claiming them again keeps the list empty.
	_, err = c.Replay(ctx, "log", "g", rheo.FromSequence(0))
	require.NoError(t, err)
	replayed, err := c.Fetch(ctx, "log", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, replayed, 40)
	require.Equal(t, empty, pelSizes(t, rc, b, "log", "g", 2), "reopened and claimed")
	require.NoError(t, c.AckBatch(ctx, replayed))
	lag, err = c.Lag(ctx, "log", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}

// TestPendingEntriesOfEarlierVersions: a store written by earlier versions
// holds a pending entry for every offered delivery that is not terminal.
// Settles remove them, whether the lease is settled by its holder or
// claimed again after it expired, and a fetch past them still claims the
// rest.
func TestPendingEntriesOfEarlierVersions(t *testing.T) {
	b, rc := newBackend(t)
	c, clk, ls := leased(t, b, "log", "g", 2, 20, 5, time.Second, "w1")
	ctx := context.Background()
	// A group an earlier version created (no dk field in m), and what its
	// fetch left beside the leases.
	require.NoError(t, rc.HDel(ctx, b.GroupKey("log", "g", "m"), "dk").Err())
	for _, l := range ls {
		require.NoError(t, rc.Do(ctx, "XCLAIM", fmt.Sprintf("%s{log}:s:%d", b.KeyPrefix(), l.Event.Partition), "g", "rheo", 0,
			l.Receipt, "FORCE", "JUSTID").Err())
	}
	require.Equal(t, []int64{10, 10}, pelSizes(t, rc, b, "log", "g", 2))
	require.NoError(t, c.AckBatch(ctx, ls[:10]))
	clk.Advance(2 * time.Second)
	again, err := c.Fetch(ctx, "log", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, again, 10)
	var left int64
	for _, n := range pelSizes(t, rc, b, "log", "g", 2) {
		left += n
	}
	require.EqualValues(t, 10, left, "the expired leases' entries stay until they settle")
	require.NoError(t, c.AckBatch(ctx, again))
	require.Equal(t, []int64{0, 0}, pelSizes(t, rc, b, "log", "g", 2))
	lag, err := c.Lag(ctx, "log", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}

// TestUnpackedEntriesAreFetched: a fetch returns an entry's packed field
// alone, and an entry of the older form (one field per attribute) as its
// fields; both decode, fresh and claimed again.
func TestUnpackedEntriesAreFetched(t *testing.T) {
	b, rc := newBackend(t)
	clk := clock.NewFrozen(epoch)
	c := rheo.New(b, rheo.WithClock(clk))
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "old", rheo.StreamConfig{}))
	p0 := 0
	_, err := c.Append(ctx, "old", rheo.Message{ID: "new-1", Type: "t", Partition: &p0, Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	// What an earlier version's append wrote for the second event.
	base := b.KeyPrefix() + "{old}:"
	require.NoError(t, rc.XAdd(ctx, &goredis.XAddArgs{Stream: base + "s:0", ID: "2-0",
		Values: []any{"id", "old-2", "type", "legacy", "key", "k", "ts", fmt.Sprint(epoch.UnixMicro()), "data", `{"n":2}`, "meta", `{"m":"v"}`}}).Err())
	require.NoError(t, rc.HIncrBy(ctx, base+"hw", "0", 1).Err())
	require.NoError(t, rc.HSet(ctx, base+"ids", "old-2", "0:2").Err())
	require.NoError(t, c.CreateGroup(ctx, "old", "g", rheo.GroupConfig{}))
	check := func(ls []rheo.Lease, attempt int) {
		t.Helper()
		require.Len(t, ls, 2)
		require.Equal(t, "new-1", ls[0].Event.ID)
		require.JSONEq(t, `{"n":1}`, string(ls[0].Event.Payload))
		require.Equal(t, rheo.Event{ID: "old-2", Stream: "old", Partition: 0, Sequence: 2, Type: "legacy", Key: "k",
			Timestamp: epoch, Payload: json.RawMessage(`{"n":2}`), Metadata: map[string]string{"m": "v"}}, ls[1].Event)
		for _, l := range ls {
			require.Equal(t, attempt, l.Attempt)
		}
	}
	ls, err := c.Fetch(ctx, "old", "g", rheo.FetchOptions{Limit: 10, LeaseDuration: time.Second})
	require.NoError(t, err)
	check(ls, 1)
	clk.Advance(2 * time.Second)
	ls, err = c.Fetch(ctx, "old", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	check(ls, 2)
	require.NoError(t, c.AckBatch(ctx, ls))
}
