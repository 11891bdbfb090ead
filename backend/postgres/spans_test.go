package postgres_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

// TestSpanLeaseIDsAgree checks that the lease IDs of span members computed
// in SQL (by a fetch, and when a span's members become rows) are the ones
// Go computes (when a replay or trim turns spans into rows) and inverts
// (to find a settled lease's span), for any token and sequence.
func TestSpanLeaseIDsAgree(t *testing.T) {
	pool := testPool(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		tok := uuid.NewString()
		seq := r.Int64N(1 << 62)
		switch i % 4 {
		case 0:
			seq = int64(i + 1)
		case 1: // a result with leading zeros in its last 12 digits
			tok = tok[:24] + "000000000000"
			seq = int64(i)
		}
		var got string
		require.NoError(t, pool.QueryRow(ctx, postgres.MemberIDSQLForTest(), tok, seq).Scan(&got))
		want := sqlstore.SpanLeaseID(tok, seq)
		require.Equal(t, want, got, "token %s, sequence %d", tok, seq)
		_, err := uuid.Parse(got)
		require.NoError(t, err)
		require.Equal(t, tok, sqlstore.SpanToken(got, seq))
		if seq&(1<<48-1) != 0 {
			require.NotEqual(t, tok, got)
		}
	}
}

// TestSpanMembersSettledConcurrently settles the members of a few spans
// from many goroutines at once, each lease by two of them with different
// outcomes (ack, nack, reject, renew), so that settles of one span keep
// colliding: every lease is settled exactly once (the other attempt is
// stale, or for a renewal both succeed before it is settled), and the
// group ends as the winners left it.
func TestSpanMembersSettledConcurrently(t *testing.T) {
	ctx := context.Background()
	c := spanStream(t, 3, 300, 5)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 300})
	require.NoError(t, err)
	require.Len(t, ls, 300)

	settled := settleConcurrently(t, c, ls, "nack", 7)
	counts := map[string]int64{}
	for _, k := range settled {
		counts[k]++
	}
	// Leases only renewed (by both goroutines) are still leased.
	leased := int64(len(ls)) - int64(len(settled))
	st, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Equal(t, leased, st.Inflight, "outcomes %v", counts)
	require.Equal(t, counts["nack"], st.Available)
	require.Equal(t, counts["reject"], st.DeadLetters)
	held, err := c.Leases(ctx, "s", "g", rheo.LeaseListOptions{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, held, int(leased))
	for _, l := range held {
		_, ok := settled[leaseOf(ls, l).ID]
		require.False(t, ok, "a settled lease is listed as held: %v", l.Event.ID)
	}
}

// Settles of different members of one span, at once from eight
// goroutines, one lease each at a time, all succeed: a settle that finds
// the span changed by another under it (its first statement reaches the
// span by tuple ID) settles on the span's newest version, never answers
// stale for a lease nobody else settled.
func TestDisjointSpanMembersSettleConcurrently(t *testing.T) {
	ctx := context.Background()
	c := spanStream(t, 2, 400, 5)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 400})
	require.NoError(t, err)
	require.Len(t, ls, 400)
	var wg sync.WaitGroup
	errs := make([]error, len(ls))
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(ls); i += 8 {
				if i%3 == 0 {
					errs[i] = c.Nack(ctx, ls[i], "again")
				} else {
					errs[i] = c.Ack(ctx, ls[i])
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "lease %d (%s)", i, ls[i].ID)
	}
	st, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, st.Inflight)
	require.Equal(t, int64((len(ls)+2)/3), st.Available)
}

// settleConcurrently settles ls from eight goroutines, each lease by two of
// them, each picking at random (seeded) an ack, a retry (a nack, or a
// release when retry is "release"), a reject or a renewal, and returns
// the outcome that won for each lease settled (by lease ID). It fails the
// test on any error other than a stale lease, and on a lease settled twice.
func settleConcurrently(t *testing.T, c *rheo.Client, ls []rheo.Lease, retry string, seed uint64) map[string]string {
	t.Helper()
	ctx := context.Background()
	var (
		mu       sync.Mutex
		settled  = map[string]string{} // lease ID -> the outcome that won
		failures []error
	)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), seed))
			for i, l := range ls {
				if i%4 != w%4 { // each lease goes to two of the eight goroutines
					continue
				}
				kind := []string{"ack", retry, "reject", "renew"}[r.IntN(4)]
				var err error
				switch kind {
				case "ack":
					err = c.Ack(ctx, l)
				case "nack":
					err = c.Nack(ctx, l, "again")
				case "release":
					err = c.Release(ctx, l)
				case "reject":
					err = c.Reject(ctx, l, "bad")
				case "renew":
					_, err = c.Renew(ctx, l, time.Minute)
				}
				mu.Lock()
				switch {
				case err == nil && kind != "renew":
					if prev, ok := settled[l.ID]; ok {
						failures = append(failures, errors.New(l.ID+" settled twice: "+prev+" and "+kind))
					}
					settled[l.ID] = kind
				case err != nil && !errors.Is(err, rheo.ErrStaleLease):
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Empty(t, failures)
	return settled
}

func leaseOf(ls []rheo.Lease, l rheo.Lease) rheo.Lease {
	for _, x := range ls {
		if x.Event.ID == l.Event.ID {
			return x
		}
	}
	return rheo.Lease{}
}

// TestSpanReceiptKindsDoNotCross: a lease settles only under the receipt
// it was fetched with. A delivery row's lease given a span member's
// receipt, and a span member's lease given its bare ID (in its span, and
// after it moved to a row of its own), are refused with
// ErrReceiptMismatch, as a backend with native receipts refuses a wrong
// one; the genuine leases then settle.
func TestSpanReceiptKindsDoNotCross(t *testing.T) {
	ctx := context.Background()
	c := spanStream(t, 1, 3, 3)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 3})
	require.NoError(t, err)
	require.Len(t, ls, 3)
	for _, l := range ls {
		require.Equal(t, l.ID+"+span", l.Receipt, "a fresh event is leased as a span's member")
	}
	require.NoError(t, c.Nack(ctx, ls[0], "again"))
	re, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, re, 1)
	row := re[0]
	require.Equal(t, row.ID, row.Receipt, "a redelivery is a delivery row's lease")

	switched := row
	switched.Receipt = row.ID + "+span"
	require.ErrorIs(t, c.Ack(ctx, switched), rheo.ErrReceiptMismatch)
	_, err = c.Renew(ctx, switched, time.Minute)
	require.ErrorIs(t, err, rheo.ErrReceiptMismatch)

	member := ls[1]
	bare := member
	bare.Receipt = member.ID
	require.ErrorIs(t, c.Ack(ctx, bare), rheo.ErrReceiptMismatch, "in its span")
	_, err = c.Renew(ctx, member, time.Minute) // moves it to a row of its own
	require.NoError(t, err)
	require.ErrorIs(t, c.Ack(ctx, bare), rheo.ErrReceiptMismatch, "in a row of its own")
	require.ErrorIs(t, c.AckBatch(ctx, []rheo.Lease{bare}), rheo.ErrReceiptMismatch)

	require.NoError(t, c.AckBatch(ctx, []rheo.Lease{row, member, ls[2]}))
	st, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, st.Inflight)
	require.Zero(t, st.Available)
}

// TestSettleBatchWithForgedEventIDKeepsTheGenuineRequest: a batch naming a
// lease once with a forged event ID and once as fetched settles the genuine
// request (the forged one is stale), as on the memory backend.
func TestSettleBatchWithForgedEventIDKeepsTheGenuineRequest(t *testing.T) {
	ctx := context.Background()
	c := spanStream(t, 1, 2, 0)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	forged := ls[0]
	forged.Event.ID = "not-" + forged.Event.ID
	err = c.AckBatch(ctx, []rheo.Lease{forged, ls[0]})
	var be *rheo.BatchError
	require.ErrorAs(t, err, &be)
	require.ErrorIs(t, be.Errs[0], rheo.ErrStaleLease)
	require.NoError(t, be.Errs[1])
	st, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, st.Inflight)
}

// spanStream returns a client of a fresh backend with stream "s" of the
// given partitions holding events events, and group "g" on it.
func spanStream(t *testing.T, partitions, events, maxAttempts int) *rheo.Client {
	t.Helper()
	ctx := context.Background()
	c := rheo.New(newBackend(t))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: partitions}))
	fill(t, c, "s", events)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: maxAttempts}))
	return c
}
