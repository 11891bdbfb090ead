package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/faultproxy"
)

var faultEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// proxied returns a client whose pool dials the test server through a fault
// proxy, and a direct one; both use one fresh schema (dropped at cleanup).
func proxied(t *testing.T, clk *clock.Frozen) (*rheo.Client, *rheo.Client, *faultproxy.Proxy) {
	t.Helper()
	direct := newBackend(t)
	u, err := url.Parse(dsn())
	require.NoError(t, err)
	px, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	u.Host = px.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	viaProxy, err := postgres.New(pool, postgres.WithSchema(direct.Schema()))
	require.NoError(t, err)
	// Cleanups run last-in first-out: the proxied pool goes before the
	// proxy, and both before the schema is dropped.
	t.Cleanup(func() { px.Close() })
	t.Cleanup(func() { viaProxy.Close(); pool.Close() })
	return rheo.New(viaProxy, rheo.WithClock(clk)), rheo.New(direct, rheo.WithClock(clk)), px
}

func requireLag(t *testing.T, c *rheo.Client, stream, group string, want int64) {
	t.Helper()
	lag, err := c.Lag(context.Background(), stream, group)
	require.NoError(t, err)
	require.Equal(t, want, lag.Total)
}

// The settle of an ack is one statement in an implicit transaction: it
// commits when the server processes the Sync that follows it. A connection
// reset right after the statement (and its Sync) reached the server: the ack
// is ErrAmbiguous (it may have committed; here it did), never a clean
// failure, and a retry is ErrStaleLease.
func TestResetDuringSettleIsAmbiguous(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(faultEpoch)
	a, b, px := proxied(t, clk)
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, b.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := b.Append(ctx, "s", rheo.Message{ID: "event-cut-after-me"})
	require.NoError(t, err)
	ls, err := a.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)

	// The event ID travels in the settle's Bind message, after the
	// statement text and just before Execute and Sync.
	px.CutAfter([]byte(ls[0].Event.ID))
	err = a.Ack(ctx, ls[0])
	require.ErrorIs(t, err, rheo.ErrAmbiguous)
	require.NotErrorIs(t, err, rheo.ErrBackendUnavailable)
	require.Equal(t, 1, px.Cuts())
	require.Equal(t, rheo.Unknown, rheo.Classify(err), "the runtime leaves the lease to expire")
	// pgx cancels whatever the server still runs on a connection it lost
	// (a CancelRequest on a new connection), so the settle may have been
	// rolled back after all: the retry is ErrStaleLease when it committed
	// (the usual case: the statement is short), nil when it did not.
	err = a.Ack(ctx, ls[0])
	if err != nil {
		require.ErrorIs(t, err, rheo.ErrStaleLease)
	} else {
		t.Log("the settle was cancelled before it committed; the retry settled")
	}
	requireLag(t, b, "s", "g", 0)
	require.ErrorIs(t, a.Ack(ctx, ls[0]), rheo.ErrStaleLease)
}

// The writes of the shared SQL layer (here CreateGroup) run in an explicit
// transaction that pgx ends with a simple-protocol Query "commit". A reset
// right after it reached the server: ErrAmbiguous; the group exists and the
// retry is ErrAlreadyExists.
func TestResetDuringCommitIsAmbiguous(t *testing.T) {
	ctx := context.Background()
	a, b, px := proxied(t, clock.NewFrozen(faultEpoch))
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	_, err := a.ListGroups(ctx, "s") // the proxied client knows the stream
	require.NoError(t, err)

	px.CutAfter([]byte("commit"))
	err = a.CreateGroup(ctx, "s", "g", rheo.GroupConfig{})
	require.ErrorIs(t, err, rheo.ErrAmbiguous)
	require.NotErrorIs(t, err, rheo.ErrBackendUnavailable)
	require.Equal(t, 1, px.Cuts())
	// As for the settle: committed unless pgx's cancel of the lost
	// connection's work got there first; either way the retry converges.
	err = a.CreateGroup(ctx, "s", "g", rheo.GroupConfig{})
	if err != nil {
		require.ErrorIs(t, err, rheo.ErrAlreadyExists)
	}
	gs, err := b.ListGroups(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, []string{"g"}, gs)
}

// An append is one statement in an implicit transaction. A reset right
// after it reached the server: ErrAmbiguous, and the retry with the same
// event ID returns the stored event; the log holds it once.
func TestResetDuringAppendIsAmbiguousAndRetryIsIdempotent(t *testing.T) {
	ctx := context.Background()
	a, b, px := proxied(t, clock.NewFrozen(faultEpoch))
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	_, err := a.Append(ctx, "s", rheo.Message{ID: "first"}) // the client now knows the stream
	require.NoError(t, err)

	px.CutAfter([]byte("cut-this-append"))
	_, err = a.Append(ctx, "s", rheo.Message{ID: "cut-this-append", Payload: []byte(`{"n":1}`)})
	require.ErrorIs(t, err, rheo.ErrAmbiguous)
	require.NotErrorIs(t, err, rheo.ErrBackendUnavailable)
	require.Equal(t, 1, px.Cuts())
	var again rheo.Event
	require.Eventually(t, func() bool {
		again, err = a.Append(ctx, "s", rheo.Message{ID: "cut-this-append", Payload: []byte(`{"n":1}`)})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	evs, err := b.Read(ctx, "s", rheo.ReadOptions{Partition: 0})
	require.NoError(t, err)
	require.Len(t, evs, 2, "the ambiguous append ran once and the retry wrote nothing")
	require.Equal(t, "cut-this-append", evs[1].ID)
	require.Equal(t, evs[1].Sequence, again.Sequence)
	require.Equal(t, int64(2), again.Sequence)
}

// A fetch is BEGIN, the claim and COMMIT in one pipelined batch. A reset
// right after the batch reached the server: the fetch is ErrAmbiguous, and
// whatever the claim did nothing is lost: once a lease it may have taken
// expires, the delivery is claimed again with the matching attempt.
func TestResetDuringFetchCommitLosesNothing(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(faultEpoch)
	a, b, px := proxied(t, clk)
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, b.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := b.Append(ctx, "s", rheo.Message{ID: "e1"})
	require.NoError(t, err)
	// The consumer ID travels in the claim's Bind message, followed by the
	// COMMIT's and the Sync.
	px.CutAfter([]byte("cut-this-fetch"))
	ls, err := a.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, ConsumerID: "cut-this-fetch", LeaseDuration: 30 * time.Second})
	require.ErrorIs(t, err, rheo.ErrAmbiguous)
	require.NotErrorIs(t, err, rheo.ErrBackendUnavailable)
	require.Empty(t, ls)
	require.Equal(t, 1, px.Cuts())
	// pgx sends a CancelRequest for the lost connection's work, so the
	// claim may or may not have committed. Either way the delivery is
	// claimable again once the lost claim's lease (if any) expires, with
	// attempt 2 if the claim committed and 1 if it was cancelled.
	clk.Advance(31 * time.Second)
	var got []rheo.Lease
	require.Eventually(t, func() bool {
		got, err = b.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: time.Minute})
		return err == nil && len(got) == 1
	}, 10*time.Second, 20*time.Millisecond, "nothing is lost")
	require.Equal(t, "e1", got[0].Event.ID)
	claimed := got[0].Attempt == 2
	if !claimed {
		require.Equal(t, 1, got[0].Attempt)
		t.Log("the lost claim was cancelled before it committed")
	}
	require.NoError(t, b.Ack(ctx, got[0]))
	requireLag(t, b, "s", "g", 0)
	clk.Advance(2 * time.Minute)
	again, err := b.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Empty(t, again, "settled once")
}

// A worker partitioned away for longer than its lease: its ack, bounded by
// its context, fails as ErrAmbiguous (the settle was sent; its outcome is
// not known), the lease moves to another worker once expired, and after the
// partition heals the late ack (the one held in the network, and a retry)
// is refused as stale; the event is settled once, by the new holder.
func TestPartitionLongerThanLease(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(faultEpoch)
	a, b, px := proxied(t, clk)
	require.NoError(t, b.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, b.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := b.Append(ctx, "s", rheo.Message{ID: "e1"})
	require.NoError(t, err)
	old, err := a.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, old, 1)

	px.Partition()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	start := time.Now()
	err = a.Ack(short, old[0])
	cancel()
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second, "the ack returns at its deadline")
	require.ErrorIs(t, err, rheo.ErrAmbiguous, "a write cut off after it was sent may have run")
	require.Equal(t, rheo.Unknown, rheo.Classify(err))
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = a.Fetch(short, "s", "g", rheo.FetchOptions{Limit: 1})
	cancel()
	require.Error(t, err, "the partitioned worker reaches nothing")

	clk.Advance(31 * time.Second)
	moved, err := b.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, moved, 1, "the expired lease moved to the other worker")
	require.Equal(t, old[0].Event.ID, moved[0].Event.ID)
	require.Equal(t, 2, moved[0].Attempt)

	px.Heal()
	require.ErrorIs(t, a.Ack(ctx, old[0]), rheo.ErrStaleLease, "the late ack is refused")
	requireLag(t, b, "s", "g", 1)
	require.NoError(t, b.Ack(ctx, moved[0]))
	requireLag(t, b, "s", "g", 0)
}

// Latency and a bandwidth limit slow a consumer down but lose nothing and
// raise no error.
func TestLatencyAndBandwidth(t *testing.T) {
	a, b, px := proxied(t, clock.NewFrozen(faultEpoch))
	faultproxy.CheckLatencyAndBandwidth(t, a, b, px)
}
