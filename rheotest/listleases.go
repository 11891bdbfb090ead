package rheotest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// runListLeases holds backends that implement rheo.LeaseLister to one
// listing of current leases; the others must answer ErrUnsupported.
func runListLeases(t *testing.T, f Factory) {
	runCases(t, f, []testCase{
		{"lists_current_leases_by_position", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			e.appendN(s, 0, 3)
			e.appendN(s, 1, 3)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 6, ConsumerID: "w1", LeaseDuration: time.Minute})
			require.Len(t, ls, 6)
			got, err := e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{})
			if errors.Is(err, rheo.ErrUnsupported) {
				_, lister := e.c.Backend().(rheo.LeaseLister)
				require.False(t, lister, "a LeaseLister must not answer ErrUnsupported")
				t.Skip("backend does not list leases")
			}
			require.NoError(t, err)
			require.Len(t, got, 6)
			e.ack(ls[0])
			require.NoError(t, e.c.Reject(e.ctx, ls[4], "bad"))
			require.NoError(t, e.c.Nack(e.ctx, ls[1], "later"))
			e.clk.Advance(2 * time.Minute) // the rest expire, nobody reclaims them
			got, err = e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{})
			require.NoError(t, err)
			want := []rheo.Lease{ls[2], ls[3], ls[5]}
			require.Len(t, got, len(want))
			for i, l := range got {
				require.Equal(t, want[i].Event.ID, l.Event.ID)
				require.Equal(t, want[i].Event.Partition, l.Event.Partition)
				require.Equal(t, want[i].Event.Sequence, l.Event.Sequence)
				require.Equal(t, "w1", l.ConsumerID)
				require.Equal(t, 1, l.Attempt)
				require.True(t, want[i].ExpiresAt.Equal(l.ExpiresAt), "expires %v, want %v", l.ExpiresAt, want[i].ExpiresAt)
				require.True(t, want[i].LeasedAt.Equal(l.LeasedAt), "leased %v, want %v", l.LeasedAt, want[i].LeasedAt)
				require.Empty(t, l.ID, "a listed lease cannot settle")
				require.Empty(t, l.Receipt)
				require.Equal(t, s, l.Stream)
				require.Equal(t, g, l.Group)
			}
			got, err = e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{Limit: 2})
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.Equal(t, ls[2].Event.ID, got[0].Event.ID)
		}},
		{"a_reclaimed_lease_shows_its_new_holder", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			e.appendN(s, 0, 1)
			g := e.group(s, rheo.GroupConfig{})
			e.fetch(s, g, rheo.FetchOptions{ConsumerID: "w1", LeaseDuration: time.Second})
			e.clk.Advance(2 * time.Second)
			l2 := e.fetch(s, g, rheo.FetchOptions{ConsumerID: "w2", LeaseDuration: time.Minute})
			require.Len(t, l2, 1)
			got, err := e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{})
			if errors.Is(err, rheo.ErrUnsupported) {
				t.Skip("backend does not list leases")
			}
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, "w2", got[0].ConsumerID)
			require.Equal(t, 2, got[0].Attempt)
			require.True(t, l2[0].ExpiresAt.Equal(got[0].ExpiresAt))
		}},
		{"by_event_ids_only_those_leased", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(2)
			evs := append(e.appendN(s, 0, 2), e.appendN(s, 1, 2)...)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 3, ConsumerID: "w1"})
			require.Len(t, ls, 3)
			e.ack(ls[0])
			ids := []string{evs[3].ID, ls[0].Event.ID, "no-such-event", ls[2].Event.ID, ls[1].Event.ID}
			got, err := e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{EventIDs: ids})
			if errors.Is(err, rheo.ErrUnsupported) {
				t.Skip("backend does not list leases")
			}
			require.NoError(t, err)
			require.Len(t, got, 2, "the acked, the unoffered and the unknown event are not leased")
			require.Equal(t, ls[1].Event.ID, got[0].Event.ID, "ordered by position")
			require.Equal(t, ls[2].Event.ID, got[1].Event.ID)
			got, err = e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{EventIDs: ids, Limit: 1})
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, ls[1].Event.ID, got[0].Event.ID)
		}},
		{"event_ids_are_a_filter", func(t *testing.T, f Factory) {
			// An ID that comes twice lists its lease once, and an empty,
			// non-nil list lists none (nil lists every lease): through the
			// client and from the backend itself.
			e := newEnv(t, f)
			s := e.stream(2)
			evs := append(e.appendN(s, 0, 2), e.appendN(s, 1, 2)...)
			g := e.group(s, rheo.GroupConfig{})
			ls := e.fetch(s, g, rheo.FetchOptions{Limit: 4, ConsumerID: "w1"})
			require.Len(t, ls, 4)
			ll, ok := e.c.Backend().(rheo.LeaseLister)
			if !ok {
				t.Skip("backend does not list leases")
			}
			ids := []string{evs[2].ID, evs[2].ID, "no-such-event", evs[0].ID, evs[2].ID, evs[0].ID}
			check := func(how string, got []rheo.Lease, err error, want ...string) {
				t.Helper()
				require.NoError(t, err, how)
				var gotIDs []string
				for _, l := range got {
					gotIDs = append(gotIDs, l.Event.ID)
				}
				require.Equal(t, want, gotIDs, how)
			}
			got, err := e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{EventIDs: ids})
			check("client, repeated IDs", got, err, evs[0].ID, evs[2].ID)
			got, err = ll.Leases(e.ctx, s, g, ids, 10)
			check("backend, repeated IDs", got, err, evs[0].ID, evs[2].ID)
			got, err = ll.Leases(e.ctx, s, g, ids, 1)
			check("backend, repeated IDs, limit 1", got, err, evs[0].ID)
			got, err = e.c.Leases(e.ctx, s, g, rheo.LeaseListOptions{EventIDs: []string{}})
			check("client, empty IDs", got, err)
			got, err = ll.Leases(e.ctx, s, g, []string{}, 10)
			check("backend, empty IDs", got, err)
			got, err = ll.Leases(e.ctx, s, g, nil, 10)
			check("backend, nil IDs", got, err, evs[0].ID, evs[1].ID, evs[2].ID, evs[3].ID)
			_, err = e.c.Leases(e.ctx, Name("nope"), g, rheo.LeaseListOptions{EventIDs: []string{}})
			require.ErrorIs(t, err, rheo.ErrStreamNotFound, "an empty list still names a stream")
			_, err = e.c.Leases(e.ctx, s, Name("nope"), rheo.LeaseListOptions{EventIDs: []string{}})
			require.ErrorIs(t, err, rheo.ErrGroupNotFound, "an empty list still names a group")
		}},
		{"unknown_stream_or_group", func(t *testing.T, f Factory) {
			e := newEnv(t, f)
			s := e.stream(1)
			if _, ok := e.c.Backend().(rheo.LeaseLister); !ok {
				t.Skip("backend does not list leases")
			}
			_, err := e.c.Leases(e.ctx, Name("nope"), "g", rheo.LeaseListOptions{})
			require.ErrorIs(t, err, rheo.ErrStreamNotFound)
			_, err = e.c.Leases(e.ctx, s, Name("nope"), rheo.LeaseListOptions{})
			require.ErrorIs(t, err, rheo.ErrGroupNotFound)
			_, err = e.c.Leases(e.ctx, s, "", rheo.LeaseListOptions{})
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			_, err = e.c.Leases(e.ctx, s, "g", rheo.LeaseListOptions{Limit: rheo.MaxLimit + 1})
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
		}},
	})
}
