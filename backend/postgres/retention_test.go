package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// TestMaxEventsBoundsRows appends continuously under MaxEvents and checks
// that the event and delivery tables hold a bounded number of rows
// (autovacuum then makes their space reusable; see docs/operations.md).
func TestMaxEventsBoundsRows(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	c := rheo.New(b)
	const keep = 300
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2, Retention: rheo.Retention{MaxEvents: keep}}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	count := func(table string) int {
		var n int
		require.NoError(t, b.Pool().QueryRow(ctx, "SELECT COUNT(*) FROM "+b.Schema()+"."+table).Scan(&n))
		return n
	}
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	batch := make([]rheo.Message, 200)
	for i := range batch {
		batch[i] = rheo.Message{Key: string(rune('a' + i%26)), Payload: payload}
	}
	for range 12 {
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
		require.LessOrEqual(t, count("rheo_events"), 2*keep)
		require.Zero(t, count("rheo_deliveries"))
	}
	st, err := b.Stream(ctx, "s")
	require.NoError(t, err)
	for p := range 2 {
		require.Equal(t, int64(keep), st.HighWatermarks[p]-st.TrimmedThrough[p])
	}
}
