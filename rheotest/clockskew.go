package rheotest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// ClockSkewOptions configures RunClockSkew.
type ClockSkewOptions struct {
	// Seeds and Steps: how many seeded sequences, of how many random
	// operations each.
	Seeds, Steps int
	// Op, when set, is one more random operation on the backend under
	// test (say, deleting what only a newer version of its layout writes);
	// it returns what it did, for failure messages.
	Op func(t *testing.T, b rheo.Backend) string
	// Check, when set, runs after every step with a description of it
	// (say, an invariant of the backend's own layout).
	Check func(t *testing.T, b rheo.Backend, at string)
	// Epoch is where the clock starts; zero: 2026-01-01.
	Epoch time.Time
	// Microseconds, when set, moves the clock by a whole number of
	// milliseconds and -1, 0 or 1 µs, so that it lands next to due times
	// and lease expiries as well as on them. With an Epoch past 2^53 µs
	// since 1970 (mid-2255), it holds a backend that keeps times as
	// float64s to the microsecond.
	Microseconds bool
}

// RunClockSkew runs seeded sequences of random operations on a fresh
// backend from f and on the memory backend side by side, under one clock
// that jumps back and forth by up to 3s, as the clocks of several processes
// sharing a store disagree, and requires the same result from both after
// every step (see skewAgainstMemory).
func RunClockSkew(t *testing.T, f Factory, opts ClockSkewOptions) {
	for seed := uint64(1); seed <= uint64(opts.Seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			skewAgainstMemory(t, seed, f(t), opts)
		})
	}
}

// skewAgainstMemory drives backend sutB and the memory backend with the same
// seeded random operations (appends, fetches of all or one partition,
// acks, nacks with and without a delay, renewals, replays, redrives, settle
// batches whose nacks are due before, at or after the settle's time) under
// one clock that jumps back and forth by up to 3s, as the clocks of several
// processes disagree. Every fetch must claim the same deliveries (event,
// partition, sequence, attempt, expiry), every settle and renewal must
// agree, and so must lag and dead letters after every step. A nack without
// a delay by a client whose clock is ahead is not due to one whose clock
// is behind (the SQL stores' schema version 3 as first written made it due
// at any clock; Redis's ready sets must agree however they are dropped and
// rebuilt).
func skewAgainstMemory(t *testing.T, seed uint64, sutB rheo.Backend, opts ClockSkewOptions) {
	const parts, maxAttempts = 2, 2
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !opts.Epoch.IsZero() {
		epoch = opts.Epoch
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	mb := memory.New()
	t.Cleanup(func() { _ = mb.Close() })
	now := epoch
	rclk, mclk := clock.NewFrozen(now), clock.NewFrozen(now)
	r, m := rheo.New(sutB, rheo.WithClock(rclk)), rheo.New(mb, rheo.WithClock(mclk))
	ctx := context.Background()
	nextID := 0
	var trail []string
	appendSome := func(n int) {
		msgs := make([]rheo.Message, n)
		for i := range msgs {
			p := rng.IntN(parts)
			msgs[i] = rheo.Message{ID: fmt.Sprintf("e%d", nextID), Type: "t", Partition: &p,
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, nextID))}
			nextID++
		}
		_, err := r.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
		_, err = m.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
	}
	for _, c := range []*rheo.Client{r, m} {
		require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
		require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: maxAttempts}))
	}
	appendSome(20)
	type pair struct{ r, m rheo.Lease }
	var held []pair
	pick := func() (pair, bool) {
		if len(held) == 0 {
			return pair{}, false
		}
		if rng.IntN(3) > 0 {
			return held[len(held)-1-rng.IntN(min(8, len(held)))], true
		}
		return held[rng.IntN(len(held))], true
	}
	hist := func() string { return fmt.Sprint(trail[max(0, len(trail)-15):]) }
	sameErr := func(what string, er, em error) {
		t.Helper()
		require.Equal(t, em == nil, er == nil, "%s: sut %v, memory %v\n%s", what, er, em, hist())
		if em != nil {
			require.Equal(t, rheo.Classify(em), rheo.Classify(er), "%s: sut %v, memory %v", what, er, em)
		}
	}
	setClock := func(t time.Time) { rclk.Set(t); mclk.Set(t) }
	for step := range opts.Steps {
		what := ""
		switch op := rng.IntN(19); op {
		case 0:
			what = "append"
			appendSome(1 + rng.IntN(4))
		case 1, 2, 3, 15:
			fo := rheo.FetchOptions{Limit: 1 + rng.IntN(6), LeaseDuration: time.Duration(1+rng.IntN(4)) * time.Second}
			if rng.IntN(3) == 0 {
				fo.Partitions = []int{rng.IntN(parts)}
			}
			what = fmt.Sprintf("fetch %+v at %v", fo, rclk.Now().Sub(now))
			lr, err := r.Fetch(ctx, "s", "g", fo)
			require.NoError(t, err)
			lm, err := m.Fetch(ctx, "s", "g", fo)
			require.NoError(t, err)
			var got []string
			for _, l := range lm {
				got = append(got, l.Event.ID)
			}
			what += fmt.Sprint(" -> ", got)
			require.Len(t, lr, len(lm), "step %d: %s\n%s", step, what, hist())
			for i := range lm {
				a, b := lr[i], lm[i]
				require.Equal(t, []any{b.Event.ID, b.Event.Partition, b.Event.Sequence, b.Attempt, b.ExpiresAt},
					[]any{a.Event.ID, a.Event.Partition, a.Event.Sequence, a.Attempt, a.ExpiresAt}, "step %d: %s, lease %d\n%s", step, what, i, hist())
				held = append(held, pair{a, b})
			}
		case 4, 12:
			if l, ok := pick(); ok {
				what = "ack " + l.m.Event.ID
				sameErr(what, r.Ack(ctx, l.r), m.Ack(ctx, l.m))
			}
		case 5, 13:
			if l, ok := pick(); ok {
				d := time.Duration(rng.IntN(4)) * time.Second
				what = fmt.Sprintf("nack %s delay %v at %v", l.m.Event.ID, d, rclk.Now().Sub(now))
				sameErr(what, r.Nack(ctx, l.r, "x", rheo.Delay(d)), m.Nack(ctx, l.m, "x", rheo.Delay(d)))
			}
		case 6:
			if l, ok := pick(); ok {
				d := time.Duration(1+rng.IntN(4)) * time.Second
				what = fmt.Sprintf("renew %s by %v", l.m.Event.ID, d)
				_, er := r.Renew(ctx, l.r, d)
				_, em := m.Renew(ctx, l.m, d)
				sameErr(what, er, em)
			}
		case 7, 8:
			at := now.Add(time.Duration(rng.IntN(6001)-3000) * time.Millisecond)
			if opts.Microseconds {
				at = at.Add(time.Duration(rng.IntN(3)-1) * time.Microsecond)
			}
			what = "clock " + at.Sub(now).String()
			setClock(at)
		case 9, 14:
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			if opts.Microseconds {
				now = now.Add(time.Duration(rng.IntN(3)-1) * time.Microsecond)
			}
			what = "advance"
			setClock(now)
		case 10:
			var rep rheo.Replay
			switch rng.IntN(3) {
			case 0:
				rep = rheo.FromSequence(int64(rng.IntN(8)))
			case 1:
				rep = rheo.Events(fmt.Sprintf("e%d", rng.IntN(nextID)), fmt.Sprintf("e%d", rng.IntN(nextID)))
			default:
				rep = rheo.Matching(rheo.Query{Type: "t"})
			}
			what = fmt.Sprintf("replay %+v", rep)
			kr, er := r.Replay(ctx, "s", "g", rep)
			km, em := m.Replay(ctx, "s", "g", rep)
			sameErr(what, er, em)
			require.Equal(t, km, kr, "step %d: %s", step, what)
		case 11:
			what = "redrive"
			kr, er := r.Redrive(ctx, "s", "g")
			km, em := m.Redrive(ctx, "s", "g")
			sameErr(what, er, em)
			require.Equal(t, km, kr, "step %d: %s", step, what)
		case 16, 17:
			var qr, qm []rheo.SettleRequest
			seen := map[string]bool{}
			for range 1 + rng.IntN(5) {
				l, ok := pick()
				if !ok {
					break
				}
				if seen[l.m.ID] {
					continue
				}
				seen[l.m.ID] = true
				kind := []rheo.SettleKind{rheo.SettleAck, rheo.SettleAck, rheo.SettleNack, rheo.SettleReject}[rng.IntN(4)]
				at := rclk.Now().Add(time.Duration(rng.IntN(5)-2) * time.Second)
				qr = append(qr, rheo.SettleRequest{Kind: kind, Lease: l.r, Reason: "b", AvailableAt: at})
				qm = append(qm, rheo.SettleRequest{Kind: kind, Lease: l.m, Reason: "b", AvailableAt: at})
			}
			what = fmt.Sprintf("settle batch of %d", len(qr))
			er, err := sutB.Settle(ctx, "s", "g", qr, rclk.Now())
			require.NoError(t, err)
			em, err := mb.Settle(ctx, "s", "g", qm, mclk.Now())
			require.NoError(t, err)
			for i := range em {
				sameErr(fmt.Sprintf("%s, request %d", what, i), er[i], em[i])
			}
		case 18:
			if opts.Op != nil {
				what = opts.Op(t, sutB)
			}
		}
		if what != "" {
			trail = append(trail, fmt.Sprintf("%d:%s", step, what))
		}
		if opts.Check != nil {
			opts.Check(t, sutB, fmt.Sprintf("step %d: %s", step, what))
		}
		lr, err := r.Lag(ctx, "s", "g")
		require.NoError(t, err)
		lm, err := m.Lag(ctx, "s", "g")
		require.NoError(t, err)
		require.Equal(t, lm.Partitions, lr.Partitions, "step %d: %s: lag", step, what)
		dr, err := r.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{Limit: 1000})
		require.NoError(t, err)
		dm, err := m.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{Limit: 1000})
		require.NoError(t, err)
		require.Len(t, dr, len(dm), "step %d: %s: dead letters\n%s", step, what, hist())
		for i := range dm {
			require.Equal(t, []any{dm[i].EventID, dm[i].Attempts, dm[i].Reason},
				[]any{dr[i].EventID, dr[i].Attempts, dr[i].Reason}, "step %d: %s: dead letter %d", step, what, i)
		}
	}
}
