package rheotest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// SharedFactory opens two backends on one fresh store, as two processes
// sharing a database would (two connections, two sets of caches); a store
// kept in one process's memory returns the same backend twice.
type SharedFactory func(t testing.TB) (a, b rheo.Backend)

// RunShared runs the cases of two clients on one store: what one client
// deletes and creates again under the same name, the other must see as it
// is now, never as its caches remember it. Every backend shared between
// processes must pass it.
func RunShared(t *testing.T, f SharedFactory) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, a, b *rheo.Client, clk *clock.Frozen)
	}{
		{"group_deleted_and_created_again_by_another_client", func(t *testing.T, a, b *rheo.Client, clk *clock.Frozen) {
			ctx := context.Background()
			s, g := Name("s"), Name("g")
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 1}))
			require.NoError(t, a.CreateGroup(ctx, s, g, rheo.GroupConfig{}))
			_, err := a.Append(ctx, s, rheo.Message{ID: "e1", Type: "t"})
			require.NoError(t, err)
			// b learns the group's ids, and holds a lease of it.
			ls, err := b.Fetch(ctx, s, g, rheo.FetchOptions{Limit: 10})
			require.NoError(t, err)
			require.Len(t, ls, 1)
			held := ls[0]

			require.NoError(t, a.DeleteGroup(ctx, s, g, rheo.DeleteOptions{Confirm: true}))
			require.ErrorIs(t, b.Ack(ctx, held), rheo.ErrGroupNotFound, "the group is gone")
			_, err = b.Fetch(ctx, s, g, rheo.FetchOptions{Limit: 10})
			require.ErrorIs(t, err, rheo.ErrGroupNotFound)

			require.NoError(t, a.CreateGroup(ctx, s, g, rheo.GroupConfig{}))
			_, err = a.Append(ctx, s, rheo.Message{ID: "e2", Type: "t"})
			require.NoError(t, err)
			require.ErrorIs(t, b.Ack(ctx, held), rheo.ErrStaleLease, "a lease of the deleted group is current in no group")
			lag, err := b.Lag(ctx, s, g)
			require.NoError(t, err)
			require.EqualValues(t, 2, lag.Total, "the new group starts at the beginning")
			ls, err = b.Fetch(ctx, s, g, rheo.FetchOptions{Limit: 10})
			require.NoError(t, err)
			require.Equal(t, []string{"e1", "e2"}, eventIDs(ls), "b fetches from the new group")
			require.NoError(t, b.AckBatch(ctx, ls))
			info, err := a.GroupInfo(ctx, s, g)
			require.NoError(t, err)
			require.EqualValues(t, 0, info.Lag.Total)

			// A lease a fetched from the new group settles through b.
			_, err = a.Append(ctx, s, rheo.Message{ID: "e3", Type: "t"})
			require.NoError(t, err)
			ls, err = a.Fetch(ctx, s, g, rheo.FetchOptions{Limit: 10})
			require.NoError(t, err)
			require.Len(t, ls, 1)
			_, err = b.Renew(ctx, ls[0], time.Minute)
			require.NoError(t, err)
			require.NoError(t, b.Ack(ctx, ls[0]))
		}},
		{"stream_deleted_and_created_again_by_another_client", func(t *testing.T, a, b *rheo.Client, clk *clock.Frozen) {
			ctx := context.Background()
			s := Name("s")
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 2}))
			_, err := b.Append(ctx, s, rheo.Message{ID: "old", Type: "t", Key: "k"})
			require.NoError(t, err)
			evs, err := b.Query(ctx, rheo.Query{Stream: s})
			require.NoError(t, err)
			require.Len(t, evs, 1)

			require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
			_, err = b.Query(ctx, rheo.Query{Stream: s})
			require.ErrorIs(t, err, rheo.ErrStreamNotFound)
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 2}))
			require.NoError(t, a.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))

			e, err := b.Append(ctx, s, rheo.Message{ID: "new", Type: "t", Key: "k"})
			require.NoError(t, err, "b appends to the new stream")
			require.EqualValues(t, 1, e.Sequence)
			for _, c := range []*rheo.Client{a, b} {
				evs, err := c.Query(ctx, rheo.Query{Stream: s})
				require.NoError(t, err)
				require.Equal(t, []string{"new"}, eventIDs(evs))
				got, err := c.Read(ctx, s, rheo.ReadOptions{Partition: e.Partition})
				require.NoError(t, err)
				require.Equal(t, []string{"new"}, eventIDs(got))
				st, err := c.Stream(ctx, s)
				require.NoError(t, err)
				require.EqualValues(t, 1, st.HighWatermarks[e.Partition])
			}
			ls, err := b.Fetch(ctx, s, "g", rheo.FetchOptions{Limit: 10})
			require.NoError(t, err)
			require.Equal(t, []string{"new"}, eventIDs(ls))
			require.NoError(t, b.AckBatch(ctx, ls))
		}},
		{"stream_created_again_with_other_partitions_by_another_client", func(t *testing.T, a, b *rheo.Client, clk *clock.Frozen) {
			ctx := context.Background()
			s := Name("s")
			keys := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}
			append8 := func(c *rheo.Client) []rheo.Event {
				t.Helper()
				ms := make([]rheo.Message, len(keys))
				for i, k := range keys {
					ms[i] = rheo.Message{Type: "t", Key: k}
				}
				evs, err := c.AppendBatch(ctx, s, ms)
				require.NoError(t, err)
				return evs
			}
			parts := func(evs []rheo.Event) []int {
				out := make([]int, len(evs))
				for i, e := range evs {
					out[i] = e.Partition
				}
				return out
			}
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 4}))
			append8(b) // b caches 4 partitions

			// Fewer partitions: b routes by the new count at once (the
			// store refuses what the old count routed).
			require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 1}))
			require.Equal(t, []int{0, 0, 0, 0, 0, 0, 0, 0}, parts(append8(b)))
			evs, err := b.Query(ctx, rheo.Query{Stream: s, Partitions: []int{0}})
			require.NoError(t, err)
			require.Len(t, evs, 8)
			_, err = b.Query(ctx, rheo.Query{Stream: s, Partitions: []int{3}})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)
			require.NoError(t, a.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))
			for _, c := range []*rheo.Client{a, b} {
				lag, err := c.Lag(ctx, s, "g")
				require.NoError(t, err)
				require.Len(t, lag.Partitions, 1)
			}
			// b's store knows the group of 1 partition now (as a fetch
			// leaves it), and is asked next for more partitions than
			// that: the stream's, created again with 4.
			ls, err := b.Fetch(ctx, s, "g", rheo.FetchOptions{Limit: 100})
			require.NoError(t, err)
			require.Len(t, ls, 8)
			require.NoError(t, b.AckBatch(ctx, ls))
			// b's count is fresh now; a new shrink is found by the fetch.
			require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 4}))
			require.NoError(t, a.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))
			clk.Advance(10 * time.Second)
			ls, err = b.Fetch(ctx, s, "g", rheo.FetchOptions{Limit: 1})
			require.NoError(t, err)
			require.Empty(t, ls) // b caches 4 partitions
			require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 1}))
			require.NoError(t, a.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))
			_, err = a.Append(ctx, s, rheo.Message{ID: "one", Type: "t"})
			require.NoError(t, err)
			ls, err = b.Fetch(ctx, s, "g", rheo.FetchOptions{Limit: 10})
			require.NoError(t, err, "a fetch of every partition takes the partitions the stream has")
			require.Equal(t, []string{"one"}, eventIDs(ls))
			_, err = b.Fetch(ctx, s, "g", rheo.FetchOptions{Limit: 10, Partitions: []int{2}})
			require.ErrorIs(t, err, rheo.ErrInvalidPartition)

			// Every request that names a partition, with b's count out of
			// date both ways.
			for _, grow := range []bool{true, false} {
				from, to := 1, 4
				if !grow {
					from, to = 4, 1
				}
				require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
				require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: from}))
				require.NoError(t, a.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))
				clk.Advance(10 * time.Second)
				_, err = b.Lag(ctx, s, "g") // b caches from
				require.NoError(t, err)
				require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
				require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: to}))
				require.NoError(t, a.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))
				if !grow {
					// A replay of every partition of b's out-of-date count
					// (4; the stream has 1) is refused whole or done right,
					// never half done.
					_, err = a.Append(ctx, s, rheo.Message{Type: "t"})
					require.NoError(t, err)
					ls, err := a.Fetch(ctx, s, "g", rheo.FetchOptions{Limit: 10})
					require.NoError(t, err)
					require.NoError(t, a.AckBatch(ctx, ls))
					n, err := b.Replay(ctx, s, "g", rheo.FromSequence(0))
					lag, lerr := a.Lag(ctx, s, "g")
					require.NoError(t, lerr)
					if err != nil {
						require.ErrorIs(t, err, rheo.ErrInvalidPartition)
						require.Zero(t, lag.Total, "a refused replay reopens nothing")
					} else {
						require.Equal(t, 1, n)
						require.EqualValues(t, 1, lag.Total)
					}
				}
				p := 3
				check := func(what string, err error) {
					t.Helper()
					if grow {
						require.NoError(t, err, "%s of partition 3, which the stream has now", what)
					} else {
						require.ErrorIs(t, err, rheo.ErrInvalidPartition, "%s of partition 3, which the stream lacks now", what)
					}
				}
				_, err = b.Append(ctx, s, rheo.Message{Type: "t", Partition: &p})
				check("append", err)
				_, err = b.Read(ctx, s, rheo.ReadOptions{Partition: 3})
				check("read", err)
				_, err = b.Query(ctx, rheo.Query{Stream: s, Partitions: []int{3}})
				check("query", err)
				_, err = b.Lag(ctx, s, "g", 3)
				check("lag", err)
				_, err = b.Replay(ctx, s, "g", rheo.FromSequence(0), 3)
				check("replay", err)
				_, err = b.ResetGroup(ctx, s, "g", rheo.ResetOptions{Confirm: true, Start: rheo.Beginning(), Partitions: []int{3}})
				check("reset", err)
				_, err = b.Fetch(ctx, s, "g", rheo.FetchOptions{Limit: 10, Partitions: []int{3}})
				check("fetch", err)
			}

			// More partitions: keys are routed by the new count once the
			// cached count is older than the client's refresh interval
			// (10 s), and a partition named in a request is checked at once.
			require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 4}))
			want := parts(append8(a))
			clk.Advance(10 * time.Second)
			require.Equal(t, want, parts(append8(b)))
			require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 1}))
			append8(b)
			require.NoError(t, a.DeleteStream(ctx, s, rheo.DeleteOptions{Confirm: true}))
			require.NoError(t, a.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 4}))
			_, err = b.Read(ctx, s, rheo.ReadOptions{Partition: 3})
			require.NoError(t, err, "partition 3 exists again")
			require.Equal(t, want, parts(append8(b)), "and keys follow")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ba, bb := f(t)
			clk := clock.NewFrozen(Epoch)
			a := rheo.New(ba, rheo.WithClock(clk))
			b := rheo.New(bb, rheo.WithClock(clk))
			tc.run(t, a, b, clk)
		})
	}
}

func eventIDs[T interface{ rheo.Event | rheo.Lease }](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		switch v := any(x).(type) {
		case rheo.Event:
			out[i] = v.ID
		case rheo.Lease:
			out[i] = v.Event.ID
		}
	}
	return out
}
