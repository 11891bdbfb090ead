package faultproxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// CheckLatencyAndBandwidth is a store's test that latency (15 ms each way)
// and a bandwidth limit (64 KiB/s) on px slow a consumer down but lose
// nothing and raise no error: a, whose store connections go through px,
// appends 50 events of about 2 KB to a new stream "s" and acks them all;
// direct, connected to the same store without the proxy, then reads lag 0.
func CheckLatencyAndBandwidth(t testing.TB, a, direct *rheo.Client, px *Proxy) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, direct.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, direct.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	px.SetLatency(15 * time.Millisecond)
	px.SetBandwidth(64 << 10)
	for i := range 50 {
		_, err := a.Append(ctx, "s", rheo.Message{Key: string(rune('a' + i%26)), Payload: []byte(`{"pad":"` + strings.Repeat("x", 2000) + `"}`)})
		require.NoError(t, err)
	}
	acked := 0
	for acked < 50 {
		ls, err := a.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 7})
		require.NoError(t, err)
		require.NotEmpty(t, ls)
		require.NoError(t, a.AckBatch(ctx, ls))
		acked += len(ls)
	}
	require.Equal(t, 50, acked)
	lag, err := direct.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}
