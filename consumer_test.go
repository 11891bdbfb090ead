package rheo_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

const consumerWait = 30 * time.Second

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

type consumerFixture struct {
	c      *rheo.Client
	clk    *clock.Frozen
	counts *rheo.Counters
	s, g   string
}

func newConsumerFixture(t *testing.T) *consumerFixture {
	t.Helper()
	f := &consumerFixture{clk: clock.NewFrozen(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)), counts: &rheo.Counters{}, s: "orders", g: "workers"}
	f.c = rheo.New(memory.New(), rheo.WithClock(f.clk), rheo.WithObserver(f.counts), rheo.WithLogger(quietLogger))
	t.Cleanup(func() { f.c.Close() })
	ctx := context.Background()
	require.NoError(t, f.c.CreateStream(ctx, f.s, rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, f.c.CreateGroup(ctx, f.s, f.g, rheo.GroupConfig{}))
	return f
}

func (f *consumerFixture) append(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		_, err := f.c.Append(context.Background(), f.s, rheo.Message{Key: fmt.Sprint(i), Type: "t"})
		require.NoError(t, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, consumerWait, time.Millisecond, "waiting for %s", what)
}

func TestDefaultBackoffDoublesFromOneSecondToOneMinute(t *testing.T) {
	want := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for attempt, d := range want {
		require.Equal(t, d, rheo.DefaultBackoff(attempt), "attempt %d", attempt)
	}
	require.Equal(t, time.Minute, rheo.DefaultBackoff(1000))
}

func TestRejectAndRetryAfterKeepTheCauseAndItsMessage(t *testing.T) {
	cause := errors.New("bad payload")
	rej := rheo.Reject(cause)
	require.ErrorIs(t, rej, cause)
	require.Equal(t, "bad payload", rej.Error())
	require.Equal(t, "wrapped: bad payload", fmt.Errorf("wrapped: %w", rej).Error())
	ra := rheo.RetryAfter(time.Second, cause)
	require.ErrorIs(t, ra, cause)
	require.Equal(t, "bad payload", ra.Error())
	require.NotEmpty(t, rheo.Reject(nil).Error())
	require.NotEmpty(t, rheo.RetryAfter(time.Second, nil).Error())
}

func TestConsumerDefaults(t *testing.T) {
	f := newConsumerFixture(t)
	k, err := f.c.NewConsumer(rheo.ConsumerConfig{Stream: f.s, Group: f.g, Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	require.NotEmpty(t, k.ID())
	k2, err := f.c.NewConsumer(rheo.ConsumerConfig{Stream: f.s, Group: f.g, ConsumerID: "w-1", Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	require.Equal(t, "w-1", k2.ID())
	require.NotEqual(t, k.ID(), func() string {
		k3, _ := f.c.NewConsumer(rheo.ConsumerConfig{Stream: f.s, Group: f.g, Handler: func(context.Context, rheo.Event) error { return nil }})
		return k3.ID()
	}(), "generated IDs are unique")
	// Drain of a consumer that never ran returns at once.
	require.NoError(t, k.Drain(context.Background()))
}

// A consumer exercising every path (acks, retries, rejects, panics,
// renewals, a handler cancelled at shutdown) leaves no goroutine behind.
func TestConsumerLeavesNoGoroutineBehind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := newConsumerFixture(t)
	f.append(t, 40)
	var n atomic.Int64
	block := make(chan struct{})
	k, err := f.c.NewConsumer(rheo.ConsumerConfig{
		Stream: f.s, Group: f.g, Concurrency: 4, MaxInflight: 8,
		LeaseDuration:   20 * time.Millisecond, // renewals tick while handlers run
		ShutdownTimeout: 10 * time.Millisecond,
		Backoff:         func(int) time.Duration { return 0 },
		Handler: func(ctx context.Context, e rheo.Event) error {
			i := n.Add(1)
			if i == 12 {
				close(block)
				<-ctx.Done() // held until the shutdown budget runs out
				return ctx.Err()
			}
			switch i % 5 {
			case 1:
				return errors.New("retry")
			case 2:
				return rheo.Reject(errors.New("reject"))
			case 3:
				panic("boom")
			}
			return nil
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	waitFor(t, "a handler held and renewals", func() bool {
		select {
		case <-block:
			return f.counts.Renewals.Load() > 0
		default:
			return false
		}
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(consumerWait):
		t.Fatal("Run did not return")
	}
	require.Positive(t, f.counts.Acks.Load())
	require.Positive(t, f.counts.Retries.Load())
	require.Positive(t, f.counts.DeadLetters.Load())
	require.Positive(t, f.counts.Panics.Load())
}

func TestCountersCountEveryStep(t *testing.T) {
	f := newConsumerFixture(t)
	f.append(t, 4)
	var seen atomic.Int64
	k, err := f.c.NewConsumer(rheo.ConsumerConfig{
		Stream: f.s, Group: f.g, PollInterval: 5 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 },
		Handler: func(ctx context.Context, e rheo.Event) error {
			l, _ := rheo.LeaseFromContext(ctx)
			switch seen.Add(1) {
			case 1:
				panic("boom")
			case 2:
				return rheo.Reject(errors.New("no"))
			}
			if l.Attempt == 1 && e.Sequence%2 == 0 {
				return errors.New("again")
			}
			return nil
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	waitFor(t, "lag 0", func() bool {
		lag, err := f.c.Lag(context.Background(), f.s, f.g)
		return err == nil && lag.Total == 0
	})
	cancel()
	require.NoError(t, <-done)
	c := f.counts
	require.Equal(t, int64(1), c.Panics.Load())
	require.Equal(t, int64(1), c.Rejects.Load())
	require.Equal(t, int64(1), c.DeadLetters.Load())
	require.Equal(t, int64(3), c.Acks.Load(), "four events, one dead-lettered")
	require.Equal(t, c.Handled.Load(), c.Acks.Load()+c.Retries.Load()+c.DeadLetters.Load())
	require.Equal(t, c.Handled.Load(), c.Leases.Load())
	require.Equal(t, c.HandlerErrors.Load(), c.Retries.Load()+c.DeadLetters.Load())
	require.Positive(t, c.Fetches.Load())
	require.Zero(t, c.Lost.Load()+c.SettleErrors.Load()+c.FetchErrors.Load())
}

// At the end of the shutdown budget, leases waiting for a handler are
// released at once (their attempts not counted), and the cancelled ones are
// nacked ("consumer stopped", no delay).
func TestShutdownHandsBackLeasesNotYetStarted(t *testing.T) {
	f := newConsumerFixture(t)
	f.append(t, 3)
	started := make(chan struct{}, 3)
	k, err := f.c.NewConsumer(rheo.ConsumerConfig{
		Stream: f.s, Group: f.g, Concurrency: 1, MaxInflight: 3,
		ShutdownTimeout: time.Millisecond,
		Backoff:         func(int) time.Duration { return time.Hour },
		Handler: func(ctx context.Context, e rheo.Event) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	<-started
	waitFor(t, "three leases held", func() bool {
		gi, err := f.c.GroupInfo(context.Background(), f.s, f.g)
		return err == nil && gi.Inflight == 3
	})
	cancel()
	require.NoError(t, <-done)
	require.Len(t, started, 0, "queued leases never start after the budget")
	ls, err := f.c.Fetch(context.Background(), f.s, f.g, rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, ls, 3, "all three claimable at once")
	require.Equal(t, 2, ls[0].Attempt, "the started one was nacked: its attempt counted")
	for _, l := range ls[1:] {
		require.Equal(t, 1, l.Attempt, "the queued ones were released: not counted")
	}
}

func TestRunOnClosedClient(t *testing.T) {
	f := newConsumerFixture(t)
	k, err := f.c.NewConsumer(rheo.ConsumerConfig{Stream: f.s, Group: f.g, Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	waitFor(t, "a fetch", func() bool { return f.counts.Fetches.Load() > 0 })
	require.NoError(t, f.c.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, rheo.ErrClosed)
	case <-time.After(consumerWait):
		t.Fatal("Run did not end after Close")
	}
	require.ErrorIs(t, k.Run(ctx), rheo.ErrClosed)
}

// Renewals move the lease the runtime settles and reports, never the one
// LeaseFromContext gives a running handler (the lease as fetched), which
// the handler reads while renewals go on (go test -race).
func TestRenewalsLeaveTheHandlersLeaseAsFetched(t *testing.T) {
	clk := clock.NewFrozen(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var renewed []time.Time // successful renewals' expiries
	var handled, acked rheo.Lease
	obs := observerFunc(func(ev rheo.ConsumerEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.Kind == rheo.ConsumerRenewed && ev.Err == nil:
			renewed = append(renewed, ev.Lease.ExpiresAt)
		case ev.Kind == rheo.ConsumerHandled:
			handled = ev.Lease
		case ev.Kind == rheo.ConsumerAcked:
			acked = ev.Lease
		}
	})
	c, _ := streamOn(t, memory.New(), rheo.GroupConfig{}, 1, rheo.WithClock(clk), rheo.WithObserver(obs), rheo.WithLogger(quietLogger))
	const d = 40 * time.Millisecond // renewed every 20ms of real time
	var first rheo.Lease
	seen := func(exp time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(renewed, exp)
	}
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 1, MaxInflight: 1, LeaseDuration: d,
		Handler: func(ctx context.Context, _ rheo.Event) error {
			first, _ = rheo.LeaseFromContext(ctx)
			for i := 1; i <= 2; i++ {
				// Half a lease passes; the next renewal moves the expiry
				// to a lease from then.
				clk.Advance(d / 2)
				want := first.ExpiresAt.Add(time.Duration(i) * d / 2)
				deadline := time.Now().Add(consumerWait)
				for !seen(want) {
					if l, _ := rheo.LeaseFromContext(ctx); !l.ExpiresAt.Equal(first.ExpiresAt) {
						return fmt.Errorf("the handler's lease moved to %v", l.ExpiresAt)
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("no renewal to %v", want)
					}
					time.Sleep(time.Millisecond)
				}
			}
			return nil
		}})
	require.NoError(t, err)
	stop := runUntilStopped(k)
	waitFor(t, "the ack", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked.ID != ""
	})
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	last := first.ExpiresAt.Add(d)
	require.Equal(t, first.ID, acked.ID)
	require.True(t, handled.ExpiresAt.Equal(last), "handled reports the renewed lease: %v, want %v", handled.ExpiresAt, last)
	require.True(t, acked.ExpiresAt.Equal(last), "acked reports the renewed lease: %v, want %v", acked.ExpiresAt, last)
	l, _ := rheo.LeaseFromContext(context.Background())
	require.Zero(t, l)
}
