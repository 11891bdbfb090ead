package rheotest

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func runFetch(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"lease_carries_fencing_token_attempt_and_expiry", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10, ConsumerID: "c1", LeaseDuration: 7 * time.Second})
			require.Len(t, ls, 1)
			l := ls[0]
			_, err := uuid.Parse(l.ID)
			require.NoError(t, err, "lease ID is a UUID string")
			require.NotEmpty(t, l.Receipt)
			require.Equal(t, s, l.Stream)
			require.Equal(t, g, l.Group)
			require.Equal(t, "c1", l.ConsumerID)
			require.Equal(t, 1, l.Attempt)
			require.True(t, l.LeasedAt.Equal(Epoch), "LeasedAt %v", l.LeasedAt)
			require.True(t, l.ExpiresAt.Equal(Epoch.Add(7*time.Second)), "ExpiresAt %v", l.ExpiresAt)
			requireSameEvent(t, evs[0], l.Event)
		}},
		{"default_lease_duration_and_fetch_limit_come_from_options", func(t *testing.T, f Factory) {
			e := newEnv(t, f, rheo.WithLeaseDuration(42*time.Second), rheo.WithFetchLimit(3))
			s := e.stream(1)
			e.appendN(s, 0, 5)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{})
			require.Len(t, ls, 3)
			require.True(t, ls[0].ExpiresAt.Equal(Epoch.Add(42*time.Second)))
		}},
		{"limit_is_filled_in_sequence_order", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 5)
			g := e.group(s, rheo.GroupConfig{})
			a := e.fetchN(s, g, 2)
			require.Equal(t, []pos{{0, 1}, {0, 2}}, positions(a))
			b := e.fetchN(s, g, 2)
			require.Equal(t, []pos{{0, 3}, {0, 4}}, positions(b))
			c := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []pos{{0, 5}}, positions(c))
			e.ack(append(append(a, b...), c...)...)
			e.requireNone(s, g)
		}},
		{"leases_sorted_by_partition_then_sequence", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			_, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{msg(2, 1), msg(1, 1), msg(0, 1), msg(2, 2), msg(0, 2), msg(1, 2)})
			require.NoError(t, err)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 100})
			require.Equal(t, []pos{{0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 1}, {2, 2}}, positions(ls))
		}},
		{"a_big_backlog_does_not_starve_another_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 50)
			e.appendN(s, 1, 3)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			requireSorted(t, ls)
			var p0, p1 []int64
			for _, l := range ls {
				if l.Event.Partition == 0 {
					p0 = append(p0, l.Event.Sequence)
				} else {
					p1 = append(p1, l.Event.Sequence)
				}
			}
			require.Equal(t, []int64{1, 2, 3}, p1, "partition 1 gets its whole (small) share: %s", leaseList(ls))
			require.GreaterOrEqual(t, len(p0), 5, "partition 0 gets at least its fair share")
			for i, sq := range p0 {
				require.Equal(t, int64(i+1), sq, "partition 0 claims in sequence order")
			}
		}},
		{"limit_is_filled_from_other_partitions_when_one_runs_short", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			e.appendN(s, 0, 2)
			e.appendN(s, 2, 30)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Len(t, ls, 10, "claimable work is left behind while under the limit: %s", leaseList(ls))
			require.Equal(t, []pos{{0, 1}, {0, 2}}, positions(ls[:2]))
		}},
		{"fairness_holds_for_many_partitions_and_small_limits", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(4)
			e.appendN(s, 0, 40)
			e.appendN(s, 3, 2)
			g := e.group(s, rheo.GroupConfig{})
			seen := map[int]int{}
			for range 2 {
				for _, l := range e.fetch(s, g, rheo.FetchOptions{Limit: 2}) {
					seen[l.Event.Partition]++
				}
			}
			require.Equal(t, 2, seen[3], "two fetches of 2 must reach partition 3 despite partition 0's backlog: %v", seen)
		}},
		{"redeliveries_in_many_partitions_are_claimed_in_one_fetch", func(t *testing.T, f Factory) {
			// 40 partitions, each with a nacked delivery (available at
			// once) and an expired lease (due at a time): one fetch
			// claims all of them, sorted, however a store splits the
			// reads of many partitions.
			e := newEnv(t, f)
			s := e.stream(40)
			var ms []rheo.Message
			for p := range 40 {
				ms = append(ms, msg(p, 1), msg(p, 2), msg(p, 3))
			}
			_, err := e.c.AppendBatch(e.ctx, s, ms)
			require.NoError(t, err)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 120, LeaseDuration: time.Minute})
			require.Len(t, ls, 120)
			var want []pos
			var reqs []rheo.SettleRequest
			for _, l := range ls {
				switch l.Event.Sequence {
				case 1:
					e.ack(l)
				case 2:
					reqs = append(reqs, rheo.SettleRequest{Kind: rheo.SettleNack, Lease: l, Reason: "again"})
					want = append(want, pos{l.Event.Partition, 2})
				case 3: // left to expire
					want = append(want, pos{l.Event.Partition, 3})
				}
			}
			e.settle(s, g, reqs)
			e.clk.Advance(2 * time.Minute)
			ls = e.fetch(s, g, rheo.FetchOptions{Limit: 200})
			require.Equal(t, want, positions(ls))
			for _, l := range ls {
				require.Equal(t, 2, l.Attempt)
			}
			e.ack(ls...)
			e.requireNone(s, g)
			e.requireLag(s, g, 39, 3, 3)

			// Fresh events in every partition, settled in one batch:
			// whole acks of 39 fetched runs and a nack of the 40th.
			ms = ms[:0]
			for p := range 40 {
				ms = append(ms, msg(p, 4))
			}
			_, err = e.c.AppendBatch(e.ctx, s, ms)
			require.NoError(t, err)
			ls = e.fetch(s, g, rheo.FetchOptions{Limit: 100})
			require.Len(t, ls, 40)
			reqs = reqs[:0]
			for _, l := range ls {
				kind := rheo.SettleAck
				if l.Event.Partition == 7 {
					kind = rheo.SettleNack
				}
				reqs = append(reqs, rheo.SettleRequest{Kind: kind, Lease: l, Reason: "again"})
			}
			e.settle(s, g, reqs)
			ls = e.fetch(s, g, rheo.FetchOptions{Limit: 100})
			require.Equal(t, []pos{{7, 4}}, positions(ls))
			e.ack(ls...)
			e.requireNone(s, g)
			e.requireLag(s, g, 39, 4, 4)
			e.requireLag(s, g, 7, 4, 4)
		}},
		{"fetch_partitions_restricts_the_claim", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			for p := range 3 {
				e.appendN(s, p, 2)
			}
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 100, Partitions: []int{1}})
			require.Equal(t, []pos{{1, 1}, {1, 2}}, positions(ls))
			ls = e.fetch(s, g, rheo.FetchOptions{Limit: 100, Partitions: []int{2, 0}})
			require.Equal(t, []pos{{0, 1}, {0, 2}, {2, 1}, {2, 2}}, positions(ls))
		}},
		{"empty_stream_fetches_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			g := e.group(s, rheo.GroupConfig{})
			e.requireNone(s, g)
		}},
		{"held_lease_is_not_claimable_until_it_expires", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			first := e.fetch(s, g, rheo.FetchOptions{Limit: 1, ConsumerID: "c1", LeaseDuration: time.Second})
			require.Len(t, first, 1)
			e.requireNone(s, g)
			e.clk.Set(first[0].ExpiresAt.Add(-time.Microsecond))
			e.requireNone(s, g)
			e.clk.Set(first[0].ExpiresAt) // expired when now >= ExpiresAt
			again := e.fetch(s, g, rheo.FetchOptions{Limit: 1, ConsumerID: "c2", LeaseDuration: 10 * time.Second})
			require.Len(t, again, 1)
			require.Equal(t, first[0].Event.ID, again[0].Event.ID)
			require.Equal(t, 2, again[0].Attempt)
			require.NotEqual(t, first[0].ID, again[0].ID, "a reclaim gets a fresh lease ID")
			require.Equal(t, "c2", again[0].ConsumerID)
			require.True(t, again[0].ExpiresAt.Equal(first[0].ExpiresAt.Add(10*time.Second)))
		}},
		{"reclaim_comes_before_later_events_of_the_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			e.fetchN(s, g, 1)
			e.appendN(s, 0, 2)
			e.clk.Advance(time.Hour)
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 2})
			require.Equal(t, []pos{{0, 1}, {0, 2}}, positions(ls))
			require.Equal(t, []int{2, 1}, []int{ls[0].Attempt, ls[1].Attempt})
		}},
		{"two_groups_each_see_every_event", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 3)
			risk := e.group(s, rheo.GroupConfig{})
			audit := e.group(s, rheo.GroupConfig{})
			a := e.fetchN(s, risk, 3)
			e.ack(a...)
			e.requireNone(s, risk)
			b := e.fetch(s, audit, rheo.FetchOptions{Limit: 10})
			require.Len(t, b, 3)
			for i, l := range b {
				require.Equal(t, 1, l.Attempt)
				requireSameEvent(t, evs[i], l.Event)
			}
			e.requireNone(s, audit)
			e.ack(b...)
			e.requireLag(s, audit, 0, 3, 3)
		}},
		{"consumption_never_changes_events", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			ls := e.fetchN(s, g, 3)
			e.ack(ls[0])
			require.NoError(t, e.c.Nack(e.ctx, ls[1], "x"))
			require.NoError(t, e.c.Reject(e.ctx, ls[2], "y"))
			requireSameEvents(t, evs, e.readAll(s, 0))
			got, err := e.c.Query(e.ctx, rheo.Query{Stream: s, Type: "test"})
			require.NoError(t, err)
			requireSameEvents(t, evs, got)
		}},
	})
}

func runSettle(t *testing.T, f Factory) {
	// stolen sets up a lease that expired and was reclaimed by another
	// consumer: old is stale, fresh is current.
	stolen := func(t *testing.T, f Factory) (e *env, s, g string, old, fresh rheo.Lease) {
		e = newEnv(t, f)
		s = e.stream(1)
		e.appendN(s, 0, 1)
		g = e.group(s, rheo.GroupConfig{})
		a := e.fetch(s, g, rheo.FetchOptions{Limit: 1, ConsumerID: "old", LeaseDuration: 50 * time.Millisecond})
		require.Len(t, a, 1)
		e.clk.Advance(100 * time.Millisecond)
		b := e.fetch(s, g, rheo.FetchOptions{Limit: 1, ConsumerID: "new", LeaseDuration: time.Minute})
		require.Len(t, b, 1)
		require.Equal(t, a[0].Event.ID, b[0].Event.ID)
		return e, s, g, a[0], b[0]
	}
	runCases(t, f, []testCase{
		{"ack_settles_and_nothing_is_left", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			e.ack(e.fetchN(s, g, 1)...)
			e.requireNone(s, g)
			e.clk.Advance(24 * time.Hour)
			e.requireNone(s, g)
			e.requireLag(s, g, 0, 1, 1)
		}},
		{"second_ack_of_one_lease_is_stale", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			e.ack(l)
			require.ErrorIs(t, e.c.Ack(e.ctx, l), rheo.ErrStaleLease)
			require.Equal(t, rheo.Lost, rheo.Classify(e.c.Ack(e.ctx, l)))
		}},
		{"stale_ack_after_reclaim", func(t *testing.T, f Factory) {
			e, s, g, old, fresh := stolen(t, f)
			before := e.snapshot()
			err := e.c.Ack(e.ctx, old)
			require.ErrorIs(t, err, rheo.ErrStaleLease)
			// The same words on every store.
			require.Contains(t, err.Error(), fmt.Sprintf("lease %s of event %q (partition %d, sequence %d) in group %q of stream %q",
				old.ID, old.Event.ID, old.Event.Partition, old.Event.Sequence, g, s))
			require.Equal(t, before, e.snapshot(), "a stale ack writes nothing")
			e.ack(fresh)
			e.requireLag(s, g, 0, 1, 1)
		}},
		{"stale_nack_after_reclaim", func(t *testing.T, f Factory) {
			e, s, g, old, fresh := stolen(t, f)
			require.ErrorIs(t, e.c.Nack(e.ctx, old, "retry"), rheo.ErrStaleLease)
			e.requireNone(s, g) // the stale nack did not release the event
			e.ack(fresh)
		}},
		{"stale_reject_after_reclaim", func(t *testing.T, f Factory) {
			e, s, g, old, fresh := stolen(t, f)
			require.ErrorIs(t, e.c.Reject(e.ctx, old, "bad"), rheo.ErrStaleLease)
			require.Empty(t, e.deadLetters(s, g))
			e.ack(fresh)
		}},
		{"stale_renew_after_reclaim", func(t *testing.T, f Factory) {
			e, _, _, old, fresh := stolen(t, f)
			_, err := e.c.Renew(e.ctx, old, time.Hour)
			require.ErrorIs(t, err, rheo.ErrStaleLease)
			e.ack(fresh)
		}},
		{"stale_batch_ack_reports_per_lease", func(t *testing.T, f Factory) {
			e, s, g, old, fresh := stolen(t, f)
			e.appendN(s, 0, 1)
			other := e.fetchN(s, g, 1)[0]
			err := e.c.AckBatch(e.ctx, []rheo.Lease{other, old, fresh})
			var be *rheo.BatchError
			require.ErrorAs(t, err, &be)
			require.Len(t, be.Errs, 3)
			require.NoError(t, be.Errs[0])
			require.ErrorIs(t, be.Errs[1], rheo.ErrStaleLease)
			require.NoError(t, be.Errs[2])
			require.ErrorIs(t, err, rheo.ErrStaleLease)
			e.requireLag(s, g, 0, 2, 2)
		}},
		{"ack_batch_across_groups_and_streams_reports_in_order", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s1, s2 := e.stream(1), e.stream(1)
			e.appendN(s1, 0, 2)
			e.appendN(s2, 0, 1)
			g1, g2, g3 := e.group(s1, rheo.GroupConfig{}), e.group(s1, rheo.GroupConfig{}), e.group(s2, rheo.GroupConfig{})
			a, b, c := e.fetchN(s1, g1, 2), e.fetchN(s1, g2, 1), e.fetchN(s2, g3, 1)
			bad := a[1]
			bad.ID = "not a lease ID"
			err := e.c.AckBatch(e.ctx, []rheo.Lease{a[0], b[0], bad, c[0]})
			var be *rheo.BatchError
			require.ErrorAs(t, err, &be)
			require.Len(t, be.Errs, 4)
			require.NoError(t, be.Errs[0])
			require.NoError(t, be.Errs[1])
			require.ErrorIs(t, be.Errs[2], rheo.ErrInvalidArgument)
			require.NoError(t, be.Errs[3])
			e.requireLag(s1, g1, 0, 1, 2)
			e.requireLag(s1, g2, 0, 1, 2)
			e.requireLag(s2, g3, 0, 1, 1)
			require.NoError(t, e.c.AckBatch(e.ctx, a[1:]))
			e.requireLag(s1, g1, 0, 2, 2)
		}},
		{"ack_batch_with_one_lease_twice_acks_it_once", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 2)
			err := e.c.AckBatch(e.ctx, []rheo.Lease{ls[0], ls[1], ls[0]})
			var be *rheo.BatchError
			require.ErrorAs(t, err, &be)
			require.NoError(t, be.Errs[0])
			require.NoError(t, be.Errs[1])
			require.ErrorIs(t, be.Errs[2], rheo.ErrStaleLease)
			e.requireLag(s, g, 0, 2, 2)
		}},
		{"settle_batch_naming_one_lease_twice_settles_the_first_request", func(t *testing.T, f Factory) {
			// Whatever the two kinds, the first request settles the
			// lease and the second is stale: never both, never the
			// second's effect.
			A, N, R, L := rheo.SettleAck, rheo.SettleNack, rheo.SettleReject, rheo.SettleRelease
			for _, ks := range [][2]rheo.SettleKind{{A, N}, {N, A}, {A, R}, {R, A}, {N, R}, {R, N}, {N, N}, {R, R},
				{L, A}, {A, L}, {L, N}, {N, L}, {L, R}, {R, L}, {L, L}} {
				e := newEnv(t, f)
				s := e.stream(1)
				e.appendN(s, 0, 1)
				g := e.group(s, rheo.GroupConfig{})
				l := e.fetchN(s, g, 1)[0]
				reqs := []rheo.SettleRequest{
					{Kind: ks[0], Lease: l, Reason: "first", AvailableAt: e.clk.Now()},
					{Kind: ks[1], Lease: l, Reason: "second", AvailableAt: e.clk.Now()},
				}
				errs, err := e.c.Backend().Settle(e.ctx, s, g, reqs, e.clk.Now())
				require.NoError(t, err)
				require.Len(t, errs, 2)
				require.NoError(t, errs[0], "kinds %v: the first request", ks)
				require.ErrorIs(t, errs[1], rheo.ErrStaleLease, "kinds %v: the second request", ks)
				gi := e.info(s, g)
				switch ks[0] {
				case A:
					require.Equal(t, int64(0), gi.Lag.Total, "kinds %v: acked", ks)
				case N, L:
					require.Equal(t, int64(1), gi.Available, "kinds %v: available again", ks)
					l := e.fetchN(s, g, 1)[0]
					require.Equal(t, map[rheo.SettleKind]int{N: 2, L: 1}[ks[0]], l.Attempt, "kinds %v: counted unless released", ks)
				case R:
					dls := e.deadLetters(s, g)
					require.Len(t, dls, 1, "kinds %v: dead-lettered", ks)
					require.Equal(t, "first", dls[0].Reason, "kinds %v", ks)
				}
			}
		}},
		{"settle_of_an_unknown_kind_is_refused_and_writes_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 2)
			settle := func(reqs ...rheo.SettleRequest) []error {
				errs, err := e.c.Backend().Settle(e.ctx, s, g, reqs, e.clk.Now())
				require.NoError(t, err)
				require.Len(t, errs, len(reqs))
				return errs
			}
			forged := ls[0]
			forged.ID = uuid.NewString()
			for _, k := range []rheo.SettleKind{0, -1, rheo.SettleRelease + 1} {
				for _, l := range []rheo.Lease{ls[0], forged} {
					errs := settle(rheo.SettleRequest{Kind: k, Lease: l, Reason: "x", AvailableAt: e.clk.Now()})
					require.ErrorIs(t, errs[0], rheo.ErrInvalidArgument, "kind %d, lease %s", k, l.ID)
				}
			}
			require.Equal(t, int64(2), e.info(s, g).Inflight, "nothing written")
			// A missing stream or group is reported for the whole call first.
			unknown := []rheo.SettleRequest{{Kind: 99, Lease: ls[0]}}
			_, err := e.c.Backend().Settle(e.ctx, s, "no-such-group", unknown, e.clk.Now())
			require.ErrorIs(t, err, rheo.ErrGroupNotFound)
			_, err = e.c.Backend().Settle(e.ctx, "no-such-stream", g, unknown, e.clk.Now())
			require.ErrorIs(t, err, rheo.ErrStreamNotFound)
			// Beside requests of known kinds, even for the same lease:
			// only the unknown one is refused.
			errs := settle(rheo.SettleRequest{Kind: 99, Lease: ls[0]}, rheo.SettleRequest{Kind: rheo.SettleAck, Lease: ls[0]},
				rheo.SettleRequest{Kind: rheo.SettleAck, Lease: ls[1]})
			require.ErrorIs(t, errs[0], rheo.ErrInvalidArgument)
			require.NoError(t, errs[1])
			require.NoError(t, errs[2])
			e.requireLag(s, g, 0, 2, 2)
		}},
		{"ack_batch_spans_groups_and_streams", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s1, s2 := e.stream(1), e.stream(2)
			e.appendN(s1, 0, 2)
			e.appendN(s2, 1, 2)
			g1, g2 := e.group(s1, rheo.GroupConfig{}), e.group(s1, rheo.GroupConfig{})
			g3 := e.group(s2, rheo.GroupConfig{})
			var all []rheo.Lease
			all = append(all, e.fetchN(s1, g1, 2)...)
			all = append(all, e.fetchN(s2, g3, 2)...)
			all = append(all, e.fetchN(s1, g2, 2)...)
			require.NoError(t, e.c.AckBatch(e.ctx, all))
			e.requireLag(s1, g1, 0, 2, 2)
			e.requireLag(s1, g2, 0, 2, 2)
			e.requireLag(s2, g3, 1, 2, 2)
		}},
		{"ack_batch_of_current_leases_returns_nil", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 3)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			require.NoError(t, e.c.AckBatch(e.ctx, e.fetchN(s, g, 5)))
			require.Equal(t, int64(0), e.lag(s, g).Total)
			e.requireNone(s, g)
		}},
		{"expired_but_unreclaimed_lease_can_still_ack", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			e.clk.Advance(time.Hour)
			e.ack(l)
			e.requireNone(s, g)
			e.requireLag(s, g, 0, 1, 1)
		}},
		{"expired_but_unreclaimed_lease_can_still_renew", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			now := e.clk.Advance(time.Minute)
			r, err := e.c.Renew(e.ctx, l, time.Minute)
			require.NoError(t, err)
			require.True(t, r.ExpiresAt.Equal(now.Add(time.Minute)))
			e.requireNone(s, g)
			e.ack(r)
		}},
		{"renew_moves_expiry_and_keeps_the_lease", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: 200 * time.Millisecond})[0]
			e.clk.Advance(100 * time.Millisecond)
			r, err := e.c.Renew(e.ctx, l, 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, l.ID, r.ID)
			require.Equal(t, l.Attempt, r.Attempt)
			require.True(t, r.ExpiresAt.Equal(Epoch.Add(100*time.Millisecond+5*time.Second)), "ExpiresAt %v", r.ExpiresAt)
			e.clk.Advance(300 * time.Millisecond) // past the original expiry
			e.requireNone(s, g)
			require.Equal(t, int64(1), e.info(s, g).Inflight)
			e.ack(r)
			e.requireNone(s, g)
		}},
		{"renewed_lease_expires_at_its_new_time", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			r, err := e.c.Renew(e.ctx, l, 10*time.Second)
			require.NoError(t, err)
			e.clk.Set(r.ExpiresAt)
			ls := e.fetchN(s, g, 1)
			require.Equal(t, 2, ls[0].Attempt)
			require.ErrorIs(t, e.c.Ack(e.ctx, r), rheo.ErrStaleLease)
		}},
		{"durations_round_up_to_whole_microseconds", func(t *testing.T, f Factory) {
			// Times are kept to the microsecond: a lease duration or a delay
			// that is not a whole number of them is rounded up, so that the
			// lease lasts and the retry waits at least as asked, and every
			// store agrees on the instant.
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 10})
			now := e.clk.Now()
			us := time.Microsecond
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: 1500 * time.Nanosecond})[0]
			require.True(t, l.ExpiresAt.Equal(now.Add(2*us)), "expires at %v", l.ExpiresAt)
			e.clk.Set(now.Add(us))
			r, err := e.c.Renew(e.ctx, l, time.Nanosecond)
			require.NoError(t, err)
			require.True(t, r.ExpiresAt.Equal(now.Add(2*us)), "renewed to %v", r.ExpiresAt)
			e.clk.Set(now.Add(2 * us))
			again := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: 999 * time.Nanosecond})[0]
			require.Equal(t, l.Event.ID, again.Event.ID)
			require.Equal(t, 2, again.Attempt)
			require.True(t, again.ExpiresAt.Equal(now.Add(3*us)), "expires at %v", again.ExpiresAt)
			require.NoError(t, e.c.Nack(e.ctx, again, "later", rheo.Delay(1500*time.Nanosecond)))
			e.clk.Set(now.Add(3 * us))
			next := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: math.MaxInt64})
			require.Len(t, next, 1)
			require.NotEqual(t, l.Event.ID, next[0].Event.ID, "the nack is not due before 2 µs")
			require.True(t, next[0].ExpiresAt.Equal(now.Add(3*us).Add(time.Duration(math.MaxInt64).Truncate(us))),
				"the longest lease expires at %v", next[0].ExpiresAt)
			e.clk.Set(now.Add(4 * us))
			ls := e.fetchN(s, g, 1)
			require.Equal(t, l.Event.ID, ls[0].Event.ID)
			require.Equal(t, 3, ls[0].Attempt)
		}},
		{"renew_zero_uses_default_lease_duration", func(t *testing.T, f Factory) {
			e := newEnv(t, f, rheo.WithLeaseDuration(9*time.Second))
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			r, err := e.c.Renew(e.ctx, l, 0)
			require.NoError(t, err)
			require.True(t, r.ExpiresAt.Equal(Epoch.Add(9*time.Second)))
		}},
		{"renew_after_ack_is_stale", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			e.ack(l)
			_, err := e.c.Renew(e.ctx, l, time.Minute)
			require.ErrorIs(t, err, rheo.ErrStaleLease)
		}},
		{"settle_after_nack_is_stale", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			require.NoError(t, e.c.Nack(e.ctx, l, "later"))
			require.ErrorIs(t, e.c.Ack(e.ctx, l), rheo.ErrStaleLease)
			require.ErrorIs(t, e.c.Nack(e.ctx, l, "again"), rheo.ErrStaleLease)
			require.ErrorIs(t, e.c.Reject(e.ctx, l, "no"), rheo.ErrStaleLease)
		}},
		{"forged_lease_id_is_stale", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			for _, receipt := range []string{"own", "forged"} {
				forged := l
				forged.ID = uuid.NewString()
				if receipt == "forged" {
					forged.Receipt = forged.ID
				}
				requireStale(t, forged, e.c.Ack(e.ctx, forged))
				_, err := e.c.Renew(e.ctx, forged, time.Hour)
				requireStale(t, forged, err)
			}
			e.ack(l)
		}},
		{"lease_id_of_another_current_lease_is_stale", func(t *testing.T, f Factory) {
			// A lease is named by its ID: the ID of another event's
			// current lease names no lease of this event, whatever the
			// receipt (this lease's, or the other's).
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 2)
			a, b := ls[0], ls[1]
			before := e.snapshot()
			for _, receipt := range []string{a.Receipt, b.Receipt} {
				crossed := a
				crossed.ID, crossed.Receipt = b.ID, receipt
				requireStale(t, crossed, e.c.Ack(e.ctx, crossed))
				requireStale(t, crossed, e.c.Nack(e.ctx, crossed, "x"))
				requireStale(t, crossed, e.c.Reject(e.ctx, crossed, "x"))
				requireStale(t, crossed, e.c.Release(e.ctx, crossed))
				_, err := e.c.Renew(e.ctx, crossed, time.Hour)
				requireStale(t, crossed, err)
				var be *rheo.BatchError
				require.ErrorAs(t, e.c.AckBatch(e.ctx, []rheo.Lease{crossed, crossed}), &be)
				require.Len(t, be.Errs, 2)
				requireStale(t, crossed, be.Errs[0])
				requireStale(t, crossed, be.Errs[1])
			}
			require.Equal(t, before, e.snapshot(), "a stale settle writes nothing")
			e.ack(a)
			e.ack(b)
			e.requireLag(s, g, 0, 2, 2)
		}},
		{"tampered_receipt_is_refused_and_the_genuine_lease_still_settles", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			// Receipts of every form a store issues: the lease ID, a span
			// member's (the ID and "+span"), a stream entry ID.
			for _, receipt := range []string{l.Receipt[:len(l.Receipt)/2], l.Receipt + "x", "1-1", uuid.NewString(), l.ID, l.ID + "+span"} {
				if receipt == l.Receipt {
					continue
				}
				bad := l
				bad.Receipt = receipt
				requireReceiptRefused(t, bad, e.c.Ack(e.ctx, bad))
				requireReceiptRefused(t, bad, e.c.Reject(e.ctx, bad, "x"))
				_, err := e.c.Renew(e.ctx, bad, time.Hour)
				requireReceiptRefused(t, bad, err)
			}
			require.Empty(t, e.deadLetters(s, g))
			e.ack(l)
		}},
		{"ack_in_one_group_does_not_settle_another", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			risk := e.group(s, rheo.GroupConfig{})
			surv := e.group(s, rheo.GroupConfig{})
			a := e.fetchN(s, risk, 1)[0]
			b := e.fetchN(s, surv, 1)[0]
			e.ack(a)
			e.requireLag(s, surv, 0, 0, 1)
			e.requireNone(s, surv)
			e.ack(b)
			crossed := a
			crossed.Group = surv
			require.ErrorIs(t, e.c.Ack(e.ctx, crossed), rheo.ErrStaleLease, "a lease of one group never settles another")
		}},
	})
}

// requireReceiptRefused checks a settle with a wrong receipt failed as
// the package documentation says: the lease's ID names its event's current
// lease, so ErrReceiptMismatch, in the same words on every store.
func requireReceiptRefused(t *testing.T, tampered rheo.Lease, err error) {
	t.Helper()
	require.ErrorIs(t, err, rheo.ErrReceiptMismatch)
	require.Contains(t, err.Error(), leaseWords(tampered)+": the receipt is not the one the lease was issued with")
}

// requireStale checks that a settle or renewal of l failed with
// ErrStaleLease, in the same words on every store.
func requireStale(t *testing.T, l rheo.Lease, err error) {
	t.Helper()
	require.ErrorIs(t, err, rheo.ErrStaleLease)
	require.Contains(t, err.Error(), leaseWords(l))
}

// leaseWords is how every store names a lease in its fencing errors.
func leaseWords(l rheo.Lease) string {
	return fmt.Sprintf("lease %s of event %q (partition %d, sequence %d) in group %q of stream %q",
		l.ID, l.Event.ID, l.Event.Partition, l.Event.Sequence, l.Group, l.Stream)
}

func runRetry(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"nack_redelivers_with_attempt_2", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 5})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, ConsumerID: "c1"})[0]
			require.NoError(t, e.c.Nack(e.ctx, l, "transient"))
			again := e.fetch(s, g, rheo.FetchOptions{Limit: 1, ConsumerID: "c2"})
			require.Len(t, again, 1)
			require.Equal(t, l.Event.ID, again[0].Event.ID)
			require.Equal(t, 2, again[0].Attempt)
			require.NotEqual(t, l.ID, again[0].ID)
			e.requireLag(s, g, 0, 0, 1)
			require.NoError(t, e.c.Reject(e.ctx, again[0], "give up"))
			e.requireNone(s, g)
		}},
		{"nack_at_max_attempts_dead_letters_with_reason", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 3})
			for round := 1; round <= 3; round++ {
				ls := e.fetchN(s, g, 1)
				require.Equal(t, round, ls[0].Attempt)
				e.clk.Advance(time.Second)
				require.NoError(t, e.c.Nack(e.ctx, ls[0], "boom"))
			}
			e.requireNone(s, g)
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 1)
			require.Equal(t, evs[0].ID, dls[0].EventID)
			require.Equal(t, "max_attempts: boom", dls[0].Reason)
			require.Equal(t, 3, dls[0].Attempts)
			require.Equal(t, 0, dls[0].Partition)
			require.Equal(t, int64(1), dls[0].Sequence)
			require.True(t, dls[0].DeadLetteredAt.Equal(Epoch.Add(3*time.Second)), "DeadLetteredAt %v", dls[0].DeadLetteredAt)
			requireSameEvent(t, evs[0], dls[0].Event)
			e.requireLag(s, g, 0, 1, 1)
		}},
		{"max_attempts_1_first_nack_dead_letters", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "nope"))
			e.requireNone(s, g)
			require.Equal(t, "max_attempts: nope", e.deadLetters(s, g)[0].Reason)
		}},
		{"group_default_max_attempts_comes_from_the_client", func(t *testing.T, f Factory) {
			e := newEnv(t, f, rheo.WithMaxAttempts(2))
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "a"))
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "b"))
			e.requireNone(s, g)
			require.Equal(t, "max_attempts: b", e.deadLetters(s, g)[0].Reason)
		}},
		{"nack_delay_holds_the_delivery_until_due", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			e.clk.Advance(time.Second)
			require.NoError(t, e.c.Nack(e.ctx, l, "later", rheo.Delay(10*time.Second)))
			e.requireNone(s, g)
			e.clk.Set(Epoch.Add(11*time.Second - time.Microsecond))
			e.requireNone(s, g)
			require.Equal(t, int64(1), e.info(s, g).Available, "a delayed delivery counts as available")
			e.clk.Set(Epoch.Add(11 * time.Second))
			ls := e.fetchN(s, g, 1)
			require.Equal(t, 2, ls[0].Attempt)
		}},
		{"delayed_nack_does_not_block_later_events", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			l := e.fetchN(s, g, 1)[0]
			require.NoError(t, e.c.Nack(e.ctx, l, "later", rheo.Delay(time.Minute)))
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []pos{{0, 2}, {0, 3}}, positions(ls))
			e.ack(ls...)
			e.requireLag(s, g, 0, 0, 3)
			e.clk.Advance(time.Minute)
			e.ack(e.fetchN(s, g, 1)...)
			e.requireLag(s, g, 0, 3, 3)
		}},
		{"nack_without_delay_is_claimable_at_once", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "x", rheo.Delay(0)))
			require.Len(t, e.fetch(s, g, rheo.FetchOptions{}), 1)
		}},
		{"nack_is_due_at_its_time_whatever_the_fetchers_clock", func(t *testing.T, f Factory) {
			// A nack is due at the time it gives (its clock, plus any
			// delay): a fetch whose clock is behind that time, a
			// process whose clock lags the nacker's, does not take it
			// yet, whether the nack had a delay or not.
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 2)
			e.clk.Set(Epoch.Add(10 * time.Second))
			require.NoError(t, e.c.Nack(e.ctx, ls[0], "x"))
			require.NoError(t, e.c.Nack(e.ctx, ls[1], "x", rheo.Delay(5*time.Second)))
			e.clk.Set(Epoch.Add(10*time.Second - time.Microsecond))
			e.requireNone(s, g)
			e.clk.Set(Epoch.Add(10 * time.Second))
			require.Equal(t, []pos{{0, 1}}, positions(e.fetch(s, g, rheo.FetchOptions{Limit: 10})))
			e.clk.Set(Epoch.Add(15 * time.Second))
			require.Equal(t, []pos{{0, 2}}, positions(e.fetch(s, g, rheo.FetchOptions{Limit: 10})))
		}},
		{"reject_dead_letters_at_once_with_reason_verbatim", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 5})
			ls := e.fetchN(s, g, 2)
			// Any text, kept byte for byte: quotes, tabs, newlines, line
			// separators, multi-byte characters, a leading and trailing
			// space.
			reason := " schema: missing field \"amount\"\t\n\u2028 \u00e9\U0001F600 "
			require.NoError(t, e.c.Reject(e.ctx, ls[0], reason))
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 1)
			require.Equal(t, reason, dls[0].Reason)
			require.Equal(t, 1, dls[0].Attempts)
			e.ack(ls[1])
			e.requireNone(s, g)
			e.requireLag(s, g, 0, 2, 2)
		}},
		{"reject_is_isolated_to_its_group", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g1 := e.group(s, rheo.GroupConfig{})
			g2 := e.group(s, rheo.GroupConfig{})
			require.NoError(t, e.c.Reject(e.ctx, e.fetchN(s, g1, 1)[0], "bad"))
			require.Len(t, e.deadLetters(s, g1), 1)
			require.Empty(t, e.deadLetters(s, g2))
			require.Equal(t, int64(0), e.info(s, g2).DeadLetters)
			e.ack(e.fetchN(s, g2, 1)...)
			e.requireLag(s, g2, 0, 1, 1)
		}},
		{"poison_expiry_at_the_limit_dead_letters_instead_of_redelivering", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 2})
			first := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})
			require.Equal(t, 1, first[0].Attempt)
			e.clk.Advance(time.Second)
			second := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})
			require.Len(t, second, 1)
			require.Equal(t, evs[0].ID, second[0].Event.ID)
			require.Equal(t, 2, second[0].Attempt, "an expiry below the limit redelivers")
			e.clk.Advance(time.Second)
			third := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []pos{{0, 2}}, positions(third), "the poison event is not redelivered")
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 1)
			require.Equal(t, evs[0].ID, dls[0].EventID)
			require.Equal(t, "max_attempts: lease expired", dls[0].Reason)
			require.Equal(t, 2, dls[0].Attempts)
			require.ErrorIs(t, e.c.Ack(e.ctx, second[0]), rheo.ErrStaleLease, "the expired holder lost it")
			e.ack(third...)
			e.requireLag(s, g, 0, 2, 2)
		}},
		{"poison_expiry_with_max_attempts_1", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})
			e.clk.Advance(time.Second)
			e.requireNone(s, g)
			require.Equal(t, int64(1), e.info(s, g).DeadLetters)
			e.requireLag(s, g, 0, 1, 1)
		}},
		// Many leases expired at once (a fleet of consumers crashed holding
		// them), more than a store may read of them per fetch, behind
		// deliveries that are not due (delayed retries, leases renewed) or
		// not: fetches claim them in sequence order, and those that reach
		// the attempt limit and expire again are buried first (R6).
		{"many_expired_leases_are_claimed_in_sequence_order", func(t *testing.T, f Factory) {
			for _, tc := range []struct {
				name  string
				block func(e *env, ls []rheo.Lease) // holds back the first 40 leases
			}{
				{"dense", nil},
				{"behind_delayed_retries", func(e *env, ls []rheo.Lease) {
					for _, l := range ls {
						require.NoError(t, e.c.Nack(e.ctx, l, "later", rheo.Delay(24*time.Hour)))
					}
				}},
				{"behind_leases_in_flight", func(e *env, ls []rheo.Lease) {
					for _, l := range ls {
						_, err := e.c.Renew(e.ctx, l, 24*time.Hour)
						require.NoError(t, err)
					}
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := newEnv(t, f)
					s := e.stream(1)
					evs := e.appendN(s, 0, 140)
					g := e.group(s, rheo.GroupConfig{MaxAttempts: 2})
					ls := e.fetch(s, g, rheo.FetchOptions{Limit: 140, LeaseDuration: time.Minute})
					require.Len(t, ls, 140)
					next := int64(1) // the first sequence the fetches claim
					if tc.block != nil {
						tc.block(e, ls[:40])
						next = 41
					}
					e.clk.Advance(2 * time.Minute)
					again := e.fetch(s, g, rheo.FetchOptions{Limit: 5, LeaseDuration: time.Minute})
					require.Equal(t, []int64{next, next + 1, next + 2, next + 3, next + 4}, sequences(again))
					for _, l := range again {
						require.Equal(t, 2, l.Attempt)
					}
					// Those five expire at the limit, with the rest.
					e.clk.Advance(2 * time.Minute)
					for range 6 {
						got := e.fetch(s, g, rheo.FetchOptions{Limit: 5, LeaseDuration: time.Hour})
						next += 5
						require.Equal(t, []int64{next, next + 1, next + 2, next + 3, next + 4}, sequences(got))
						for i, l := range got {
							require.Equal(t, 2, l.Attempt)
							requireSameEvent(t, evs[next-1+int64(i)], l.Event)
						}
					}
					dls := e.deadLetters(s, g)
					require.Len(t, dls, 5)
					for i, d := range dls {
						require.Equal(t, again[i].Event.ID, d.EventID)
						require.Equal(t, "max_attempts: lease expired", d.Reason)
					}
				})
			}
		}},
		{"many_expired_leases_at_max_attempts_1_are_all_buried", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 140)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			require.Len(t, e.fetch(s, g, rheo.FetchOptions{Limit: 140, LeaseDuration: time.Minute}), 140)
			e.clk.Advance(2 * time.Minute)
			e.requireNone(s, g)
			require.Equal(t, int64(140), e.info(s, g).DeadLetters)
			e.requireLag(s, g, 0, 140, 140)
		}},
		{"renewing_an_expired_poison_lease_before_any_fetch_keeps_it", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second})[0]
			e.clk.Advance(2 * time.Second)
			r, err := e.c.Renew(e.ctx, l, time.Minute)
			require.NoError(t, err, "nobody reclaimed it yet")
			e.requireNone(s, g)
			require.Empty(t, e.deadLetters(s, g), "a renewed lease is not expired, so not poison")
			e.ack(r)
			e.requireLag(s, g, 0, 1, 1)
		}},
		{"unexpired_lease_at_the_limit_still_settles", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			l := e.fetch(s, g, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Minute})[0]
			e.clk.Advance(30 * time.Second)
			e.requireNone(s, g)
			e.ack(l)
			require.Empty(t, e.deadLetters(s, g))
		}},
	})
}
