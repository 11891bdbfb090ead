package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/faultproxy"
)

// proxied returns a client of the test server through a fault proxy,
// without go-redis's own retries (a retried write would hide the fault),
// and a direct one; both share a fresh key prefix.
func proxied(t *testing.T, clk *clock.Frozen) (*rheo.Client, *rheo.Client, *faultproxy.Proxy) {
	t.Helper()
	direct := testClient(t)
	o, err := goredis.ParseURL(testURL())
	require.NoError(t, err)
	px, err := faultproxy.Start(o.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { px.Close() })
	o.Addr, o.MaxRetries = px.Addr(), -1
	o.ReadTimeout, o.WriteTimeout = 2*time.Second, 2*time.Second
	viaProxy := goredis.NewClient(o)
	t.Cleanup(func() { viaProxy.Close() })
	prefix := uniquePrefix()
	t.Cleanup(func() { dropKeys(t, direct, prefix) })
	a := rheo.New(mustNew(t, viaProxy, redis.WithKeyPrefix(prefix)), rheo.WithClock(clk))
	b := rheo.New(mustNew(t, direct, redis.WithKeyPrefix(prefix)), rheo.WithClock(clk))
	require.NoError(t, b.Migrate(context.Background()))
	return a, b, px
}

// A connection reset after the settle script reached Redis, before its
// reply: the ack is reported ErrAmbiguous (it did run), and a retry is
// answered ErrStaleLease, which the runtime treats as settled elsewhere.
func TestResetDuringSettleScriptIsAmbiguous(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(epoch)
	a, b, px := proxied(t, clk)
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, b.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := b.Append(ctx, "s", rheo.Message{ID: "e1"})
	require.NoError(t, err)
	ls, err := a.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)

	px.CutAfter([]byte("evalsha"))
	err = a.Ack(ctx, ls[0])
	require.ErrorIs(t, err, rheo.ErrAmbiguous)
	require.Equal(t, 1, px.Cuts())
	require.Equal(t, rheo.Unknown, rheo.Classify(err), "the runtime leaves the lease to expire")
	// It ran: the group is done, and the retry is refused as stale.
	require.Eventually(t, func() bool {
		lag, err := b.Lag(ctx, "s", "g")
		return err == nil && lag.Total == 0
	}, 10*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, a.Ack(ctx, ls[0]), rheo.ErrStaleLease)
}

// A connection reset after the append script reached Redis: the append is
// ErrAmbiguous, and retrying it with the same event ID returns the stored
// event instead of writing a second one.
func TestResetDuringAppendIsAmbiguousAndRetryIsIdempotent(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(epoch)
	a, b, px := proxied(t, clk)
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))

	_, err := a.Append(ctx, "s", rheo.Message{ID: "first"}) // the client now knows the stream's partitions
	require.NoError(t, err)
	px.CutAfter([]byte("evalsha"))
	_, err = a.Append(ctx, "s", rheo.Message{ID: "once", Payload: []byte(`{"n":1}`)})
	require.ErrorIs(t, err, rheo.ErrAmbiguous)
	var again rheo.Event
	require.Eventually(t, func() bool {
		again, err = a.Append(ctx, "s", rheo.Message{ID: "once", Payload: []byte(`{"n":1}`)})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	evs, err := b.Read(ctx, "s", rheo.ReadOptions{Partition: 0})
	require.NoError(t, err)
	require.Len(t, evs, 2, "the ambiguous append ran once and the retry wrote nothing")
	require.Equal(t, "once", evs[1].ID)
	require.Equal(t, evs[1].Sequence, again.Sequence)
}

// A worker partitioned away for longer than its lease: its ack times out
// (ErrAmbiguous: it may have reached Redis), the lease moves to another
// worker once expired, and when the partition heals the late ack (the one
// held in the network, and a retry) is refused as stale; the event is
// settled once, by the new holder.
func TestPartitionLongerThanLease(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(epoch)
	a, b, px := proxied(t, clk)
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, b.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := b.Append(ctx, "s", rheo.Message{ID: "e1"})
	require.NoError(t, err)
	old, err := a.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, old, 1)

	px.Partition()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = a.Ack(short, old[0])
	cancel()
	require.Error(t, err)
	require.ErrorIs(t, err, rheo.ErrAmbiguous, "a write cut off after it was sent may have run")
	require.Equal(t, rheo.Unknown, rheo.Classify(err))
	_, err = a.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.Error(t, err, "the partitioned worker reaches nothing")

	clk.Advance(31 * time.Second)
	moved, err := b.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, moved, 1, "the expired lease moved to the other worker")
	require.Equal(t, old[0].Event.ID, moved[0].Event.ID)
	require.Equal(t, 2, moved[0].Attempt)

	px.Heal()
	require.ErrorIs(t, a.Ack(ctx, old[0]), rheo.ErrStaleLease, "the late ack is refused")
	require.NoError(t, b.Ack(ctx, moved[0]))
	lag, err := b.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}

// Latency and a bandwidth limit slow a consumer down but lose nothing and
// raise no error.
func TestLatencyAndBandwidth(t *testing.T) {
	a, b, px := proxied(t, clock.NewFrozen(epoch))
	faultproxy.CheckLatencyAndBandwidth(t, a, b, px)
}
