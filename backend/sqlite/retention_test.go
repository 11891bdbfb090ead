package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// TestMaxEventsBoundsStorage appends continuously under MaxEvents and checks
// that the tables and the database file stay bounded: trimmed rows go, and
// SQLite reuses the pages they freed.
func TestMaxEventsBoundsStorage(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	c := rheo.New(b)
	const keep = 300
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2, Retention: rheo.Retention{MaxEvents: keep}}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	db, err := sql.Open("sqlite", b.Path())
	require.NoError(t, err)
	defer db.Close()
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	batch := make([]rheo.Message, 200)
	for i := range batch {
		batch[i] = rheo.Message{Key: string(rune('a' + i%26)), Payload: payload}
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
		require.LessOrEqual(t, count(t, db, "SELECT COUNT(*) FROM rheo_events"), 2*keep)
		require.Zero(t, count(t, db, "SELECT COUNT(*) FROM rheo_deliveries"))
	}
	pages := func() int {
		return count(t, db, "PRAGMA page_count") - count(t, db, "PRAGMA freelist_count")
	}
	for range 10 {
		round()
	}
	base := count(t, db, "PRAGMA page_count")
	for range 40 {
		round()
	}
	end := count(t, db, "PRAGMA page_count")
	t.Logf("page_count after 2k events: %d, after 10k: %d (in use %d)", base, end, pages())
	// 8,000 more events of 1 KiB would need ~2,000 more 4 KiB pages.
	require.Less(t, end, base+base/2, "freed pages are reused")
	st, err := b.Stream(ctx, "s")
	require.NoError(t, err)
	for p := range 2 {
		require.Equal(t, int64(keep), st.HighWatermarks[p]-st.TrimmedThrough[p])
	}
}
