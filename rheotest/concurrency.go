package rheotest

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// waitBound is how long a woken Fetch may take at most in these cases: far
// below the Wait they ask for, far above any scheduling delay.
const waitBound = 30 * time.Second

type fetchResult struct {
	leases []rheo.Lease
	err    error
}

// wokenFetch starts a Fetch of (s, g) with a long Wait, runs wake, and
// returns what the woken fetch claimed; it fails the test if the fetch
// failed or was not woken (what names the wake).
func (e *env) wokenFetch(s, g, what string, wake func()) []rheo.Lease {
	e.t.Helper()
	done := make(chan fetchResult, 1)
	go func() {
		ls, err := e.c.Fetch(e.ctx, s, g, rheo.FetchOptions{Limit: 5, Wait: 10 * time.Minute})
		done <- fetchResult{ls, err}
	}()
	runtime.Gosched()
	wake()
	select {
	case r := <-done:
		require.NoError(e.t, r.err)
		return r.leases
	case <-time.After(waitBound):
		e.t.Fatalf("Fetch with Wait was not woken by %s", what)
		return nil
	}
}

func runConcurrency(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"competing_fetchers_hold_at_most_one_current_lease_per_event", competingFetchers},
		{"concurrent_fetches_never_claim_one_event_twice", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 50)
			g := e.group(s, rheo.GroupConfig{})
			results := make(chan fetchResult, 10)
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					ls, err := e.c.Fetch(e.ctx, s, g, rheo.FetchOptions{Limit: 10})
					results <- fetchResult{ls, err}
				})
			}
			wg.Wait()
			close(results)
			seen := map[string]bool{}
			for r := range results {
				require.NoError(t, r.err)
				for _, l := range r.leases {
					require.False(t, seen[l.Event.ID], "event %s leased twice", l.Event.ID)
					seen[l.Event.ID] = true
				}
			}
			require.Len(t, seen, 50)
		}},
		{"fetch_wait_is_woken_by_an_append", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			var evs []rheo.Event
			ls := e.wokenFetch(s, g, "an append", func() { evs = e.appendN(s, 0, 1) })
			require.Len(t, ls, 1)
			require.Equal(t, evs[0].ID, ls[0].Event.ID)
		}},
		{"fetch_wait_is_woken_by_a_nack", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			held := e.fetchN(s, g, 1)[0]
			ls := e.wokenFetch(s, g, "a nack", func() { require.NoError(t, e.c.Nack(e.ctx, held, "retry elsewhere")) })
			require.Len(t, ls, 1)
			require.Equal(t, 2, ls[0].Attempt)
		}},
		{"fetch_wait_is_woken_by_a_replay", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			ls := e.wokenFetch(s, g, "a replay", func() { require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0)))) })
			require.Len(t, ls, 1)
		}},
		{"fetch_wait_is_woken_by_a_redrive", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			require.NoError(t, e.c.Reject(e.ctx, e.fetchN(s, g, 1)[0], "bad"))
			ls := e.wokenFetch(s, g, "a redrive", func() {
				n, err := e.c.Redrive(e.ctx, s, g)
				require.NoError(t, err)
				require.Equal(t, 1, n)
			})
			require.Len(t, ls, 1)
			require.Equal(t, 1, ls[0].Attempt)
		}},
		{"fetch_wait_on_an_empty_stream_returns_nothing_after_the_wait", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			start := time.Now()
			ls, err := e.c.Fetch(e.ctx, s, g, rheo.FetchOptions{Wait: 30 * time.Millisecond})
			require.NoError(t, err)
			require.Empty(t, ls)
			require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond, "returned before the wait ended")
		}},
		{"fetch_wait_ends_when_the_context_is_cancelled", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			ctx, cancel := context.WithCancel(e.ctx)
			done := make(chan fetchResult, 1)
			go func() {
				ls, err := e.c.Fetch(ctx, s, g, rheo.FetchOptions{Wait: 10 * time.Minute})
				done <- fetchResult{ls, err}
			}()
			cancel()
			select {
			case r := <-done:
				require.ErrorIs(t, r.err, context.Canceled)
				require.Empty(t, r.leases)
			case <-time.After(waitBound):
				t.Fatal("Fetch with Wait ignored its context")
			}
		}},
	})
}

// competingFetchers runs many workers fetching and settling one group at
// once while the clock jumps past lease expiries, so that reclaims race with
// settles. Whatever the interleaving: no two leases share (event, attempt),
// every event is acked exactly once, by the last lease issued for it, and
// every failed settle is a stale lease.
func competingFetchers(t *testing.T, f Factory) {
	const (
		workers = 8
		perPart = 100
		parts   = 3
		total   = perPart * parts
	)
	e := newEnv(t, f)
	s := e.stream(parts)
	for p := range parts {
		e.appendN(s, p, perPart)
	}
	g := e.group(s, rheo.GroupConfig{MaxAttempts: 1000})

	var (
		mu       sync.Mutex
		issued   = map[string]map[int]string{} // event -> attempt -> lease ID
		maxTry   = map[string]int{}
		ackedBy  = map[string][]rheo.Lease{}
		acked    atomic.Int64
		stale    atomic.Int64
		failMu   sync.Mutex
		failures []string
	)
	fail := func(msg string) {
		failMu.Lock()
		failures = append(failures, msg)
		failMu.Unlock()
	}
	record := func(l rheo.Lease) bool {
		mu.Lock()
		defer mu.Unlock()
		byTry := issued[l.Event.ID]
		if byTry == nil {
			byTry = map[int]string{}
			issued[l.Event.ID] = byTry
		}
		if other, dup := byTry[l.Attempt]; dup {
			fail("event " + l.Event.ID + " leased twice at one attempt: " + other + " and " + l.ID)
			return false
		}
		byTry[l.Attempt] = l.ID
		maxTry[l.Event.ID] = max(maxTry[l.Event.ID], l.Attempt)
		return true
	}
	settled := func(l rheo.Lease, err error) bool {
		switch {
		case err == nil:
			return true
		case errors.Is(err, rheo.ErrStaleLease):
			stale.Add(1)
			return false
		default:
			fail("settle of " + leaseName(l) + ": " + err.Error())
			return false
		}
	}
	onAck := func(l rheo.Lease) {
		mu.Lock()
		ackedBy[l.Event.ID] = append(ackedBy[l.Event.ID], l)
		mu.Unlock()
		acked.Add(1)
	}

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for round := 0; acked.Load() < total; round++ {
				if round > 50000 || ctx.Err() != nil {
					fail("worker gave up before every event was acked")
					return
				}
				ls, err := e.c.Fetch(ctx, s, g, rheo.FetchOptions{Limit: 1 + rng.IntN(6), LeaseDuration: time.Second})
				if err != nil {
					fail("fetch: " + err.Error())
					return
				}
				if len(ls) == 0 {
					if rng.IntN(8) == 0 {
						e.clk.Advance(time.Second) // free leases of slow workers
					}
					runtime.Gosched()
					continue
				}
				for _, l := range ls {
					if !record(l) {
						return
					}
				}
				if rng.IntN(15) == 0 {
					e.clk.Advance(time.Second) // every lease held now expires
				}
				if rng.IntN(4) == 0 {
					err := e.c.AckBatch(ctx, ls)
					var be *rheo.BatchError
					if err != nil && !errors.As(err, &be) {
						fail("ack batch: " + err.Error())
						return
					}
					for i, l := range ls {
						var lerr error
						if be != nil {
							lerr = be.Errs[i]
						}
						if settled(l, lerr) {
							onAck(l)
						}
					}
					continue
				}
				for _, l := range ls {
					switch r := rng.IntN(10); {
					case r == 0:
						settled(l, e.c.Nack(ctx, l, "again"))
					case r == 1:
						nl, err := e.c.Renew(ctx, l, time.Second)
						if settled(l, err) && settled(nl, e.c.Ack(ctx, nl)) {
							onAck(nl)
						}
					default:
						if settled(l, e.c.Ack(ctx, l)) {
							onAck(l)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	for _, msg := range failures {
		t.Error(msg)
	}
	if t.Failed() {
		return
	}
	require.Len(t, ackedBy, total)
	for id, ls := range ackedBy {
		require.Len(t, ls, 1, "event %s acked %d times", id, len(ls))
		require.Equal(t, maxTry[id], ls[0].Attempt, "event %s acked by attempt %d but attempt %d was issued", id, ls[0].Attempt, maxTry[id])
	}
	t.Logf("%d stale settles refused", stale.Load())
	for p := range parts {
		e.requireLag(s, g, p, perPart, perPart)
	}
	gi := e.info(s, g)
	require.Equal(t, int64(0), gi.Inflight)
	require.Equal(t, int64(0), gi.Available)
	require.Equal(t, int64(0), gi.DeadLetters)
	e.requireNone(s, g)
}
