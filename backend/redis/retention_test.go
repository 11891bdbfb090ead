package redis_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
)

// TestMaxEventsBoundsKeys appends continuously under MaxEvents and checks
// that the partition streams, the ID index and their memory stay bounded:
// trims XTRIM the streams and drop the trimmed IDs.
func TestMaxEventsBoundsKeys(t *testing.T) {
	ctx := context.Background()
	b, rc := newBackend(t)
	c := rheo.New(b)
	const keep = 300
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2, Retention: rheo.Retention{MaxEvents: keep}}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	base := b.KeyPrefix() + "{s}:"
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	batch := make([]rheo.Message, 200)
	for i := range batch {
		batch[i] = rheo.Message{Key: string(rune('a' + i%26)), Payload: payload}
	}
	memory := func() int64 {
		var total int64
		for _, k := range append([]string{base + "s:0", base + "s:1"}, idIndexKeys(t, rc, base)...) {
			n, err := rc.MemoryUsage(ctx, k).Result()
			require.NoError(t, err)
			total += n
		}
		return total
	}
	round := func() {
		_, err := c.AppendBatch(ctx, "s", batch)
		require.NoError(t, err)
		for {
			ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 500})
			require.NoError(t, err)
			if len(ls) == 0 {
				break
			}
			require.NoError(t, c.AckBatch(ctx, ls))
		}
		_, err = c.EnforceRetention(ctx)
		require.NoError(t, err)
		for p := range 2 {
			n, err := rc.XLen(ctx, base+"s:"+string(rune('0'+p))).Result()
			require.NoError(t, err)
			require.LessOrEqual(t, n, int64(keep))
		}
		require.LessOrEqual(t, idIndexFields(t, rc, base), int64(2*keep))
	}
	for range 5 {
		round()
	}
	warm := memory()
	for range 10 {
		round()
	}
	end := memory()
	t.Logf("MEMORY USAGE of the partition streams and ID index: %d bytes after 1k events, %d after 3k", warm, end)
	// 2,000 more events of 1 KiB would add ~2 MB.
	require.Less(t, end, warm*3/2, "memory follows the retained events, not the appended ones")
}

// Redis filters times by scanning a partition's entries, within a limit
// (WithQueryScanLimit). A trim by MaxAge behind more old events than that,
// GroupInfo (which asks whether a group holds retention back) and
// EnforceRetention still work: the cutoff is searched in windows of
// sequences the limit allows.
func TestMaxAgeBehindMoreOldEventsThanTheScanLimit(t *testing.T) {
	ctx := context.Background()
	b, _ := newBackend(t, redis.WithQueryScanLimit(5))
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := rheo.New(b, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateStream(ctx, "t", rheo.StreamConfig{Partitions: 1, Retention: rheo.Retention{MaxEvents: 1}}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	for range 12 {
		_, err := c.Append(ctx, "s", rheo.Message{Payload: []byte(`{}`)})
		require.NoError(t, err)
		_, err = c.Append(ctx, "t", rheo.Message{Payload: []byte(`{}`)})
		require.NoError(t, err)
	}
	clk.Advance(2 * time.Hour)
	_, err := c.Append(ctx, "s", rheo.Message{Payload: []byte(`{}`)})
	require.NoError(t, err)
	require.NoError(t, c.SetRetention(ctx, "s", rheo.Retention{MaxAge: time.Hour}))

	info, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.True(t, info.HoldsRetention)

	rep, err := c.Trim(ctx, "s", rheo.TrimOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(12), rep.Partitions[0].Target)
	require.Zero(t, rep.Removed, "the group holds it back")

	reps, err := c.EnforceRetention(ctx)
	require.NoError(t, err)
	require.Len(t, reps, 2)

	rep, err = c.Trim(ctx, "s", rheo.TrimOptions{Force: true, Confirm: true})
	require.NoError(t, err)
	require.Equal(t, int64(12), rep.Removed)
}
