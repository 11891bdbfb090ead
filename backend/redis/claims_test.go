package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/clock"
)

var epoch = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

func appendN(t testing.TB, c *rheo.Client, stream string, parts, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		batch := make([]rheo.Message, 0, 500)
		for j := i; j < min(i+500, n); j++ {
			p := j % parts
			batch = append(batch, rheo.Message{Type: "t", Partition: &p, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, j))})
		}
		_, err := c.AppendBatch(ctx, stream, batch)
		require.NoError(t, err)
	}
}

// leased sets up a stream of n events over parts partitions with one group
// (maxAttempts) on be, under a clock frozen at epoch, and fetches all n as
// consumer with the given lease duration.
func leased(t *testing.T, be rheo.Backend, stream, group string, parts, n, maxAttempts int, lease time.Duration, consumer string) (*rheo.Client, *clock.Frozen, []rheo.Lease) {
	t.Helper()
	clk := clock.NewFrozen(epoch)
	c := rheo.New(be, rheo.WithClock(clk))
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, stream, rheo.StreamConfig{Partitions: parts}))
	appendN(t, c, stream, parts, n)
	require.NoError(t, c.CreateGroup(ctx, stream, group, rheo.GroupConfig{MaxAttempts: maxAttempts}))
	ls, err := c.Fetch(ctx, stream, group, rheo.FetchOptions{Limit: n, LeaseDuration: lease, ConsumerID: consumer})
	require.NoError(t, err)
	require.Len(t, ls, n)
	return c, clk, ls
}

// TestReceiptTampering: the receipt is the Redis entry ID; any other value
// is ErrReceiptMismatch for settles and renewals, checked after the fencing
// token, and the genuine lease still settles afterwards.
func TestReceiptTampering(t *testing.T) {
	b, _ := newBackend(t)
	c, clk, ls := leased(t, b, "orders", "billing", 2, 4, 3, time.Second, "")
	ctx := context.Background()
	for _, l := range ls {
		require.NotEqual(t, l.ID, l.Receipt, "the receipt is the entry ID, not the fencing token")
		require.Equal(t, fmt.Sprintf("%d-0", l.Event.Sequence), l.Receipt)
	}
	l := ls[0]
	// Receipts repeat across partitions (each partition is its own Redis
	// stream), so tamper with receipts of other sequences.
	require.Equal(t, ls[2].Receipt, l.Receipt)
	for _, receipt := range []string{ls[1].Receipt, "1-1", "0-0", l.Receipt + "0", "x"} {
		bad := l
		bad.Receipt = receipt
		require.ErrorIs(t, c.Ack(ctx, bad), rheo.ErrReceiptMismatch, "receipt %q", receipt)
		require.ErrorIs(t, c.Nack(ctx, bad, "r"), rheo.ErrReceiptMismatch, "receipt %q", receipt)
		require.ErrorIs(t, c.Reject(ctx, bad, "r"), rheo.ErrReceiptMismatch, "receipt %q", receipt)
		_, err := c.Renew(ctx, bad, time.Second)
		require.ErrorIs(t, err, rheo.ErrReceiptMismatch, "receipt %q", receipt)
	}
	// The fencing token is checked first: a forged token with a tampered
	// receipt is stale, not a mismatch.
	forged := ls[1]
	forged.ID = ls[0].ID
	require.ErrorIs(t, c.Ack(ctx, forged), rheo.ErrStaleLease)
	require.NoError(t, c.Ack(ctx, l))
	require.ErrorIs(t, c.Ack(ctx, l), rheo.ErrStaleLease, "a second ack is stale")

	// After expiry and a reclaim the receipt stays the same entry ID while
	// the fencing token changes; the old token is stale.
	clk.Advance(2 * time.Second)
	again, err := c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, again, 3)
	for i, nl := range again {
		old := ls[i+1]
		require.Equal(t, old.Receipt, nl.Receipt)
		require.NotEqual(t, old.ID, nl.ID)
		require.Equal(t, 2, nl.Attempt)
		require.ErrorIs(t, c.Ack(ctx, old), rheo.ErrStaleLease)
		bad := nl
		bad.Receipt = "1-1"
		require.ErrorIs(t, c.Ack(ctx, bad), rheo.ErrReceiptMismatch)
	}
	require.NoError(t, c.AckBatch(ctx, again))
	lag, err := c.Lag(ctx, "orders", "billing")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}

// TestConcurrentClaims: many goroutines over several Redis clients fetch
// one group at once; with a frozen clock no lease expires, so every event
// must be handed out exactly once, and every ack must succeed.
func TestConcurrentClaims(t *testing.T) {
	const clients, perClient, events, parts = 4, 6, 6000, 3
	clk := clock.NewFrozen(epoch)
	first, _ := newBackend(t)
	ctx := context.Background()
	setup := rheo.New(first, rheo.WithClock(clk))
	require.NoError(t, setup.CreateStream(ctx, "jobs", rheo.StreamConfig{Partitions: parts}))
	appendN(t, setup, "jobs", parts, events)
	require.NoError(t, setup.CreateGroup(ctx, "jobs", "workers", rheo.GroupConfig{}))

	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for ci := range clients {
		// Each client is its own connection pool, as separate processes are.
		b := mustNew(t, testClient(t), redis.WithKeyPrefix(first.KeyPrefix()))
		c := rheo.New(b, rheo.WithClock(clk))
		for w := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ls, err := c.Fetch(ctx, "jobs", "workers", rheo.FetchOptions{Limit: 1 + (ci+w)%25, ConsumerID: fmt.Sprintf("c%d-w%d", ci, w)})
					if err != nil {
						errs <- err
						return
					}
					if len(ls) == 0 {
						return
					}
					mu.Lock()
					for _, l := range ls {
						seen[l.Event.ID]++
					}
					mu.Unlock()
					if err := c.AckBatch(ctx, ls); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, events)
	for id, n := range seen {
		require.Equal(t, 1, n, "event %s claimed %d times", id, n)
	}
	lag, err := setup.Lag(ctx, "jobs", "workers")
	require.NoError(t, err)
	for _, pl := range lag.Partitions {
		require.Equal(t, pl.HighWatermark, pl.Frontier, "partition %d", pl.Partition)
		require.Equal(t, int64(events/parts), pl.HighWatermark)
	}
	info, err := setup.GroupInfo(ctx, "jobs", "workers")
	require.NoError(t, err)
	require.Zero(t, info.Inflight)
	require.Zero(t, info.Available)
}

// TestCompactionKeepsGroupStateBounded: acked deliveries leave no
// bookkeeping behind; only in-flight leases, holes and dead letters keep
// keys of the group (R9).
func TestCompactionKeepsGroupStateBounded(t *testing.T) {
	b, rc := newBackend(t)
	clk := clock.NewFrozen(epoch)
	c := rheo.New(b, rheo.WithClock(clk))
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "log", rheo.StreamConfig{Partitions: 2}))
	appendN(t, c, "log", 2, 1000)
	require.NoError(t, c.CreateGroup(ctx, "log", "g", rheo.GroupConfig{}))
	var hole rheo.Lease
	for {
		ls, err := c.Fetch(ctx, "log", "g", rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		if len(ls) == 0 {
			break
		}
		if hole.ID == "" {
			hole, ls = ls[0], ls[1:]
		}
		require.NoError(t, c.AckBatch(ctx, ls))
	}
	gb := b.KeyPrefix() + "{log}:g:g:"
	// Partition of the hole keeps its terminal sequences above the hole.
	p := hole.Event.Partition
	require.EqualValues(t, 1, rc.HLen(ctx, fmt.Sprintf("%sl:%d", gb, p)).Val())
	require.EqualValues(t, 499, rc.ZCard(ctx, fmt.Sprintf("%st:%d", gb, p)).Val())
	require.EqualValues(t, 0, rc.Exists(ctx, fmt.Sprintf("%sl:%d", gb, 1-p), fmt.Sprintf("%st:%d", gb, 1-p)).Val())
	require.NoError(t, c.Ack(ctx, hole))
	for q := range 2 {
		require.EqualValues(t, 0, rc.Exists(ctx, fmt.Sprintf("%sl:%d", gb, q), fmt.Sprintf("%st:%d", gb, q), fmt.Sprintf("%sd:%d", gb, q)).Val())
	}
	pel, err := rc.XPending(ctx, b.KeyPrefix()+"{log}:s:0", "g").Result()
	require.NoError(t, err)
	require.Zero(t, pel.Count, "the pending-entries list stays empty")
	lag, err := c.Lag(ctx, "log", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}

// TestWakeups: a subscriber is signalled by an append, a nack and a replay
// made through another backend instance (another connection).
func TestWakeups(t *testing.T) {
	b, _ := newBackend(t)
	other := mustNew(t, testClient(t), redis.WithKeyPrefix(b.KeyPrefix()))
	c := rheo.New(other)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "w", rheo.StreamConfig{}))
	require.NoError(t, c.CreateGroup(ctx, "w", "g", rheo.GroupConfig{}))
	ch, cancel := b.Subscribe("w")
	defer cancel()
	wait := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake-up after %s", what)
		}
	}
	select {
	case <-ch:
		t.Fatal("signalled before any change")
	default:
	}
	_, err := c.Append(ctx, "w", rheo.Message{})
	require.NoError(t, err)
	wait("append")
	ls, err := c.Fetch(ctx, "w", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	require.NoError(t, c.Nack(ctx, ls[0], "again"))
	wait("nack")
	_, err = c.Replay(ctx, "w", "g", rheo.FromSequence(0))
	require.NoError(t, err)
	wait("replay")

	// Fetch with Wait returns as soon as an event lands.
	cw := rheo.New(b)
	ls, err = cw.Fetch(ctx, "w", "g", rheo.FetchOptions{Limit: 5})
	require.NoError(t, err)
	require.NoError(t, cw.AckBatch(ctx, ls))
	got := make(chan []rheo.Lease, 1)
	go func() {
		ls, err := cw.Fetch(ctx, "w", "g", rheo.FetchOptions{Limit: 1, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	_, err = c.Append(ctx, "w", rheo.Message{})
	require.NoError(t, err)
	select {
	case ls := <-got:
		require.Len(t, ls, 1)
	case <-time.After(30 * time.Second):
		t.Fatal("Fetch with Wait was not woken by an append")
	}
}

// TestErrorsAreClassified: an unreachable server is ErrBackendUnavailable.
func TestErrorsAreClassified(t *testing.T) {
	ctx := context.Background()
	be, err := redis.Open(ctx, "redis://127.0.0.1:1/0?dial_timeout=200ms&max_retries=-1")
	require.NoError(t, err)
	defer be.Close()
	require.ErrorIs(t, be.Ping(ctx), rheo.ErrBackendUnavailable)
	_, err = be.Append(ctx, "s", []rheo.Event{{ID: "a", Stream: "s", Payload: json.RawMessage(`{}`)}})
	require.ErrorIs(t, err, rheo.ErrBackendUnavailable, "nothing was sent")
	require.False(t, errors.Is(err, rheo.ErrAmbiguous))
	_, err = be.Fetch(ctx, rheo.FetchRequest{Stream: "s", Group: "g", Partitions: []int{0}, Limit: 1, Now: epoch, LeaseDuration: time.Second, NewLeaseID: func() string { return "x" }})
	require.ErrorIs(t, err, rheo.ErrBackendUnavailable)

	_, err = redis.Open(ctx, "redis://127.0.0.1:6379/0?key_prefix=%7Bbad")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
}

// TestOpenDSN: rheo.Open with a redis:// DSN owns its client.
func TestOpenDSN(t *testing.T) {
	testClient(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	c, err := rheo.Open(ctx, testURL()+"?key_prefix="+prefix)
	require.NoError(t, err)
	defer dropKeys(t, testClient(t), prefix)
	require.NoError(t, c.Migrate(ctx))
	require.NoError(t, c.CreateStream(ctx, "dsn", rheo.StreamConfig{Partitions: 3}))
	ss, err := c.ListStreams(ctx)
	require.NoError(t, err)
	require.Len(t, ss, 1)
	require.Equal(t, 3, ss[0].Partitions)
	require.Equal(t, prefix, c.Backend().(*redis.Backend).KeyPrefix())
	require.NoError(t, c.Close())
}

// TestLeasesWrittenByEarlierVersions: a lease is one hash field holding the
// lease ID, attempt, claim time and consumer; earlier versions wrote
// "<lease ID>:<attempt>" and a claim record in c:<p>. Leases of either form
// list with their consumer, settle, expire and come back, and settling one
// removes its claim record.
func TestLeasesWrittenByEarlierVersions(t *testing.T) {
	b, rc := newBackend(t)
	c, clk, ls := leased(t, b, "log", "g", 1, 3, 5, time.Minute, "new-worker")
	ctx := context.Background()
	gb := b.KeyPrefix() + "{log}:g:g:"
	require.Zero(t, rc.Exists(ctx, gb+"c:0").Val(), "a claim writes no claim record")

	// Rewrite the first two leases the way an earlier version stored them.
	for _, l := range ls[:2] {
		seq := fmt.Sprint(l.Event.Sequence)
		require.NoError(t, rc.HSet(ctx, gb+"l:0", seq, l.ID+":1").Err())
		require.NoError(t, rc.HSet(ctx, gb+"c:0", seq, fmt.Sprintf("%s:%d:old-worker", l.ID, epoch.UnixMicro())).Err())
	}
	listed, err := c.Leases(ctx, "log", "g", rheo.LeaseListOptions{})
	require.NoError(t, err)
	require.Len(t, listed, 3)
	for i, l := range listed {
		require.Equal(t, ls[i].Event.ID, l.Event.ID)
		require.Equal(t, 1, l.Attempt)
		require.True(t, l.LeasedAt.Equal(epoch), "leased at %v", l.LeasedAt)
		require.True(t, l.ExpiresAt.Equal(epoch.Add(time.Minute)), "expires at %v", l.ExpiresAt)
		want := "new-worker"
		if i < 2 {
			want = "old-worker"
		}
		require.Equal(t, want, l.ConsumerID)
	}

	// The old-form lease settles and takes its claim record along.
	require.NoError(t, c.Ack(ctx, ls[0]))
	require.False(t, rc.HExists(ctx, gb+"c:0", fmt.Sprint(ls[0].Event.Sequence)).Val())

	// The other old-form lease expires and comes back as attempt 2, now in
	// the new form; the old one is fenced.
	clk.Advance(2 * time.Minute)
	again, err := c.Fetch(ctx, "log", "g", rheo.FetchOptions{Limit: 3, ConsumerID: "next-worker"})
	require.NoError(t, err)
	require.Len(t, again, 2)
	require.Equal(t, ls[1].Event.ID, again[0].Event.ID)
	require.Equal(t, 2, again[0].Attempt)
	require.ErrorIs(t, c.Ack(ctx, ls[1]), rheo.ErrStaleLease)
	listed, err = c.Leases(ctx, "log", "g", rheo.LeaseListOptions{EventIDs: []string{ls[1].Event.ID}})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, "next-worker", listed[0].ConsumerID)
	require.Equal(t, 2, listed[0].Attempt)
	require.NoError(t, c.AckBatch(ctx, again))
	require.Zero(t, rc.Exists(ctx, gb+"l:0", gb+"c:0").Val(), "nothing is left once every lease is settled")
	lag, err := c.Lag(ctx, "log", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}

// TestDueSetsStaySkiplists: a fetch adds a never-due pin to the due sets
// it writes, which keeps them in Redis's skiplist encoding (a listpack's
// inserts and removals scan it: a run of them is quadratic), and the pin
// goes with the last lease, so a group with nothing in flight keeps no due
// set.
func TestDueSetsStaySkiplists(t *testing.T) {
	b, rc := newBackend(t)
	c, clk, ls := leased(t, b, "log", "g", 2, 6, 1, time.Minute, "w")
	ctx := context.Background()
	gb := b.KeyPrefix() + "{log}:g:g:"
	for p := range 2 {
		require.Equal(t, "skiplist", rc.ObjectEncoding(ctx, fmt.Sprintf("%sd:%d", gb, p)).Val())
	}
	require.NoError(t, c.AckBatch(ctx, ls[1:]))
	require.Equal(t, "skiplist", rc.ObjectEncoding(ctx, fmt.Sprintf("%sd:%d", gb, ls[0].Event.Partition)).Val())
	require.Zero(t, rc.Exists(ctx, fmt.Sprintf("%sd:%d", gb, 1-ls[0].Event.Partition)).Val())
	// The last lease expires at its attempt limit: the fetch dead-letters
	// it, and its due set goes.
	clk.Advance(2 * time.Minute)
	again, err := c.Fetch(ctx, "log", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, again)
	require.Zero(t, rc.Exists(ctx, gb+"d:0", gb+"d:1", gb+"l:0", gb+"l:1").Val())
	dl, err := c.DeadLetters(ctx, "log", "g", rheo.DeadLetterOptions{})
	require.NoError(t, err)
	require.Len(t, dl, 1)
}

// TestMixedSettleBatch: one settle batch of acks, nacks, rejects, stale
// leases and wrong receipts, the way the consumer runtime sends them, gives
// each request its own outcome, reason and delay on Redis exactly as on the
// memory backend (the script reads nack and reject arguments from a list
// of their own, in request order).
func TestMixedSettleBatch(t *testing.T) {
	rb, _ := newBackend(t)
	type outcome struct {
		Codes []string
		Dead  []string
		Later []string
	}
	run := func(t *testing.T, be rheo.Backend) outcome {
		c, clk, ls := leased(t, be, "mix", "g", 2, 8, 3, time.Minute, "")
		ctx := context.Background()
		bad := func(l rheo.Lease) rheo.Lease { l.Receipt = "999-0"; return l }
		stale := func(l rheo.Lease) rheo.Lease { l.ID = "not-the-lease"; return l }
		reqs := []rheo.SettleRequest{
			{Kind: rheo.SettleNack, Lease: ls[0], Reason: "n0", AvailableAt: epoch.Add(10 * time.Second)},
			{Kind: rheo.SettleReject, Lease: ls[1], Reason: "r1"},
			{Kind: rheo.SettleAck, Lease: bad(ls[2])},
			{Kind: rheo.SettleReject, Lease: bad(ls[3]), Reason: "never"},
			{Kind: rheo.SettleNack, Lease: stale(ls[4]), Reason: "never", AvailableAt: epoch},
			{Kind: rheo.SettleReject, Lease: ls[5], Reason: "r5"},
			{Kind: rheo.SettleNack, Lease: ls[6], Reason: "n6", AvailableAt: epoch.Add(30 * time.Second)},
			{Kind: rheo.SettleAck, Lease: ls[2]},
			{Kind: rheo.SettleReject, Lease: ls[7], Reason: "r7"},
			{Kind: rheo.SettleAck, Lease: ls[7]},
		}
		errs, err := be.Settle(ctx, "mix", "g", reqs, epoch)
		require.NoError(t, err)
		var o outcome
		for _, e := range errs {
			switch {
			case e == nil:
				o.Codes = append(o.Codes, "ok")
			case errors.Is(e, rheo.ErrReceiptMismatch):
				o.Codes = append(o.Codes, "receipt")
			case errors.Is(e, rheo.ErrStaleLease):
				o.Codes = append(o.Codes, "stale")
			default:
				o.Codes = append(o.Codes, e.Error())
			}
		}
		dl, err := c.DeadLetters(ctx, "mix", "g", rheo.DeadLetterOptions{})
		require.NoError(t, err)
		for _, d := range dl {
			o.Dead = append(o.Dead, fmt.Sprintf("%d/%d:%d:%s", d.Partition, d.Sequence, d.Attempts, d.Reason))
		}
		// The nacks come back at their own times: ls[0] after 10 s, ls[6]
		// after 30 s (the leases of ls[3] and ls[4] expire after a minute).
		for _, d := range []time.Duration{11 * time.Second, 31 * time.Second} {
			clk.Set(epoch.Add(d))
			again, err := c.Fetch(ctx, "mix", "g", rheo.FetchOptions{Limit: 8})
			require.NoError(t, err)
			for _, l := range again {
				o.Later = append(o.Later, fmt.Sprintf("%v:%d/%d", d, l.Event.Partition, l.Event.Sequence))
			}
		}
		return o
	}
	want := run(t, memory.New())
	require.Equal(t, []string{"ok", "ok", "receipt", "receipt", "stale", "ok", "ok", "ok", "ok", "stale"}, want.Codes)
	require.Len(t, want.Dead, 3)
	require.Len(t, want.Later, 2)
	require.Equal(t, want, run(t, rb))
}
