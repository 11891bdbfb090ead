package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/rheotest"
)

// A fetch locks the cursor rows of the partitions that have events past
// the cursor, and only those: a transaction holding the cursor of an idle
// partition (a Replay, say) does not hold up a fetch of the others, while
// one holding the cursor of a partition with new events makes an
// otherwise empty-handed fetch wait for it and then take them (in the same
// statement), and a fetch with another delivery to claim take that instead.
func TestFetchLocksOnlyCursorsWithNewEvents(t *testing.T) {
	be := newBackend(t)
	c := rheo.New(be)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	var gid int64
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT id FROM "+be.Schema()+".rheo_groups").Scan(&gid))
	hold := func(part int) (release func()) {
		tx, err := be.Pool().Begin(ctx)
		require.NoError(t, err)
		// Rolled back on failure too (cleanups run last first), or the
		// schema's drop would wait for it.
		var once sync.Once
		release = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
		t.Cleanup(release)
		_, err = tx.Exec(ctx, "SELECT 1 FROM "+be.Schema()+".rheo_group_parts WHERE grp_id = $1 AND part = $2 FOR UPDATE", gid, part)
		require.NoError(t, err)
		return release
	}

	// Idle partition 1 held: a fetch with nothing to take returns at once,
	// and one with events in partition 2 takes them.
	release := hold(1)
	short, stop := context.WithTimeout(ctx, 30*time.Second)
	ls, err := c.Fetch(short, "s", "g", rheo.FetchOptions{Limit: 10})
	stop()
	require.NoError(t, err, "a held idle cursor made the fetch wait")
	require.Empty(t, ls)
	two := 2
	_, err = c.AppendBatch(ctx, "s", []rheo.Message{{Partition: &two, Payload: []byte(`{"n":1}`)}})
	require.NoError(t, err)
	ls, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.Equal(t, 2, ls[0].Event.Partition)
	require.NoError(t, c.AckBatch(ctx, ls))
	release()

	// Partition 3, which has a new event, held: the fetch waits for the
	// holder and then takes the event.
	three := 3
	_, err = c.AppendBatch(ctx, "s", []rheo.Message{{Partition: &three, Payload: []byte(`{"n":2}`)}})
	require.NoError(t, err)
	release = hold(3)
	type result struct {
		ls  []rheo.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
		done <- result{ls, err}
	}()
	// The fetch is waiting on the held row (its first try skipped it): a
	// statement on this schema waits for a lock (the only other
	// transaction on it is the holder; pg_stat_activity keeps the first
	// kilobyte of a query's text, which names the schema but may stop
	// before the cursor table).
	require.Eventually(t, func() bool {
		var waiting int
		err := be.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, be.Schema()).Scan(&waiting)
		return err == nil && waiting > 0
	}, time.Minute, 10*time.Millisecond, "the fetch did not wait for the held cursor")
	select {
	case r := <-done:
		t.Fatalf("fetch returned while the cursor was held: %v, %v", r.ls, r.err)
	default:
	}
	release()
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.ls, 1)
	require.Equal(t, 3, r.ls[0].Event.Partition)

	// Partition 3's cursor held again over a new event, and a delivery of
	// partition 3 available at once (nacked): the fetch takes that delivery
	// without waiting for the cursor.
	_, err = c.AppendBatch(ctx, "s", []rheo.Message{{Partition: &three, Payload: []byte(`{"n":3}`)}})
	require.NoError(t, err)
	require.NoError(t, c.Nack(ctx, r.ls[0], "again"))
	release = hold(3)
	short, stop = context.WithTimeout(ctx, 30*time.Second)
	ls, err = c.Fetch(short, "s", "g", rheo.FetchOptions{Limit: 10})
	stop()
	require.NoError(t, err, "a held cursor made a fetch with a delivery to claim wait")
	require.Len(t, ls, 1)
	require.Equal(t, r.ls[0].Event.ID, ls[0].Event.ID)
	require.Equal(t, 2, ls[0].Attempt)
	release()
	ls, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, ls, 1, "the event behind the held cursor")
	require.JSONEq(t, `{"n":3}`, string(ls[0].Event.Payload))
}

// A fetch turns the expired spans of its partitions into delivery rows
// before it claims, skipping any span another transaction holds instead of
// waiting for it: two fetchers exploding overlapping sets of spans used to
// deadlock (and each deadlock cost a second before PostgreSQL broke it).
// The held span's members come with a later fetch.
func TestFetchSkipsHeldExpiredSpans(t *testing.T) {
	be := newBackend(t)
	clk := clock.NewFrozen(rheotest.Epoch)
	c := rheo.New(be, rheo.WithClock(clk))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	var ms []rheo.Message
	for p := range 2 {
		for i := range 2 {
			ms = append(ms, rheo.Message{Partition: &p, Payload: []byte(fmt.Sprintf(`{"p":%d,"i":%d}`, p, i))})
		}
	}
	_, err := c.AppendBatch(ctx, "s", ms)
	require.NoError(t, err)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	first, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, first, 4)
	var spans int
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT count(*) FROM "+be.Schema()+".rheo_spans").Scan(&spans))
	require.Equal(t, 2, spans, "one span per partition")
	clk.Advance(time.Hour) // every lease has expired

	tx, err := be.Pool().Begin(ctx)
	require.NoError(t, err)
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(release)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+be.Schema()+".rheo_spans WHERE part = 0 FOR UPDATE")
	require.NoError(t, err)

	short, stop := context.WithTimeout(ctx, 30*time.Second)
	ls, err := c.Fetch(short, "s", "g", rheo.FetchOptions{Limit: 10})
	stop()
	require.NoError(t, err, "the fetch waited for the held span")
	require.Len(t, ls, 2, "the expired members of partition 1")
	for _, l := range ls {
		require.Equal(t, 1, l.Event.Partition)
		require.Equal(t, 2, l.Attempt)
	}
	release()
	ls, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, ls, 2, "the members of the span that was held")
	for _, l := range ls {
		require.Equal(t, 0, l.Event.Partition)
		require.Equal(t, 2, l.Attempt)
	}
	require.NoError(t, c.AckBatch(ctx, ls))
	for _, l := range first {
		require.ErrorIs(t, c.Ack(ctx, l), rheo.ErrStaleLease, "a lease of the first fetch")
	}
}
