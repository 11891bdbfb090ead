package mongotest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// bigEvents is the large stream of BenchmarkFetchAckBySize. Loading 1,000,000
// events into an embedded FerretDB takes too long for a routine run; set
// RHEO_MONGO_BENCH_BIG to change it.
func bigEvents() int {
	if v, err := strconv.Atoi(os.Getenv("RHEO_MONGO_BENCH_BIG")); err == nil && v > 0 {
		return v
	}
	return 100_000
}

// loadStream appends n events to a fresh stream of one partition and
// creates a group that starts near its end, so that fetches find work
// right away whatever the stream's length.
func loadStream(b *testing.B, c *rheo.Client, stream string, n int) {
	ctx := context.Background()
	require.NoError(b, c.CreateStream(ctx, stream, rheo.StreamConfig{}))
	const batch = 1000
	ms := make([]rheo.Message, batch)
	for done := 0; done < n; done += batch {
		for i := range ms {
			ms[i] = rheo.Message{Payload: []byte(fmt.Sprintf(`{"n":%d}`, done+i))}
		}
		_, err := c.AppendBatch(ctx, stream, ms[:min(batch, n-done)])
		require.NoError(b, err)
	}
}

// BenchmarkFetchAckBySize fetches and acks 10 events per op on a stream of
// 1,000 events and on a large one: the cost per op must not depend on the
// stream's length (every hot-path read is a point lookup).
func BenchmarkFetchAckBySize(b *testing.B) {
	for _, n := range []int{1000, bigEvents()} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			ctx := context.Background()
			be := open(b)
			clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			c := rheo.New(be, rheo.WithClock(clk))
			start := time.Now()
			loadStream(b, c, "s", n)
			b.Logf("loaded %d events in %v", n, time.Since(start).Round(time.Millisecond))
			require.NoError(b, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{Start: rheo.AfterSequence(int64(n - 1000))}))
			b.ResetTimer()
			for b.Loop() {
				ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
				if err != nil {
					b.Fatal(err)
				}
				if len(ls) == 0 {
					// Start over on the same window: replay it.
					b.StopTimer()
					_, err := c.Replay(ctx, "s", "g", rheo.FromSequence(int64(n-1000)))
					require.NoError(b, err)
					b.StartTimer()
					continue
				}
				if err := c.AckBatch(ctx, ls); err != nil {
					b.Fatal(err)
				}
				_, err = c.Lag(ctx, "s", "g")
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppend appends batches of 1 and 100 events.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			ctx := context.Background()
			c := rheo.New(open(b))
			require.NoError(b, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
			ms := make([]rheo.Message, size)
			i := 0
			for b.Loop() {
				for j := range ms {
					ms[j] = rheo.Message{Key: strconv.Itoa(i), Payload: []byte(`{"a":1}`)}
					i++
				}
				if _, err := c.AppendBatch(ctx, "s", ms); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
