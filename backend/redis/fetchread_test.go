package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/internal/testserver"
)

// beforeRead runs fn before the first pipeline that reads entries with
// XRANGE: between a fetch's script, which claims a run of new events, and
// the client's read of them.
type beforeRead struct {
	fn    func()
	fired atomic.Bool
}

func (h *beforeRead) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *beforeRead) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (h *beforeRead) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "xrange") && h.fired.CompareAndSwap(false, true) {
				h.fn()
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestFetchReturnsWhatAForcedTrimLeft: a fetch claims a run of new events
// in its script and reads them in a second round trip. A forced trim in
// between removes the run's first events and their leases; the fetch
// returns the others, each with its own lease ID (acks of all of them
// settle), and nothing is left behind: no lag, nothing to fetch again.
func TestFetchReturnsWhatAForcedTrimLeft(t *testing.T) {
	be, rc := newBackend(t)
	ctx := context.Background()
	c := rheo.New(be)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	msgs := make([]rheo.Message, 10)
	for i := range msgs {
		msgs[i] = rheo.Message{Type: "t", Key: strconv.Itoa(i), Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
	}
	_, err := c.AppendBatch(ctx, "s", msgs)
	require.NoError(t, err)
	hook := &beforeRead{fn: func() {
		res, err := be.Trim(ctx, rheo.TrimRequest{Stream: "s", Partition: 0, Through: 4, Limit: 100, Force: true})
		require.NoError(t, err)
		require.EqualValues(t, 4, res.Removed)
	}}
	rc.AddHook(hook)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.True(t, hook.fired.Load(), "the fetch read no entries of its own")
	var seqs []int64
	ids := map[string]bool{}
	for _, l := range ls {
		seqs = append(seqs, l.Event.Sequence)
		require.Equal(t, 1, l.Attempt)
		require.JSONEq(t, `{"n":`+strconv.FormatInt(l.Event.Sequence-1, 10)+`}`, string(l.Event.Payload))
		ids[l.ID] = true
	}
	require.Equal(t, []int64{5, 6, 7, 8, 9, 10}, seqs)
	require.Len(t, ids, len(ls), "lease IDs repeat")
	require.NoError(t, c.AckBatch(ctx, ls))
	lag, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
	more, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, more)
}

// TestFetchDropsRunsOfAStreamCreatedAgain: the stream is deleted, created
// again under its name and given new events between a fetch's claim and
// its read. The new events sit at the sequences the fetch claimed in the
// old stream, and nobody leased them: the fetch returns none of them, and
// the new group gets them all, once, at attempt 1.
func TestFetchDropsRunsOfAStreamCreatedAgain(t *testing.T) {
	be, rc := newBackend(t)
	ctx := context.Background()
	c := rheo.New(be)
	other := rheo.New(be)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := c.AppendBatch(ctx, "s", []rheo.Message{{ID: "old-1", Type: "t"}, {ID: "old-2", Type: "t"}})
	require.NoError(t, err)
	hook := &beforeRead{fn: func() {
		require.NoError(t, other.DeleteStream(ctx, "s", rheo.DeleteOptions{Confirm: true}))
		require.NoError(t, other.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
		require.NoError(t, other.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
		_, err := other.AppendBatch(ctx, "s", []rheo.Message{{ID: "new-1", Type: "t"}, {ID: "new-2", Type: "t"}})
		require.NoError(t, err)
	}}
	rc.AddHook(hook)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.True(t, hook.fired.Load(), "the fetch read no entries of its own")
	require.Empty(t, ls, "leases on events of the stream created again")
	got, err := other.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, l := range got {
		require.Equal(t, "new-"+strconv.Itoa(i+1), l.Event.ID)
		require.Equal(t, 1, l.Attempt)
	}
	require.NoError(t, other.AckBatch(ctx, got))
}

// failReads makes the first n pipelines that read entries with XRANGE
// fail before they reach Redis, as a dropped connection would.
type failReads struct {
	beforeRead
	n atomic.Int32
}

func (h *failReads) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "xrange") {
				if h.n.Add(-1) >= 0 {
					return errors.New("connection reset by peer")
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestFetchReadsClaimedEventsAgainAfterAFailure: the read of the events a
// fetch claimed changes nothing, so a failed one is tried again (up to
// three times): two failures in a row cost nothing, three make the fetch
// fail as ambiguous (its claims stand and expire).
func TestFetchReadsClaimedEventsAgainAfterAFailure(t *testing.T) {
	for _, fails := range []int32{2, 3} {
		t.Run(fmt.Sprintf("failures=%d", fails), func(t *testing.T) {
			be, rc := newBackend(t)
			ctx := context.Background()
			c := rheo.New(be)
			require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
			require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
			msgs := make([]rheo.Message, 6)
			for i := range msgs {
				msgs[i] = rheo.Message{Type: "t", Key: strconv.Itoa(i)}
			}
			_, err := c.AppendBatch(ctx, "s", msgs)
			require.NoError(t, err)
			hook := &failReads{}
			hook.n.Store(fails)
			rc.AddHook(hook)
			ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
			require.Equal(t, fails-3, hook.n.Load(), "reads tried: three at most")
			if fails == 3 {
				require.ErrorIs(t, err, rheo.ErrAmbiguous)
				info, err := c.GroupInfo(ctx, "s", "g")
				require.NoError(t, err)
				require.EqualValues(t, 6, info.Inflight, "the claims stand")
				return
			}
			require.NoError(t, err)
			require.Len(t, ls, 6)
			require.NoError(t, c.AckBatch(ctx, ls))
		})
	}
}

// TestFetchReadsClaimedEventsFromThePrimary: a cluster client that reads
// from replicas (ReadOnly) would send a plain read of the events a fetch
// just claimed to a replica, which may not have them yet: the fetch would
// return fewer leases than it claimed, without an error, and the others
// would only come back when they expire, an attempt spent. Here the
// stream's replica lags (its writes paused) while the fetch claims five
// new events; the fetch returns all five.
func TestFetchReadsClaimedEventsFromThePrimary(t *testing.T) {
	cl := testserver.StartCluster(t)
	admin := cl.Client(t)
	ctx := context.Background()
	// A cluster lists its replicas in CLUSTER SLOTS a little after it is
	// healthy; until then a ReadOnly client reads primaries.
	require.Eventually(t, func() bool {
		slots, err := admin.ClusterSlots(ctx).Result()
		if err != nil || len(slots) == 0 {
			return false
		}
		for _, s := range slots {
			if len(s.Nodes) < 2 {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the replicas never showed in CLUSTER SLOTS")
	ro := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), ReadOnly: true, MaxRedirects: 16})
	t.Cleanup(func() { _ = ro.Close() })
	prefix := uniquePrefix()
	t.Cleanup(func() { dropClusterKeys(t, admin, prefix) })
	b := mustNew(t, ro, redis.WithKeyPrefix(prefix))
	require.NoError(t, b.Migrate(ctx))
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 1}))
	// One event through the whole path first: the client learns which
	// commands are read-only (COMMAND) as a long-running one would have.
	_, err := c.Append(ctx, "s", rheo.Message{Type: "t"})
	require.NoError(t, err)
	warm, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, warm, 1)
	require.NoError(t, c.AckBatch(ctx, warm))

	replica := cl.ReplicaOf(t, cl.PrimaryOf(t, admin, prefix+"{s}:meta"))
	rc := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	// The replica stops applying what its primary sends (it still serves
	// reads): it lags as any replica may.
	require.NoError(t, rc.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err())
	t.Cleanup(func() { _ = rc.Do(ctx, "CLIENT", "UNPAUSE").Err() })
	msgs := make([]rheo.Message, 5)
	for i := range msgs {
		msgs[i] = rheo.Message{Type: "t", Key: strconv.Itoa(i)}
	}
	_, err = c.AppendBatch(ctx, "s", msgs)
	require.NoError(t, err)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.NoError(t, rc.Do(ctx, "CLIENT", "UNPAUSE").Err())
	require.Len(t, ls, 5, "claimed events the fetch did not return")
	require.NoError(t, c.AckBatch(ctx, ls))
}
