package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/testserver"
)

// TestAOFRestart: with appendonly yes and appendfsync always, a kill -9 and
// restart of Redis loses nothing that was acknowledged: appended events,
// acks, nacks, dead letters and the frontier.
func TestAOFRestart(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := context.Background()
	clk := clock.NewFrozen(epoch)
	open := func() *rheo.Client {
		be, err := redis.Open(ctx, "redis://"+srv.Addr()+"/0")
		require.NoError(t, err)
		c := rheo.New(be, rheo.WithClock(clk))
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.Migrate(ctx))
		return c
	}
	c := open()
	require.NoError(t, c.CreateStream(ctx, "durable", rheo.StreamConfig{Partitions: 3}))
	require.NoError(t, c.CreateGroup(ctx, "durable", "g", rheo.GroupConfig{MaxAttempts: 2}))
	appendN(t, c, "durable", 3, 3000)
	ls, err := c.Fetch(ctx, "durable", "g", rheo.FetchOptions{Limit: 300, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 300)
	require.NoError(t, c.AckBatch(ctx, ls[:250]))
	require.NoError(t, c.Reject(ctx, ls[250], "bad"))
	require.NoError(t, c.Nack(ctx, ls[251], "later"))
	heldLease := ls[252]
	last, err := c.Append(ctx, "durable", rheo.Message{ID: "the-last-one", Key: "k"})
	require.NoError(t, err)

	lagBefore, err := c.Lag(ctx, "durable", "g")
	require.NoError(t, err)
	infoBefore, err := c.GroupInfo(ctx, "durable", "g")
	require.NoError(t, err)
	var before [][]rheo.Event
	for p := range 3 {
		evs, err := c.Read(ctx, "durable", rheo.ReadOptions{Partition: p, Limit: 10000})
		require.NoError(t, err)
		before = append(before, evs)
	}

	srv.Kill9()
	srv.Start()
	c = open()

	for p := range 3 {
		evs, err := c.Read(ctx, "durable", rheo.ReadOptions{Partition: p, Limit: 10000})
		require.NoError(t, err)
		require.Equal(t, before[p], evs, "partition %d after restart", p)
	}
	again, err := c.Append(ctx, "durable", rheo.Message{ID: "the-last-one", Key: "k"})
	require.NoError(t, err)
	require.Equal(t, last.Sequence, again.Sequence, "the idempotency index survived")
	lagAfter, err := c.Lag(ctx, "durable", "g")
	require.NoError(t, err)
	require.Equal(t, lagBefore, lagAfter)
	infoAfter, err := c.GroupInfo(ctx, "durable", "g")
	require.NoError(t, err)
	require.Equal(t, infoBefore, infoAfter)
	dl, err := c.DeadLetters(ctx, "durable", "g", rheo.DeadLetterOptions{})
	require.NoError(t, err)
	require.Len(t, dl, 1)
	require.Equal(t, ls[250].Event.ID, dl[0].EventID)
	// The lease taken before the restart still settles; the acked ones stay
	// acked (stale).
	require.NoError(t, c.Ack(ctx, heldLease))
	require.ErrorIs(t, c.Ack(ctx, ls[0]), rheo.ErrStaleLease)
	// The nacked event comes back first, then the rest.
	next, err := c.Fetch(ctx, "durable", "g", rheo.FetchOptions{Limit: 1, Partitions: []int{ls[251].Event.Partition}})
	require.NoError(t, err)
	require.Len(t, next, 1)
	require.Equal(t, ls[251].Event.ID, next[0].Event.ID)
	require.Equal(t, 2, next[0].Attempt)
}
