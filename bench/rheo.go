package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rheo-go/rheo"
)

const benchStream, benchGroup = "bench", "g"

// fillRheo appends n events in batches of 1,000 (setup, not timed).
func fillRheo(ctx context.Context, c *rheo.Client, n int) error {
	return fillStream(ctx, c, benchStream, n)
}

// rheoBacklog opens a fresh store holding a stream of n events and a group
// at its beginning.
func rheoBacklog(ctx context.Context, e *env, store string, n int) (*rheo.Client, func(), error) {
	c, cleanup, err := e.rheoClient(ctx, store)
	if err != nil {
		return nil, nil, err
	}
	err = c.CreateStream(ctx, benchStream, rheo.StreamConfig{Partitions: e.parts})
	if err == nil {
		err = fillRheo(ctx, c, n)
	}
	if err == nil {
		err = c.CreateGroup(ctx, benchStream, benchGroup, rheo.GroupConfig{})
	}
	if err == nil && store == "postgres" {
		err = e.analyze(ctx, c)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return c, cleanup, nil
}

// rheoConsumer drains a backlog of n events with the consumer runtime at
// its default settings: only Concurrency is set.
func rheoConsumer(store string) workload { return rheoConsumerWindow(store, 0) }

// rheoConsumerWindow is rheoConsumer with MaxInflight set (0: the default).
func rheoConsumerWindow(store string, maxInflight int) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		c, cleanup, err := rheoBacklog(ctx, e, store, n)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		var handled atomic.Int64
		all := make(chan struct{})
		k, err := c.NewConsumer(rheo.ConsumerConfig{
			Stream: benchStream, Group: benchGroup, Concurrency: e.workers, MaxInflight: maxInflight,
			Handler: func(context.Context, rheo.Event) error {
				if handled.Add(1) == int64(n) {
					close(all)
				}
				return nil
			},
		})
		if err != nil {
			return 0, err
		}
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		ran := make(chan error, 1)
		start := e.start()
		go func() { ran <- k.Run(runCtx) }()
		select {
		case <-all:
		case err := <-ran:
			return 0, fmt.Errorf("consumer stopped early: %v", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if err := k.Drain(ctx); err != nil { // waits for the last settles
			return 0, err
		}
		elapsed := e.stop(start)
		if err := <-ran; err != nil {
			return 0, err
		}
		return rate(n, elapsed), checkLag(ctx, c)
	}
}

// rheoRaw drains a backlog of n events with two goroutines, each looping
// Fetch(Limit 100) + AckBatch.
func rheoRaw(store string) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		c, cleanup, err := rheoBacklog(ctx, e, store, n)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		var done atomic.Int64
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		start := e.start()
		for w := range 2 {
			wg.Go(func() {
				for done.Load() < int64(n) {
					ls, err := c.Fetch(ctx, benchStream, benchGroup, rheo.FetchOptions{Limit: 100, ConsumerID: fmt.Sprint("w", w)})
					if err != nil {
						errs <- err
						return
					}
					if len(ls) == 0 {
						continue
					}
					if err := c.AckBatch(ctx, ls); err != nil {
						errs <- err
						return
					}
					done.Add(int64(len(ls)))
				}
			})
		}
		wg.Wait()
		elapsed := e.stop(start)
		close(errs)
		if err := <-errs; err != nil {
			return 0, err
		}
		return rate(n, elapsed), checkLag(ctx, c)
	}
}

// rheoAppend appends n freshly built events from one producer in batches
// of size.
func rheoAppend(store string, size int) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		c, cleanup, err := e.rheoClient(ctx, store)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		if err := c.CreateStream(ctx, benchStream, rheo.StreamConfig{Partitions: e.parts}); err != nil {
			return 0, err
		}
		msgs := make([]rheo.Message, size)
		start := e.start()
		for i := 0; i < n; i += size {
			msgs = msgs[:min(size, n-i)]
			for j := range msgs {
				// A fresh payload slice per message, as a producer
				// marshalling its events would hand over.
				msgs[j] = rheo.Message{Type: "order.created", Key: strconv.Itoa(i + j), Payload: payload(make([]byte, 0, 128), i+j)}
			}
			if _, err := c.AppendBatch(ctx, benchStream, msgs); err != nil {
				return 0, err
			}
		}
		return rate(n, e.stop(start)), nil
	}
}

func checkLag(ctx context.Context, c *rheo.Client) error {
	lag, err := c.Lag(ctx, benchStream, benchGroup)
	if err != nil {
		return err
	}
	if lag.Total != 0 {
		return fmt.Errorf("lag is %d after the burn-down, want 0", lag.Total)
	}
	return nil
}

// analyze refreshes PostgreSQL's statistics after a bulk load, as every
// PostgreSQL peer here does before its timed part.
func (e *env) analyze(ctx context.Context, c *rheo.Client) error {
	type schemaer interface{ Schema() string }
	s, ok := c.Backend().(schemaer)
	if !ok {
		return nil
	}
	_, err := e.pool.Exec(ctx, "VACUUM ANALYZE "+s.Schema()+".rheo_events")
	return err
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
