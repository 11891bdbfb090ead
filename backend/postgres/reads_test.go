package postgres_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

// TestReadsRunOnPgxsStatementCache runs the reads that go through
// database/sql (stream and group lookups, Read, Query, Lag, group stats,
// dead letters, lease lists) on a pool of one connection, twice to warm
// it, then five times more: once pgx holds a statement prepared on the
// connection, a read prepares nothing again. A statement prepared through
// database/sql on a pool that keeps no idle connections of its own is
// prepared, run and deallocated on every call, and fails this.
func TestReadsRunOnPgxsStatementCache(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	tr := &countingTracer{}
	c, _ := clientOnOwnPool(t, 4, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = tr
	})
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := c.AppendBatch(ctx, "s", []rheo.Message{
		{ID: "a", Type: "t", Key: "k1", Payload: json.RawMessage(`{"n":1}`)},
		{ID: "b", Type: "t", Key: "k2", Payload: json.RawMessage(`{"n":2}`)},
	})
	require.NoError(t, err)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)

	reads := func() {
		t.Helper()
		lag, err := c.Lag(ctx, "s", "g")
		require.NoError(t, err)
		require.Equal(t, int64(2), lag.Total)
		evs, err := c.Read(ctx, "s", rheo.ReadOptions{Partition: ls[0].Event.Partition})
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		evs, err = c.Query(ctx, rheo.Query{Stream: "s", Type: "t", Key: "k2"})
		require.NoError(t, err)
		require.Len(t, evs, 1)
		info, err := c.GroupInfo(ctx, "s", "g")
		require.NoError(t, err)
		require.Equal(t, int64(1), info.Inflight)
		_, err = c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		held, err := c.Leases(ctx, "s", "g", rheo.LeaseListOptions{})
		require.NoError(t, err)
		require.Len(t, held, 1)
		_, err = c.Stream(ctx, "s")
		require.NoError(t, err)
	}
	reads()
	reads()
	queries, prepares := tr.n.Load(), tr.prepares.Load()
	for range 5 {
		reads()
	}
	require.Positive(t, tr.n.Load()-queries, "the tracer sees the reads")
	require.Zero(t, tr.prepares.Load()-prepares, "statements prepared again by reads of the same shape")
}

// TestLagProbesOnlyPartitionsWithPendingWork explains Lag on a group of
// 256 partitions with leases outstanding in three of them: the lowest
// pending sequence is looked up in those three (a lookup that runs once
// per partition of the group is the cost Lag had on many partitions), and
// Lag reports each partition's frontier as the lowest pending lease
// leaves it. A read of four partitions looks up only those four.
func TestLagProbesOnlyPartitionsWithPendingWork(t *testing.T) {
	ctx := context.Background()
	be, c := lagGroup(t, 256)
	for _, p := range []int{3, 70, 200} {
		for range 2 {
			_, err := c.Append(ctx, "s", rheo.Message{Type: "t", Partition: &p, Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
		}
	}
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 6})
	require.NoError(t, err)
	require.Len(t, ls, 6)
	// One lease of partition 70 becomes a delivery row of its own (the
	// first), one of partition 200 is acked (the first): the frontier of
	// 3 and 70 is 0, that of 200 is 1.
	for _, l := range ls {
		switch {
		case l.Event.Partition == 70 && l.Event.Sequence == 1:
			require.NoError(t, c.Nack(ctx, l, "later", rheo.Delay(time.Hour)))
		case l.Event.Partition == 200 && l.Event.Sequence == 1:
			require.NoError(t, c.Ack(ctx, l))
		}
	}
	lag, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Len(t, lag.Partitions, 256)
	require.Equal(t, int64(5), lag.Total)
	for _, pl := range lag.Partitions {
		want := rheo.PartitionLag{Partition: pl.Partition}
		switch pl.Partition {
		case 3, 70:
			want.HighWatermark, want.Lag = 2, 2
		case 200:
			want.HighWatermark, want.Frontier, want.Lag = 2, 1, 1
		}
		require.Equal(t, want, pl)
	}

	_, err = be.Pool().Exec(ctx, "ANALYZE "+be.Schema()+".rheo_group_parts, "+be.Schema()+".rheo_partitions")
	require.NoError(t, err)
	sid, gid := lagGroupIDs(t, be)
	requireLookupsAtMost(t, explain(t, be, "", be.LagSQLForTest(), gid, sid), 4, "a lookup runs per partition of the group")

	// A read of given partitions returns their rows of the whole read,
	// and looks up the lowest pending sequences once per partition asked
	// for.
	of, err := c.Lag(ctx, "s", "g", 200, 3, 70, 9)
	require.NoError(t, err)
	require.Equal(t, rheo.Lag{Stream: "s", Group: "g", Total: 5, Partitions: []rheo.PartitionLag{
		lag.Partitions[3], lag.Partitions[9], lag.Partitions[70], lag.Partitions[200]}}, of)
	requireLookupsAtMost(t, explain(t, be, "", be.LagPartsSQLForTest(), gid, sid, []int{3, 9, 70, 200}), 4, "a lookup runs per partition asked for")
}

// lagGroup returns a client over a fresh schema holding stream "s" of
// parts partitions and its group "g".
func lagGroup(t *testing.T, parts int) (*postgres.Backend, *rheo.Client) {
	t.Helper()
	ctx := context.Background()
	be := newBackend(t)
	c := rheo.New(be)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	return be, c
}

// lagGroupIDs returns the ids of stream "s" and of its group "g", the
// arguments of the lag statements.
func lagGroupIDs(t *testing.T, be *postgres.Backend) (sid, gid int64) {
	t.Helper()
	require.NoError(t, be.Pool().QueryRow(context.Background(), "SELECT g.stream_id, g.id FROM "+be.Schema()+".rheo_groups g JOIN "+
		be.Schema()+".rheo_streams s ON s.id = g.stream_id WHERE s.name = 's' AND g.name = 'g'").Scan(&sid, &gid))
	return sid, gid
}

// requireLookupsAtMost fails when a plan's lookup of delivery rows or
// spans (the lines of the explained plan) runs more than max times.
func requireLookupsAtMost(t *testing.T, lines []string, max int, msg string) {
	t.Helper()
	text := strings.Join(lines, "\n")
	for _, l := range lines {
		if !strings.Contains(l, "rheo_deliveries") && !strings.Contains(l, "rheo_spans") {
			continue
		}
		_, n, ok := strings.Cut(l, "loops=")
		require.True(t, ok, l)
		loops, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(n), ")"))
		require.NoError(t, err, l)
		require.LessOrEqual(t, loops, max, "%s:\n%s", msg, text)
	}
}

// TestLagOfPartitionsReadsOnlyThose explains a lag read of 4 partitions of
// a stream of 1,024 (next to a stream of 4, with deliveries pending in
// some partitions), without statistics and with fresh ones: every table is
// read through its key for the partitions asked for, never scanned, so
// that the read costs what 4 partitions do.
func TestLagOfPartitionsReadsOnlyThose(t *testing.T) {
	ctx := context.Background()
	be, c := lagGroup(t, 1024)
	require.NoError(t, c.CreateStream(ctx, "small", rheo.StreamConfig{Partitions: 4}))
	require.NoError(t, c.CreateGroup(ctx, "small", "g", rheo.GroupConfig{}))
	ms := make([]rheo.Message, 100)
	for i := range 20 {
		for j := range ms {
			ms[j] = rheo.Message{Type: "t", Key: strconv.Itoa(i*100 + j), Payload: json.RawMessage(`{}`)}
		}
		_, err := c.AppendBatch(ctx, "s", ms)
		require.NoError(t, err)
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		for _, l := range ls[:i%3*10] {
			require.NoError(t, c.Nack(ctx, l, "later", rheo.Delay(time.Hour)))
		}
		if i%2 == 0 {
			require.NoError(t, c.AckBatch(ctx, ls[i%3*10:]))
		}
	}
	full, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	of, err := c.Lag(ctx, "s", "g", 3, 1000, 0, 517)
	require.NoError(t, err)
	want := []rheo.PartitionLag{full.Partitions[0], full.Partitions[3], full.Partitions[517], full.Partitions[1000]}
	require.Equal(t, want, of.Partitions)

	sid, gid := lagGroupIDs(t, be)
	// Before statistics are gathered (a new stream, before autovacuum's
	// ANALYZE) and after.
	for _, analyze := range []bool{false, true} {
		if analyze {
			_, err = be.Pool().Exec(ctx, "ANALYZE")
			require.NoError(t, err)
		}
		text := strings.Join(explain(t, be, "", be.LagPartsSQLForTest(), gid, sid, []int{0, 1, 2, 3}), "\n")
		require.NotContains(t, text, "Seq Scan", "analyzed: %v\n%s", analyze, text)
		require.NotContains(t, text, "Rows Removed by Filter", "analyzed: %v\n%s", analyze, text)
	}
}

// TestReadsAfterAResultTypeChange changes the type of columns the reads
// return while their statements are cached on the pool's one connection
// (as a migration of a newer version run by another process could): the
// next reads succeed, each preparing its statement anew once pgx dropped
// the stale one.
func TestReadsAfterAResultTypeChange(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	c, _ := clientOnOwnPool(t, 2, func(c *pgxpool.Config) { c.MaxConns = 1 })
	schema := c.Backend().(*postgres.Backend).Schema()
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := c.Append(ctx, "s", rheo.Message{Type: "t", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	reads := func() {
		t.Helper()
		lag, err := c.Lag(ctx, "s", "g")
		require.NoError(t, err)
		require.Equal(t, int64(1), lag.Total)
		n := 0
		for p := range 2 {
			evs, err := c.Read(ctx, "s", rheo.ReadOptions{Partition: p})
			require.NoError(t, err)
			n += len(evs)
		}
		require.Equal(t, 1, n)
		info, err := c.GroupInfo(ctx, "s", "g")
		require.NoError(t, err)
		require.Equal(t, int64(1), info.Available)
	}
	reads()
	reads()
	_, err = testPool(t).Exec(ctx, "ALTER TABLE "+schema+".rheo_group_parts ALTER COLUMN part TYPE bigint; "+
		"ALTER TABLE "+schema+".rheo_events ALTER COLUMN part TYPE bigint; ALTER TABLE "+schema+".rheo_streams ALTER COLUMN partitions TYPE bigint")
	require.NoError(t, err)
	reads()
}
