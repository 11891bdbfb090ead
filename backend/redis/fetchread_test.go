package redis_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
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
		if len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "xrange") && h.fired.CompareAndSwap(false, true) {
			h.fn()
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
