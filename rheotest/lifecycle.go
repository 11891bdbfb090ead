package rheotest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func init() {
	sections = append(sections,
		section{name: "delete", run: runDelete},
		section{name: "retention", run: runRetention},
	)
}

var confirm = rheo.DeleteOptions{Confirm: true}

func runDelete(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"delete_group_requires_confirm", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			require.ErrorIs(t, e.c.DeleteGroup(e.ctx, s, g, rheo.DeleteOptions{}), rheo.ErrConfirmRequired)
			groups, err := e.c.ListGroups(e.ctx, s)
			require.NoError(t, err)
			require.Equal(t, []string{g}, groups, "an unconfirmed delete writes nothing")
		}},
		{"delete_group_unknown", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			require.ErrorIs(t, e.c.DeleteGroup(e.ctx, s, "nope", confirm), rheo.ErrGroupNotFound)
			require.ErrorIs(t, e.c.DeleteGroup(e.ctx, Name("nostream"), "nope", confirm), rheo.ErrStreamNotFound)
		}},
		{"delete_group_drops_its_state_and_stales_its_leases", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 3)
			e.appendN(s, 1, 2)
			g := e.group(s, rheo.GroupConfig{})
			other := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 5)
			require.NoError(t, e.c.Reject(e.ctx, ls[0], "bad"))
			e.ack(ls[1])
			otherLeases := e.fetchN(s, other, 5)

			require.NoError(t, e.c.DeleteGroup(e.ctx, s, g, confirm))
			groups, err := e.c.ListGroups(e.ctx, s)
			require.NoError(t, err)
			require.Equal(t, []string{other}, groups)
			_, err = e.c.Lag(e.ctx, s, g)
			require.ErrorIs(t, err, rheo.ErrGroupNotFound)
			err = e.c.Ack(e.ctx, ls[2])
			require.True(t, errors.Is(err, rheo.ErrGroupNotFound) || errors.Is(err, rheo.ErrStaleLease), "ack after delete: %v", err)

			// A group of the same name starts afresh; old leases stay stale.
			require.NoError(t, e.c.CreateGroup(e.ctx, s, g, rheo.GroupConfig{}))
			require.ErrorIs(t, e.c.Ack(e.ctx, ls[3]), rheo.ErrStaleLease)
			gi := e.info(s, g)
			require.Zero(t, gi.DeadLetters)
			require.Zero(t, gi.Inflight)
			require.Equal(t, int64(5), gi.Lag.Total)
			require.Len(t, e.drain(s, g), 5, "the new group gets every event")

			// The other group and the events are untouched.
			e.ack(otherLeases...)
			e.requireLag(s, other, 0, 3, 3)
			require.Len(t, e.readAll(s, 0), 3)
		}},
		{"delete_stream_requires_confirm", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 2)
			require.ErrorIs(t, e.c.DeleteStream(e.ctx, s, rheo.DeleteOptions{}), rheo.ErrConfirmRequired)
			require.Len(t, e.readAll(s, 0), 2)
			require.ErrorIs(t, e.c.DeleteStream(e.ctx, Name("nostream"), confirm), rheo.ErrStreamNotFound)
		}},
		{"delete_stream_drops_events_and_groups", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			keep := e.stream(1)
			evs := e.appendN(s, 0, 3)
			e.appendN(keep, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetchN(s, g, 3)

			require.NoError(t, e.c.DeleteStream(e.ctx, s, confirm))
			streams, err := e.c.ListStreams(e.ctx)
			require.NoError(t, err)
			require.Len(t, streams, 1)
			require.Equal(t, keep, streams[0].Name)
			_, err = e.c.Read(e.ctx, s, rheo.ReadOptions{})
			require.ErrorIs(t, err, rheo.ErrStreamNotFound)
			_, err = e.c.Lag(e.ctx, s, g)
			require.ErrorIs(t, err, rheo.ErrStreamNotFound)
			require.Error(t, e.c.Ack(e.ctx, ls[0]))

			// The name can be used again: a new, empty stream whose
			// sequences restart and whose old IDs are new.
			require.NoError(t, e.c.CreateStream(e.ctx, s, rheo.StreamConfig{Partitions: 1}))
			_, err = e.c.ListGroups(e.ctx, s)
			require.NoError(t, err)
			again, err := e.c.Append(e.ctx, s, rheo.Message{ID: evs[0].ID})
			require.NoError(t, err)
			require.Equal(t, int64(1), again.Sequence)
			require.Len(t, e.readAll(keep, 0), 1)
		}},
	})
}

// trim runs a trim and requires it to succeed.
func (e *env) trim(s string, opts rheo.TrimOptions) rheo.TrimReport {
	e.t.Helper()
	rep, err := e.c.Trim(e.ctx, s, opts)
	require.NoError(e.t, err)
	return rep
}

func (e *env) trimmed(s string) []int64 {
	e.t.Helper()
	st, err := e.c.Backend().Stream(e.ctx, s)
	require.NoError(e.t, err)
	return st.TrimmedThrough
}

func maxEvents(n int64) rheo.TrimOptions {
	return rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: n}}
}

func runRetention(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"policy_is_stored_with_the_stream", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := Name("s")
			pol := rheo.Retention{MaxAge: 90 * time.Minute, MaxEvents: 1000, Interest: true}
			require.NoError(t, e.c.CreateStream(e.ctx, s, rheo.StreamConfig{Partitions: 2, Retention: pol}))
			plain := e.stream(1)
			streams, err := e.c.ListStreams(e.ctx)
			require.NoError(t, err)
			byName := map[string]rheo.StreamInfo{}
			for _, si := range streams {
				byName[si.Name] = si
			}
			require.Equal(t, pol, byName[s].Retention)
			require.True(t, byName[plain].Retention.IsZero())

			require.NoError(t, e.c.SetRetention(e.ctx, s, rheo.Retention{MaxEvents: 5}))
			st, err := e.c.Backend().Stream(e.ctx, s)
			require.NoError(t, err)
			require.Equal(t, rheo.Retention{MaxEvents: 5}, st.Retention)
			require.Equal(t, []int64{0, 0}, st.TrimmedThrough)

			require.ErrorIs(t, e.c.SetRetention(e.ctx, s, rheo.Retention{MaxEvents: -1}), rheo.ErrInvalidArgument)
			require.ErrorIs(t, e.c.SetRetention(e.ctx, Name("nostream"), rheo.Retention{MaxEvents: 1}), rheo.ErrStreamNotFound)
			bad := Name("s")
			require.ErrorIs(t, e.c.CreateStream(e.ctx, bad, rheo.StreamConfig{Retention: rheo.Retention{MaxAge: -time.Second}}), rheo.ErrInvalidArgument)
			streams, err = e.c.ListStreams(e.ctx)
			require.NoError(t, err)
			require.Len(t, streams, 2, "a refused create writes nothing")
		}},
		{"trim_without_rules_is_refused", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3)
			_, err := e.c.Trim(e.ctx, s, rheo.TrimOptions{})
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			_, err = e.c.Trim(e.ctx, s, rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: 1}, Force: true})
			require.ErrorIs(t, err, rheo.ErrConfirmRequired)
			_, err = e.c.Trim(e.ctx, Name("nostream"), maxEvents(1))
			require.ErrorIs(t, err, rheo.ErrStreamNotFound)
			require.Len(t, e.readAll(s, 0), 3)
		}},
		{"max_events_trims_each_partition", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			evs := e.appendN(s, 0, 10)
			e.appendN(s, 1, 2)
			rep := e.trim(s, maxEvents(3))
			require.Equal(t, int64(7), rep.Removed)
			require.Equal(t, []int64{7, 0}, e.trimmed(s))
			require.Equal(t, []int64{8, 9, 10}, seqs(e.readAll(s, 0)), "reads start at the oldest retained event")
			got, err := e.c.Query(e.ctx, rheo.Query{Stream: s, Partitions: []int{0}})
			require.NoError(t, err)
			require.Equal(t, []int64{8, 9, 10}, seqs(got))
			found, err := e.c.Backend().Events(e.ctx, s, []string{evs[0].ID, evs[9].ID})
			require.NoError(t, err)
			require.Len(t, found, 1, "a removed event is gone from ID lookups")
			// Sequences are never reused; a removed ID may be appended again.
			again, err := e.c.Append(e.ctx, s, rheo.Message{ID: evs[0].ID, Partition: new(int)})
			require.NoError(t, err)
			require.Equal(t, int64(11), again.Sequence)
			rep = e.trim(s, maxEvents(3))
			require.Equal(t, int64(1), rep.Removed)
			require.Equal(t, []int64{9, 10, 11}, seqs(e.readAll(s, 0)))
		}},
		{"trim_runs_in_bounded_batches", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 25)
			rep := e.trim(s, rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: 2}, BatchSize: 4})
			require.Equal(t, int64(23), rep.Removed)
			require.Equal(t, []int64{23}, e.trimmed(s))
			_, err := e.c.Trim(e.ctx, s, rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: 2}, BatchSize: rheo.MaxLimit + 1})
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
		}},
		{"slow_group_holds_retention_back", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := Name("s")
			require.NoError(t, e.c.CreateStream(e.ctx, s, rheo.StreamConfig{Retention: rheo.Retention{MaxEvents: 2}}))
			fast := e.group(s, rheo.GroupConfig{})
			slow := e.group(s, rheo.GroupConfig{})
			e.appendN(s, 0, 10)
			e.drain(s, fast)
			ls := e.fetchN(s, slow, 6)
			e.ack(ls[:4]...) // frontier 4, 5 and 6 leased
			require.True(t, e.info(s, slow).HoldsRetention)
			require.False(t, e.info(s, fast).HoldsRetention)

			rep := e.trim(s, rheo.TrimOptions{})
			require.Equal(t, int64(4), rep.Removed)
			require.Equal(t, []int64{4}, e.trimmed(s))
			require.Equal(t, int64(8), rep.Partitions[0].Target)
			require.Equal(t, []string{slow}, rep.Partitions[0].HeldBy)
			require.Zero(t, rep.Skipped)
			e.requireLag(s, slow, 0, 4, 10)
			e.ack(ls[4:]...)
			e.drain(s, slow)
			require.False(t, e.info(s, slow).HoldsRetention)
			rep = e.trim(s, rheo.TrimOptions{})
			require.Equal(t, int64(4), rep.Removed)
			require.Empty(t, rep.Partitions[0].HeldBy)
			require.Equal(t, []int64{9, 10}, seqs(e.readAll(s, 0)))
			require.Zero(t, e.info(s, slow).Skipped)
		}},
		{"trimmed_dead_letters_are_counted_as_skipped", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			e.appendN(s, 0, 4)
			ls := e.fetchN(s, g, 4)
			require.NoError(t, e.c.Reject(e.ctx, ls[1], "poison"))
			e.ack(ls[0], ls[2], ls[3])
			require.Equal(t, int64(1), e.info(s, g).DeadLetters)
			rep := e.trim(s, maxEvents(1))
			require.Equal(t, int64(3), rep.Removed)
			require.Equal(t, int64(1), rep.DeadLetters)
			require.Equal(t, int64(1), rep.Skipped)
			gi := e.info(s, g)
			require.Zero(t, gi.DeadLetters)
			require.Equal(t, int64(1), gi.Skipped)
			require.Empty(t, e.deadLetters(s, g))
			e.requireLag(s, g, 0, 4, 4)
		}},
		{"forced_trim_makes_groups_skip_the_range", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			g := e.group(s, rheo.GroupConfig{})
			e.appendN(s, 0, 10)
			ls := e.fetchN(s, g, 3)
			e.ack(ls[0])
			require.NoError(t, e.c.Reject(e.ctx, ls[1], "poison"))
			// Event 3 is leased, 4..10 never offered.
			rep := e.trim(s, rheo.TrimOptions{Retention: rheo.Retention{MaxEvents: 5}, Force: true, Confirm: true})
			require.Equal(t, int64(5), rep.Removed)
			// Not acked: 2 (dead), 3 (leased), 4 and 5 (never offered).
			require.Equal(t, int64(4), rep.Skipped)
			require.Equal(t, int64(1), rep.DeadLetters)
			require.Empty(t, rep.Partitions[0].HeldBy)
			gi := e.info(s, g)
			require.Equal(t, int64(4), gi.Skipped)
			require.Zero(t, gi.DeadLetters)
			require.Zero(t, gi.Inflight)
			e.requireLag(s, g, 0, 5, 10)
			require.ErrorIs(t, e.c.Ack(e.ctx, ls[2]), rheo.ErrStaleLease, "a lease on a trimmed event is stale")
			require.Equal(t, []int64{6, 7, 8, 9, 10}, seqs(e.drain(s, g)))
			e.requireLag(s, g, 0, 10, 10)
		}},
		{"starts_below_the_trimmed_point_begin_at_the_oldest_retained_event", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			evs := e.appendN(s, 0, 10)
			e.trim(s, maxEvents(5))
			for _, pos := range []rheo.Position{rheo.Beginning(), rheo.AfterSequence(2), rheo.AtTime(Epoch.Add(-time.Hour))} {
				g := e.group(s, rheo.GroupConfig{Start: pos})
				e.requireLag(s, g, 0, 5, 10)
				require.Equal(t, int64(6), e.fetchN(s, g, 1)[0].Event.Sequence)
			}
			g := e.group(s, rheo.GroupConfig{})
			e.drain(s, g)
			require.NoError(t, errOf(e.c.Replay(e.ctx, s, g, rheo.FromSequence(0))))
			e.requireLag(s, g, 0, 5, 10)
			require.Equal(t, []int64{6, 7, 8, 9, 10}, seqs(e.drain(s, g)))
			require.NoError(t, errOf(e.c.ResetGroup(e.ctx, s, g, rheo.ResetOptions{Confirm: true, Start: rheo.Beginning()})))
			e.requireLag(s, g, 0, 5, 10)
			_, err := e.c.Replay(e.ctx, s, g, rheo.Events(evs[0].ID))
			require.ErrorIs(t, err, rheo.ErrInvalidArgument, "a removed event cannot be replayed by ID")
			got, err := e.c.Query(e.ctx, rheo.Query{Stream: s, AfterSequence: 1, UntilSequence: 7})
			require.NoError(t, err)
			require.Equal(t, []int64{6, 7}, seqs(got), "a query over a trimmed range returns what is retained")
		}},
		{"interest_keeps_what_some_group_needs", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 10)
			interest := rheo.TrimOptions{Retention: rheo.Retention{Interest: true}}
			require.Zero(t, e.trim(s, interest).Removed, "no groups: interest keeps everything")
			a := e.group(s, rheo.GroupConfig{})
			b := e.group(s, rheo.GroupConfig{})
			e.ack(e.fetchN(s, a, 3)...)
			e.ack(e.fetchN(s, b, 6)...)
			rep := e.trim(s, interest)
			require.Equal(t, int64(3), rep.Removed)
			require.Empty(t, rep.Partitions[0].HeldBy)
			require.False(t, e.info(s, a).HoldsRetention, "interest alone is never held back")
			require.Equal(t, []int64{3}, e.trimmed(s))
		}},
		{"max_age_trims_the_old_prefix", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 3) // at Epoch
			e.clk.Advance(time.Hour)
			e.appendN(s, 0, 2) // at Epoch+1h
			e.clk.Advance(30 * time.Minute)
			rep := e.trim(s, rheo.TrimOptions{Retention: rheo.Retention{MaxAge: time.Hour}})
			require.Equal(t, int64(3), rep.Removed)
			require.Equal(t, []int64{4, 5}, seqs(e.readAll(s, 0)))
			e.clk.Advance(time.Hour)
			require.Equal(t, int64(2), e.trim(s, rheo.TrimOptions{Retention: rheo.Retention{MaxAge: time.Hour}}).Removed)
			require.Empty(t, e.readAll(s, 0))
			ev, err := e.c.Append(e.ctx, s, rheo.Message{})
			require.NoError(t, err)
			require.Equal(t, int64(6), ev.Sequence, "sequences continue after an emptied partition")
		}},
		{"max_age_between_microseconds_removes_exactly_the_older_events", func(t *testing.T, f Factory) {
			// Times are kept in whole microseconds; a MaxAge that is not a
			// whole number of them still removes exactly the events older
			// than now − MaxAge, and GroupInfo says so first.
			e := newEnv(t, f)
			s := e.stream(1)
			now := e.clk.Now()
			for _, at := range []time.Time{now.Add(-time.Minute - time.Microsecond), now.Add(-time.Minute), now} {
				_, err := e.c.Append(e.ctx, s, rheo.Message{Timestamp: at, Payload: []byte(`{}`)})
				require.NoError(t, err)
			}
			g := e.group(s, rheo.GroupConfig{})
			r := rheo.Retention{MaxAge: time.Minute + 500*time.Nanosecond}
			require.NoError(t, e.c.SetRetention(e.ctx, s, r))
			require.True(t, e.info(s, g).HoldsRetention, "the first event is older than now − MaxAge")
			rep := e.trim(s, rheo.TrimOptions{Retention: r, Force: true, Confirm: true})
			require.Equal(t, int64(1), rep.Removed)
			require.Equal(t, int64(1), rep.Partitions[0].Target)
			require.Equal(t, []int64{2, 3}, seqs(e.readAll(s, 0)))
		}},
		{"backend_trim_and_replay_of_a_missing_partition_are_refused", func(t *testing.T, f Factory) {
			// The client checks partitions first; a backend called directly
			// (or racing a stream created again with fewer partitions)
			// refuses them itself, and writes nothing.
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 2)
			g := e.group(s, rheo.GroupConfig{})
			e.ack(e.fetchN(s, g, 2)...)
			b := e.c.Backend()
			_, err := b.Trim(e.ctx, rheo.TrimRequest{Stream: s, Partition: 2, Through: 1, Limit: 10, Force: true})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)
			_, err = b.Replay(e.ctx, rheo.ReplayRequest{Stream: s, Group: g,
				Events: []rheo.EventRef{{Partition: 0, Sequence: 1}, {Partition: 5, Sequence: 1}}})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)
			require.Equal(t, int64(2), e.lag(s, g).Partitions[0].Frontier, "nothing was reopened")
			n, err := b.Replay(e.ctx, rheo.ReplayRequest{Stream: s, Group: g, Events: []rheo.EventRef{{Partition: 0, Sequence: 1}}})
			require.NoError(t, err, "the store still answers")
			require.Equal(t, 1, n)
		}},
		{"retention_lease_has_one_holder", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			b := e.c.Backend()
			now := Epoch
			held, err := b.LeaseRetention(e.ctx, s, "a", now, now.Add(time.Minute))
			require.NoError(t, err)
			require.True(t, held)
			held, err = b.LeaseRetention(e.ctx, s, "b", now.Add(30*time.Second), now.Add(2*time.Minute))
			require.NoError(t, err)
			require.False(t, held, "b must wait while a holds the lease")
			held, err = b.LeaseRetention(e.ctx, s, "a", now.Add(30*time.Second), now.Add(90*time.Second))
			require.NoError(t, err)
			require.True(t, held, "the holder renews")
			held, err = b.LeaseRetention(e.ctx, s, "b", now.Add(60*time.Second), now.Add(2*time.Minute))
			require.NoError(t, err)
			require.False(t, held, "a renewed until 90s")
			held, err = b.LeaseRetention(e.ctx, s, "b", now.Add(90*time.Second), now.Add(2*time.Minute))
			require.NoError(t, err)
			require.True(t, held, "an expired lease is taken over")
			held, err = b.LeaseRetention(e.ctx, s, "b", now.Add(100*time.Second), now.Add(100*time.Second))
			require.NoError(t, err)
			require.True(t, held, "release")
			held, err = b.LeaseRetention(e.ctx, s, "a", now.Add(100*time.Second), now.Add(3*time.Minute))
			require.NoError(t, err)
			require.True(t, held, "a released lease is free")
			_, err = b.LeaseRetention(e.ctx, Name("nostream"), "a", now, now.Add(time.Minute))
			require.ErrorIs(t, err, rheo.ErrStreamNotFound)
		}},
		{"enforce_retention_skips_a_stream_leased_elsewhere", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := Name("s")
			require.NoError(t, e.c.CreateStream(e.ctx, s, rheo.StreamConfig{Retention: rheo.Retention{MaxEvents: 2}}))
			plain := e.stream(1)
			e.appendN(s, 0, 5)
			e.appendN(plain, 0, 5)
			held, err := e.c.Backend().LeaseRetention(e.ctx, s, "someone-else", Epoch, Epoch.Add(time.Minute))
			require.NoError(t, err)
			require.True(t, held)
			reps, err := e.c.EnforceRetention(e.ctx)
			require.NoError(t, err)
			require.Empty(t, reps)
			require.Len(t, e.readAll(s, 0), 5)
			e.clk.Advance(time.Minute)
			reps, err = e.c.EnforceRetention(e.ctx)
			require.NoError(t, err)
			require.Len(t, reps, 1)
			require.Equal(t, s, reps[0].Stream)
			require.Equal(t, int64(3), reps[0].Removed)
			require.Len(t, e.readAll(plain, 0), 5, "a stream without a policy is never trimmed")
			// The pass released its lease.
			held, err = e.c.Backend().LeaseRetention(e.ctx, s, "someone-else", e.clk.Now(), e.clk.Now().Add(time.Minute))
			require.NoError(t, err)
			require.True(t, held)
		}},
		{"two_clients_enforcing_retention_at_once", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			other := rheo.New(e.c.Backend(), rheo.WithClock(e.clk)) // shares the store; not closed (e.c owns it)
			s := Name("s")
			require.NoError(t, e.c.CreateStream(e.ctx, s, rheo.StreamConfig{Partitions: 2, Retention: rheo.Retention{MaxEvents: 3}}))
			g := e.group(s, rheo.GroupConfig{})
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for _, c := range []*rheo.Client{e.c, other} {
				wg.Go(func() {
					for range 10 {
						if _, err := c.EnforceRetention(e.ctx); err != nil {
							errs <- err
						}
					}
				})
			}
			for i := range 20 {
				e.appendN(s, i%2, 2)
				e.drain(s, g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			// One last pass from either client leaves exactly MaxEvents.
			_, err := other.EnforceRetention(e.ctx)
			require.NoError(t, err)
			require.Equal(t, []int64{17, 17}, e.trimmed(s))
			for p := range 2 {
				require.Equal(t, []int64{18, 19, 20}, seqs(e.readAll(s, p)))
			}
			e.requireLag(s, g, 0, 20, 20)
			require.Zero(t, e.info(s, g).Skipped)
		}},
	})
}
