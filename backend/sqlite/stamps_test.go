package sqlite_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/sqlite"
	"github.com/rheo-go/rheo/internal/sqlstore"
	"github.com/rheo-go/rheo/rheotest"
)

// stampedStream makes a stream of 64 partitions and a group at its end.
func stampedStream(t *testing.T, b *sqlite.Backend) *rheo.Client {
	t.Helper()
	c := rheo.New(b)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 64}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	return c
}

// appendTo appends one event to each of parts, named by tag and partition.
func appendTo(t *testing.T, c *rheo.Client, tag string, parts ...int) {
	t.Helper()
	ms := make([]rheo.Message, len(parts))
	for i, p := range parts {
		ms[i] = rheo.Message{ID: tag + "-" + strconv.Itoa(p), Partition: &parts[i], Payload: []byte(`{}`)}
	}
	_, err := c.AppendBatch(context.Background(), "s", ms)
	require.NoError(t, err)
}

// drain fetches (Limit each time) and acks until a fetch returns nothing,
// and returns the IDs fetched, in order.
func drain(t *testing.T, c *rheo.Client, limit int, parts ...int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: limit, Partitions: parts})
		require.NoError(t, err)
		if len(ls) == 0 {
			return ids
		}
		for _, l := range ls {
			ids = append(ids, l.Event.ID)
		}
		require.NoError(t, c.AckBatch(ctx, ls))
	}
}

// TestFetchReadsOnlyStampedPartitions: once a fetch from every partition
// left no new event behind, the next ones read only the partitions
// appended to since (StampReads counts them), and still get every event:
// those of later appends, those a fetch with a small limit left behind,
// those a fetch from some partitions did not take.
func TestFetchReadsOnlyStampedPartitions(t *testing.T) {
	c := stampedStream(t, open(t))
	appendTo(t, c, "a", 0, 1, 2, 40)
	before := sqlstore.StampReads()
	require.ElementsMatch(t, []string{"a-0", "a-1", "a-2", "a-40"}, drain(t, c, 100))
	require.Equal(t, before+1, sqlstore.StampReads(), "the fetch after the first drain reads stamps")

	// A small limit leaves events behind: the fetches after it find them.
	appendTo(t, c, "b", 3, 5, 7, 9, 11, 63)
	require.ElementsMatch(t, []string{"b-3", "b-5", "b-7", "b-9", "b-11", "b-63"}, drain(t, c, 2))

	// A fetch from some partitions takes part of what was appended; the
	// rest comes with the next fetch from all.
	appendTo(t, c, "c", 4, 6, 8)
	require.ElementsMatch(t, []string{"c-6"}, drain(t, c, 10, 6))
	require.ElementsMatch(t, []string{"c-4", "c-8"}, drain(t, c, 10))
	require.Greater(t, sqlstore.StampReads(), before+4)
}

// TestStampsForgottenOnReplayAndReset: a replay or a reset moves cursors
// back in partitions not appended to since the group's last drain; the
// next fetch from every partition still offers their events again.
func TestStampsForgottenOnReplayAndReset(t *testing.T) {
	ctx := context.Background()
	c := stampedStream(t, open(t))
	appendTo(t, c, "a", 10, 20)
	require.Len(t, drain(t, c, 100), 2)
	appendTo(t, c, "b", 30)
	require.Equal(t, []string{"b-30"}, drain(t, c, 100))

	n, err := c.Replay(ctx, "s", "g", rheo.FromSequence(0), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"a-10"}, drain(t, c, 100), "the replayed partition was not appended to since the drain")

	_, err = c.ResetGroup(ctx, "s", "g", rheo.ResetOptions{Confirm: true, Start: rheo.Beginning(), Partitions: []int{20}})
	require.NoError(t, err)
	require.Equal(t, []string{"a-20"}, drain(t, c, 100), "the reset partition was not appended to since the drain")
}

// TestUpgradeToStamps: a store written before schema version 8 (no stamps,
// no seen counts) with events not yet fetched in many partitions, and a
// group that had drained others, gets every event after the upgrade.
func TestUpgradeToStamps(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rheo.db")
	b, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	c := stampedStream(t, b)
	appendTo(t, c, "a", 1, 2, 3)
	require.Len(t, drain(t, c, 100), 3)
	appendTo(t, c, "b", 1, 50, 60)
	require.NoError(t, b.Close())

	c = rheo.New(upgraded(t, path,
		"ALTER TABLE rheo_partitions DROP COLUMN stamp",
		"ALTER TABLE rheo_groups DROP COLUMN seen",
		"DELETE FROM rheo_schema WHERE version = 8",
	))
	require.ElementsMatch(t, []string{"b-1", "b-50", "b-60"}, drain(t, c, 100))
	appendTo(t, c, "c", 2, 61)
	require.ElementsMatch(t, []string{"c-2", "c-61"}, drain(t, c, 100))
}

// TestConformanceStamped runs the conformance suite with every fetch from
// all partitions of a stream of two or more reading stamps once its group
// recorded a seen count (and materializing runs at once), so that every
// rule meets that path, not only the wide streams that take it by default.
func TestConformanceStamped(t *testing.T) {
	t.Cleanup(sqlstore.SetFewRuns(1))
	before := sqlstore.StampReads()
	rheotest.RunBackend(t, func(t testing.TB) rheo.Backend { return open(t) })
	require.Greater(t, sqlstore.StampReads(), before, "fetches read stamps")
}
