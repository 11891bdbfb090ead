package rheotest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// settledMix leaves a 4-event single-partition group with seq 1 acked, seq 2
// dead-lettered, seq 3 leased (returned) and seq 4 acked; frontier 2.
func settledMix(t *testing.T, e *env) (s, g string, evs []rheo.Event, held rheo.Lease) {
	t.Helper()
	s = e.stream(1)
	evs = e.appendN(s, 0, 4)
	g = e.group(s, rheo.GroupConfig{})
	ls := e.fetchN(s, g, 4)
	e.ack(ls[0], ls[3])
	require.NoError(t, e.c.Reject(e.ctx, ls[1], "bad"))
	e.requireLag(s, g, 0, 2, 4)
	return s, g, evs, ls[2]
}

func runReplay(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"from_sequence_0_redelivers_acked_events_unchanged", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 5)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))))
			e.requireLag(s, g, 0, 0, 5)
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 100})
			requireSameEvents(t, evs, leaseEvents(ls))
			for _, l := range ls {
				require.Equal(t, 1, l.Attempt, "attempts start again")
			}
			requireSameEvents(t, evs, e.readAll(s, 0))
		}},
		{"replay_reopens_acked_dead_and_leased_deliveries", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, evs, held := settledMix(t, e)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))))
			require.Empty(t, e.deadLetters(s, g), "replayed dead letters are cleared")
			gi := e.info(s, g)
			require.Equal(t, int64(0), gi.DeadLetters)
			require.Equal(t, int64(0), gi.Inflight)
			require.Equal(t, int64(4), gi.Available)
			e.requireLag(s, g, 0, 0, 4)
			require.ErrorIs(t, e.c.Ack(e.ctx, held), rheo.ErrStaleLease, "the holder of a replayed lease is stale")
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			requireSameEvents(t, evs, leaseEvents(ls))
			for _, l := range ls {
				require.Equal(t, 1, l.Attempt)
			}
		}},
		{"replay_reports_the_deliveries_it_reopened", func(t *testing.T, f Factory) {
			// Only events the group was offered are counted: the rest are
			// delivered in their turn anyway.
			e := newEnv(t, f)
			s := e.stream(2)
			evs := e.appendN(s, 0, 6)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.ack(e.fetch(s, g, rheo.FetchOptions{Limit: 4, Partitions: []int{0}})...)
			replay := func(from rheo.Replay, partitions ...int) int {
				t.Helper()
				n, err := e.c.Replay(e.ctx, s, g, from, partitions...)
				require.NoError(t, err)
				return n
			}
			require.Equal(t, 2, replay(rheo.FromSequence(2), 0), "seq 3 and 4 of p0; 5 and 6 were never offered")
			require.Equal(t, 2, replay(rheo.FromSequence(0), 0), "the cursor is at 2 now")
			require.Equal(t, 0, replay(rheo.FromSequence(0), 1), "p1 was never offered")
			e.drain(s, g)
			require.Equal(t, 2, replay(rheo.Events(evs[0].ID, evs[0].ID, evs[5].ID)), "an ID named twice counts once")
			e.drain(s, g)
			require.Equal(t, 8, replay(rheo.Matching(rheo.Query{Type: "test"})))
			e.drain(s, g)
			require.Equal(t, 6, replay(rheo.FromTime(evs[0].Timestamp), 0))
			require.Equal(t, 2, replay(rheo.FromSequence(0)), "every partition: p0 was reopened already")
			e.drain(s, g)
			require.Equal(t, 8, replay(rheo.FromSequence(0)))
			require.Equal(t, 0, replay(rheo.FromSequence(0)), "nothing was offered since")
		}},
		{"replay_restarts_attempts", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 3})
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "x"))
			l := e.fetchN(s, g, 1)[0]
			require.Equal(t, 2, l.Attempt)
			require.NoError(t, e.c.Nack(e.ctx, l, "x"))
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))))
			for want := 1; want <= 3; want++ {
				l := e.fetchN(s, g, 1)[0]
				require.Equal(t, want, l.Attempt)
				require.NoError(t, e.c.Nack(e.ctx, l, "x"))
			}
			e.requireNone(s, g)
		}},
		{"from_sequence_reopens_only_above_it", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 4)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(2))))
			e.requireLag(s, g, 0, 2, 4)
			require.Equal(t, []int64{3, 4}, seqs(e.drain(s, g)))
			e.requireLag(s, g, 0, 4, 4)
		}},
		{"replay_is_scoped_to_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 1)
			e.appendN(s, 1, 1)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0), 1)))
			e.requireLag(s, g, 0, 1, 1)
			e.requireLag(s, g, 1, 0, 1)
			require.Equal(t, []pos{{1, 1}}, eventPositions(e.drain(s, g)))
		}},
		{"replay_never_touches_other_groups", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			other := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			ol := e.fetchN(s, other, 2)
			e.ack(ol[0])
			before := e.info(s, other)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))))
			require.Equal(t, before, e.info(s, other))
			e.ack(ol[1])
			e.requireLag(s, other, 0, 2, 3)
		}},
		{"from_time_reopens_from_the_first_event_at_or_after", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			for i := range 4 {
				_, err := e.c.Append(e.ctx, s, rheo.Message{Partition: ptr(i % 2), Timestamp: Epoch.Add(time.Duration(i) * time.Second)})
				require.NoError(t, err)
			}
			// p0: seq1@0s, seq2@2s; p1: seq1@1s, seq2@3s.
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromTime(Epoch.Add(2*time.Second)))))
			e.requireLag(s, g, 0, 1, 2)
			e.requireLag(s, g, 1, 1, 2)
			require.Equal(t, []pos{{0, 2}, {1, 2}}, eventPositions(e.drain(s, g)))
		}},
		{"from_time_and_matching_respect_the_partition_scope", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 2)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromTime(Epoch), 1)))
			e.requireLag(s, g, 0, 2, 2)
			require.Equal(t, []pos{{1, 1}, {1, 2}}, eventPositions(e.drain(s, g)))
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Matching(rheo.Query{Type: "test"}), 0)))
			e.requireLag(s, g, 1, 2, 2)
			require.Equal(t, []pos{{0, 1}, {0, 2}}, eventPositions(e.drain(s, g)))
			_, err := e.c.Replay(e.ctx, s, g, rheo.Matching(rheo.Query{Partitions: []int{1}}), 0)
			require.ErrorIs(t, err, rheo.ErrNoEventsInRange, "a query outside the scope matches nothing")
		}},
		{"from_time_with_no_event_is_no_events_in_range", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			before := e.snapshot()
			_, err := e.c.Replay(e.ctx, s, g, rheo.FromTime(Epoch.Add(time.Hour)))
			require.ErrorIs(t, err, rheo.ErrNoEventsInRange)
			require.Equal(t, before, e.snapshot())
		}},
		{"matching_reopens_exactly_the_matches", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			var ms []rheo.Message
			for i := range 12 {
				typ := "keep"
				if i%3 == 0 {
					typ = "redo"
				}
				ms = append(ms, rheo.Message{Type: typ, Partition: ptr(i % 2)})
			}
			evs, err := e.c.AppendBatch(e.ctx, s, ms)
			require.NoError(t, err)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			// A small page size makes the replay follow cursors across pages.
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Matching(rheo.Query{Type: "redo", Limit: 1}))))
			var want []pos
			for _, ev := range evs {
				if ev.Type == "redo" {
					want = append(want, pos{ev.Partition, ev.Sequence})
				}
			}
			got := eventPositions(e.drain(s, g))
			require.ElementsMatch(t, want, got)
			e.requireLag(s, g, 0, 6, 6)
		}},
		{"matching_lowers_the_frontier_below_the_first_match", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			_, err := e.c.AppendBatch(e.ctx, s, []rheo.Message{{Type: "a"}, {Type: "b"}, {Type: "a"}})
			require.NoError(t, err)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Matching(rheo.Query{Type: "b"}))))
			e.requireLag(s, g, 0, 1, 3)
			require.Equal(t, []int64{2}, seqs(e.drain(s, g)))
			e.requireLag(s, g, 0, 3, 3)
		}},
		{"matching_nothing_is_no_events_in_range", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			before := e.snapshot()
			require.ErrorIs(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Matching(rheo.Query{Type: "none"}))), rheo.ErrNoEventsInRange)
			require.Equal(t, before, e.snapshot())
		}},
		{"events_reopens_the_named_events_in_scope", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e0 := e.appendN(s, 0, 2)
			e1 := e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Events(e0[1].ID, e1[0].ID), 1)))
			require.Equal(t, []string{e1[0].ID}, ids(e.drain(s, g)), "partition scope excludes p0's event")
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Events(e0[1].ID))))
			e.requireLag(s, g, 0, 1, 2)
			require.Equal(t, []string{e0[1].ID}, ids(e.drain(s, g)))
		}},
		{"events_with_an_unknown_id_is_invalid_and_reopens_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			before := e.snapshot()
			_, err := e.c.Replay(e.ctx, s, g, rheo.Events(evs[0].ID, "no-such-event"))
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			require.Equal(t, before, e.snapshot())
			e.requireNone(s, g)
		}},
		{"events_after_a_reset_recreates_the_delivery", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			require.NoError(t, errOf(e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Start: rheo.Latest()})))
			e.requireNone(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Events(evs[1].ID))))
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []string{evs[1].ID}, ids(leaseEvents(ls)))
			e.ack(ls...)
			e.requireLag(s, g, 0, 3, 3)
		}},
		{"events_with_no_ids_is_a_no_op", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Events())))
			e.requireNone(s, g)
		}},
		{"replay_without_a_range_is_invalid", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			require.ErrorIs(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Replay{})), rheo.ErrInvalidArgument)
		}},
		{"from_sequence_beyond_the_cursor_never_skips_later_events", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(10))))
			e.requireLag(s, g, 0, 3, 3)
			e.requireNone(s, g)
			e.appendN(s, 0, 8)
			require.Equal(t, []int64{4, 5, 6, 7, 8, 9, 10, 11}, seqs(e.drain(s, g)))
		}},
		{"from_sequence_0_on_a_late_group_offers_the_earlier_events", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 4)
			g := e.group(s, rheo.GroupConfig{Start: rheo.AfterSequence(2)})
			require.Equal(t, []int64{3, 4}, seqs(e.drain(s, g)))
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))))
			e.requireLag(s, g, 0, 0, 4)
			require.Equal(t, []int64{1, 2, 3, 4}, seqs(e.drain(s, g)))
		}},
		{"events_not_yet_offered_are_left_alone", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Events(evs[2].ID))))
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []int64{1, 2, 3}, seqs(leaseEvents(ls)), "each event offered once, in order")
			for _, l := range ls {
				require.Equal(t, 1, l.Attempt)
			}
			e.ack(ls...)
			e.requireNone(s, g)
		}},
		{"replayed_event_settles_under_its_new_lease_only", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			old := e.fetchN(s, g, 1)[0]
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))))
			fresh := e.fetchN(s, g, 1)[0]
			require.Equal(t, 1, fresh.Attempt)
			require.NotEqual(t, old.ID, fresh.ID)
			for _, op := range []func() error{
				func() error { return e.c.Ack(e.ctx, old) },
				func() error { return e.c.Nack(e.ctx, old, "x") },
				func() error { return e.c.Reject(e.ctx, old, "x") },
				func() error { _, err := e.c.Renew(e.ctx, old, time.Minute); return err },
			} {
				require.ErrorIs(t, op(), rheo.ErrStaleLease)
			}
			e.ack(fresh)
		}},
	})
}

func runReset(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"reset_without_confirm_is_confirm_required_and_changes_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, _, held := settledMix(t, e)
			before := e.snapshot()
			_, err := e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Start: rheo.Beginning()})
			require.ErrorIs(t, err, rheo.ErrConfirmRequired)
			require.Equal(t, before, e.snapshot())
			e.ack(held)
		}},
		{"reset_forgets_deliveries_leases_and_dead_letters", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, evs, held := settledMix(t, e)
			require.NoError(t, errOf(e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true})))
			require.Empty(t, e.deadLetters(s, g))
			gi := e.info(s, g)
			require.Equal(t, int64(0), gi.Inflight)
			require.Equal(t, int64(0), gi.DeadLetters)
			require.Equal(t, int64(4), gi.Available)
			e.requireLag(s, g, 0, 0, 4)
			require.ErrorIs(t, e.c.Ack(e.ctx, held), rheo.ErrStaleLease)
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			requireSameEvents(t, evs, leaseEvents(ls))
			for _, l := range ls {
				require.Equal(t, 1, l.Attempt)
			}
			requireSameEvents(t, evs, e.readAll(s, 0))
		}},
		{"reset_is_scoped_to_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 2)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Partitions: []int{0}})))
			e.requireLag(s, g, 0, 0, 2)
			e.requireLag(s, g, 1, 2, 2)
			require.Equal(t, []pos{{0, 1}, {0, 2}}, eventPositions(e.drain(s, g)))
		}},
		{"reset_reports_the_deliveries_it_reopened", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 5)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 3})
			require.Equal(t, 3, e.info(s, g).MaxAttempts)
			require.Equal(t, rheo.DefaultMaxAttempts, e.info(s, e.group(s, rheo.GroupConfig{})).MaxAttempts)
			e.drain(s, g)
			reset := func(opts rheo.ResetOptions) int {
				t.Helper()
				opts.Confirm = true
				n, err := e.c.ResetGroup(e.ctx, s, g, opts)
				require.NoError(t, err)
				return n
			}
			require.Equal(t, 2, reset(rheo.ResetOptions{Start: rheo.AfterSequence(3), Partitions: []int{0}}))
			require.Equal(t, 0, reset(rheo.ResetOptions{Start: rheo.Latest()}), "a reset to latest reopens nothing")
			require.Equal(t, 7, reset(rheo.ResetOptions{Start: rheo.Beginning()}))
			require.Equal(t, 0, reset(rheo.ResetOptions{Start: rheo.Beginning()}), "nothing was offered since")
			require.Equal(t, 3, e.info(s, g).MaxAttempts, "a reset keeps the group's settings")
		}},
		{"reset_to_a_start_position", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 5)
			e.appendN(s, 1, 1)
			g := e.group(s, rheo.GroupConfig{})
			require.NoError(t, errOf(e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Start: rheo.AfterSequence(3), Partitions: []int{0}})))
			e.requireLag(s, g, 0, 3, 5)
			e.requireLag(s, g, 1, 0, 1)
			require.NoError(t, errOf(e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Start: rheo.Latest(), Partitions: []int{1}})))
			e.requireLag(s, g, 1, 1, 1)
			require.Equal(t, []pos{{0, 4}, {0, 5}}, eventPositions(e.drain(s, g)))
		}},
		{"reset_beyond_high_watermark_is_invalid_and_changes_nothing", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, _, _ := settledMix(t, e)
			before := e.snapshot()
			_, err := e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Start: rheo.AfterSequence(5)})
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			_, err = e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Partitions: []int{1}})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)
			require.Equal(t, before, e.snapshot())
		}},
		{"reset_leaves_other_groups_alone", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			other := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			e.drain(s, other)
			require.NoError(t, errOf(e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true})))
			e.requireLag(s, other, 0, 2, 2)
			e.requireNone(s, other)
		}},
	})
}

func runRedrive(t *testing.T, f Factory) {
	// dead makes every one of n events a dead letter of a fresh group.
	dead := func(t *testing.T, e *env, n int) (string, string, []rheo.Event) {
		s := e.stream(1)
		evs := e.appendN(s, 0, n)
		g := e.group(s, rheo.GroupConfig{MaxAttempts: 2})
		for _, l := range e.fetchN(s, g, n) {
			require.NoError(t, e.c.Reject(e.ctx, l, "bad"))
		}
		e.requireLag(s, g, 0, int64(n), int64(n))
		return s, g, evs
	}
	runCases(t, f, []testCase{
		{"redrive_named_dead_letters", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, evs := dead(t, e, 3)
			n, err := e.c.Redrive(e.ctx, s, g, evs[1].ID)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			e.requireLag(s, g, 0, 1, 3)
			dls := e.deadLetters(s, g)
			require.Len(t, dls, 2)
			require.Equal(t, int64(2), e.info(s, g).DeadLetters)
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []string{evs[1].ID}, ids(leaseEvents(ls)))
			require.Equal(t, 1, ls[0].Attempt, "attempts are reset")
			e.ack(ls...)
			e.requireLag(s, g, 0, 3, 3)
		}},
		{"redrive_all_returns_the_count", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, evs := dead(t, e, 4)
			n, err := e.c.Redrive(e.ctx, s, g)
			require.NoError(t, err)
			require.Equal(t, 4, n)
			require.Empty(t, e.deadLetters(s, g))
			e.requireLag(s, g, 0, 0, 4)
			require.Equal(t, ids(evs), ids(e.drain(s, g)))
			n, err = e.c.Redrive(e.ctx, s, g)
			require.NoError(t, err)
			require.Equal(t, 0, n, "nothing left to redrive")
		}},
		{"redrive_ignores_ids_that_are_not_dead_letters", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, evs := dead(t, e, 2)
			e.appendN(s, 0, 1)
			e.drain(s, g)
			before := e.snapshot()
			n, err := e.c.Redrive(e.ctx, s, g, "unknown", e.readAll(s, 0)[2].ID)
			require.NoError(t, err)
			require.Equal(t, 0, n)
			require.Equal(t, before, e.snapshot())
			n, err = e.c.Redrive(e.ctx, s, g, evs[0].ID, "unknown")
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}},
		{"redrive_gives_a_full_set_of_attempts_again", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 2})
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "x"))
			require.NoError(t, e.c.Nack(e.ctx, e.fetchN(s, g, 1)[0], "x"))
			e.requireNone(s, g)
			n, err := e.c.Redrive(e.ctx, s, g)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			l := e.fetchN(s, g, 1)[0]
			require.Equal(t, 1, l.Attempt)
			require.NoError(t, e.c.Nack(e.ctx, l, "y"))
			l = e.fetchN(s, g, 1)[0]
			require.Equal(t, 2, l.Attempt)
			require.NoError(t, e.c.Nack(e.ctx, l, "y"))
			require.Equal(t, "max_attempts: y", e.deadLetters(s, g)[0].Reason)
		}},
		{"redrive_of_another_groups_dead_letter_is_a_no_op", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, evs := dead(t, e, 1)
			other := e.group(s, rheo.GroupConfig{})
			e.drain(s, other)
			n, err := e.c.Redrive(e.ctx, s, other, evs[0].ID)
			require.NoError(t, err)
			require.Equal(t, 0, n)
			e.requireNone(s, other)
			require.Len(t, e.deadLetters(s, g), 1)
		}},
		{"redrive_is_isolated_to_its_group", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, g, _ := dead(t, e, 1)
			other := e.group(s, rheo.GroupConfig{})
			require.NoError(t, e.c.Reject(e.ctx, e.fetchN(s, other, 1)[0], "no"))
			_, err := e.c.Redrive(e.ctx, s, g)
			require.NoError(t, err)
			require.Len(t, e.deadLetters(s, other), 1)
			e.requireNone(s, other)
		}},
	})
}
