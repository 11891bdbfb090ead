package postgres_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/internal/testserver"
)

// privateServer is a PostgreSQL instance of this test alone
// (internal/testserver), so that it can be crashed without disturbing the
// shared server other packages test against.
type privateServer struct{ *testserver.Postgres }

func startPrivateServer(t *testing.T) privateServer {
	t.Helper()
	return privateServer{testserver.StartPostgres(t)}
}

func (s privateServer) crashRestart() { s.CrashRestart() }
func (s privateServer) dsn() string   { return s.DSN() }

// TestServerCrashRestart crashes the PostgreSQL server (pg_ctl restart -m
// immediate) while a consumer works through a stream that a producer keeps
// appending to. The consumer recovers by itself (its failed fetches and
// settles back off and retry; leases whose settle was lost expire and are
// redelivered), and in the end every event in the stream was handled at
// least once, every acknowledged append survived the crash (those made
// right before it included), nothing is dead-lettered and the lag is zero
// on every partition.
func TestServerCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("server restart test skipped in -short mode")
	}
	srv := startPrivateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	be, err := postgres.Open(ctx, srv.dsn())
	require.NoError(t, err)
	// The crash makes every inflight settle log a warning: keep errors only.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c := rheo.New(be, rheo.WithLogger(quiet))
	defer c.Close()
	require.NoError(t, c.Migrate(ctx))
	const parts = 4
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 1000}))

	var (
		mu      sync.Mutex
		handled = map[string]int{}
		acked   []string // IDs of appends the server acknowledged
	)
	appendBatch := func(n, from int) error {
		msgs := make([]rheo.Message, n)
		for i := range msgs {
			msgs[i] = rheo.Message{Type: "t", Key: strconv.Itoa(from + i), Payload: []byte(`{"n":1}`)}
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		evs, err := c.AppendBatch(actx, "s", msgs)
		if err != nil {
			return err
		}
		mu.Lock()
		for _, e := range evs {
			acked = append(acked, e.ID)
		}
		mu.Unlock()
		return nil
	}
	for i := 0; i < 2000; i += 500 {
		require.NoError(t, appendBatch(500, i))
	}

	k, err := c.NewConsumer(rheo.ConsumerConfig{
		Stream: "s", Group: "g", Concurrency: 4, MaxInflight: 100,
		// Settles the crash loses leave their leases to expire: keep that short.
		LeaseDuration: time.Second,
		PollInterval:  50 * time.Millisecond,
		Backoff:       func(int) time.Duration { return 10 * time.Millisecond },
		Handler: func(_ context.Context, e rheo.Event) error {
			mu.Lock()
			handled[e.ID]++
			mu.Unlock()
			return nil
		},
	})
	require.NoError(t, err)
	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- k.Run(runCtx) }()

	// The producer keeps appending through the crash, so the consumer has
	// work on both sides of it. Failed appends (unavailable or ambiguous)
	// are not counted as acknowledged; the stream is read back at the end.
	var (
		restarted   atomic.Bool
		stopProduce = make(chan struct{})
		produced    = make(chan struct{})
		failures    atomic.Int64
	)
	go func() {
		defer close(produced)
		next, afterRestart := 2000, 0
		for afterRestart < 1500 {
			select {
			case <-stopProduce:
				return
			default:
			}
			if err := appendBatch(50, next); err != nil {
				failures.Add(1)
				time.Sleep(20 * time.Millisecond) // the server is down: do not spin
			} else if restarted.Load() {
				afterRestart += 50
			}
			next += 50
		}
	}()
	defer func() { close(stopProduce); <-produced }()

	// Crash once the consumer is well into the stream.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= 1000
	}, 20*time.Second, 5*time.Millisecond, "consumer made no progress before the crash")
	mu.Lock()
	beforeCrash := append([]string(nil), acked[max(0, len(acked)-100):]...)
	ackedBeforeCrash, handledBeforeCrash := len(acked), len(handled)
	mu.Unlock()
	srv.crashRestart()
	restarted.Store(true)
	t.Logf("crashed after %d acknowledged appends and %d handled events", ackedBeforeCrash, handledBeforeCrash)

	select {
	case <-produced:
	case <-time.After(25 * time.Second):
		t.Fatal("producer did not get 1,500 appends through after the restart")
	}

	// The consumer catches up by itself.
	var lag rheo.Lag
	require.Eventually(t, func() bool {
		lag, err = c.Lag(ctx, "s", "g")
		return err == nil && lag.Total == 0
	}, 25*time.Second, 20*time.Millisecond, "consumer did not catch up after the restart: %+v, %v", lag, err)
	stopRun()
	require.NoError(t, <-runErr)

	// Every partition's frontier is its high watermark.
	require.Len(t, lag.Partitions, parts)
	for _, p := range lag.Partitions {
		require.Equal(t, p.HighWatermark, p.Frontier, "partition %d", p.Partition)
		require.Zero(t, p.Lag, "partition %d", p.Partition)
	}
	// Acked, not given up on.
	dead, err := c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{})
	require.NoError(t, err)
	require.Empty(t, dead)

	// Every event in the stream was handled; every acknowledged append is
	// in the stream, those made right before the crash included.
	stored := map[string]bool{}
	for e, err := range c.QueryAll(ctx, rheo.Query{Stream: "s", Limit: 1000}) {
		require.NoError(t, err)
		stored[e.ID] = true
	}
	mu.Lock()
	defer mu.Unlock()
	var total int64
	for _, p := range lag.Partitions {
		total += p.HighWatermark
	}
	require.Equal(t, int64(len(stored)), total, "high watermarks count every stored event")
	for _, id := range beforeCrash {
		require.True(t, stored[id], "append %s acknowledged right before the crash is lost", id)
	}
	for _, id := range acked {
		require.True(t, stored[id], "acknowledged append %s is lost", id)
	}
	for id := range stored {
		require.Positive(t, handled[id], "event %s was never handled", id)
	}
	dups := 0
	for _, n := range handled {
		dups += n - 1
	}
	t.Logf("%d events stored (%d acknowledged appends, %d failed append batches), %d handled more than once",
		len(stored), len(acked), failures.Load(), dups)
}
