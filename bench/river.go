package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// orderArgs is River's job carrying the same ~100-byte JSON as every other
// peer's message.
type orderArgs struct {
	OrderID     int    `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int    `json:"amount_cents"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
	Items       int    `json:"items"`
}

func (orderArgs) Kind() string { return "order_created" }

func newOrder(i int) orderArgs {
	return orderArgs{OrderID: i, Customer: fmt.Sprint("c-", i%977), AmountCents: 1000 + i%50000,
		Currency: "EUR", Status: "created", Items: 3}
}

// noopWorker does nothing, as in River's own burn-down benchmark.
type noopWorker struct {
	river.WorkerDefaults[orderArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[orderArgs]) error {
	w.done.Add(1)
	return nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// riverSchema makes a fresh schema migrated for River.
func riverSchema(ctx context.Context, e *env) (string, func(), error) {
	name, drop, err := e.schema(ctx, "river")
	if err != nil {
		return "", nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(e.pool), &rivermigrate.Config{Schema: name, Logger: quiet})
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		drop()
		return "", nil, fmt.Errorf("river migrate: %w", err)
	}
	return name, drop, nil
}

// riverTuning is how a River client fetches: its workers, the pause
// between fetches and the poll interval when nothing is notified.
type riverTuning struct {
	workers                int // 0: the benchmark's -workers
	cooldown, pollInterval time.Duration
}

// riverBench is the tuning River's own benchmark (`river bench`) runs
// with: 2,000 workers, a 2 ms fetch cooldown and a 20 ms poll interval,
// which its authors found fastest. River's defaults (100 ms cooldown, 1 s
// poll) cap a client at MaxWorkers jobs per 100 ms.
var riverBench = riverTuning{workers: 2000, cooldown: 2 * time.Millisecond, pollInterval: 20 * time.Millisecond}

// riverBurnDown inserts n jobs (setup), then times a River client tuned by
// t working them all off; Stop waits for the completer to record the last
// completions, as rheo's Drain waits for the last acks.
func riverBurnDown(t riverTuning) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		return riverBurnDownRun(ctx, e, n, t)
	}
}

func riverBurnDownRun(ctx context.Context, e *env, n int, t riverTuning) (float64, error) {
	schema, drop, err := riverSchema(ctx, e)
	if err != nil {
		return 0, err
	}
	defer drop()
	ins, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{Schema: schema, Logger: quiet})
	if err != nil {
		return 0, err
	}
	params := make([]river.InsertManyParams, 0, 1000)
	for i := 0; i < n; i += 1000 {
		params = params[:0]
		for j := i; j < min(i+1000, n); j++ {
			params = append(params, river.InsertManyParams{Args: newOrder(j)})
		}
		if _, err := ins.InsertManyFast(ctx, params); err != nil {
			return 0, err
		}
	}
	if _, err := e.pool.Exec(ctx, "VACUUM ANALYZE "+schema+".river_job"); err != nil {
		return 0, err
	}
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	maxWorkers := t.workers
	if maxWorkers == 0 {
		maxWorkers = e.workers
	}
	c, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{
		Schema:            schema,
		Logger:            quiet,
		FetchCooldown:     t.cooldown,
		FetchPollInterval: t.pollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return 0, err
	}
	start := e.start()
	if err := c.Start(ctx); err != nil {
		return 0, err
	}
	waitErr := until(ctx, 10*time.Minute, func() bool { return done.Load() >= int64(n) })
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	stopErr := c.Stop(stopCtx)
	elapsed := e.stop(start)
	if waitErr != nil {
		return 0, fmt.Errorf("river burn-down: %d of %d jobs worked: %w", done.Load(), n, waitErr)
	}
	if stopErr != nil {
		return 0, stopErr
	}
	var left int
	if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".river_job WHERE state <> 'completed'").Scan(&left); err != nil {
		return 0, err
	}
	if left != 0 {
		return 0, fmt.Errorf("river burn-down: %d jobs not completed", left)
	}
	return rate(n, elapsed), nil
}

// riverInsertMany times one producer inserting n jobs with InsertMany in
// batches of size.
func riverInsertMany(size int) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		schema, drop, err := riverSchema(ctx, e)
		if err != nil {
			return 0, err
		}
		defer drop()
		c, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{Schema: schema, Logger: quiet})
		if err != nil {
			return 0, err
		}
		params := make([]river.InsertManyParams, size)
		start := e.start()
		for i := 0; i < n; i += size {
			params = params[:min(size, n-i)]
			for j := range params {
				params[j] = river.InsertManyParams{Args: newOrder(i + j)}
			}
			if _, err := c.InsertMany(ctx, params); err != nil {
				return 0, err
			}
		}
		return rate(n, e.stop(start)), nil
	}
}
