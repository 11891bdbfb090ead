package rheotest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func init() {
	sections = append(sections, section{name: "consumer", run: runConsumer})
}

// runConsumer checks the consumer runtime on the backend: scheduling limits,
// handler outcomes, renewal, fencing, stopping, and the settle policy under
// injected failures. Lease expiry is driven by the frozen clock; the
// runtime's own timers (polling, renewal ticks) are wall-clock and kept short.
func runConsumer(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"handles_every_event_within_concurrency_and_inflight_limits", consumerLimits},
		{"slow_events_all_processed_with_concurrency_one", consumerSlowSerial},
		{"two_groups_each_process_every_event", consumerTwoGroups},
		{"nil_acks_and_lag_reaches_zero", consumerAcks},
		{"panic_is_nacked_then_redelivered_and_acked", consumerPanic},
		{"reject_dead_letters_with_reason", consumerReject},
		{"error_message_that_is_not_text_is_stored_with_replacement_characters", consumerReasonNotText},
		{"retry_after_delays_redelivery", consumerRetryAfter},
		{"error_retries_with_backoff_delay", consumerBackoff},
		{"invalid_config_refused", consumerInvalidConfig},
		{"second_runtime_on_one_group_refused", consumerAlreadyRunning},
		{"stolen_lease_settle_is_stale_and_never_nacked", consumerStolen},
		{"renewal_keeps_slow_handler_lease_alive", consumerRenewalKeepsLease},
		{"renewal_finding_stolen_lease_cancels_handler", consumerRenewalLost},
		{"drain_waits_for_inflight_then_run_returns", consumerDrain},
		{"drain_timeout_and_second_drain_refused", consumerDrainTimeout},
		{"shutdown_lets_running_handler_finish", consumerShutdown},
		{"shutdown_budget_cancels_handler_and_nacks_at_once", consumerShutdownBudget},
		{"idle_fetch_rate_is_bounded", consumerIdleRate},
		{"fetch_errors_retried_until_group_exists", consumerFetchRetry},
		{"fresh_consumer_resumes_from_durable_state", consumerResume},
		{"ack_unavailable_not_nacked_and_redelivered_after_expiry", consumerAckUnavailable},
		{"ack_definite_failure_nacked_and_redelivered", consumerAckFailed},
		{"nack_unavailable_left_to_expiry", consumerNackUnavailable},
		{"renew_unavailable_then_ok_keeps_lease", consumerRenewUnavailable},
	})
}

func consumerLimits(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 6)
	release := make(chan struct{}, 6)
	var runningNow, maxRunning atomic.Int64
	var h seen
	e.start(rheo.ConsumerConfig{Concurrency: 2, MaxInflight: 3, Handler: func(ctx context.Context, ev rheo.Event) error {
		n := runningNow.Add(1)
		defer runningNow.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		h.add(ctx, ev)
		<-release
		return nil
	}})
	// Two handlers run and a third lease waits for a slot.
	eventually(t, "two handlers running and three leases held", func() bool {
		return runningNow.Load() == 2 && e.info(e.s, e.g).Inflight == 3
	})
	require.Equal(t, 3, e.b.limits()[0], "the first fetch asks for exactly the free slots")
	// Finish handlers one at a time, so slots free up one at a time.
	for i := range 6 {
		release <- struct{}{}
		eventually(t, "the next ack", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == i+1 })
	}
	require.LessOrEqual(t, maxRunning.Load(), int64(2), "handlers running at once")
	require.LessOrEqual(t, e.b.maxHeldAndAsked(), 3, "a fetch asked for more than the free slots")
	require.Len(t, h.all(), 6)
	e.requireLag(e.s, e.g, 0, 6, 6)
}

func consumerSlowSerial(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 3)
	release := make(chan struct{}, 3)
	var h seen
	e.start(rheo.ConsumerConfig{Concurrency: 1, MaxInflight: 3, Handler: func(ctx context.Context, ev rheo.Event) error {
		h.add(ctx, ev)
		<-release
		return nil
	}})
	for i := range 3 {
		eventually(t, "next handler", func() bool { return h.len() == i+1 })
		release <- struct{}{}
	}
	eventually(t, "three acks", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 3 })
	var got []int64
	for _, l := range h.all() {
		got = append(got, l.Event.Sequence)
	}
	require.Equal(t, []int64{1, 2, 3}, got, "one handler at a time takes the held leases in order")
}

func consumerTwoGroups(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	g2 := e.group(e.s, rheo.GroupConfig{})
	evs := e.appendN(e.s, 0, 2)
	var a, b seen
	e.start(rheo.ConsumerConfig{Handler: func(ctx context.Context, ev rheo.Event) error { a.add(ctx, ev); return nil }})
	e.start(rheo.ConsumerConfig{Group: g2, Handler: func(ctx context.Context, ev rheo.Event) error { b.add(ctx, ev); return nil }})
	eventually(t, "both groups to finish", func() bool {
		return e.lag(e.s, e.g).Total == 0 && e.lag(e.s, g2).Total == 0
	})
	require.ElementsMatch(t, ids(evs), ids(leaseEvents(a.all())))
	require.ElementsMatch(t, ids(evs), ids(leaseEvents(b.all())))
}

func consumerAcks(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	var h seen
	e.start(rheo.ConsumerConfig{Concurrency: 4, Handler: func(ctx context.Context, ev rheo.Event) error {
		h.add(ctx, ev)
		return nil
	}})
	// Appended after the consumer went idle: the wakeup or the poll finds them.
	evs := e.appendN(e.s, 0, 20)
	eventually(t, "lag 0", func() bool { return e.lag(e.s, e.g).Total == 0 })
	require.ElementsMatch(t, ids(evs), ids(leaseEvents(h.all())))
	for _, l := range h.all() {
		require.Equal(t, 1, l.Attempt, "LeaseFromContext gives the lease")
		require.Equal(t, e.s, l.Stream)
	}
	require.Empty(t, e.b.settles(rheo.SettleNack))
	require.Empty(t, e.rec.of(rheo.ConsumerLost, nil))
}

func consumerPanic(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	ev := e.appendN(e.s, 0, 1)[0]
	var h seen
	e.start(rheo.ConsumerConfig{
		Backoff: func(int) time.Duration { return 0 },
		Handler: func(ctx context.Context, ev rheo.Event) error {
			if h.add(ctx, ev).Attempt == 1 {
				panic("boom")
			}
			return nil
		}})
	eventually(t, "ack after the panic", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 1 })
	require.GreaterOrEqual(t, h.len(), 2)
	nacks := e.b.settles(rheo.SettleNack)
	require.Len(t, nacks, 1)
	require.Equal(t, ev.ID, nacks[0].Lease.Event.ID)
	require.Equal(t, "panic: boom", nacks[0].Reason)
	handled := e.rec.of(rheo.ConsumerHandled, func(ev rheo.ConsumerEvent) bool { return ev.Panicked })
	require.Len(t, handled, 1)
	e.requireLag(e.s, e.g, 0, 1, 1)
}

func consumerReject(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	ev := e.appendN(e.s, 0, 1)[0]
	e.start(rheo.ConsumerConfig{Handler: func(ctx context.Context, ev rheo.Event) error {
		return rheo.Reject(errors.New("bad payload"))
	}})
	e.rec.await(t, "reject", rheo.ConsumerRejected, succeeded)
	dls := e.deadLetters(e.s, e.g)
	require.Len(t, dls, 1)
	require.Equal(t, ev.ID, dls[0].EventID)
	require.Equal(t, "bad payload", dls[0].Reason)
	e.requireNone(e.s, e.g)
	e.requireLag(e.s, e.g, 0, 1, 1)
	require.Empty(t, e.b.settles(rheo.SettleNack))
}

// consumerReasonNotText: a handler's error message with a byte that is not
// UTF-8 and a NUL, which Nack and Reject refuse, still settles its lease
// beside the others of its fetch: the reason is stored with U+FFFD in their
// place, and every other event is acked.
func consumerReasonNotText(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{MaxAttempts: 1})
	evs := e.appendN(e.s, 0, 20)
	bad, retried := evs[3].ID, evs[7].ID
	e.start(rheo.ConsumerConfig{Concurrency: 20, Handler: func(ctx context.Context, ev rheo.Event) error {
		switch ev.ID {
		case bad:
			return rheo.Reject(errors.New("bad \xff byte \x00 here"))
		case retried:
			return errors.New("\xc3")
		}
		return nil
	}})
	eventually(t, "every event settled", func() bool {
		return e.rec.count(rheo.ConsumerAcked, succeeded) == 18 &&
			e.rec.count(rheo.ConsumerRejected, succeeded) == 1 && e.rec.count(rheo.ConsumerRetried, succeeded) == 1
	})
	e.requireNone(e.s, e.g)
	e.requireLag(e.s, e.g, 0, 20, 20)
	dls := e.deadLetters(e.s, e.g)
	require.Len(t, dls, 2)
	reasons := map[string]string{dls[0].EventID: dls[0].Reason, dls[1].EventID: dls[1].Reason}
	require.Equal(t, map[string]string{bad: "bad \uFFFD byte \uFFFD here", retried: "max_attempts: \uFFFD"}, reasons)
	require.Equal(t, "bad \uFFFD byte \uFFFD here", e.rec.await(t, "reject", rheo.ConsumerRejected, succeeded).Reason)
}

func consumerRetryAfter(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	var h seen
	e.start(rheo.ConsumerConfig{Handler: func(ctx context.Context, ev rheo.Event) error {
		if h.add(ctx, ev).Attempt == 1 {
			return rheo.RetryAfter(time.Minute, errors.New("rate limited"))
		}
		return nil
	}})
	retry := e.rec.await(t, "retry", rheo.ConsumerRetried, succeeded)
	require.Equal(t, time.Minute, retry.Delay)
	require.Equal(t, "rate limited", retry.Reason)
	e.requireNone(e.s, e.g)
	require.Equal(t, 1, h.len(), "redelivered before its delay")
	e.clk.Advance(time.Minute)
	eventually(t, "ack after the delay", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 1 })
	require.Equal(t, 2, h.all()[1].Attempt)
}

func consumerBackoff(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	var h seen
	e.start(rheo.ConsumerConfig{
		Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * 10 * time.Second },
		Handler: func(ctx context.Context, ev rheo.Event) error {
			if h.add(ctx, ev).Attempt < 3 {
				return errors.New("downstream timeout")
			}
			return nil
		}})
	first := e.rec.await(t, "first retry", rheo.ConsumerRetried, succeeded)
	require.Equal(t, 10*time.Second, first.Delay)
	require.Equal(t, "downstream timeout", first.Reason)
	e.requireNone(e.s, e.g)
	e.clk.Advance(10 * time.Second)
	e.rec.await(t, "second retry", rheo.ConsumerRetried, func(ev rheo.ConsumerEvent) bool {
		return ev.Err == nil && ev.Lease.Attempt == 2
	})
	second := e.rec.of(rheo.ConsumerRetried, nil)[1]
	require.Equal(t, 20*time.Second, second.Delay)
	e.clk.Advance(20 * time.Second)
	eventually(t, "ack on the third attempt", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 1 })
	require.Equal(t, 3, h.len())
}

func consumerInvalidConfig(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	h := func(context.Context, rheo.Event) error { return nil }
	for _, tc := range []struct {
		field string
		cfg   rheo.ConsumerConfig
	}{
		{"Handler", rheo.ConsumerConfig{Stream: e.s, Group: e.g}},
		{"Stream", rheo.ConsumerConfig{Group: e.g, Handler: h}},
		{"Group", rheo.ConsumerConfig{Stream: e.s, Handler: h}},
		{"Concurrency", rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, Concurrency: -1}},
		{"MaxInflight", rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, MaxInflight: -1}},
		{"MaxInflight", rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, MaxInflight: rheo.MaxLimit + 1}},
		{"LeaseDuration", rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, LeaseDuration: -time.Second}},
		{"PollInterval", rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, PollInterval: -time.Second}},
		{"ShutdownTimeout", rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, ShutdownTimeout: -time.Second}},
		{"ConsumerID", rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, ConsumerID: "a\x00b"}},
	} {
		k, err := e.c.NewConsumer(tc.cfg)
		require.ErrorIs(t, err, rheo.ErrInvalidArgument, tc.field)
		require.Contains(t, err.Error(), tc.field)
		require.Nil(t, k)
	}
	_, err := e.c.NewConsumer(rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, Partitions: []int{-1}})
	require.ErrorIs(t, err, rheo.ErrInvalidPartition)

	// A partition the stream does not have ends Run with the error.
	k, err := e.c.NewConsumer(rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h, Partitions: []int{5}})
	require.NoError(t, err)
	require.ErrorIs(t, k.Run(context.Background()), rheo.ErrInvalidPartition)
	// Concurrency 0 means 1.
	var h1 seen
	e.appendN(e.s, 0, 1)
	e.start(rheo.ConsumerConfig{Concurrency: 0, Handler: func(ctx context.Context, ev rheo.Event) error {
		h1.add(ctx, ev)
		return nil
	}})
	eventually(t, "handled", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 1 })
}

func consumerAlreadyRunning(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	h := func(context.Context, rheo.Event) error { return nil }
	first := e.start(rheo.ConsumerConfig{Handler: h})
	eventually(t, "first consumer fetching", func() bool { return e.rec.count(rheo.ConsumerFetched, nil) > 0 })
	k, err := e.c.NewConsumer(rheo.ConsumerConfig{Stream: e.s, Group: e.g, Handler: h})
	require.NoError(t, err)
	require.ErrorIs(t, k.Run(context.Background()), rheo.ErrAlreadyRunning)
	// The running one cannot be run twice either.
	require.ErrorIs(t, first.k.Run(context.Background()), rheo.ErrAlreadyRunning)
	// Another group on the same stream is fine.
	g2 := e.group(e.s, rheo.GroupConfig{})
	e.start(rheo.ConsumerConfig{Group: g2, Handler: h})
	// Once the first stops, the group may run again.
	require.NoError(t, first.stop(t))
	e.start(rheo.ConsumerConfig{Handler: h})
	e.appendN(e.s, 0, 1)
	// The stopped consumer's last fetch may still run in a networked store
	// and lease the event to nobody: let every lease taken so far expire.
	e.clk.Advance(time.Hour)
	eventually(t, "both groups ack", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 2 })
}

// blocker is a handler that announces each start and blocks until released
// (or until its context ends, returning the context's cause).
type blocker struct {
	started chan rheo.Lease
	release chan error
	causes  chan error
}

func newBlocker() *blocker {
	return &blocker{started: make(chan rheo.Lease, 16), release: make(chan error, 16), causes: make(chan error, 16)}
}

func (b *blocker) handle(ctx context.Context, ev rheo.Event) error {
	l, _ := rheo.LeaseFromContext(ctx)
	b.started <- l
	select {
	case err := <-b.release:
		return err
	case <-ctx.Done():
		b.causes <- context.Cause(ctx)
		return ctx.Err()
	}
}

func consumerStolen(t *testing.T, f Factory) {
	for _, outcome := range []struct {
		name string
		err  error
		kind rheo.ConsumerEventKind
	}{
		{"ack", nil, rheo.ConsumerAcked},
		{"retry", errors.New("try again"), rheo.ConsumerRetried},
		{"reject", rheo.Reject(errors.New("bad")), rheo.ConsumerRejected},
	} {
		t.Run(outcome.name, func(t *testing.T) {
			e := newConsumerEnv(t, f, rheo.GroupConfig{})
			e.appendN(e.s, 0, 1)
			b := newBlocker()
			e.start(rheo.ConsumerConfig{LeaseDuration: 30 * time.Second, Handler: b.handle})
			mine := receive(t, "handler start", b.started)
			// The lease expires and another worker reclaims the event.
			e.clk.Advance(30*time.Second + time.Millisecond)
			theirs := e.fetchN(e.s, e.g, 1)[0]
			require.Equal(t, mine.Event.ID, theirs.Event.ID)
			require.Equal(t, 2, theirs.Attempt)
			b.release <- outcome.err
			settle := e.rec.await(t, "the stale settle", outcome.kind, nil)
			require.ErrorIs(t, settle.Err, rheo.ErrStaleLease)
			lost := e.rec.await(t, "lost lease", rheo.ConsumerLost, nil)
			require.Equal(t, mine.ID, lost.Lease.ID)
			// No nack after a lost ack, and no second settle of any kind.
			require.Len(t, e.b.settles(rheo.SettleNack), map[bool]int{true: 1, false: 0}[outcome.kind == rheo.ConsumerRetried])
			require.Len(t, e.b.allSettles(), 1)
			// The new holder still owns the delivery.
			e.ack(theirs)
			e.requireLag(e.s, e.g, 0, 1, 1)
		})
	}
}

func consumerRenewalKeepsLease(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	b := newBlocker()
	const lease = 100 * time.Millisecond
	e.start(rheo.ConsumerConfig{LeaseDuration: lease, Handler: b.handle})
	mine := receive(t, "handler start", b.started)
	// Move the clock half a lease at a time, each time after a renewal made
	// at the current time: over five lease durations the lease never lapses.
	for range 10 {
		now := e.clk.Now()
		e.rec.await(t, "a renewal at the current time", rheo.ConsumerRenewed, func(ev rheo.ConsumerEvent) bool {
			return ev.Err == nil && ev.Lease.ExpiresAt.Equal(now.Add(lease))
		})
		e.clk.Advance(lease / 2)
		e.requireNone(e.s, e.g)
	}
	require.True(t, e.clk.Now().After(mine.ExpiresAt.Add(3*lease)))
	b.release <- nil
	ack := e.rec.await(t, "ack", rheo.ConsumerAcked, nil)
	require.NoError(t, ack.Err)
	require.Empty(t, e.rec.of(rheo.ConsumerLost, nil))
	e.requireLag(e.s, e.g, 0, 1, 1)
}

func consumerRenewalLost(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	b := newBlocker()
	// A renewal has half a lease to answer (see consumerRenewUnavailable).
	e.start(rheo.ConsumerConfig{LeaseDuration: time.Second, Handler: b.handle})
	mine := receive(t, "handler start", b.started)
	// Expire the lease until another worker manages to claim it between
	// two renewals.
	var theirs []rheo.Lease
	eventually(t, "another worker to steal the lease", func() bool {
		e.clk.Advance(time.Hour)
		theirs = e.fetch(e.s, e.g, rheo.FetchOptions{Limit: 1})
		return len(theirs) == 1
	})
	require.Equal(t, mine.Event.ID, theirs[0].Event.ID)
	cause := receive(t, "the handler's context to end", b.causes)
	require.ErrorIs(t, cause, rheo.ErrStaleLease)
	lost := e.rec.await(t, "lost lease", rheo.ConsumerLost, nil)
	require.Equal(t, mine.ID, lost.Lease.ID)
	e.rec.await(t, "handler return", rheo.ConsumerHandled, nil)
	// The dropped lease is never settled; the thief's lease still is current.
	require.Empty(t, e.b.allSettles())
	e.ack(theirs...)
	e.requireLag(e.s, e.g, 0, 1, 1)
}

func consumerDrain(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	b := newBlocker()
	r := e.start(rheo.ConsumerConfig{Handler: b.handle})
	receive(t, "handler start", b.started)
	// A Drain whose context is already done still begins the drain.
	require.ErrorIs(t, r.k.Drain(canceledContext()), context.Canceled)
	drained := make(chan error, 1)
	go func() { drained <- r.k.Drain(context.Background()) }()
	e.appendN(e.s, 0, 1)
	fetches := e.b.fetches.Load()
	select {
	case err := <-drained:
		t.Fatalf("drain returned %v while a handler runs", err)
	default:
	}
	b.release <- nil
	require.NoError(t, receive(t, "drain", drained))
	require.NoError(t, r.wait(t), "Run returns nil after a drain")
	require.Equal(t, fetches, e.b.fetches.Load(), "no fetch after the drain began")
	require.Equal(t, 1, e.rec.count(rheo.ConsumerAcked, succeeded))
	e.requireLag(e.s, e.g, 0, 1, 2)
	// Drain of a stopped consumer returns at once.
	require.NoError(t, r.k.Drain(context.Background()))
}

func canceledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func consumerDrainTimeout(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	b := newBlocker()
	r := e.start(rheo.ConsumerConfig{Handler: b.handle})
	receive(t, "handler start", b.started)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.k.Drain(ctx), context.DeadlineExceeded)
	// A pending drain refuses a second one.
	first := make(chan error, 1)
	go func() {
		for {
			// The probe below may hold the drain for an instant.
			err := r.k.Drain(context.Background())
			if !errors.Is(err, rheo.ErrAlreadyDraining) {
				first <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	eventually(t, "second drain refused", func() bool {
		return errors.Is(r.k.Drain(canceledContext()), rheo.ErrAlreadyDraining)
	})
	b.release <- nil
	require.NoError(t, receive(t, "first drain", first))
	require.NoError(t, r.wait(t))
	e.requireLag(e.s, e.g, 0, 1, 1)
}

func consumerShutdown(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	b := newBlocker()
	r := e.start(rheo.ConsumerConfig{ShutdownTimeout: time.Minute, Handler: b.handle})
	receive(t, "handler start", b.started)
	r.cancel()
	b.release <- nil
	require.NoError(t, r.stop(t))
	require.Equal(t, 1, e.rec.count(rheo.ConsumerAcked, succeeded), "the running handler finished and acked")
	e.requireLag(e.s, e.g, 0, 1, 1)
}

func consumerShutdownBudget(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	ev := e.appendN(e.s, 0, 1)[0]
	b := newBlocker()
	r := e.start(rheo.ConsumerConfig{ShutdownTimeout: 10 * time.Millisecond, Handler: b.handle,
		Backoff: func(int) time.Duration { return time.Hour }})
	receive(t, "handler start", b.started)
	require.NoError(t, r.stop(t))
	require.ErrorIs(t, receive(t, "the handler's context to end", b.causes), rheo.ErrConsumerStopped)
	nacks := e.b.settles(rheo.SettleNack)
	require.Len(t, nacks, 1)
	require.Equal(t, "consumer stopped", nacks[0].Reason)
	// No delay: another worker takes it at once.
	l := e.fetchN(e.s, e.g, 1)[0]
	require.Equal(t, ev.ID, l.Event.ID)
	require.Equal(t, 2, l.Attempt)
}

func consumerIdleRate(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	const poll = 50 * time.Millisecond
	const window = 500 * time.Millisecond
	// Generous: an idle consumer fetches about once per poll (window/poll
	// = 10), wakeups aside; a hot loop would fetch thousands of times.
	const bound = 25
	e.start(rheo.ConsumerConfig{Concurrency: 4, PollInterval: poll,
		Handler: func(context.Context, rheo.Event) error { return nil }})
	measure := func() int64 {
		before := e.b.fetches.Load()
		time.Sleep(window)
		return e.b.fetches.Load() - before
	}
	idle := measure()
	require.LessOrEqual(t, idle, int64(bound), "fetches of an idle consumer in %v", window)
	require.Positive(t, idle, "an idle consumer still polls")
	e.appendN(e.s, 0, 200)
	eventually(t, "burst consumed", func() bool { return e.lag(e.s, e.g).Total == 0 })
	after := measure()
	require.LessOrEqual(t, after, int64(bound), "fetches of an idle consumer after a burst in %v", window)
}

func consumerFetchRetry(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	g := Name("g")
	var h seen
	e.start(rheo.ConsumerConfig{Group: g, Handler: func(ctx context.Context, ev rheo.Event) error {
		h.add(ctx, ev)
		return nil
	}})
	eventually(t, "repeated fetch errors", func() bool { return e.rec.count(rheo.ConsumerFetched, failed) >= 2 })
	fe := e.rec.of(rheo.ConsumerFetched, failed)[0]
	require.ErrorIs(t, fe.Err, rheo.ErrGroupNotFound)
	require.NoError(t, e.c.CreateGroup(e.ctx, e.s, g, rheo.GroupConfig{}))
	ev := e.appendN(e.s, 0, 1)[0]
	eventually(t, "handled once the group exists", func() bool { return h.len() == 1 })
	require.Equal(t, ev.ID, h.all()[0].Event.ID)
}

func consumerResume(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	var h seen
	handler := func(ctx context.Context, ev rheo.Event) error { h.add(ctx, ev); return nil }
	r := e.start(rheo.ConsumerConfig{Handler: handler})
	eventually(t, "first event", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 1 })
	require.NoError(t, r.stop(t))
	e.appendN(e.s, 0, 1)
	// A fetch the stopped consumer sent just before it stopped may still run
	// in a networked store after Run returned (its outcome was never heard)
	// and lease the new event to nobody. Such a lease expires like any
	// other: move the frozen clock past every lease taken so far.
	e.clk.Advance(time.Hour)
	e.start(rheo.ConsumerConfig{Handler: handler})
	eventually(t, "second event", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 2 })
	got := h.all()
	require.Len(t, got, 2)
	require.Equal(t, []int64{1, 2}, []int64{got[0].Event.Sequence, got[1].Event.Sequence})
}

func consumerAckUnavailable(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{MaxAttempts: 5})
	ev := e.appendN(e.s, 0, 1)[0]
	e.b.setSettleFault(func(r rheo.SettleRequest) error {
		if r.Kind == rheo.SettleAck {
			return rheo.Errorf(rheo.ErrBackendUnavailable, "injected")
		}
		return nil
	})
	const lease = time.Second
	r := e.start(rheo.ConsumerConfig{LeaseDuration: lease,
		Handler: func(context.Context, rheo.Event) error { return nil }})
	ack := e.rec.await(t, "ack error", rheo.ConsumerAcked, nil)
	require.ErrorIs(t, ack.Err, rheo.ErrBackendUnavailable)
	require.NoError(t, r.k.Drain(context.Background()))
	require.Empty(t, e.b.settles(rheo.SettleNack), "an unknown ack outcome is never nacked")
	// Still leased until it expires, then redelivered.
	e.requireNone(e.s, e.g)
	e.clk.Advance(lease + 100*time.Millisecond)
	l := e.fetchN(e.s, e.g, 1)[0]
	require.Equal(t, ev.ID, l.Event.ID)
	require.Equal(t, 2, l.Attempt)
}

func consumerAckFailed(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{MaxAttempts: 5})
	ev := e.appendN(e.s, 0, 1)[0]
	var once sync.Once
	e.b.setSettleFault(func(r rheo.SettleRequest) error {
		var err error
		if r.Kind == rheo.SettleAck {
			once.Do(func() { err = errors.New("write conflict") })
		}
		return err
	})
	var h seen
	e.start(rheo.ConsumerConfig{LeaseDuration: time.Minute, Handler: func(ctx context.Context, ev rheo.Event) error {
		h.add(ctx, ev)
		return nil
	}})
	eventually(t, "ack after redelivery", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 1 })
	nacks := e.b.settles(rheo.SettleNack)
	require.Len(t, nacks, 1)
	require.True(t, strings.HasPrefix(nacks[0].Reason, "ack failed: "), nacks[0].Reason)
	require.Contains(t, nacks[0].Reason, "write conflict")
	got := h.all()
	require.Len(t, got, 2)
	require.Equal(t, ev.ID, got[1].Event.ID)
	require.Equal(t, 2, got[1].Attempt, "redelivered without waiting for expiry")
	eventually(t, "lag 0", func() bool { return e.lag(e.s, e.g).Total == 0 })
}

func consumerNackUnavailable(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{MaxAttempts: 5})
	ev := e.appendN(e.s, 0, 1)[0]
	e.b.setSettleFault(func(r rheo.SettleRequest) error {
		if r.Kind == rheo.SettleNack {
			return rheo.Errorf(rheo.ErrBackendUnavailable, "injected")
		}
		return nil
	})
	var h seen
	const lease = time.Second
	e.start(rheo.ConsumerConfig{LeaseDuration: lease, Handler: func(ctx context.Context, ev rheo.Event) error {
		if h.add(ctx, ev).Attempt == 1 {
			return errors.New("transient")
		}
		return nil
	}})
	nack := e.rec.await(t, "nack error", rheo.ConsumerRetried, nil)
	require.ErrorIs(t, nack.Err, rheo.ErrBackendUnavailable)
	require.Equal(t, int64(1), e.info(e.s, e.g).Inflight, "left leased")
	e.clk.Advance(lease + 100*time.Millisecond)
	eventually(t, "ack after expiry", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 1 })
	got := h.all()
	require.Len(t, got, 2)
	require.Equal(t, ev.ID, got[1].Event.ID)
	require.Equal(t, 2, got[1].Attempt)
}

func consumerRenewUnavailable(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 1)
	var fails atomic.Int64
	e.b.setRenewFault(func(rheo.Lease) error {
		if fails.Add(1) == 1 {
			return rheo.Errorf(rheo.ErrBackendUnavailable, "injected")
		}
		return nil
	})
	b := newBlocker()
	// Renewals tick every half lease in real time, each bounded by that
	// half: a lease of a second gives a store under load 500 ms to answer
	// (the frozen clock keeps the lease from expiring meanwhile).
	e.start(rheo.ConsumerConfig{LeaseDuration: time.Second, Handler: b.handle})
	mine := receive(t, "handler start", b.started)
	bad := e.rec.await(t, "failed renewal", rheo.ConsumerRenewed, failed)
	require.ErrorIs(t, bad.Err, rheo.ErrBackendUnavailable)
	e.rec.await(t, "renewal after the failure", rheo.ConsumerRenewed, succeeded)
	b.release <- nil
	ack := e.rec.await(t, "ack", rheo.ConsumerAcked, nil)
	require.NoError(t, ack.Err)
	require.Equal(t, mine.ID, ack.Lease.ID, "the same lease, kept through the failed renewal")
	require.Empty(t, e.rec.of(rheo.ConsumerLost, nil))
	e.requireLag(e.s, e.g, 0, 1, 1)
}
