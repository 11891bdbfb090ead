package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

func TestAppendTxCommit(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{Partitions: 2}))
	_, err := b.Pool().Exec(ctx, "CREATE TABLE "+b.Schema()+".orders (id text PRIMARY KEY)")
	require.NoError(t, err)

	changed, cancel := b.Subscribe("orders")
	defer cancel()
	drain(changed)

	tx, err := b.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO "+b.Schema()+".orders (id) VALUES ('o-1')")
	require.NoError(t, err)
	evs, err := postgres.AppendTx(ctx, c, tx, "orders", []rheo.Message{
		{ID: "ev-1", Type: "order.created", Key: "o-1", Payload: json.RawMessage(`{"id":"o-1"}`)},
		{Type: "order.audited", Key: "o-1"},
	})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, "ev-1", evs[0].ID)
	require.NotEmpty(t, evs[1].ID, "AppendTx generates IDs like AppendBatch")
	require.Equal(t, int64(1), evs[0].Sequence)
	require.Equal(t, int64(2), evs[1].Sequence, "one key, one partition, contiguous sequences")

	// Invisible to others before commit.
	read, err := c.Read(ctx, "orders", rheo.ReadOptions{Partition: evs[0].Partition})
	require.NoError(t, err)
	require.Empty(t, read, "events are invisible until the business transaction commits")

	require.NoError(t, tx.Commit(ctx))
	read, err = c.Read(ctx, "orders", rheo.ReadOptions{Partition: evs[0].Partition})
	require.NoError(t, err)
	require.Len(t, read, 2)
	require.Equal(t, "ev-1", read[0].ID)
	require.JSONEq(t, `{"id":"o-1"}`, string(read[0].Payload))

	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the outbox transaction committed")
	}

	// Re-appending the same ID through AppendTx is idempotent too.
	tx, err = b.Pool().Begin(ctx)
	require.NoError(t, err)
	again, err := postgres.AppendTx(ctx, c, tx, "orders", []rheo.Message{{ID: "ev-1", Type: "other"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, evs[0].Sequence, again[0].Sequence)
	require.Equal(t, "order.created", again[0].Type)
}

func TestAppendTxRollback(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{}))

	tx, err := b.Pool().Begin(ctx)
	require.NoError(t, err)
	evs, err := postgres.AppendTx(ctx, c, tx, "orders", []rheo.Message{{ID: "lost", Type: "order.created"}})
	require.NoError(t, err)
	require.Equal(t, int64(1), evs[0].Sequence)
	require.NoError(t, tx.Rollback(ctx))

	read, err := c.Read(ctx, "orders", rheo.ReadOptions{})
	require.NoError(t, err)
	require.Empty(t, read, "a rolled-back outbox append leaves no event")
	st, err := b.Stream(ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, []int64{0}, st.HighWatermarks, "the sequence allocation rolled back too")

	ev, err := c.Append(ctx, "orders", rheo.Message{ID: "lost", Type: "again"})
	require.NoError(t, err)
	require.Equal(t, int64(1), ev.Sequence, "no hole is left in the sequence")
	require.Equal(t, "again", ev.Type)
}

func TestAppendTxValidatesLikeAppendBatch(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{}))
	tx, err := b.Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = postgres.AppendTx(ctx, c, tx, "orders", []rheo.Message{{Payload: json.RawMessage(`[1]`)}})
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = postgres.AppendTx(ctx, c, tx, "missing", []rheo.Message{{}})
	require.ErrorIs(t, err, rheo.ErrStreamNotFound)
}

func TestConcurrentMigrate(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	schema := schemaName()
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := postgres.New(pool, postgres.WithSchema(schema))
			if err != nil {
				errs[i] = err
				return
			}
			defer b.Close()
			errs[i] = b.Migrate(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "migrate %d", i)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".rheo_schema").Scan(&n))
	require.Positive(t, n)
	b, err := postgres.New(pool, postgres.WithSchema(schema))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Migrate(ctx), "Migrate is idempotent")
	var again int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".rheo_schema").Scan(&again))
	require.Equal(t, n, again)
}

func TestMigrationSQL(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	schema := schemaName()
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	script, err := postgres.MigrationSQL(schema)
	require.NoError(t, err)
	require.Contains(t, script, schema)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// Run as one script, as an external migration tool would.
	require.NoError(t, conn.Conn().PgConn().Exec(ctx, script).Close())

	b, err := postgres.New(pool, postgres.WithSchema(schema))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Migrate(ctx), "Migrate after the printed script is a no-op")
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))

	_, err = postgres.MigrationSQL("bad;name")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = postgres.New(pool, postgres.WithSchema(`x"; DROP TABLE y; --`))
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
}

func TestOpenByDSN(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	schema := schemaName()
	sep := "?"
	if strings.Contains(dsn(), "?") {
		sep = "&"
	}
	c, err := rheo.Open(ctx, dsn()+sep+"rheo_schema="+schema)
	require.NoError(t, err)
	b := c.Backend().(*postgres.Backend)
	require.Equal(t, schema, b.Schema())
	t.Cleanup(func() { testPool(t).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	require.NoError(t, c.Migrate(ctx))
	require.NoError(t, c.Ping(ctx))
	require.NoError(t, c.Close())
	require.Error(t, b.Pool().Ping(ctx), "a pool made by Open is closed by Close")

	// A borrowed pool survives Close.
	borrowed, err := postgres.New(testPool(t), postgres.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, borrowed.Close())
	require.NoError(t, testPool(t).Ping(ctx))
}

func TestUnreachableIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := postgres.Open(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	if err == nil {
		defer b.Close()
		err = b.Ping(ctx)
	}
	require.ErrorIs(t, err, rheo.ErrBackendUnavailable)
	require.Equal(t, rheo.Unknown, rheo.Classify(err))
}

func TestNotifyWakesWaitingFetch(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 3}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))

	// One listening connection serves every subscriber.
	ch1, cancel1 := b.Subscribe("s")
	defer cancel1()
	ch2, cancel2 := b.Subscribe("s")
	defer cancel2()
	other, cancel3 := b.Subscribe("other")
	defer cancel3()
	drain(ch1, ch2, other)
	waitListening(t, b)
	drain(ch1, ch2, other)

	got := make(chan []rheo.Lease, 1)
	go func() {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 5, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	_, err := c.Append(ctx, "s", rheo.Message{Type: "x"})
	require.NoError(t, err)
	for _, ch := range []<-chan struct{}{ch1, ch2} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("subscriber not notified of the append")
		}
	}
	select {
	case ls := <-got:
		require.Len(t, ls, 1)
	case <-time.After(30 * time.Second):
		t.Fatal("waiting fetch not woken")
	}
	select {
	case <-other:
		t.Fatal("a subscriber of another stream was signalled")
	default:
	}
	var n int
	require.NoError(t, b.Pool().QueryRow(ctx,
		"SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' AND query ILIKE '%rheo_"+b.Schema()+"%'").Scan(&n))
	require.Equal(t, 1, n, "one LISTEN connection per backend")
}

// waitListening appends to a scratch stream until a signal shows the
// listener is up (the first LISTEN happens asynchronously).
func waitListening(t *testing.T, b *postgres.Backend) {
	ctx := context.Background()
	c := rheo.New(b)
	err := c.CreateStream(ctx, "probe", rheo.StreamConfig{})
	if err != nil && !errors.Is(err, rheo.ErrAlreadyExists) {
		require.NoError(t, err)
	}
	ch, cancel := b.Subscribe("probe")
	defer cancel()
	deadline := time.After(20 * time.Second)
	for {
		_, err := c.Append(ctx, "probe", rheo.Message{})
		require.NoError(t, err)
		select {
		case <-ch:
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("listener never came up")
		}
	}
}

func drain(chs ...<-chan struct{}) {
	for _, ch := range chs {
		select {
		case <-ch:
		default:
		}
	}
}

// TestAppendTxAfterStreamCreatedAgain: another process deletes the stream
// and creates it again with fewer, then more, partitions; AppendTx routes
// by the count the stream has, as AppendBatch does.
func TestAppendTxAfterStreamCreatedAgain(t *testing.T) {
	ctx := context.Background()
	ba := newBackend(t)
	bb, err := postgres.New(testPool(t), postgres.WithSchema(ba.Schema()))
	require.NoError(t, err)
	t.Cleanup(func() { bb.Close() })
	a, b := rheo.New(ba), rheo.New(bb)
	appendTx := func(msgs ...rheo.Message) ([]rheo.Event, error) {
		tx, err := bb.Pool().Begin(ctx)
		require.NoError(t, err)
		evs, err := postgres.AppendTx(ctx, b, tx, "s", msgs)
		if err != nil {
			require.NoError(t, tx.Rollback(ctx))
			return nil, err
		}
		return evs, tx.Commit(ctx)
	}
	recreate := func(parts int) {
		require.NoError(t, a.DeleteStream(ctx, "s", rheo.DeleteOptions{Confirm: true}))
		require.NoError(t, a.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
	}
	require.NoError(t, a.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	keys := []rheo.Message{{Type: "t", Key: "k1"}, {Type: "t", Key: "k2"}, {Type: "t", Key: "k3"}, {Type: "t", Key: "k4"}}
	_, err = appendTx(keys...) // b caches 4 partitions
	require.NoError(t, err)

	recreate(1)
	evs, err := appendTx(keys...)
	require.NoError(t, err, "keys are routed again by the count the stream has")
	for _, e := range evs {
		require.Zero(t, e.Partition)
	}
	recreate(4)
	p := 3
	evs, err = appendTx(rheo.Message{Type: "t", Partition: &p})
	require.NoError(t, err, "a partition the stream has now")
	require.Equal(t, 3, evs[0].Partition)
	got, err := a.Read(ctx, "s", rheo.ReadOptions{Partition: 3})
	require.NoError(t, err)
	require.Len(t, got, 1)
}
