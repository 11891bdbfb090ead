package rheotel_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/rheotel"
)

// The group gauges report what Lag and GroupInfo say, for every group or
// only the chosen ones, and stop when unregistered.
func TestWatchGroupsMatchesGroupInfo(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx := context.Background()
		require.NoError(t, c.CreateGroup(ctx, "orders", "audit", rheo.GroupConfig{}))
		for i := range 6 {
			_, err := c.Append(ctx, "orders", rheo.Message{Key: strconv.Itoa(i)})
			require.NoError(t, err)
		}
		ls, err := c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 4})
		require.NoError(t, err)
		require.NoError(t, c.Ack(ctx, ls[0]))
		require.NoError(t, c.Reject(ctx, ls[1], "bad"))
		clk.Advance(90 * time.Second)

		stop, err := tel.ins.WatchGroups(c)
		require.NoError(t, err)
		rm := tel.collect(t)
		for _, g := range []string{"billing", "audit"} {
			info, err := c.GroupInfo(ctx, "orders", g)
			require.NoError(t, err)
			m := map[string]any{"messaging.consumer.group.name": g}
			require.Equal(t, float64(info.Lag.Total), sum(rm, rheotel.MetricGroupLag, m), g)
			for _, pl := range info.Lag.Partitions {
				require.Equal(t, float64(pl.Lag), sum(rm, rheotel.MetricGroupLag, map[string]any{
					"messaging.consumer.group.name": g, "messaging.destination.partition.id": strconv.Itoa(pl.Partition)}))
			}
			require.Equal(t, float64(info.Inflight), sum(rm, rheotel.MetricGroupInflight, m), g)
			require.Equal(t, float64(info.Available), sum(rm, rheotel.MetricGroupAvailable, m), g)
			require.Equal(t, float64(info.DeadLetters), sum(rm, rheotel.MetricGroupDeadLetters, m), g)
			require.Equal(t, clk.Now().Sub(info.OldestPending).Seconds(), sum(rm, rheotel.MetricGroupOldestPending, m), g)
		}
		require.Equal(t, 2.0, sum(rm, rheotel.MetricGroupInflight, map[string]any{"messaging.consumer.group.name": "billing"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricGroupDeadLetters, nil))
		require.Equal(t, 6.0, sum(rm, rheotel.MetricHighWatermark, map[string]any{"messaging.destination.name": "orders"}))
		require.NoError(t, stop())

		stop, err = tel.ins.WatchGroups(c, rheotel.Group{Stream: "orders", Group: "audit"})
		require.NoError(t, err)
		defer stop()
		rm = tel.collect(t)
		require.Zero(t, sum(rm, rheotel.MetricGroupLag, map[string]any{"messaging.consumer.group.name": "billing"}))
		require.Equal(t, 6.0, sum(rm, rheotel.MetricGroupLag, map[string]any{"messaging.consumer.group.name": "audit"}))
	})
}
