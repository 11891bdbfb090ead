package rheo_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// A replay from a time that finds no event in the partitions it is scoped
// to names those partitions, not the whole stream (which has such events).
func TestReplayFromTimeNamesItsPartitions(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	c := rheo.New(memory.New(), rheo.WithClock(clock.NewFrozen(at)))
	defer c.Close()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	_, err := c.Append(ctx, "s", rheo.Message{Payload: []byte(`{}`), Partition: new(int)})
	require.NoError(t, err)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))

	_, err = c.Replay(ctx, "s", "g", rheo.FromTime(at), 1)
	require.ErrorIs(t, err, rheo.ErrNoEventsInRange)
	require.ErrorContains(t, err, `no event of partitions [1] of stream "s" at or after 2026-01-02T09:00:00Z`)

	_, err = c.Replay(ctx, "s", "g", rheo.FromTime(at.Add(time.Hour)))
	require.ErrorContains(t, err, `no event of stream "s" at or after 2026-01-02T10:00:00Z`)

	n, err := c.Replay(ctx, "s", "g", rheo.FromTime(at), 0)
	require.NoError(t, err)
	require.Equal(t, 0, n, "never offered: nothing to reopen")
}
