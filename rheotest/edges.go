package rheotest

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// runEdges holds cases where stores once disagreed: claim order under many
// due deliveries, poison beside claimable work, fencing on the event ID, and
// how a fetch shares its limit across uneven partitions. Every backend must
// give exactly the same answer.
func runEdges(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"sequence_bounds_at_the_largest_int64_read_and_query_nothing", func(t *testing.T, f Factory) {
			// After the last sequence there is nothing, however far after:
			// a bound one past it must not overflow into the stream.
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 3)
			e.appendN(s, 1, 2)
			for _, after := range []int64{math.MaxInt64, math.MaxInt64 - 1, 3} {
				evs, err := e.c.Read(e.ctx, s, rheo.ReadOptions{Partition: 0, After: after, Limit: 10_000})
				require.NoError(t, err, "after %d", after)
				require.Empty(t, evs, "after %d", after)
				for _, order := range []rheo.Order{rheo.Asc(rheo.OrderSequence), rheo.Desc(rheo.OrderSequence), rheo.Asc(rheo.OrderID)} {
					evs, err := e.c.Query(e.ctx, rheo.Query{Stream: s, AfterSequence: after, OrderBy: []rheo.Order{order}})
					require.NoError(t, err, "after %d, %v", after, order)
					require.Empty(t, evs, "after %d, %v", after, order)
				}
			}
			evs, err := e.c.Query(e.ctx, rheo.Query{Stream: s, AfterSequence: 1, UntilSequence: math.MaxInt64})
			require.NoError(t, err)
			require.Len(t, evs, 3, "sequences 2 and 3 of partition 0, 2 of partition 1")
		}},
		{"replay_and_reset_count_what_the_start_passed_over", func(t *testing.T, f Factory) {
			// The count is the retained events at or below the group's cursor:
			// those it was offered and those its start passed over.
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 4)
			g := e.group(s, rheo.GroupConfig{Start: rheo.Latest()})
			n, err := e.c.Replay(e.ctx, s, g, rheo.FromSequence(1))
			require.NoError(t, err)
			require.Equal(t, 3, n, "sequences 2 to 4, passed over by Latest")
			n, err = e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Start: rheo.Latest()})
			require.NoError(t, err)
			require.Zero(t, n)
			n, err = e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Start: rheo.Beginning()})
			require.NoError(t, err)
			require.Equal(t, 4, n)
			e.appendN(s, 0, 1)
			n, err = e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))
			require.NoError(t, err)
			require.Zero(t, n, "the cursor is at 0: all five are still to be delivered")
			require.Len(t, e.drain(s, g), 5)
		}},
		{"rotation_starts_at_the_first_partition_for_a_new_group_of_an_old_name", func(t *testing.T, f Factory) {
			// The first fetch of a group starts with the first requested
			// partition: also for a group created again under a deleted
			// one's name, and after fetches that failed because the group
			// did not exist yet.
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 1)
			e.appendN(s, 1, 1)
			first := func(g string) int {
				t.Helper()
				ls := e.fetch(s, g, rheo.FetchOptions{Limit: 1})
				require.Len(t, ls, 1)
				return ls[0].Event.Partition
			}
			g := e.group(s, rheo.GroupConfig{})
			require.Equal(t, 0, first(g))
			require.NoError(t, e.c.DeleteGroup(e.ctx, s, g, rheo.DeleteOptions{Confirm: true}))
			require.NoError(t, e.c.CreateGroup(e.ctx, s, g, rheo.GroupConfig{}))
			require.Equal(t, 0, first(g), "a group created again starts over")
			later := Name("g")
			for range 3 {
				_, err := e.c.Fetch(e.ctx, s, later, rheo.FetchOptions{Limit: 1})
				require.ErrorIs(t, err, rheo.ErrGroupNotFound)
			}
			require.NoError(t, e.c.CreateGroup(e.ctx, s, later, rheo.GroupConfig{}))
			require.Equal(t, 0, first(later), "failed fetches do not step the rotation")
		}},
		{"far_future_times_are_exact_to_the_microsecond", func(t *testing.T, f Factory) {
			// Past 2^53 µs since 1970 (mid-2255) a float64 no longer holds
			// every microsecond: lease expiries, nack due times and listed
			// leases must still be exact, at each parity of the clock.
			for off := range 4 {
				e := newEnv(t, f)
				at := time.Date(2260, time.January, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(off) * time.Microsecond)
				e.clk.Set(at)
				s := e.stream(1)
				e.appendN(s, 0, 1)
				g := e.group(s, rheo.GroupConfig{MaxAttempts: 5})
				ls := e.fetch(s, g, rheo.FetchOptions{LeaseDuration: 3 * time.Microsecond})
				require.Len(t, ls, 1)
				require.True(t, ls[0].ExpiresAt.Equal(at.Add(3*time.Microsecond)), "offset %d: expires %v", off, ls[0].ExpiresAt)
				listed := func(want time.Time) {
					t.Helper()
					got, err := e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{})
					if errors.Is(err, rheo.ErrUnsupported) {
						return
					}
					require.NoError(t, err)
					require.Len(t, got, 1)
					require.True(t, want.Equal(got[0].ExpiresAt), "offset %d: listed expiry %v, want %v", off, got[0].ExpiresAt, want)
				}
				listed(ls[0].ExpiresAt)
				e.clk.Advance(2 * time.Microsecond)
				e.requireNone(s, g) // 1 µs before the lease expires
				e.clk.Advance(time.Microsecond)
				ls = e.fetch(s, g, rheo.FetchOptions{LeaseDuration: time.Microsecond})
				require.Len(t, ls, 1, "offset %d: the lease expired at %v", off, e.clk.Now())
				require.Equal(t, 2, ls[0].Attempt)
				l, err := e.c.Renew(e.ctx, ls[0], 5*time.Microsecond)
				require.NoError(t, err)
				require.True(t, l.ExpiresAt.Equal(e.clk.Now().Add(5*time.Microsecond)))
				listed(l.ExpiresAt)
				e.clk.Advance(4 * time.Microsecond)
				e.requireNone(s, g) // 1 µs before the renewed lease expires
				e.clk.Advance(time.Microsecond)
				ls = e.fetch(s, g, rheo.FetchOptions{})
				require.Len(t, ls, 1, "offset %d: the renewed lease expired at %v", off, e.clk.Now())
				require.NoError(t, e.c.Nack(e.ctx, ls[0], "later", rheo.Delay(5*time.Microsecond)))
				e.clk.Advance(4 * time.Microsecond)
				e.requireNone(s, g) // 1 µs before the nack is due
				e.clk.Advance(time.Microsecond)
				ls = e.fetch(s, g, rheo.FetchOptions{})
				require.Len(t, ls, 1, "offset %d: the nack was due at %v", off, e.clk.Now())
				require.Equal(t, 4, ls[0].Attempt)
			}
		}},
		{"redriven_and_replayed_deliveries_are_due_at_once_before_1970", func(t *testing.T, f Factory) {
			// A redrive or a replay makes a delivery available at once,
			// whatever the clock reads: also before 1970, where a due time
			// of 0 µs would lie in the future.
			for _, at := range []time.Time{
				time.Date(1969, time.December, 1, 0, 0, 0, 0, time.UTC),
				// Before -2^53 µs, and within the years every store keeps
				// (MongoDB's nanoseconds reach back to 1677).
				time.Date(1680, time.January, 1, 0, 0, 0, 0, time.UTC),
			} {
				e := newEnv(t, f)
				e.clk.Set(at)
				s := e.stream(1)
				evs := e.appendN(s, 0, 2)
				g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
				ls := e.fetchN(s, g, 2)
				require.NoError(t, e.c.Reject(e.ctx, ls[0], "bad"))
				e.ack(ls[1])
				n, err := e.c.Redrive(e.ctx, s, g, evs[0].ID)
				require.NoError(t, err)
				require.Equal(t, 1, n)
				got := e.fetchN(s, g, 1)
				require.Equal(t, evs[0].ID, got[0].Event.ID, "redriven at %v", at)
				e.ack(got[0])
				n, err = e.c.Replay(e.ctx, s, g, rheo.Events(evs[1].ID))
				require.NoError(t, err)
				require.Equal(t, 1, n)
				got = e.fetchN(s, g, 1)
				require.Equal(t, evs[1].ID, got[0].Event.ID, "replayed at %v", at)
				e.ack(got[0])
				n, err = e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))
				require.NoError(t, err)
				require.Equal(t, 2, n)
				require.Len(t, e.fetch(s, g, rheo.FetchOptions{Limit: 10}), 2, "replayed from the start at %v", at)
			}
		}},
		{"many_due_deliveries_are_claimed_in_sequence_order", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			const n = 150 // more due deliveries than any backend's claim window
			e.appendN(s, 0, n)
			g := e.group(s, rheo.GroupConfig{})
			var ls []rheo.Lease
			for len(ls) < n {
				ls = append(ls, e.fetch(s, g, rheo.FetchOptions{Limit: 100})...)
			}
			for _, l := range ls {
				require.NoError(t, e.c.Nack(e.ctx, l, "again"))
			}
			for want := int64(1); want <= 5; want++ {
				got := e.fetchN(s, g, 1)
				require.Equal(t, want, got[0].Event.Sequence, "fetch %d of nacked deliveries", want)
			}
		}},
		{"claim_order_ignores_due_times", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			const n = 100
			e.appendN(s, 0, n)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, n)
			// Sequence 1 comes due last, sequence n first.
			for _, l := range ls {
				delay := time.Duration(l.Event.Sequence) * time.Second
				require.NoError(t, e.c.Nack(e.ctx, l, "later", rheo.Delay(delay)))
			}
			e.clk.Advance(time.Duration(n+1) * time.Second)
			require.Equal(t, []pos{{0, 1}, {0, 2}, {0, 3}}, positions(e.fetchN(s, g, 3)))
		}},
		{"poison_does_not_take_a_claims_place", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 2})
			first := e.fetchN(s, g, 1)[0]
			require.Equal(t, int64(1), first.Event.Sequence)
			e.clk.Advance(time.Minute)
			poison := e.fetchN(s, g, 1)[0]
			require.Equal(t, int64(1), poison.Event.Sequence)
			require.Equal(t, 2, poison.Attempt)
			second := e.fetchN(s, g, 1)[0]
			require.Equal(t, int64(2), second.Event.Sequence)
			require.NoError(t, e.c.Nack(e.ctx, second, "retry"))
			e.clk.Advance(time.Minute)

			got := e.fetch(s, g, rheo.FetchOptions{Limit: 1})
			require.Equal(t, []pos{{0, 2}}, positions(got), "the available delivery, not the poison nor a new event")
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 1)
			require.Equal(t, int64(1), dls[0].Sequence)
			require.Equal(t, "max_attempts: lease expired", dls[0].Reason)
			require.ErrorIs(t, e.c.Ack(e.ctx, poison), rheo.ErrStaleLease)
		}},
		{"a_fetch_buries_all_poison_of_its_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 6)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 8, Partitions: []int{0}})
			require.Len(t, ls, 6)
			require.NoError(t, e.c.Nack(e.ctx, ls[0], "x", rheo.Delay(time.Hour))) // dead at once: MaxAttempts 1
			e.clk.Advance(time.Minute)
			// Partition 0 now holds five expired leases at the limit. One
			// fetch of partition 0 with room for one claim buries them all,
			// wherever they sit, and claims nothing (no other work there).
			require.Empty(t, e.fetch(s, g, rheo.FetchOptions{Limit: 1, Partitions: []int{0}}))
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 6)
			for i, dl := range dls {
				require.Equal(t, int64(i+1), dl.Sequence)
			}
			for _, l := range ls[1:] {
				require.ErrorIs(t, e.c.Ack(e.ctx, l), rheo.ErrStaleLease, "late ack of %s", leaseName(l))
			}
			e.requireLag(s, g, 0, 6, 6)
			e.requireLag(s, g, 1, 0, 2)
		}},
		{"poison_above_a_claim_is_buried_too", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 4)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 2})
			first := e.fetchN(s, g, 1)[0]
			require.NoError(t, e.c.Nack(e.ctx, first, "later", rheo.Delay(2*time.Minute)))
			e.fetchN(s, g, 2) // 2 and 3, attempt 1
			e.clk.Advance(time.Minute)
			ls := e.fetchN(s, g, 2) // 2 and 3 again, attempt 2: at the limit
			require.Equal(t, []pos{{0, 2}, {0, 3}}, positions(ls))
			e.clk.Advance(2 * time.Minute)
			// Sequence 1 is due; 2 and 3 are poison above it.
			got := e.fetch(s, g, rheo.FetchOptions{Limit: 1})
			require.Equal(t, []pos{{0, 1}}, positions(got))
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 2)
			require.Equal(t, []int64{2, 3}, []int64{dls[0].Sequence, dls[1].Sequence})
			require.ErrorIs(t, e.c.Ack(e.ctx, ls[1]), rheo.ErrStaleLease)
		}},
		{"settle_and_renew_fence_on_the_event_id", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			forged := l
			forged.Event.ID = evs[1].ID
			require.ErrorIs(t, e.c.Ack(e.ctx, forged), rheo.ErrStaleLease)
			require.ErrorIs(t, e.c.Nack(e.ctx, forged, "x"), rheo.ErrStaleLease)
			require.ErrorIs(t, e.c.Reject(e.ctx, forged, "x"), rheo.ErrStaleLease)
			_, err := e.c.Renew(e.ctx, forged, time.Minute)
			require.ErrorIs(t, err, rheo.ErrStaleLease)
			require.ErrorIs(t, e.c.AckBatch(e.ctx, []rheo.Lease{forged}), rheo.ErrStaleLease)
			forged.Event.ID = "no-such-event"
			require.ErrorIs(t, e.c.Ack(e.ctx, forged), rheo.ErrStaleLease)
			require.Equal(t, int64(1), e.info(s, g).Inflight, "a forged settle changed nothing")
			e.ack(l)
			e.requireLag(s, g, 0, 1, 2)
		}},
		{"whole_fetch_acked_with_one_forged_event_id", func(t *testing.T, f Factory) {
			// A store may check a whole fetch's acks at once (against a
			// digest of its events' IDs, say); one forged ID among them
			// must still be told apart, and the others settle.
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 5)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 4)
			batch := slices.Clone(ls)
			batch[2].Event.ID = evs[4].ID // an event of the stream, not the lease's
			err := e.c.AckBatch(e.ctx, batch)
			var be *rheo.BatchError
			require.ErrorAs(t, err, &be)
			require.Len(t, be.Errs, 4)
			for i, err := range be.Errs {
				if i == 2 {
					require.ErrorIs(t, err, rheo.ErrStaleLease)
					continue
				}
				require.NoError(t, err, "lease %d of the batch", i)
			}
			require.Equal(t, int64(1), e.info(s, g).Inflight, "only the forged ack failed")
			e.ack(ls[2])
			e.requireLag(s, g, 0, 4, 5)
		}},
		{"settle_and_renew_fence_on_the_exact_lease_id", func(t *testing.T, f Factory) {
			// A lease ID spelled with other letter case is another ID
			// (IDs compare exactly), even where a store derives the IDs
			// of one fetch's leases from a common token.
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 3)
			k := slices.IndexFunc(ls, func(l rheo.Lease) bool { return caseFlipped(l.ID) != l.ID })
			require.GreaterOrEqual(t, k, 0, "no lease ID has a letter: %v", ls)
			forged := ls[k]
			forged.ID = caseFlipped(ls[k].ID)
			if rest, ok := strings.CutPrefix(ls[k].Receipt, ls[k].ID); ok {
				forged.Receipt = forged.ID + rest
			}
			batch := slices.Clone(ls)
			batch[k] = forged
			require.ErrorIs(t, e.c.AckBatch(e.ctx, batch), rheo.ErrStaleLease)
			_, err := e.c.Renew(e.ctx, forged, time.Minute)
			require.ErrorIs(t, err, rheo.ErrStaleLease)
			require.ErrorIs(t, e.c.Ack(e.ctx, forged), rheo.ErrStaleLease)
			require.Equal(t, int64(1), e.info(s, g).Inflight, "the forged lease settled nothing")
			e.ack(ls[k])
			e.requireLag(s, g, 0, 3, 3)
		}},
		{"limit_is_shared_quota_first_then_in_turn", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			e.appendN(s, 0, 10)
			e.appendN(s, 2, 10)
			g := e.group(s, rheo.GroupConfig{})
			// First fetch serves partition 0 first: quotas of 3 give 0:3,
			// 1:0, 2:3; the 3 left go to partition 0, which has them.
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 9})
			require.Equal(t, map[int]int{0: 6, 2: 3}, perPartition(ls))
			// The second starts at partition 1: quotas give 1:0, 2:3, 0:3,
			// then the 3 left go to partition 2 before partition 0.
			ls = e.fetch(s, g, rheo.FetchOptions{Limit: 9})
			require.Equal(t, map[int]int{0: 3, 2: 6}, perPartition(ls))
		}},
	})
}

// caseFlipped is id with the letter case of its last 12 characters
// flipped (where a span member's ID differs from its span's token), or of
// all of them when those 12 hold no letter.
func caseFlipped(id string) string {
	flip := func(from int) string {
		b := []byte(id)
		for i := max(0, from); i < len(b); i++ {
			switch c := b[i]; {
			case 'a' <= c && c <= 'z':
				b[i] = c - 'a' + 'A'
			case 'A' <= c && c <= 'Z':
				b[i] = c - 'A' + 'a'
			}
		}
		return string(b)
	}
	if f := flip(len(id) - 12); f != id {
		return f
	}
	return flip(0)
}

func perPartition(ls []rheo.Lease) map[int]int {
	out := map[int]int{}
	for _, l := range ls {
		out[l.Event.Partition]++
	}
	return out
}
