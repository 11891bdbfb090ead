package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// TestWideFetchBehindWatermarkKeepsExpiredLease: a fetch from more than 8
// partitions skips the partitions of a run of 32 none of which has a due
// set, without bringing their ready sets to its clock. When its clock is
// behind their watermark (another process's, or a clock stepped back), the
// leases it gives out there expire at or below the watermark, so later
// fetches, which move only what became due after the watermark, must still
// find them: the expired lease is delivered again (and, at the attempt
// limit, buried), as on the memory backend.
func TestWideFetchBehindWatermarkKeepsExpiredLease(t *testing.T) {
	rb, _ := newBackend(t)
	mb := memory.New()
	t.Cleanup(func() { _ = mb.Close() })
	for _, be := range []rheo.Backend{mb, rb} {
		ctx := context.Background()
		clk := clock.NewFrozen(epoch.Add(10 * time.Second))
		c := rheo.New(be, rheo.WithClock(clk))
		require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 10}))
		require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 5}))
		p0, p3 := 0, 3
		_, err := c.Append(ctx, "s", rheo.Message{Partition: &p0, Payload: []byte(`{}`)})
		require.NoError(t, err)
		all := rheo.FetchOptions{Limit: 10, LeaseDuration: time.Second}
		ls, err := c.Fetch(ctx, "s", "g", all)
		require.NoError(t, err)
		require.Len(t, ls, 1)
		// With a due set in the run, this fetch gives every partition of it
		// a watermark at its clock (epoch+10s).
		more, err := c.Fetch(ctx, "s", "g", all)
		require.NoError(t, err)
		require.Empty(t, more)
		require.NoError(t, c.Ack(ctx, ls[0])) // no due set is left

		clk.Set(epoch) // a clock 10s behind
		_, err = c.Append(ctx, "s", rheo.Message{Partition: &p3, Payload: []byte(`{}`)})
		require.NoError(t, err)
		ls, err = c.Fetch(ctx, "s", "g", all)
		require.NoError(t, err)
		require.Len(t, ls, 1) // leased until epoch+1s, below the watermark; then abandoned

		clk.Set(epoch.Add(20 * time.Second))
		again, err := c.Fetch(ctx, "s", "g", all)
		require.NoError(t, err)
		require.Len(t, again, 1, "%T: the expired lease comes back", be)
		require.Equal(t, ls[0].Event.ID, again[0].Event.ID)
		require.Equal(t, 2, again[0].Attempt)
		require.NoError(t, c.Ack(ctx, again[0]))
		lag, err := c.Lag(ctx, "s", "g")
		require.NoError(t, err)
		require.Zero(t, lag.Total)
	}
}
