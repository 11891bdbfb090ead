package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// TestManyExpiredLeasesAreClaimedInSequenceOrder runs, on SQLite and on
// the memory backend, fetches from a partition with more expired leases
// than a fetch reads of the index of due times (so that SQLite looks for
// them in sequence order, or, where delayed retries come first, reads them
// all), with leases at the attempt limit among them (buried first, R6).
// Both stores must claim the same sequences and bury the same leases.
func TestManyExpiredLeasesAreClaimedInSequenceOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		delayed int // the first sequences are nacked with a day's delay
	}{
		{"dense", 0},
		{"behind delayed retries", 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(b rheo.Backend) (claims [][]int64, dead []int64) {
				ctx := context.Background()
				clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
				c := rheo.New(b, rheo.WithClock(clk))
				require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
				require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 2}))
				ms := make([]rheo.Message, 140)
				_, err := c.AppendBatch(ctx, "s", ms)
				require.NoError(t, err)
				opts := rheo.FetchOptions{Limit: 140, LeaseDuration: time.Minute}
				ls, err := c.Fetch(ctx, "s", "g", opts)
				require.NoError(t, err)
				require.Len(t, ls, 140)
				for _, l := range ls[:tc.delayed] {
					require.NoError(t, c.Nack(ctx, l, "later", rheo.Delay(24*time.Hour)))
				}
				// All expire; the first five claimed again reach the
				// attempt limit (2) and expire again with the rest.
				clk.Advance(2 * time.Minute)
				again, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 5, LeaseDuration: time.Minute})
				require.NoError(t, err)
				claims = append(claims, seqs(again))
				clk.Advance(2 * time.Minute)
				for range 6 {
					got, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 5, LeaseDuration: time.Hour})
					require.NoError(t, err)
					claims = append(claims, seqs(got))
				}
				dls, err := c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{Limit: 100})
				require.NoError(t, err)
				for _, d := range dls {
					dead = append(dead, d.Sequence)
				}
				return claims, dead
			}
			wantClaims, wantDead := run(memory.New())
			gotClaims, gotDead := run(open(t))
			require.Equal(t, wantClaims, gotClaims)
			require.Equal(t, wantDead, gotDead)
			require.NotEmpty(t, wantDead, "some leases reached the attempt limit")
			t.Logf("claims %v, buried %v", gotClaims, gotDead)
		})
	}
}

func seqs(ls []rheo.Lease) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.Event.Sequence
	}
	return out
}
