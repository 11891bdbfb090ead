package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rheo-go/rheo"
)

// benchRuntime measures the consumer runtime on the bench stream: a second
// group consumed by one Consumer whose handler does nothing, so the figure is
// the runtime's own overhead over Fetch+AckBatch. Only Concurrency is set:
// the runtime sizes its fetches and inflight window itself, as it does for a
// user who sets nothing else.
func benchRuntime(ctx context.Context, c *rheo.Client, s benchSettings) (*benchRate, error) {
	const group = "bench-runtime"
	if err := c.CreateGroup(ctx, s.Stream, group, rheo.GroupConfig{}); err != nil {
		return nil, err
	}
	var handled atomic.Int64
	done := make(chan struct{})
	k, err := c.NewConsumer(rheo.ConsumerConfig{
		Stream: s.Stream, Group: group,
		Concurrency:   s.Consumers,
		LeaseDuration: time.Minute, ConsumerID: "bench-runtime",
		Handler: func(context.Context, rheo.Event) error {
			if handled.Add(1) == int64(s.Events) {
				close(done)
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	start := time.Now()
	go func() { ran <- k.Run(runCtx) }()
	select {
	case <-done:
	case err := <-ran:
		return nil, fmt.Errorf("consumer runtime stopped early: %v", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Drain waits for the last acks to be settled.
	if err := k.Drain(ctx); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	if err := <-ran; err != nil {
		return nil, fmt.Errorf("consumer runtime: %w", err)
	}
	lag, err := c.Lag(ctx, s.Stream, group)
	if err != nil {
		return nil, err
	}
	if lag.Total != 0 {
		return nil, fmt.Errorf("runtime: lag is %d after handling every event, want 0", lag.Total)
	}
	r := newRate("runtime", fmt.Sprintf("Consumer (Concurrency %d, default window ≤ %d)", s.Consumers, rheo.DefaultMaxInflight(s.Consumers)), s.Events, elapsed)
	return &r, nil
}
