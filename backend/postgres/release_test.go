package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/clock"
)

// readyOffset is what a delivery available at once stores below its due
// time (sqlstore.readyOffset): a nack without a delay, or a release.
const readyOffset = int64(1) << 62

// deliveryRow is a stored delivery as the release tests inspect it.
type deliveryRow struct {
	seq     int64
	status  int
	attempt int
	reason  *string
	due     *int64
	leaseID *string
}

// deliveryRows returns the stored deliveries of partition 0 of the
// backend's one group, in sequence order.
func deliveryRows(t *testing.T, be *postgres.Backend) []deliveryRow {
	t.Helper()
	rows, err := be.Pool().Query(context.Background(), "SELECT seq, status, attempt, reason, due_at, lease_id FROM "+
		be.Schema()+".rheo_deliveries WHERE part = 0 ORDER BY seq")
	require.NoError(t, err)
	defer rows.Close()
	var out []deliveryRow
	for rows.Next() {
		var r deliveryRow
		require.NoError(t, rows.Scan(&r.seq, &r.status, &r.attempt, &r.reason, &r.due, &r.leaseID))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestReleaseOfSpanMembers releases members in the middle of a span (the
// leases of one fetch of fresh events), acks the others in one AckBatch,
// and fetches again: the released members come back, in sequence order,
// at the attempt they were released at (their rows store the span's
// attempt minus one, available at once, due at the release's time like a
// nack without a delay, with no reason), and the released leases are
// stale. A row's release then keeps the row's reason and takes back its
// claim only: attempts counted before it still bring it to MaxAttempts.
func TestReleaseOfSpanMembers(t *testing.T) {
	ctx := context.Background()
	be := newBackend(t)
	clk := clock.NewFrozen(time.Now().Truncate(time.Microsecond))
	c := rheo.New(be, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	fill(t, c, "s", 6)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 2}))
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 6})
	require.NoError(t, err)
	require.Len(t, ls, 6)
	for _, l := range ls {
		require.Equal(t, l.ID+"+span", l.Receipt, "a fresh event is leased as a span's member")
		require.Equal(t, 1, l.Attempt)
	}

	// Release sequences 2 and 4 in one batch, by a releaser whose clock is
	// a minute ahead.
	now := clk.Now().Add(time.Minute)
	errs, err := be.Settle(ctx, "s", "g", []rheo.SettleRequest{
		{Kind: rheo.SettleRelease, Lease: ls[3], Reason: "ignored"},
		{Kind: rheo.SettleRelease, Lease: ls[1], Reason: "ignored"},
	}, now)
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, errs)
	require.NoError(t, c.AckBatch(ctx, []rheo.Lease{ls[0], ls[2], ls[4], ls[5]}))

	rows := deliveryRows(t, be)
	require.Len(t, rows, 2, "the released members have rows, the acked ones none")
	for i, r := range rows {
		require.Equal(t, int64(2*i+2), r.seq)
		require.Equal(t, 0, r.status, "sequence %d is available", r.seq)
		require.Equal(t, 0, r.attempt, "sequence %d: the released claim is not counted", r.seq)
		require.Nil(t, r.reason, "sequence %d: a release writes no reason", r.seq)
		require.Nil(t, r.leaseID, "sequence %d", r.seq)
		require.NotNil(t, r.due)
		require.Equal(t, now.UnixMicro()-readyOffset, *r.due, "sequence %d is due at the release like a nack without a delay", r.seq)
	}
	var spans int
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT count(*) FROM "+be.Schema()+".rheo_spans WHERE pending > 0").Scan(&spans))
	require.Zero(t, spans, "every member of the span is settled")
	st, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, st.Inflight)
	require.Equal(t, int64(2), st.Available)
	require.Zero(t, st.DeadLetters)
	require.Equal(t, int64(1), st.Lag.Partitions[0].Frontier, "the releases are not terminal")

	require.ErrorIs(t, c.Ack(ctx, ls[1]), rheo.ErrStaleLease, "a released lease is stale")
	require.ErrorIs(t, c.Release(ctx, ls[3]), rheo.ErrStaleLease, "a second release is stale")

	none, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, none, "a fetcher whose clock is behind the release's does not take them yet")
	clk.Set(now)
	again, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, again, 2)
	for i, l := range again {
		require.Equal(t, ls[2*i+1].Event.ID, l.Event.ID)
		require.Equal(t, 1, l.Attempt, "sequence %d: the released claim did not count", l.Event.Sequence)
		require.NotEqual(t, ls[2*i+1].ID, l.ID)
		require.Equal(t, l.ID, l.Receipt, "a redelivery is a delivery row's lease")
	}

	// A row's release: nacked first (attempt 1 counted, reason "boom"),
	// leased again at attempt 2, released: the row keeps "boom" and
	// attempt 1, so the next claim is attempt 2 again, at the limit.
	require.NoError(t, c.Nack(ctx, again[0], "boom"))
	l, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, l, 1)
	require.Equal(t, 2, l[0].Attempt)
	require.NoError(t, c.Release(ctx, l[0]))
	r := deliveryRows(t, be)[0]
	require.Equal(t, int64(2), r.seq)
	require.Equal(t, 0, r.status)
	require.Equal(t, 1, r.attempt, "the row's release takes back its claim only")
	require.NotNil(t, r.reason)
	require.Equal(t, "boom", *r.reason, "a release leaves the reason as it was")
	l, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, l, 1)
	require.Equal(t, again[0].Event.ID, l[0].Event.ID)
	require.Equal(t, 2, l[0].Attempt, "the attempt after the release is the released one's")
	require.NoError(t, c.Nack(ctx, l[0], "again"))
	require.NoError(t, c.Ack(ctx, again[1]))

	dls, err := c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{})
	require.NoError(t, err)
	require.Len(t, dls, 1, "two counted attempts reach MaxAttempts 2")
	require.Equal(t, int64(2), dls[0].Sequence)
	require.Equal(t, 2, dls[0].Attempts)
	require.Equal(t, "max_attempts: again", dls[0].Reason)
	st, err = c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, st.Inflight)
	require.Zero(t, st.Available)
	require.Equal(t, int64(6), st.Lag.Partitions[0].Frontier)
}

// TestSpanMembersReleasedConcurrently is TestSpanMembersSettledConcurrently
// with releases: each lease of a few spans is settled by two goroutines
// with different outcomes (ack, release, reject, renew), so that settles
// of one span keep colliding and go through the statement that re-checks
// rows. Every lease is settled once, and the released ones come back at
// their first attempt.
func TestSpanMembersReleasedConcurrently(t *testing.T) {
	ctx := context.Background()
	c := spanStream(t, 3, 300, 1)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 300})
	require.NoError(t, err)
	require.Len(t, ls, 300)

	byLease := settleConcurrently(t, c, ls, "release", 11)
	settled := map[string]string{} // event ID -> the outcome that won
	for _, l := range ls {
		if k, ok := byLease[l.ID]; ok {
			settled[l.Event.ID] = k
		}
	}
	counts := map[string]int64{}
	for _, k := range settled {
		counts[k]++
	}
	st, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Equal(t, int64(len(ls))-int64(len(settled)), st.Inflight, "outcomes %v", counts)
	require.Equal(t, counts["release"], st.Available)
	require.Equal(t, counts["reject"], st.DeadLetters, "MaxAttempts 1: releases never dead-letter")
	again, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 300})
	require.NoError(t, err)
	require.Len(t, again, int(counts["release"]))
	for _, l := range again {
		require.Equal(t, "release", settled[l.Event.ID], "event %s", l.Event.ID)
		require.Equal(t, 1, l.Attempt, "event %s: the released claim did not count", l.Event.ID)
	}
}
