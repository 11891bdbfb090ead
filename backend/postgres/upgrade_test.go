package postgres_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/clock"
)

// TestUpgradeKeepsDueTimes opens a schema whose deliveries were written
// before schema version 3 (a reopened one due at math.MinInt64, a nack
// without a delay due at its own time, the old index of due times), as
// backend/sqlite's test of the same name does, plus leases in flight on two
// partitions, and checks that after Migrate a fetch claims exactly what it
// claimed before: the available ones at once, the leases when they expire,
// the delayed ones when their delay is over.
func TestUpgradeKeepsDueTimes(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBackend(t)
	c := rheo.New(b, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 2}))
	for i := range 12 {
		p := i % 2
		_, err := c.Append(ctx, "s", rheo.Message{Partition: &p, Payload: []byte(`{}`)})
		require.NoError(t, err)
	}
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 12, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 12)
	// Partition 0 (ls[0..5]): 1 delayed an hour, 2 available again, 3, 5
	// and 6 acked, 4 leased. Partition 1 (ls[6..11]): 1 available again
	// (then due as a reopened one was), 2-6 leased.
	require.NoError(t, c.Nack(ctx, ls[0], "later", rheo.Delay(time.Hour)))
	require.NoError(t, c.Nack(ctx, ls[1], "again"))
	require.NoError(t, c.AckBatch(ctx, []rheo.Lease{ls[2], ls[4], ls[5]}))
	require.NoError(t, c.Nack(ctx, ls[6], "again"))
	// ls[3] (0/4), ls[7..11] (1/2..1/6) stay leased.
	s := b.Schema()
	pool := testPool(t)
	for _, q := range []string{
		"UPDATE " + s + ".rheo_deliveries SET due_at = " + strconv.FormatInt(math.MinInt64, 10) + " WHERE part = 1 AND seq = 1",
		"UPDATE " + s + ".rheo_deliveries SET due_at = " + strconv.FormatInt(clk.Now().UnixMicro(), 10) + " WHERE part = 0 AND seq = 2",
		"DROP INDEX " + s + ".rheo_deliveries_ready",
		"DROP INDEX " + s + ".rheo_deliveries_timed",
		"CREATE INDEX rheo_deliveries_due ON " + s + ".rheo_deliveries (grp_id, part, due_at)",
		"DELETE FROM " + s + ".rheo_schema WHERE version = 3",
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	b2, err := postgres.New(pool, postgres.WithSchema(s))
	require.NoError(t, err)
	defer b2.Close()
	require.NoError(t, b2.Migrate(ctx))
	var v int
	require.NoError(t, pool.QueryRow(ctx, "SELECT max(version) FROM "+s+".rheo_schema").Scan(&v))
	require.Equal(t, 8, v)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".rheo_deliveries WHERE due_at = -9223372036854775808").Scan(&n))
	require.Zero(t, n)
	c = rheo.New(b2, rheo.WithClock(clk))
	got := func(o rheo.FetchOptions) []string {
		ls, err := c.Fetch(ctx, "s", "g", o)
		require.NoError(t, err)
		var out []string
		for _, l := range ls {
			out = append(out, strconv.Itoa(l.Event.Partition)+"/"+strconv.FormatInt(l.Event.Sequence, 10)+"@"+strconv.Itoa(l.Attempt))
		}
		require.NoError(t, c.AckBatch(ctx, ls))
		return out
	}
	require.Equal(t, []string{"0/2@2", "1/1@2"}, got(rheo.FetchOptions{Limit: 10}))
	require.Empty(t, got(rheo.FetchOptions{Limit: 10}))
	clk.Advance(2 * time.Minute) // leases expire
	require.Equal(t, []string{"0/4@2", "1/2@2", "1/3@2", "1/4@2", "1/5@2", "1/6@2"}, got(rheo.FetchOptions{Limit: 10}))
	clk.Advance(time.Hour)
	require.Equal(t, []string{"0/1@2"}, got(rheo.FetchOptions{Limit: 10}))
}
