package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/teststore"
	"github.com/rheo-go/rheo/rheotest"
)

// Replay, ResetGroup and Redrive lock the group's cursor rows and its
// delivery rows while fetchers lock the same rows from the other side (a
// fetch that waits for a cursor may already hold delivery rows). None of
// them may fail because of the other: a deadlock the server breaks must be
// retried, not reported. The test runs the three in a loop against busy
// fetchers and ackers and fails on any error from any of them.
func TestMaintenanceBesideBusyFetchers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := fastDeadlockPool(t)
	schema := schemaName()
	b, err := postgres.New(pool, postgres.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, b.Migrate(ctx))
	t.Cleanup(func() {
		b.Close()
		teststore.DropSchema(t, pool, schema)
	})
	clk := clock.NewFrozen(rheotest.Epoch)
	c := rheo.New(b, rheo.WithClock(clk))
	const parts, perPart = 4, 50
	s, g := rheotest.Name("s"), rheotest.Name("g")
	require.NoError(t, c.CreateStream(ctx, s, rheo.StreamConfig{Partitions: parts}))
	var ms []rheo.Message
	for p := range parts {
		for i := range perPart {
			ms = append(ms, rheo.Message{ID: fmt.Sprintf("e-%d-%d", p, i), Type: "t", Partition: &p,
				Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		}
	}
	_, err = c.AppendBatch(ctx, s, ms)
	require.NoError(t, err)
	require.NoError(t, c.CreateGroup(ctx, s, g, rheo.GroupConfig{MaxAttempts: 1000}))

	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		errMu    sync.Mutex
		errs     []error
		fetched  atomic.Int64
		maintain atomic.Int64
	)
	report := func(what string, err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(errs) < 10 {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
		stop.Store(true)
	}
	const workers = 6
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				ls, err := c.Fetch(ctx, s, g, rheo.FetchOptions{Limit: 5, ConsumerID: fmt.Sprintf("w%d", w)})
				if err != nil {
					report("fetch", err)
					return
				}
				fetched.Add(int64(len(ls)))
				for j, l := range ls {
					var err error
					switch (i + j) % 7 {
					case 0:
						err = c.Nack(ctx, l, "again")
					case 1:
						err = c.Reject(ctx, l, "bad")
					default:
						continue
					}
					// A concurrent replay or reset may have made the lease stale.
					if err != nil && rheo.Classify(err) != rheo.Lost {
						report("settle", err)
						return
					}
				}
				if err := c.AckBatch(ctx, ls); err != nil && rheo.Classify(err) != rheo.Lost {
					report("ack", err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stop.Store(true)
		for i := 0; i < 60 && !stop.Load(); i++ {
			var err error
			switch i % 4 {
			case 0:
				_, err = c.Replay(ctx, s, g, rheo.FromSequence(0))
			case 1:
				_, err = c.ResetGroup(ctx, s, g, rheo.ResetOptions{Confirm: true})
			case 2:
				_, err = c.Redrive(ctx, s, g)
			case 3:
				_, err = c.Replay(ctx, s, g, rheo.Events("e-0-1", "e-1-2", "e-2-3", "e-3-4", "e-0-40", "e-3-45"))
			}
			if err != nil {
				report(fmt.Sprintf("maintenance %d", i), err)
				return
			}
			maintain.Add(1)
		}
	}()
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%d maintenance operations beside %d claims", maintain.Load(), fetched.Load())
	require.Greater(t, fetched.Load(), int64(0), "the fetchers claimed nothing")
}

// fastDeadlockPool returns a pool whose sessions look for deadlocks after
// 20 ms instead of the server's default second, so that a short test meets
// many; it falls back to the shared pool when the role may not set
// deadlock_timeout (it needs superuser).
func fastDeadlockPool(t *testing.T) *pgxpool.Pool {
	shared := testPool(t)
	cfg, err := pgxpool.ParseConfig(dsn())
	require.NoError(t, err)
	cfg.MaxConns = 12
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		t.Logf("deadlock_timeout stays at the server's default: %v", err)
		return shared
	}
	t.Cleanup(pool.Close)
	return pool
}
