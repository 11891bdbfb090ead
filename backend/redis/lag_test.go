package redis_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// TestLagOfReopenedBeyondTheFirst64Partitions: the lag script asks which
// partitions have reopened deliveries 64 at a time; a replay of
// partitions in the first, second and third such run lowers exactly those
// partitions' frontiers.
func TestLagOfReopenedBeyondTheFirst64Partitions(t *testing.T) {
	b, _ := newBackend(t)
	c := rheo.New(b)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "wide", rheo.StreamConfig{Partitions: 130}))
	require.NoError(t, c.CreateGroup(ctx, "wide", "g", rheo.GroupConfig{}))
	used := []int{0, 63, 64, 65, 127, 128, 129}
	ids := map[[2]int64]string{} // (partition, sequence) -> event ID
	for _, p := range used {
		for range 3 {
			e, err := c.Append(ctx, "wide", rheo.Message{Partition: &p, Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			ids[[2]int64{int64(p), e.Sequence}] = e.ID
		}
	}
	for {
		ls, err := c.Fetch(ctx, "wide", "g", rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		if len(ls) == 0 {
			break
		}
		require.NoError(t, c.AckBatch(ctx, ls))
	}
	lag, err := c.Lag(ctx, "wide", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
	// Replayed by ID, each stays reopened below its partition's frontier.
	n, err := c.Replay(ctx, "wide", "g", rheo.Events(ids[[2]int64{64, 2}], ids[[2]int64{129, 2}], ids[[2]int64{63, 3}]))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	lag, err = c.Lag(ctx, "wide", "g")
	require.NoError(t, err)
	require.Len(t, lag.Partitions, 130)
	want := map[int]int64{64: 1, 129: 1, 63: 2}
	for _, pl := range lag.Partitions {
		hw := int64(0)
		for _, u := range used {
			if u == pl.Partition {
				hw = 3
			}
		}
		f, ok := want[pl.Partition]
		if !ok {
			f = hw
		}
		require.Equal(t, rheo.PartitionLag{Partition: pl.Partition, Frontier: f, HighWatermark: hw, Lag: hw - f}, pl)
	}
	require.EqualValues(t, 5, lag.Total)
}

// TestLagAfterScriptFlush reads the lag after the server forgot its
// scripts (SCRIPT FLUSH, or a failover to a primary that never loaded
// them): the script runs inside a transaction, where its EVALSHA fails
// only at EXEC, and Lag sends it whole once more. The other operations
// fall back the same way (go-redis's Script.Run).
func TestLagAfterScriptFlush(t *testing.T) {
	b, rc := newBackend(t)
	c := rheo.New(b)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 3}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	for p := range 3 {
		for range p + 1 {
			_, err := c.Append(ctx, "s", rheo.Message{Partition: &p, Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
		}
	}
	want := []rheo.PartitionLag{
		{Partition: 0, HighWatermark: 1, Lag: 1},
		{Partition: 1, HighWatermark: 2, Lag: 2},
		{Partition: 2, HighWatermark: 3, Lag: 3},
	}
	lag, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Equal(t, want, lag.Partitions)
	require.NoError(t, rc.ScriptFlush(ctx).Err())
	lag, err = c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Equal(t, want, lag.Partitions)
	_, err = c.Lag(ctx, "s", "missing")
	require.ErrorIs(t, err, rheo.ErrGroupNotFound)
	require.NoError(t, rc.ScriptFlush(ctx).Err())
	_, err = c.Lag(ctx, "missing", "g")
	require.ErrorIs(t, err, rheo.ErrStreamNotFound)
}
