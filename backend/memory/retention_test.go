package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/rheotest"
)

func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// TestMaxEventsBoundsHeap appends 30 MiB of events under MaxEvents and
// checks the heap stays flat: trimmed events, their IDs, chunks and delivery
// records are all given back.
func TestMaxEventsBoundsHeap(t *testing.T) {
	ctx := context.Background()
	b := memory.New()
	c, _ := rheotest.NewClient(t, func(testing.TB) rheo.Backend { return b })
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2, Retention: rheo.Retention{MaxEvents: 1000}}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	batch := make([]rheo.Message, 500)
	round := func(i int) {
		for j := range batch {
			batch[j] = rheo.Message{ID: fmt.Sprintf("e-%d-%d", i, j), Key: fmt.Sprint(j), Payload: payload}
		}
		_, err := c.AppendBatch(ctx, "s", batch)
		require.NoError(t, err)
		for {
			ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1000})
			require.NoError(t, err)
			if len(ls) == 0 {
				break
			}
			require.NoError(t, c.AckBatch(ctx, ls))
		}
		_, err = c.EnforceRetention(ctx)
		require.NoError(t, err)
	}
	const rounds = 60 // 30,000 events of 1 KiB
	for i := range 20 {
		round(i)
	}
	base := heapMiB()
	for i := 20; i < rounds; i++ {
		round(i)
	}
	end := heapMiB()
	t.Logf("heap after 10k events: %.1f MiB, after 30k: %.1f MiB", base, end)
	require.Less(t, end, base+8, "the heap grows with the events written, not the events retained")
	st, err := b.Stream(ctx, "s")
	require.NoError(t, err)
	for p := range 2 {
		require.Equal(t, int64(1000), st.HighWatermarks[p]-st.TrimmedThrough[p])
	}
}
