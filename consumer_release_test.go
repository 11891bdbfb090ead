package rheo_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// oldBackend is a store written before releases existed: it refuses the
// kind, per request or (whole) for the batch, with ErrInvalidArgument.
type oldBackend struct {
	rheo.Backend
	whole bool

	mu      sync.Mutex
	batches [][]rheo.SettleKind
}

func (b *oldBackend) Settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	kinds := make([]rheo.SettleKind, len(reqs))
	refused := false
	for i, r := range reqs {
		kinds[i] = r.Kind
		refused = refused || r.Kind == rheo.SettleRelease
	}
	b.mu.Lock()
	b.batches = append(b.batches, kinds)
	b.mu.Unlock()
	if !refused {
		return b.Backend.Settle(ctx, stream, group, reqs, now)
	}
	if b.whole {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "unknown settle kind")
	}
	errs := make([]error, len(reqs))
	var pass []rheo.SettleRequest
	var at []int
	for i, r := range reqs {
		if r.Kind == rheo.SettleRelease {
			errs[i] = rheo.Errorf(rheo.ErrInvalidArgument, "unknown settle kind")
			continue
		}
		pass, at = append(pass, r), append(at, i)
	}
	res, err := b.Backend.Settle(ctx, stream, group, pass, now)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		errs[i] = res[j]
	}
	return errs, nil
}

// On a store that refuses releases, a handler's Release is sent again as a
// nack (its attempt counted), whether the store refuses it alone or the
// whole batch, and the acks settled beside it are never redelivered.
func TestReleaseFallsBackToNackOnAnOldBackend(t *testing.T) {
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "per_request", true: "whole_batch"}[whole], func(t *testing.T) {
			b := &oldBackend{Backend: memory.New(), whole: whole}
			counts := &rheo.Counters{}
			c, evs := streamOn(t, b, rheo.GroupConfig{}, 4,
				rheo.WithClock(clock.NewFrozen(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))), rheo.WithObserver(counts))
			// Four handlers finish together, so that their settles go in
			// one batch: the first releases, the others ack.
			var mu sync.Mutex
			calls := map[string][]int{}
			var arrived sync.WaitGroup
			arrived.Add(4)
			k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 4, MaxInflight: 4,
				Backoff: func(int) time.Duration { return 0 },
				Handler: func(ctx context.Context, e rheo.Event) error {
					l, _ := rheo.LeaseFromContext(ctx)
					mu.Lock()
					calls[e.ID] = append(calls[e.ID], l.Attempt)
					first := len(calls[e.ID]) == 1
					mu.Unlock()
					if !first {
						return nil
					}
					arrived.Done()
					arrived.Wait()
					if e.ID == evs[0].ID {
						return rheo.Release(errors.New("not now"))
					}
					return nil
				}})
			require.NoError(t, err)
			stop := runUntilStopped(k)
			waitFor(t, "every event acked", func() bool { return counts.Acks.Load() == 4 })
			require.NoError(t, stop())
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []int{1, 2}, calls[evs[0].ID], "released as a nack: redelivered, its attempt counted")
			for _, e := range evs[1:] {
				require.Equal(t, []int{1}, calls[e.ID], "an acked event is never handled again")
			}
			require.Equal(t, int64(1), counts.Retries.Load())
			require.Zero(t, counts.Releases.Load())
			require.Zero(t, counts.SettleErrors.Load()-map[bool]int64{false: 1, true: 0}[whole],
				"only a per-request refusal shows as a settle error")
		})
	}
}

// A Reject or RetryAfter wins over a Release in the same error chain: the
// handler worked on the event.
func TestRejectAndRetryAfterWinOverRelease(t *testing.T) {
	released := rheo.Release(errors.New("inner"))
	for _, tc := range []struct {
		name string
		err  error
		dead bool
	}{
		{"reject_of_release", rheo.Reject(released), true},
		{"release_of_reject", rheo.Release(rheo.Reject(errors.New("bad"))), true},
		{"retry_after_of_release", rheo.RetryAfter(time.Hour, released), false},
		{"joined", errors.Join(errors.New("x"), rheo.Reject(released)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newConsumerFixture(t)
			f.append(t, 1)
			k, err := f.c.NewConsumer(rheo.ConsumerConfig{Stream: f.s, Group: f.g,
				Handler: func(context.Context, rheo.Event) error { return tc.err }})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- k.Run(ctx) }()
			waitFor(t, "settled", func() bool { return f.counts.DeadLetters.Load()+f.counts.Retries.Load() == 1 })
			cancel()
			require.NoError(t, <-done)
			require.Zero(t, f.counts.Releases.Load())
			gi, err := f.c.GroupInfo(context.Background(), f.s, f.g)
			require.NoError(t, err)
			if tc.dead {
				require.Equal(t, int64(1), gi.DeadLetters)
				return
			}
			require.Zero(t, gi.DeadLetters)
			ls, err := f.c.Fetch(context.Background(), f.s, f.g, rheo.FetchOptions{})
			require.NoError(t, err)
			require.Empty(t, ls, "retried after its hour, not at once")
		})
	}
}

// cutOffBackend commits a fetch, then answers it only once the test says
// so, and as a lost answer if the fetch's context ended meanwhile: what a
// stop that cancels a fetch in flight on a remote store gets.
type cutOffBackend struct {
	rheo.Backend
	fetched chan struct{}
	proceed chan struct{}
	once    sync.Once
}

func (b *cutOffBackend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	ls, err := b.Backend.Fetch(ctx, r)
	if err != nil || len(ls) == 0 {
		return ls, err
	}
	b.once.Do(func() { close(b.fetched) })
	<-b.proceed
	if ctx.Err() != nil {
		return nil, rheo.Errorf(rheo.ErrAmbiguous, "fetch answer cut off: %v", ctx.Err())
	}
	return ls, nil
}

// A stop does not cut off a fetch in flight: the leases it claimed are
// released with the others instead of being left to expire, each having
// used an attempt.
func TestStopDoesNotCutOffAFetchInFlight(t *testing.T) {
	b := &cutOffBackend{Backend: memory.New(), fetched: make(chan struct{}), proceed: make(chan struct{})}
	counts := &rheo.Counters{}
	c, _ := streamOn(t, b, rheo.GroupConfig{MaxAttempts: 1}, 3,
		rheo.WithClock(clock.NewFrozen(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))), rheo.WithObserver(counts))
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", ShutdownTimeout: time.Minute,
		Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(runCtx) }()
	<-b.fetched
	cancel() // before the fetch answers: a fetch under runCtx sees it cancelled
	close(b.proceed)
	require.NoError(t, <-done)
	require.Zero(t, counts.FetchErrors.Load())
	gi, err := c.GroupInfo(context.Background(), "s", "g")
	require.NoError(t, err)
	require.Zero(t, gi.Inflight, "no lease left behind to expire")
	require.Positive(t, counts.Leases.Load())
	require.Equal(t, counts.Leases.Load(), counts.Acks.Load()+counts.Releases.Load())
}

// Leases so short that the renewal interval's floor exceeds half of them
// are still handled: a fresh lease is never late.
func TestVeryShortLeasesStillRunHandlers(t *testing.T) {
	counts := &rheo.Counters{}
	c, _ := streamOn(t, memory.New(), rheo.GroupConfig{}, 20, rheo.WithObserver(counts))
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 1, MaxInflight: 4,
		LeaseDuration: 10 * time.Millisecond, Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	stop := runUntilStopped(k)
	waitFor(t, "every event handled", func() bool { return counts.Acks.Load() >= 20 })
	require.NoError(t, stop())
}

// After a backend refused a release, queued leases running late are
// renewed as before releases existed, not sent as nacks again and again:
// with MaxAttempts 2, the one nack round the refusal costs leaves every
// event alive.
func TestRefusedReleaseRenewsQueuedLeasesAgain(t *testing.T) {
	b := &oldBackend{Backend: memory.New(), whole: true}
	clk := clock.NewFrozen(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	counts := &rheo.Counters{}
	var mu sync.Mutex
	renewed := map[int64][]int{} // sequence -> attempts renewed
	c, _ := streamOn(t, b, rheo.GroupConfig{MaxAttempts: 2}, 3, rheo.WithClock(clk), rheo.WithObserver(observerFunc(func(ev rheo.ConsumerEvent) {
		counts.ObserveConsumer(ev)
		if ev.Kind == rheo.ConsumerRenewed && ev.Err == nil {
			mu.Lock()
			renewed[ev.Lease.Event.Sequence] = append(renewed[ev.Lease.Event.Sequence], ev.Lease.Attempt)
			mu.Unlock()
		}
	})))
	// The first and second handler calls wait for their gates.
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var calls atomic.Int32
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 1, MaxInflight: 3,
		LeaseDuration: 400 * time.Millisecond, Backoff: func(int) time.Duration { return 0 },
		Handler: func(ctx context.Context, e rheo.Event) error {
			if n := int(calls.Add(1)); n <= len(gates) {
				<-gates[n-1]
			}
			return nil
		}})
	require.NoError(t, err)
	stop := runUntilStopped(k)
	// Sequence 1's handler runs (and waits) before the clock moves, so
	// that only the two queued leases run late.
	waitFor(t, "three leases held, one handled", func() bool { return counts.Leases.Load() == 3 && calls.Load() == 1 })
	clk.Advance(150 * time.Millisecond)
	// Sequences 2 and 3 wait in the queue and run late: released, refused,
	// nacked (attempt 1 counted).
	waitFor(t, "the refused releases nacked", func() bool { return counts.Retries.Load() == 2 })
	close(gates[0])
	// Both fetched again at attempt 2: 2 runs (and waits), 3 is queued.
	waitFor(t, "fetched again", func() bool { return counts.Leases.Load() == 5 && calls.Load() == 2 })
	clk.Advance(150 * time.Millisecond)
	waitFor(t, "the queued lease renewed at attempt 2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(renewed[3]) > 0
	})
	close(gates[1])
	waitFor(t, "every event acked", func() bool { return counts.Acks.Load() == 3 })
	require.NoError(t, stop())
	gi, err := c.GroupInfo(context.Background(), "s", "g")
	require.NoError(t, err)
	require.Zero(t, gi.DeadLetters)
	require.Equal(t, int64(2), counts.Retries.Load(), "one round of nacks, then renewals")
}

// streamOn returns a client over b (options after a quiet logger) with a
// stream "s" holding n events and a group "g" made with gcfg.
func streamOn(t *testing.T, b rheo.Backend, gcfg rheo.GroupConfig, n int, opts ...rheo.Option) (*rheo.Client, []rheo.Event) {
	t.Helper()
	c := rheo.New(b, append([]rheo.Option{rheo.WithLogger(quietLogger)}, opts...)...)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", gcfg))
	evs, err := c.AppendBatch(ctx, "s", make([]rheo.Message, n))
	require.NoError(t, err)
	return c, evs
}

// runUntilStopped runs k; stop cancels its context and returns what Run
// returned.
func runUntilStopped(k *rheo.Consumer) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

type observerFunc func(rheo.ConsumerEvent)

func (f observerFunc) ObserveConsumer(ev rheo.ConsumerEvent) { f(ev) }

// blockedFetchBackend answers its first fetch and blocks every later one
// until its context ends, like a store that stopped answering.
type blockedFetchBackend struct {
	rheo.Backend
	calls atomic.Int32
}

func (b *blockedFetchBackend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	if b.calls.Add(1) == 1 {
		return b.Backend.Fetch(ctx, r)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// The shutdown budget runs from the cancellation: a fetch in flight that
// used it up leaves none for the handlers (they are not given a second
// budget after it).
func TestShutdownBudgetRunsFromTheCancellation(t *testing.T) {
	b := &blockedFetchBackend{Backend: memory.New()}
	c, _ := streamOn(t, b, rheo.GroupConfig{}, 1)
	const budget = time.Second
	started := make(chan struct{})
	cancelled := make(chan time.Time, 1)
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 2, MaxInflight: 2,
		ShutdownTimeout: budget, Handler: func(ctx context.Context, e rheo.Event) error {
			close(started)
			<-ctx.Done()
			cancelled <- time.Now()
			return ctx.Err()
		}})
	require.NoError(t, err)
	stop := runUntilStopped(k)
	<-started
	waitFor(t, "a second fetch in flight", func() bool { return b.calls.Load() >= 2 })
	at := time.Now()
	require.NoError(t, stop())
	took := (<-cancelled).Sub(at)
	require.GreaterOrEqual(t, took, budget, "the handler had its budget")
	require.Less(t, took, budget*9/5, "the handler was cancelled %v after the cancellation, not after a second budget", took)
}
