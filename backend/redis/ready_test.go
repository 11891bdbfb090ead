package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
)

// countingBackend fetches through an instrumented copy of the fetch script
// and keeps how many elements the last fetch sent to or read from Redis.
type countingBackend struct {
	*redis.Backend
	touched int64
}

func (c *countingBackend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	ls, n, err := c.FetchCounted(ctx, r)
	c.touched = n
	return ls, err
}

// backlogFetchCost builds a group with a backlog of n deliveries of one kind
// on one partition (reopened: acked, then replayed; expired: leases that
// expired; due: nacked with a delay that has passed), claims the first 10
// of them, then returns what the next fetch of 10 touched. Both fetches
// must claim the lowest sequences, in order.
func backlogFetchCost(t *testing.T, kind string, n int) int64 {
	t.Helper()
	rb, _ := newBackend(t)
	be := &countingBackend{Backend: rb}
	clk := clock.NewFrozen(epoch)
	c := rheo.New(be, rheo.WithClock(clk))
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	appendN(t, c, "s", 1, n)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 5}))
	for done := 0; done < n; {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1000, LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.NotEmpty(t, ls)
		switch kind {
		case "reopened":
			require.NoError(t, c.AckBatch(ctx, ls))
		case "due":
			for _, l := range ls {
				require.NoError(t, c.Nack(ctx, l, "later", rheo.Delay(time.Hour)))
			}
		}
		done += len(ls)
	}
	attempt := 2
	switch kind {
	case "reopened":
		k, err := c.Replay(ctx, "s", "g", rheo.Matching(rheo.Query{Type: "t"}))
		require.NoError(t, err)
		require.Equal(t, n, k)
		attempt = 1
	case "expired":
		clk.Advance(2 * time.Minute)
	case "due":
		clk.Advance(2 * time.Hour)
	}
	appendN(t, c, "s", 1, 10) // new events wait behind the backlog
	var touched int64
	for round := range 2 {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10, LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, ls, 10)
		for i, l := range ls {
			require.Equal(t, int64(round*10+i+1), l.Event.Sequence, "%s: lowest sequences first", kind)
			require.Equal(t, attempt, l.Attempt)
		}
		touched = be.touched
		require.NoError(t, c.AckBatch(ctx, ls))
	}
	return touched
}

// TestFetchCostIndependentOfBacklog: a fetch claims the first deliveries
// of a partition's backlog of claimable ones without reading the rest.
// Earlier versions read and sorted every due delivery of the partition on
// every fetch (a ZRANGEBYSCORE of the whole due set and an HMGET of every
// member), so draining a backlog of n cost time quadratic in n. The signal
// is deterministic: how many elements the fetch script sends to and reads
// from Redis, counted by an instrumented copy of the script; it must not
// grow with the backlog (20 times larger here). Deliveries that become due
// together are moved into the ready set by the first fetch after (once
// each), so the second fetch is measured.
func TestFetchCostIndependentOfBacklog(t *testing.T) {
	for _, kind := range []string{"reopened", "expired", "due"} {
		t.Run(kind, func(t *testing.T) {
			small := backlogFetchCost(t, kind, 200)
			big := backlogFetchCost(t, kind, 4000)
			t.Logf("%s: a fetch of 10 touched %d elements with 200 in the backlog, %d with 4,000", kind, small, big)
			require.Less(t, big, int64(1000), "a fetch of 10 reads a bounded part of the backlog")
			require.LessOrEqual(t, big, small+small/4, "a fetch's cost does not grow with the backlog")
		})
	}
}

// dropReadySets deletes what earlier versions never wrote (the ready sets
// and the watermarks): the store is then as an earlier version left it.
func dropReadySets(t *testing.T, rc goredis.UniversalClient, gb string, parts int) {
	t.Helper()
	keys := []string{gb + "m"}
	for p := range parts {
		keys = append(keys, fmt.Sprintf("%sa:%d", gb, p))
	}
	require.NoError(t, rc.Del(context.Background(), keys...).Err())
}

// checkReadySets checks the layout of docs/redis.md: where partition p has a
// watermark m, its ready set a:<p> holds exactly the members of d:<p> due by
// m, none of them a lease at the attempt limit (poison is buried when it
// becomes due, never made ready); without one it has no ready set.
func checkReadySets(t *testing.T, rc goredis.UniversalClient, gb string, parts, maxAttempts int, at string) {
	t.Helper()
	ctx := context.Background()
	for p := range parts {
		ps := strconv.Itoa(p)
		ready, err := rc.ZRange(ctx, gb+"a:"+ps, 0, -1).Result()
		require.NoError(t, err)
		m, err := rc.HGet(ctx, gb+"m", ps).Result()
		if err == goredis.Nil {
			require.Empty(t, ready, "%s: partition %d has a ready set but no watermark", at, p)
			continue
		}
		require.NoError(t, err)
		due, err := rc.ZRangeByScore(ctx, gb+"d:"+ps, &goredis.ZRangeBy{Min: "-inf", Max: m}).Result()
		require.NoError(t, err)
		require.Equal(t, seqs(t, due), seqs(t, ready), "%s: partition %d: ready set against the due set by the watermark %s", at, p, m)
		if len(ready) == 0 {
			continue
		}
		vals, err := rc.HMGet(ctx, gb+"l:"+ps, ready...).Result()
		require.NoError(t, err)
		for i, v := range vals {
			s, _ := v.(string)
			lid, rest, _ := strings.Cut(s, ":")
			att, _, _ := strings.Cut(rest, ":")
			n, err := strconv.Atoi(att)
			require.NoError(t, err, "%s: partition %d, sequence %s: lease %q", at, p, ready[i], s)
			require.False(t, lid != "" && n >= maxAttempts, "%s: partition %d: poison %s (%q) is ready", at, p, ready[i], s)
		}
	}
}

// seqs returns the sequences ss, sorted.
func seqs(t *testing.T, ss []string) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		out[i] = n
	}
	slices.Sort(out)
	return out
}

// TestReadySetsAgreeWithMemory drives Redis and the memory backend with the
// same random operations under a clock that jumps back and forth (as the
// clocks of several processes disagree), and now and then deletes the ready
// sets and watermarks (a store written by an earlier version). Every fetch
// must claim the same deliveries (partition, sequence, attempt, expiry),
// every settle and renewal must agree, and so must dead letters and lag.
func TestReadySetsAgreeWithMemory(t *testing.T) {
	const parts, maxAttempts = 2, 2
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			rb, rc := newBackend(t)
			mb := memory.New()
			t.Cleanup(func() { _ = mb.Close() })
			now := epoch
			rclk, mclk := clock.NewFrozen(now), clock.NewFrozen(now)
			r, m := rheo.New(rb, rheo.WithClock(rclk)), rheo.New(mb, rheo.WithClock(mclk))
			ctx := context.Background()
			gb := rb.KeyPrefix() + "{s}:g:g:"
			nextID := 0
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
				if rng.IntN(3) > 0 { // mostly recent ones, still current
					return held[len(held)-1-rng.IntN(min(8, len(held)))], true
				}
				return held[rng.IntN(len(held))], true
			}
			sameErr := func(what string, er, em error) {
				t.Helper()
				require.Equal(t, em == nil, er == nil, "%s: redis %v, memory %v", what, er, em)
				if em != nil {
					require.Equal(t, rheo.Classify(em), rheo.Classify(er), "%s: redis %v, memory %v", what, er, em)
				}
			}
			setClock := func(t time.Time) { rclk.Set(t); mclk.Set(t) }
			for step := range 300 {
				what := ""
				switch op := rng.IntN(18); op {
				case 0:
					what = "append"
					appendSome(1 + rng.IntN(4))
				case 1, 2, 3, 15:
					opts := rheo.FetchOptions{Limit: 1 + rng.IntN(6), LeaseDuration: time.Duration(1+rng.IntN(4)) * time.Second}
					if rng.IntN(3) == 0 {
						opts.Partitions = []int{rng.IntN(parts)}
					}
					what = fmt.Sprintf("fetch %+v", opts)
					lr, err := r.Fetch(ctx, "s", "g", opts)
					require.NoError(t, err)
					lm, err := m.Fetch(ctx, "s", "g", opts)
					require.NoError(t, err)
					require.Len(t, lr, len(lm), "step %d: %s", step, what)
					for i := range lm {
						a, b := lr[i], lm[i]
						require.Equal(t, []any{b.Event.ID, b.Event.Partition, b.Event.Sequence, b.Attempt, b.ExpiresAt},
							[]any{a.Event.ID, a.Event.Partition, a.Event.Sequence, a.Attempt, a.ExpiresAt}, "step %d: %s, lease %d", step, what, i)
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
						what = fmt.Sprintf("nack %s delay %v", l.m.Event.ID, d)
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
					// Another process's clock, up to 3s behind or ahead.
					at := now.Add(time.Duration(rng.IntN(6001)-3000) * time.Millisecond)
					what = "clock " + at.Sub(now).String()
					setClock(at)
				case 9, 14:
					now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
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
					what = "drop ready sets"
					dropReadySets(t, rc, gb, parts)
				case 16, 17:
					// One settle batch over both partitions.
					var qr, qm []rheo.SettleRequest
					for range 1 + rng.IntN(5) {
						l, ok := pick()
						if !ok {
							break
						}
						kind := []rheo.SettleKind{rheo.SettleAck, rheo.SettleAck, rheo.SettleNack, rheo.SettleReject}[rng.IntN(4)]
						at := rclk.Now().Add(time.Duration(rng.IntN(3)) * time.Second)
						qr = append(qr, rheo.SettleRequest{Kind: kind, Lease: l.r, Reason: "b", AvailableAt: at})
						qm = append(qm, rheo.SettleRequest{Kind: kind, Lease: l.m, Reason: "b", AvailableAt: at})
					}
					what = fmt.Sprintf("settle batch of %d", len(qr))
					er, err := rb.Settle(ctx, "s", "g", qr, rclk.Now())
					require.NoError(t, err)
					em, err := mb.Settle(ctx, "s", "g", qm, mclk.Now())
					require.NoError(t, err)
					for i := range em {
						sameErr(fmt.Sprintf("%s, request %d", what, i), er[i], em[i])
					}
				}
				checkReadySets(t, rc, gb, parts, maxAttempts, fmt.Sprintf("step %d: %s", step, what))
				lr, err := r.Lag(ctx, "s", "g")
				require.NoError(t, err)
				lm, err := m.Lag(ctx, "s", "g")
				require.NoError(t, err)
				require.Equal(t, lm.Partitions, lr.Partitions, "step %d: %s: lag", step, what)
				dr, err := r.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{Limit: 1000})
				require.NoError(t, err)
				dm, err := m.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{Limit: 1000})
				require.NoError(t, err)
				require.Len(t, dr, len(dm), "step %d: %s: dead letters", step, what)
				for i := range dm {
					require.Equal(t, []any{dm[i].EventID, dm[i].Attempts, dm[i].Reason},
						[]any{dr[i].EventID, dr[i].Attempts, dr[i].Reason}, "step %d: %s: dead letter %d", step, what, i)
				}
			}
		})
	}
}

// TestRenewBehindWatermark: a lease renewed from a clock behind the last
// fetch's, to an expiry that fetch had already passed, is due at once; at
// its attempt limit it is poison, so the next fetch buries it rather than
// claiming it again (as on the memory backend), even though no fetch moves
// the due times it has already passed.
func TestRenewBehindWatermark(t *testing.T) {
	rb, rc := newBackend(t)
	for _, be := range []rheo.Backend{rb, memory.New()} {
		clk := clock.NewFrozen(epoch)
		c := rheo.New(be, rheo.WithClock(clk))
		ctx := context.Background()
		require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
		appendN(t, c, "s", 1, 2)
		require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 1}))
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: 30 * time.Second})
		require.NoError(t, err)
		require.Len(t, ls, 1)
		clk.Set(epoch.Add(10 * time.Second))
		_, err = c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: 30 * time.Second})
		require.NoError(t, err)
		clk.Set(epoch.Add(-5 * time.Second)) // another process's clock
		_, err = c.Renew(ctx, ls[0], time.Second)
		require.NoError(t, err)
		if be == rb {
			checkReadySets(t, rc, rb.KeyPrefix()+"{s}:g:g:", 1, 1, "after the renewal")
		}
		clk.Set(epoch.Add(10 * time.Second))
		again, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
		require.NoError(t, err)
		require.Empty(t, again, "%T", be)
		dl, err := c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		require.Len(t, dl, 1, "%T", be)
		require.Equal(t, ls[0].Event.ID, dl[0].EventID)
		require.Equal(t, "max_attempts: lease expired", dl[0].Reason)
	}
}
