package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// TestReleaseKeepsReadySets: a release makes the delivery due at the
// releaser's now, which may be at or below the partition's watermark (it
// joins the ready set at once) or above it (it must leave the ready set,
// where the expired lease it settles may already sit, until a fetch whose
// clock reaches it moves it back); its attempt goes back by one. The
// released leases here expired and were moved into the ready set by a
// fetch that did not claim them. Redis and the memory backend run the same
// steps and must claim the same deliveries at the same attempts; on Redis
// the ready sets are checked against the due sets after every step. With
// 40 partitions the work sits on the last one, so the fetches take the
// path of more than 8 partitions (runs of 32 asked for due sets at once).
func TestReleaseKeepsReadySets(t *testing.T) {
	for _, parts := range []int{1, 40} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			rb, rc := newBackend(t)
			mb := memory.New()
			t.Cleanup(func() { _ = mb.Close() })
			traces := map[string][]string{}
			for _, be := range []rheo.Backend{mb, rb} {
				name := fmt.Sprintf("%T", be)
				ctx := context.Background()
				clk := clock.NewFrozen(epoch)
				c := rheo.New(be, rheo.WithClock(clk))
				require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
				require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 2}))
				w := parts - 1
				for range 3 {
					_, err := c.Append(ctx, "s", rheo.Message{Partition: &w, Payload: []byte(`{}`)})
					require.NoError(t, err)
				}
				var trace []string
				check := func(at string) {
					t.Helper()
					if be == rb {
						checkReadySets(t, rc, rb.KeyPrefix()+"{s}:g:g:", parts, 2, at)
					}
				}
				fetch := func(at string, limit int) []rheo.Lease {
					t.Helper()
					ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: limit, LeaseDuration: time.Second})
					require.NoError(t, err, at)
					s := at + ":"
					for _, l := range ls {
						s += fmt.Sprintf(" %d/%d@%d", l.Event.Partition, l.Event.Sequence, l.Attempt)
					}
					trace = append(trace, s)
					check(at)
					return ls
				}
				release := func(at string, l rheo.Lease) {
					t.Helper()
					require.NoError(t, c.Release(ctx, l), at)
					check(at)
				}

				first := fetch("first fetch", 3) // attempt 1, expiring at epoch+1s
				require.Len(t, first, 3, name)
				clk.Set(epoch.Add(5 * time.Second))
				// Moves the three expired leases into the ready set (watermark
				// epoch+5s) and claims only the first again.
				again := fetch("second fetch", 1)
				require.Len(t, again, 1, name)
				require.Equal(t, 2, again[0].Attempt, name)

				clk.Set(epoch.Add(3 * time.Second)) // behind the watermark
				release("release behind the watermark", first[1])
				if be == rb {
					v, err := rc.HGet(ctx, rb.KeyPrefix()+"{s}:g:g:l:"+strconv.Itoa(w), "2").Result()
					require.NoError(t, err)
					require.Equal(t, ":0", v, "the released claim is not counted")
				}
				clk.Set(epoch.Add(7 * time.Second)) // ahead of the watermark
				release("release ahead of the watermark", first[2])
				require.ErrorIs(t, c.Release(ctx, first[0]), rheo.ErrStaleLease, name)

				clk.Set(epoch.Add(6 * time.Second))
				// Sequence 1's second lease expires (poison, buried); 2 is
				// ready; 3 is not due before epoch+7s.
				got := fetch("fetch at 6s", 10)
				require.Len(t, got, 1, name)
				require.Equal(t, int64(2), got[0].Event.Sequence, name)
				require.Equal(t, 1, got[0].Attempt, name)
				require.NoError(t, c.Ack(ctx, got[0]), name)
				clk.Set(epoch.Add(7 * time.Second))
				got3 := fetch("fetch at 7s", 10)
				require.Len(t, got3, 1, name)
				require.Equal(t, int64(3), got3[0].Event.Sequence, name)
				require.Equal(t, 1, got3[0].Attempt, name)
				require.NoError(t, c.Ack(ctx, got3[0]), name)
				dl, err := c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{})
				require.NoError(t, err)
				require.Len(t, dl, 1, name)
				require.Equal(t, first[0].Event.ID, dl[0].EventID, name)
				lag, err := c.Lag(ctx, "s", "g")
				require.NoError(t, err)
				require.Zero(t, lag.Total, name)
				traces[name] = trace
			}
			require.Equal(t, traces[fmt.Sprintf("%T", mb)], traces[fmt.Sprintf("%T", rb)], "Redis claims what memory claims")
		})
	}
}
