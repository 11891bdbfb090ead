package sqlite_test

import (
	"context"
	"database/sql"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/sqlite"
	"github.com/rheo-go/rheo/clock"
)

// upgraded runs stmts on the closed store at path, making it what an
// earlier version left, then opens it again (which migrates it) and checks
// that it is at the current schema version. The store is closed when the
// test ends.
func upgraded(t *testing.T, path string, stmts ...string) *sqlite.Backend {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	for _, q := range stmts {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	require.NoError(t, db.Close())
	b, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	v, err := b.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, v)
	return b
}

// TestUpgradeKeepsDueTimes opens a store whose deliveries were written
// before schema version 3 (a reopened one due at math.MinInt64, a nack
// without a delay due at its own time, the old index of due times) and
// checks that after the upgrade a fetch claims exactly what it claimed
// before: the available ones at once, in sequence order, and the delayed
// ones when their delay is over.
func TestUpgradeKeepsDueTimes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rheo.db")
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	c := rheo.New(b, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	for range 6 {
		_, err := c.Append(ctx, "s", rheo.Message{Payload: []byte(`{}`)})
		require.NoError(t, err)
	}
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 6})
	require.NoError(t, err)
	require.Len(t, ls, 6)
	// 1, 4: delayed an hour; 2, 5: available again; 3, 6: acked.
	for _, i := range []int{0, 3} {
		require.NoError(t, c.Nack(ctx, ls[i], "later", rheo.Delay(time.Hour)))
	}
	for _, i := range []int{1, 4} {
		require.NoError(t, c.Nack(ctx, ls[i], "again"))
	}
	require.NoError(t, c.AckBatch(ctx, []rheo.Lease{ls[2], ls[5]}))
	require.NoError(t, b.Close())

	// What version 2 wrote: a reopened delivery due at math.MinInt64, a
	// nack due at the time of the nack, one index of due times.
	b = upgraded(t, path,
		"UPDATE rheo_deliveries SET due_at = "+strconv.FormatInt(math.MinInt64, 10)+" WHERE seq = 2",
		"UPDATE rheo_deliveries SET due_at = "+strconv.FormatInt(clk.Now().UnixMicro(), 10)+" WHERE seq = 5",
		"DROP INDEX rheo_deliveries_ready",
		"DROP INDEX rheo_deliveries_timed",
		"CREATE INDEX rheo_deliveries_due ON rheo_deliveries (grp_id, part, due_at)",
		"DELETE FROM rheo_schema WHERE version = 3",
	)
	c = rheo.New(b, rheo.WithClock(clk))
	seqs := func() []int64 {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
		require.NoError(t, err)
		var out []int64
		for _, l := range ls {
			out = append(out, l.Event.Sequence)
		}
		require.NoError(t, c.AckBatch(ctx, ls))
		return out
	}
	require.Equal(t, []int64{2, 5}, seqs(), "the available ones, at once")
	require.Empty(t, seqs(), "the delayed ones wait")
	clk.Advance(time.Hour)
	require.Equal(t, []int64{1, 4}, seqs(), "and come when their delay is over")
}

// TestSpansOfEarlierVersionsSettle: spans written before schema version 5
// have no digest of their members' event IDs; a whole ack of one checks
// the IDs against the events instead, forged ones included.
func TestSpansOfEarlierVersionsSettle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rheo.db")
	b, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	defer b.Close()
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	for range 6 {
		_, err := c.Append(ctx, "s", rheo.Message{Payload: []byte(`{}`)})
		require.NoError(t, err)
	}
	first, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 3})
	require.NoError(t, err)
	second, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 3})
	require.NoError(t, err)

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	res, err := db.Exec("UPDATE rheo_spans SET digest = NULL")
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "both fetches wrote a span")
	require.NoError(t, db.Close())

	require.NoError(t, c.AckBatch(ctx, first), "a whole span without a digest")
	forged := slices.Clone(second)
	forged[1].Event.ID = first[0].Event.ID
	require.ErrorIs(t, c.AckBatch(ctx, forged), rheo.ErrStaleLease)
	require.NoError(t, c.Ack(ctx, second[1]))
	lag, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}
