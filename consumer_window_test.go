package rheo_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
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
