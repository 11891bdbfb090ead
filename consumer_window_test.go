package rheo_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// fetchLimits records the Count of every successful fetch.
type fetchLimits struct {
	mu     sync.Mutex
	counts []int
}

func (f *fetchLimits) ObserveConsumer(ev rheo.ConsumerEvent) {
	if ev.Kind == rheo.ConsumerFetched && ev.Err == nil && ev.Count > 0 {
		f.mu.Lock()
		f.counts = append(f.counts, ev.Count)
		f.mu.Unlock()
	}
}

func (f *fetchLimits) max() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := 0
	for _, c := range f.counts {
		m = max(m, c)
	}
	return m
}

// With only Concurrency set, a consumer whose handlers are fast holds more
// leases than it runs handlers: its fetches grow past Concurrency. With an
// explicit MaxInflight it never fetches more than that, nor more than 500
// at once.
func TestConsumerDefaultWindowPrefetchesForFastHandlers(t *testing.T) {
	for _, c := range []struct {
		name        string
		maxInflight int
		check       func(t *testing.T, largest int)
	}{
		{"default", 0, func(t *testing.T, largest int) {
			require.Greater(t, largest, 2, "largest fetch with the default window and Concurrency 2")
		}},
		{"explicit", 2, func(t *testing.T, largest int) {
			require.LessOrEqual(t, largest, 2, "largest fetch with MaxInflight 2")
		}},
		// A deep window is refilled 500 leases at a time, not half of it.
		{"deep", 5000, func(t *testing.T, largest int) {
			require.Equal(t, 500, largest, "largest fetch with MaxInflight 5000 over a backlog of 3000")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newConsumerFixture(t)
			obs := &fetchLimits{}
			f.c = rheo.New(f.c.Backend(), rheo.WithObserver(obs), rheo.WithLogger(quietLogger))
			const n = 3000
			f.append(t, n)
			k, err := f.c.NewConsumer(rheo.ConsumerConfig{Stream: f.s, Group: f.g, Concurrency: 2, MaxInflight: c.maxInflight,
				Handler: func(context.Context, rheo.Event) error { return nil }})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- k.Run(ctx) }()
			waitFor(t, "lag 0", func() bool {
				lag, err := f.c.Lag(context.Background(), f.s, f.g)
				return err == nil && lag.Total == 0
			})
			cancel()
			require.NoError(t, <-ran)
			c.check(t, obs.max())
		})
	}
}

// A window deeper than four fetches fills up: while a stalled handler keeps
// the queue full, the consumer still fetches (500 leases at a time) until
// it holds MaxInflight leases.
func TestConsumerFillsADeepWindow(t *testing.T) {
	f := newConsumerFixture(t)
	obs := &fetchLimits{}
	f.c = rheo.New(f.c.Backend(), rheo.WithClock(f.clk), rheo.WithObserver(obs), rheo.WithLogger(quietLogger))
	const window, n = 4000, 6000
	f.append(t, n)
	stall := make(chan struct{})
	k, err := f.c.NewConsumer(rheo.ConsumerConfig{Stream: f.s, Group: f.g, Concurrency: 1, MaxInflight: window,
		Handler: func(ctx context.Context, _ rheo.Event) error {
			select {
			case <-stall:
			case <-ctx.Done():
			}
			return nil
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- k.Run(ctx) }()
	waitFor(t, "a full window", func() bool {
		info, err := f.c.GroupInfo(context.Background(), f.s, f.g)
		return err == nil && info.Inflight == window
	})
	require.LessOrEqual(t, obs.max(), 500, "largest fetch")
	close(stall)
	cancel()
	require.NoError(t, <-ran)
}

// Leases a fetch returned count as queued work while they are on their way
// to the queue: with fewer slots free than a refill is worth (a quarter of
// MaxInflight), the fetch loop waits for slots instead of making a small
// fetch. The handlers are held, so no slot frees: once they run, the loop
// has fetched once. One OS thread makes the loop reach its next fetch
// before the leases are queued, as a busy machine can.
func TestConsumerDoesNotRefillSmallWhileLeasesAreOnTheirWay(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	b := &batchLog{Backend: memory.New()}
	c := rheo.New(b, rheo.WithLogger(quietLogger))
	defer c.Close()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	const n, concurrency, maxInflight = 90, 10, 100 // the first fetch leaves 10 slots, below 25
	msgs := make([]rheo.Message, n)
	for i := range msgs {
		msgs[i] = rheo.Message{Type: "t"}
	}
	_, err := c.AppendBatch(ctx, "s", msgs)
	require.NoError(t, err)
	var handled atomic.Int64
	entered, gate, all := make(chan struct{}, n), make(chan struct{}), make(chan struct{})
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: concurrency, MaxInflight: maxInflight,
		Handler: func(context.Context, rheo.Event) error {
			entered <- struct{}{}
			<-gate
			if handled.Add(1) == n {
				close(all)
			}
			return nil
		}})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- k.Run(runCtx) }()
	deadline := time.After(30 * time.Second)
	for range concurrency {
		select {
		case <-entered:
		case <-deadline:
			t.Fatal("the handlers did not start within 30s")
		}
	}
	b.mu.Lock()
	limits := slices.Clone(b.limits)
	b.mu.Unlock()
	require.Equal(t, []int{maxInflight}, limits,
		"with %d leases on their way to the queue and %d of %d slots free, the loop fetched again", n, maxInflight-n, maxInflight)
	close(gate)
	select {
	case <-all:
	case <-deadline:
		t.Fatal("the events were not all handled within 30s")
	}
	require.NoError(t, k.Drain(ctx))
	cancel()
	require.NoError(t, <-ran)
}
