package rheotest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func runFrontier(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"hole_blocks_the_frontier", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 3, Partitions: []int{0}})
			require.Equal(t, []pos{{0, 1}, {0, 2}, {0, 3}}, positions(ls))
			e.ack(ls[0], ls[2])
			e.requireLag(s, g, 0, 1, 3)
			require.Equal(t, int64(2), e.lag(s, g).Total)
			e.ack(ls[1])
			e.requireLag(s, g, 0, 3, 3)
			require.Equal(t, int64(0), e.lag(s, g).Total)
		}},
		{"hole_at_the_start_holds_frontier_at_zero", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 6)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 6)
			e.ack(ls[1:]...)
			e.requireLag(s, g, 0, 0, 6)
			require.NoError(t, e.c.Nack(e.ctx, ls[0], "x"))
			e.requireLag(s, g, 0, 0, 6)
			e.ack(e.fetchN(s, g, 1)...)
			e.requireLag(s, g, 0, 6, 6)
		}},
		{"reject_unblocks_the_frontier", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 3)
			e.ack(ls[0], ls[2])
			e.requireLag(s, g, 0, 1, 3)
			require.NoError(t, e.c.Reject(e.ctx, ls[1], "bad"))
			e.requireLag(s, g, 0, 3, 3)
		}},
		{"dead_letter_by_nack_unblocks_the_frontier", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{MaxAttempts: 1})
			ls := e.fetchN(s, g, 2)
			e.ack(ls[1])
			e.requireLag(s, g, 0, 0, 2)
			require.NoError(t, e.c.Nack(e.ctx, ls[0], "boom"))
			e.requireLag(s, g, 0, 2, 2)
		}},
		{"leases_and_nacks_do_not_move_the_frontier", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 2)
			e.requireLag(s, g, 0, 0, 2)
			require.NoError(t, e.c.Nack(e.ctx, ls[0], "x"))
			require.NoError(t, e.c.Nack(e.ctx, ls[1], "x"))
			e.requireLag(s, g, 0, 0, 2)
		}},
		{"lag_is_per_partition_and_totals", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			e.appendN(s, 0, 4)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 100, Partitions: []int{0}})
			e.ack(ls[:3]...)
			lag := e.lag(s, g)
			require.Equal(t, s, lag.Stream)
			require.Equal(t, g, lag.Group)
			require.Equal(t, []rheo.PartitionLag{
				{Partition: 0, Frontier: 3, HighWatermark: 4, Lag: 1},
				{Partition: 1, Frontier: 0, HighWatermark: 2, Lag: 2},
				{Partition: 2, Frontier: 0, HighWatermark: 0, Lag: 0},
			}, lag.Partitions)
			require.Equal(t, int64(3), lag.Total)
			only, err := e.c.Lag(e.ctx, s, g, 1)
			require.NoError(t, err)
			require.Equal(t, []rheo.PartitionLag{{Partition: 1, Frontier: 0, HighWatermark: 2, Lag: 2}}, only.Partitions)
			require.Equal(t, int64(2), only.Total)
		}},
		{"lag_grows_with_appends_and_is_never_negative", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			e.requireLag(s, g, 0, 0, 0)
			e.appendN(s, 0, 2)
			e.requireLag(s, g, 0, 0, 2)
			e.drain(s, g)
			e.requireLag(s, g, 0, 2, 2)
			late := e.group(s, rheo.GroupConfig{Start: rheo.Latest()})
			e.requireLag(s, late, 0, 2, 2)
			e.appendN(s, 0, 1)
			e.requireLag(s, late, 0, 2, 3)
		}},
		{"late_group_starts_with_frontier_at_its_start", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 10)
			g := e.group(s, rheo.GroupConfig{Start: rheo.AfterSequence(5)})
			e.requireLag(s, g, 0, 5, 10)
			ls := e.fetchN(s, g, 1)
			require.Equal(t, int64(6), ls[0].Event.Sequence)
			e.ack(ls...)
			e.requireLag(s, g, 0, 6, 10)
		}},
		{"many_acks_keep_lag_and_fetch_correct", func(t *testing.T, f Factory) {
			// R9 as a user sees it: however much was acked (and compacted),
			// progress, counts and claims stay right.
			e := newEnv(t, f)
			s := e.stream(2)
			evs := e.appendN(s, 0, 600)
			e.appendN(s, 1, 400)
			g := e.group(s, rheo.GroupConfig{})
			for {
				ls := e.fetch(s, g, rheo.FetchOptions{Limit: 97})
				if len(ls) == 0 {
					break
				}
				require.NoError(t, e.c.AckBatch(e.ctx, ls))
			}
			e.requireLag(s, g, 0, 600, 600)
			e.requireLag(s, g, 1, 400, 400)
			gi := e.info(s, g)
			require.Equal(t, rheo.GroupInfo{Stream: s, Group: g, Lag: gi.Lag, MaxAttempts: rheo.DefaultMaxAttempts}, gi, "nothing inflight, available or dead")
			e.appendN(s, 1, 1)
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []pos{{1, 401}}, positions(ls))
			e.ack(ls...)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.Events(evs[17].ID))))
			e.requireLag(s, g, 0, 17, 600)
			again := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			require.Equal(t, []pos{{0, 18}}, positions(again), "a compacted delivery can be replayed")
			require.Equal(t, 1, again[0].Attempt)
			e.ack(again...)
			e.requireLag(s, g, 0, 600, 600)
		}},
	})
}

func runGroups(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"create_group_twice_is_already_exists", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			require.ErrorIs(t, e.c.CreateGroup(e.ctx, s, g, rheo.GroupConfig{}), rheo.ErrAlreadyExists)
		}},
		{"same_group_name_on_two_streams_is_two_groups", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s1, s2 := e.stream(1), e.stream(1)
			require.NoError(t, e.c.CreateGroup(e.ctx, s1, "workers", rheo.GroupConfig{}))
			require.NoError(t, e.c.CreateGroup(e.ctx, s2, "workers", rheo.GroupConfig{}))
			e.appendN(s1, 0, 1)
			e.requireNone(s2, "workers")
			require.Len(t, e.fetch(s1, "workers", rheo.FetchOptions{}), 1)
		}},
		{"list_groups_sorted_per_stream", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s, other := e.stream(1), e.stream(1)
			for _, g := range []string{"surveillance", "g", "risk"} {
				require.NoError(t, e.c.CreateGroup(e.ctx, s, g, rheo.GroupConfig{}))
			}
			require.NoError(t, e.c.CreateGroup(e.ctx, other, "zeta", rheo.GroupConfig{}))
			gs, err := e.c.ListGroups(e.ctx, s)
			require.NoError(t, err)
			require.Equal(t, []string{"g", "risk", "surveillance"}, gs)
			none := e.stream(1)
			gs, err = e.c.ListGroups(e.ctx, none)
			require.NoError(t, err)
			require.Empty(t, gs)
		}},
		{"start_beginning_delivers_everything", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{Start: rheo.Beginning()})
			e.requireLag(s, g, 0, 0, 3)
			require.Equal(t, []int64{1, 2, 3}, seqs(e.drain(s, g)))
		}},
		{"start_latest_delivers_only_later_events", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 3)
			e.appendN(s, 1, 1)
			g := e.group(s, rheo.GroupConfig{Start: rheo.Latest()})
			e.requireLag(s, g, 0, 3, 3)
			e.requireLag(s, g, 1, 1, 1)
			e.requireNone(s, g)
			e.appendN(s, 0, 1)
			require.Equal(t, []pos{{0, 4}}, eventPositions(e.drain(s, g)))
		}},
		{"start_after_sequence", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{Start: rheo.AfterSequence(2)})
			e.requireLag(s, g, 0, 2, 3)
			require.Equal(t, []int64{3}, seqs(e.drain(s, g)))
			at := e.group(s, rheo.GroupConfig{Start: rheo.AfterSequence(3)})
			e.requireNone(s, at)
			e.requireLag(s, at, 0, 3, 3)
		}},
		{"start_after_sequence_beyond_high_watermark_is_invalid", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			before := e.snapshot()
			for _, p := range []rheo.Position{rheo.AfterSequence(4), rheo.AfterSequence(-1), rheo.AfterSequences(map[int]int64{0: 9})} {
				require.ErrorIs(t, e.c.CreateGroup(e.ctx, s, "g", rheo.GroupConfig{Start: p}), rheo.ErrInvalidArgument)
			}
			require.Equal(t, before, e.snapshot(), "no group was created")
		}},
		{"start_after_sequences_per_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			for p := range 3 {
				e.appendN(s, p, 3)
			}
			g := e.group(s, rheo.GroupConfig{Start: rheo.AfterSequences(map[int]int64{0: 2, 1: 3})})
			e.requireLag(s, g, 0, 2, 3)
			e.requireLag(s, g, 1, 3, 3)
			e.requireLag(s, g, 2, 0, 3)
			require.Equal(t, []pos{{0, 3}, {2, 1}, {2, 2}, {2, 3}}, positions(e.fetch(s, g, rheo.FetchOptions{Limit: 100})))
		}},
		{"start_after_sequences_naming_a_missing_partition_is_invalid_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			before := e.snapshot()
			err := e.c.CreateGroup(e.ctx, s, "g", rheo.GroupConfig{Start: rheo.AfterSequences(map[int]int64{2: 0})})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)
			require.Equal(t, before, e.snapshot())
		}},
		{"start_at_time_is_inclusive", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			for i := range 3 {
				_, err := e.c.Append(e.ctx, s, rheo.Message{Timestamp: Epoch.Add(time.Duration(i) * time.Second)})
				require.NoError(t, err)
			}
			g := e.group(s, rheo.GroupConfig{Start: rheo.AtTime(Epoch.Add(time.Second))})
			e.requireLag(s, g, 0, 1, 3)
			require.Equal(t, []int64{2, 3}, seqs(e.drain(s, g)))
			mid := e.group(s, rheo.GroupConfig{Start: rheo.AtTime(Epoch.Add(1500 * time.Millisecond))})
			require.Equal(t, []int64{3}, seqs(e.drain(s, mid)))
			early := e.group(s, rheo.GroupConfig{Start: rheo.AtTime(time.Unix(0, 0))})
			require.Equal(t, []int64{1, 2, 3}, seqs(e.drain(s, early)))
		}},
		{"start_at_a_future_time_starts_after_the_last_event", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{Start: rheo.AtTime(Epoch.Add(time.Hour))})
			e.requireLag(s, g, 0, 2, 2)
			e.requireLag(s, g, 1, 0, 0)
			e.requireNone(s, g)
			e.appendN(s, 0, 1)
			e.appendN(s, 1, 1)
			require.Equal(t, []pos{{0, 3}, {1, 1}}, positions(e.fetch(s, g, rheo.FetchOptions{Limit: 10})))
		}},
		{"start_applies_only_to_its_partitions", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(3)
			for p := range 3 {
				e.appendN(s, p, 2)
			}
			g := e.group(s, rheo.GroupConfig{Start: rheo.Latest(), Partitions: []int{1}})
			e.requireLag(s, g, 0, 0, 2)
			e.requireLag(s, g, 1, 2, 2)
			e.requireLag(s, g, 2, 0, 2)
			require.Equal(t, []pos{{0, 1}, {0, 2}, {2, 1}, {2, 2}}, positions(e.fetch(s, g, rheo.FetchOptions{Limit: 10})))
		}},
		{"start_partitions_out_of_range_is_invalid_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			before := e.snapshot()
			err := e.c.CreateGroup(e.ctx, s, "g", rheo.GroupConfig{Start: rheo.Latest(), Partitions: []int{0, 2}})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)
			require.Equal(t, before, e.snapshot())
		}},
	})
}

func runInspect(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"group_infos_equal_group_info_of_each_group", func(t *testing.T, f Factory) {
			// Groups at different points share some frontiers and not
			// others; retention is set so HoldsRetention is computed.
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 4)
			e.clk.Advance(time.Second)
			e.appendN(s, 1, 3)
			require.NoError(t, e.c.SetRetention(e.ctx, s, rheo.Retention{MaxEvents: 2}))
			var gs []string
			for i := range 4 {
				g := e.group(s, rheo.GroupConfig{MaxAttempts: 2 + i})
				gs = append(gs, g)
				ls := e.fetch(s, g, rheo.FetchOptions{Limit: 2 * i})
				if i >= 2 {
					e.ack(ls[:1]...)
					require.NoError(t, e.c.Reject(e.ctx, ls[len(ls)-1], "bad"))
				}
			}
			names := append(slices.Clone(gs[:2]), Name("missing"))
			names = append(names, gs[2:]...)
			infos, errs := e.c.GroupInfos(e.ctx, s, names)
			require.Len(t, infos, len(names))
			require.Len(t, errs, len(names))
			for i, g := range names {
				if i == 2 {
					require.ErrorIs(t, errs[i], rheo.ErrGroupNotFound)
					require.Equal(t, rheo.GroupInfo{}, infos[i])
					continue
				}
				require.NoError(t, errs[i], g)
				require.Equal(t, e.info(s, g), infos[i], g)
			}
			require.True(t, infos[0].HoldsRetention, "a group at the start holds MaxEvents back")
			_, errs = e.c.GroupInfos(e.ctx, Name("nope"), gs[:1])
			require.ErrorIs(t, errs[0], rheo.ErrStreamNotFound)
		}},
		{"group_info_of_a_fresh_group", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.clk.Advance(time.Second)
			e.appendN(s, 1, 2)
			e.clk.Advance(time.Second)
			e.appendN(s, 0, 3)
			g := e.group(s, rheo.GroupConfig{})
			gi := e.info(s, g)
			require.Equal(t, s, gi.Stream)
			require.Equal(t, g, gi.Group)
			require.Equal(t, int64(5), gi.Lag.Total)
			require.Equal(t, int64(0), gi.Inflight)
			require.Equal(t, int64(5), gi.Available, "events not yet offered count as available")
			require.Equal(t, int64(0), gi.DeadLetters)
			require.True(t, gi.OldestPending.Equal(Epoch.Add(time.Second)), "OldestPending %v", gi.OldestPending)
		}},
		{"group_info_counts_leases_delays_and_dead_letters", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			for i := range 6 {
				_, err := e.c.Append(e.ctx, s, rheo.Message{Timestamp: Epoch.Add(time.Duration(i) * time.Minute)})
				require.NoError(t, err)
			}
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 4, LeaseDuration: time.Second})
			e.ack(ls[0])
			require.NoError(t, e.c.Reject(e.ctx, ls[1], "bad"))
			require.NoError(t, e.c.Nack(e.ctx, ls[2], "later", rheo.Delay(time.Hour)))
			// ls[3] stays leased; events 5 and 6 were never offered.
			gi := e.info(s, g)
			require.Equal(t, int64(1), gi.Inflight)
			require.Equal(t, int64(3), gi.Available, "delayed seq 3 plus unoffered 5 and 6")
			require.Equal(t, int64(1), gi.DeadLetters)
			require.True(t, gi.OldestPending.Equal(Epoch.Add(2*time.Minute)), "oldest pending is seq 3: %v", gi.OldestPending)
			require.Equal(t, int64(4), gi.Lag.Total)
			e.clk.Advance(time.Minute)
			gi = e.info(s, g)
			require.Equal(t, int64(1), gi.Inflight, "an expired lease nobody reclaimed is still inflight")
		}},
		{"oldest_pending_is_zero_when_all_terminal", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 2)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			gi := e.info(s, g)
			require.True(t, gi.OldestPending.IsZero(), "OldestPending %v", gi.OldestPending)
			require.Equal(t, int64(0), gi.Available)
			require.Equal(t, int64(0), gi.Inflight)
		}},
		{"dead_letters_ordered_by_partition_then_sequence", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 1, 2)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 10})
			for i := len(ls) - 1; i >= 0; i-- { // reject in reverse to defeat insertion order
				require.NoError(t, e.c.Reject(e.ctx, ls[i], "r"))
			}
			dls := e.deadLetters(s, g)
			got := make([]pos, len(dls))
			for i, dl := range dls {
				got[i] = pos{dl.Partition, dl.Sequence}
				require.Equal(t, dl.EventID, dl.Event.ID)
			}
			require.Equal(t, []pos{{0, 1}, {0, 2}, {1, 1}, {1, 2}}, got)
			require.Equal(t, int64(4), e.info(s, g).DeadLetters)
		}},
		{"dead_letters_page_after_an_event_id", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 5)
			g := e.group(s, rheo.GroupConfig{})
			for _, l := range e.fetchN(s, g, 5) {
				require.NoError(t, e.c.Reject(e.ctx, l, "r"))
			}
			first, err := e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{Limit: 2})
			require.NoError(t, err)
			require.Len(t, first, 2)
			next, err := e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{Limit: 2, After: first[1].EventID})
			require.NoError(t, err)
			require.Equal(t, []int64{3, 4}, []int64{next[0].Sequence, next[1].Sequence})
			last, err := e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{Limit: 2, After: next[1].EventID})
			require.NoError(t, err)
			require.Len(t, last, 1)
			end, err := e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{After: last[0].EventID})
			require.NoError(t, err)
			require.Empty(t, end)
		}},
		{"dead_letters_after_an_unknown_or_live_id_is_cursor_not_found", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 2)
			require.NoError(t, e.c.Reject(e.ctx, ls[0], "r"))
			e.ack(ls[1])
			_, err := e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{After: "missing-cursor"})
			require.ErrorIs(t, err, rheo.ErrCursorNotFound)
			// The same words on every store.
			require.Contains(t, err.Error(), fmt.Sprintf("event %q is not a dead letter of group %q of stream %q", "missing-cursor", g, s))
			_, err = e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{After: ls[1].Event.ID})
			require.ErrorIs(t, err, rheo.ErrCursorNotFound, "an acked event is not a dead letter")
			other := e.group(s, rheo.GroupConfig{})
			_, err = e.c.DeadLetters(e.ctx, s, other, rheo.DeadLetterOptions{After: ls[0].Event.ID})
			require.ErrorIs(t, err, rheo.ErrCursorNotFound, "another group's dead letter is not a cursor")
		}},
	})
}
