package rheotest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func init() {
	sections = append(sections, section{name: "release", run: runRelease})
}

// runRelease checks SettleRelease (Client.Release): a lease handed back
// unhandled is available again at once, its claim is not counted as an
// attempt, it never dead-letters, and it is fenced like every settle; and
// that the consumer runtime releases the leases it never started.
func runRelease(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"release_hands_back_without_counting_the_attempt", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 2)
			require.NoError(t, e.c.Release(e.ctx, ls[0]))
			gi := e.info(s, g)
			require.Equal(t, int64(1), gi.Available, "the released delivery is available")
			require.Equal(t, int64(1), gi.Inflight, "the other is still leased")
			again := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Len(t, again, 1)
			require.Equal(t, evs[0].ID, again[0].Event.ID)
			require.Equal(t, 1, again[0].Attempt, "the released claim did not count")
			require.NotEqual(t, ls[0].ID, again[0].ID, "a fresh fencing token")
			require.ErrorIs(t, e.c.Ack(e.ctx, ls[0]), rheo.ErrStaleLease, "the released lease is stale")
			require.ErrorIs(t, e.c.Release(e.ctx, ls[0]), rheo.ErrStaleLease, "a second release is stale")
			e.requireLag(s, g, 0, 0, 2)
			e.ack(again[0], ls[1])
			e.requireLag(s, g, 0, 2, 2)
			require.Empty(t, e.deadLetters(s, g))
		}},
		{"release_keeps_the_attempts_of_earlier_claims", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 3})
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "first"))
			l := e.fetchN(s, g, 1)[0]
			require.Equal(t, 2, l.Attempt)
			require.NoError(t, e.c.Release(e.ctx, l))
			l = e.fetchN(s, g, 1)[0]
			require.Equal(t, 2, l.Attempt, "the attempt after the release is the released one's")
			require.NoError(t, e.c.Nack(e.ctx, l, "second"))
			l = e.fetchN(s, g, 1)[0]
			require.Equal(t, 3, l.Attempt)
			require.NoError(t, e.c.Nack(e.ctx, l, "third"))
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 1, "three counted attempts reach MaxAttempts 3")
			require.Equal(t, 3, dls[0].Attempts)
			require.Equal(t, "max_attempts: third", dls[0].Reason)
		}},
		{"release_at_the_attempt_limit_never_dead_letters", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			for range 3 {
				l := e.fetchN(s, g, 1)[0]
				require.Equal(t, 1, l.Attempt)
				require.NoError(t, e.c.Release(e.ctx, l))
				require.Empty(t, e.deadLetters(s, g))
			}
			// An expiry at the limit buries it (R6): the release left the
			// attempt at 0, so the next claim is attempt 1 again, at the limit.
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			require.Equal(t, 1, l.Attempt)
			e.clk.Advance(time.Second)
			e.requireNone(s, g)
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 1)
			require.Equal(t, "max_attempts: lease expired", dls[0].Reason)
		}},
		{"released_deliveries_come_back_in_sequence_order", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 5)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 5)
			// Release members out of order, from the middle and both ends
			// of one fetch, and settle the rest otherwise.
			require.NoError(t, e.c.Release(e.ctx, ls[3]))
			require.NoError(t, e.c.Release(e.ctx, ls[0]))
			e.ack(ls[1])
			require.NoError(t, e.c.Nack(e.ctx, ls[2], "x", rheo.Delay(time.Hour)))
			require.NoError(t, e.c.Release(e.ctx, ls[4]))
			e.requireLag(s, g, 0, 0, 5)
			again := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []pos{{0, 1}, {0, 4}, {0, 5}}, positions(again))
			for _, l := range again {
				require.Equal(t, 1, l.Attempt, "sequence %d", l.Event.Sequence)
			}
			e.ack(again...)
			e.requireLag(s, g, 0, 2, 5) // 3 waits out its delay
		}},
		{"release_of_a_whole_fetch_hands_every_lease_back", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 3)
			e.appendN(s, 1, 3)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 6)
			reqs := make([]rheo.SettleRequest, len(ls))
			for i, l := range ls {
				reqs[i] = rheo.SettleRequest{Kind: rheo.SettleRelease, Lease: l, Reason: "ignored"}
			}
			e.settle(s, g, reqs)
			require.Equal(t, int64(6), e.info(s, g).Available)
			again := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, positions(ls), positions(again))
			for _, l := range again {
				require.Equal(t, 1, l.Attempt)
			}
			require.NoError(t, e.c.AckBatch(e.ctx, again))
			e.requireLag(s, g, 0, 3, 3)
			e.requireLag(s, g, 1, 3, 3)
		}},
		{"release_is_due_at_the_releasers_time", func(t *testing.T, f Factory) {
			// Like a nack without delay: a fetcher whose clock is behind
			// the release's does not take it yet.
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			e.clk.Set(Epoch.Add(10 * time.Second))
			require.NoError(t, e.c.Release(e.ctx, l))
			e.clk.Set(Epoch.Add(10*time.Second - time.Microsecond))
			e.requireNone(s, g)
			e.clk.Set(Epoch.Add(10 * time.Second))
			require.Equal(t, []pos{{0, 1}}, positions(e.fetch(s, g, rheo.FetchOptions{Limit: 10})))
		}},
		{"release_of_an_expired_lease_nobody_reclaimed_settles", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			e.clk.Advance(2 * time.Second)
			require.NoError(t, e.c.Release(e.ctx, l))
			require.Equal(t, 1, e.fetchN(s, g, 1)[0].Attempt)
		}},
		{"release_of_a_reclaimed_lease_is_stale", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			old := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			e.clk.Advance(time.Second)
			cur := e.fetchN(s, g, 1)[0]
			require.Equal(t, 2, cur.Attempt)
			require.ErrorIs(t, e.c.Release(e.ctx, old), rheo.ErrStaleLease)
			require.Equal(t, int64(1), e.info(s, g).Inflight, "the stale release changed nothing")
			require.NoError(t, e.c.Release(e.ctx, cur))
			require.Equal(t, 2, e.fetchN(s, g, 1)[0].Attempt, "the expiry counted, the release did not")
		}},
		{"release_with_a_wrong_receipt_is_refused", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			forged := l
			forged.Receipt = l.Receipt + "x"
			requireReceiptRefused(t, l, e.c.Release(e.ctx, forged))
			require.Equal(t, int64(1), e.info(s, g).Inflight)
			require.NoError(t, e.c.Release(e.ctx, l))
		}},
		{"fetch_wait_is_woken_by_a_release", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			ls := e.wokenFetch(s, g, "a release", func() { require.NoError(t, e.c.Release(e.ctx, l)) })
			require.Len(t, ls, 1)
			require.Equal(t, 1, ls[0].Attempt)
		}},
		{"consumer_releases_queued_leases_when_it_stops", consumerReleasesQueued},
		{"handler_returning_release_hands_the_lease_back", consumerHandlerRelease},
		{"consumer_releases_queued_leases_running_late_instead_of_renewing_them", consumerReleasesLate},
		{"late_releases_keep_max_inflight_and_the_stop_clean", consumerLateKeepsInflight},
	})
}

// consumerReleasesQueued: leases fetched but never started when the
// shutdown budget runs out are released (their attempt not counted); the
// lease whose handler was cancelled is nacked (it counted).
func consumerReleasesQueued(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{MaxAttempts: 1})
	evs := e.appendN(e.s, 0, 5)
	b := newBlocker()
	r := e.start(rheo.ConsumerConfig{Concurrency: 1, MaxInflight: 5, ShutdownTimeout: 10 * time.Millisecond,
		Handler: b.handle})
	receive(t, "handler start", b.started)
	eventually(t, "five leases fetched", func() bool {
		n := 0
		for _, ev := range e.rec.of(rheo.ConsumerFetched, succeeded) {
			n += ev.Count
		}
		return n == 5
	})
	require.NoError(t, r.stop(t))
	require.ErrorIs(t, receive(t, "the handler's context to end", b.causes), rheo.ErrConsumerStopped)
	require.Len(t, e.b.settles(rheo.SettleNack), 1, "the started lease is nacked")
	require.Len(t, e.b.settles(rheo.SettleRelease), 4, "the queued leases are released")
	require.Equal(t, 4, e.rec.count(rheo.ConsumerReleased, succeeded))
	// MaxAttempts 1: the nacked one is dead; the released ones come back
	// at their first attempt, none dead-lettered.
	dls := e.deadLetters(e.s, e.g)
	require.Len(t, dls, 1)
	require.Equal(t, evs[0].ID, dls[0].Event.ID)
	ls := e.fetch(e.s, e.g, rheo.FetchOptions{Limit: 10})
	require.Equal(t, []pos{{0, 2}, {0, 3}, {0, 4}, {0, 5}}, positions(ls))
	for _, l := range ls {
		require.Equal(t, 1, l.Attempt)
	}
}

// consumerHandlerRelease: a handler returning rheo.Release hands its lease
// back; the next delivery has the same attempt.
func consumerHandlerRelease(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{MaxAttempts: 1})
	e.appendN(e.s, 0, 1)
	var calls atomic.Int32
	attempts := make(chan int, 4)
	e.start(rheo.ConsumerConfig{Handler: func(ctx context.Context, ev rheo.Event) error {
		l, _ := rheo.LeaseFromContext(ctx)
		attempts <- l.Attempt
		if calls.Add(1) == 1 {
			return rheo.Release(errors.New("not now"))
		}
		return nil
	}})
	require.Equal(t, 1, receive(t, "first delivery", attempts))
	require.Equal(t, 1, receive(t, "second delivery", attempts), "the released claim did not count")
	e.rec.await(t, "ack", rheo.ConsumerAcked, succeeded)
	rel := e.b.settles(rheo.SettleRelease)
	require.Len(t, rel, 1)
	require.Equal(t, "not now", rel[0].Reason)
	e.requireLag(e.s, e.g, 0, 1, 1)
	require.Empty(t, e.deadLetters(e.s, e.g))
}

// consumerReleasesLate: leases queued behind a slow handler are never
// renewed; once too little of one is left to start a handler on, it is
// released (its claim not counted) rather than left to expire, and comes
// back once the handler is free. The running handler's lease is renewed.
func consumerReleasesLate(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{MaxAttempts: 1})
	e.appendN(e.s, 0, 5)
	var mu sync.Mutex
	renewed := map[string]int{}
	e.b.setRenewFault(func(l rheo.Lease) error {
		mu.Lock()
		renewed[l.ID]++
		mu.Unlock()
		return nil
	})
	b := newBlocker()
	// A lease of 400ms: renewals every 200ms (wall clock); a queued lease
	// with less than 300ms left on the frozen clock is late.
	e.start(rheo.ConsumerConfig{Concurrency: 1, MaxInflight: 5, LeaseDuration: 400 * time.Millisecond,
		Handler: b.handle})
	first := receive(t, "handler start", b.started)
	eventually(t, "five leases fetched", func() bool {
		n := 0
		for _, ev := range e.rec.of(rheo.ConsumerFetched, succeeded) {
			n += ev.Count
		}
		return n == 5
	})
	e.clk.Advance(150 * time.Millisecond)
	eventually(t, "the running lease renewed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return renewed[first.ID] > 0
	})
	eventually(t, "the queued leases released", func() bool { return len(e.b.settles(rheo.SettleRelease)) == 4 })
	mu.Lock()
	for id := range renewed {
		require.Equal(t, first.ID, id, "only the running lease is renewed")
	}
	mu.Unlock()
	b.release <- nil
	for range 4 {
		l := receive(t, "a released event handled", b.started)
		require.Equal(t, 1, l.Attempt, "sequence %d: the release did not count", l.Event.Sequence)
		b.release <- nil
	}
	eventually(t, "every event acked", func() bool { return e.rec.count(rheo.ConsumerAcked, succeeded) == 5 })
	e.requireLag(e.s, e.g, 0, 5, 5)
	require.Empty(t, e.deadLetters(e.s, e.g))
}

// consumerLateKeepsInflight: leases released late while still in the
// queue stay counted against MaxInflight until a worker pops them, so the
// consumer never holds more leases than MaxInflight, and a stop while the
// handler is stuck returns.
func consumerLateKeepsInflight(t *testing.T, f Factory) {
	e := newConsumerEnv(t, f, rheo.GroupConfig{})
	e.appendN(e.s, 0, 10)
	b := newBlocker()
	r := e.start(rheo.ConsumerConfig{Concurrency: 1, MaxInflight: 3, LeaseDuration: 400 * time.Millisecond,
		ShutdownTimeout: 50 * time.Millisecond, Handler: b.handle})
	receive(t, "handler start", b.started)
	eventually(t, "three leases fetched", func() bool { return e.b.maxHeldAndAsked() >= 3 })
	e.clk.Advance(150 * time.Millisecond)
	eventually(t, "two late leases released", func() bool { return e.rec.count(rheo.ConsumerReleased, succeeded) == 2 })
	// The released jobs are still in the queue behind the stuck handler:
	// give a fetch that should not happen the time to happen.
	time.Sleep(200 * time.Millisecond)
	require.LessOrEqual(t, e.b.maxHeldAndAsked(), 3, "fetch limits %v", e.b.limits())
	require.NoError(t, r.stop(t))
	require.ErrorIs(t, receive(t, "the handler's context to end", b.causes), rheo.ErrConsumerStopped)
	require.Zero(t, e.info(e.s, e.g).Inflight)
}
