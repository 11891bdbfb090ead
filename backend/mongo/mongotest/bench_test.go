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

// bigEvents is the large stream of BenchmarkFetchAckBySize: 1,000,000
// events under FerretDB's PostgreSQL handler (about 10 minutes to load
// here) or a real MongoDB, 20,000 under FerretDB's SQLite handler, whose
// inserts slow down as a collection grows. RHEO_MONGO_BENCH_BIG sets it.
func bigEvents() int {
	if v, err := strconv.Atoi(os.Getenv("RHEO_MONGO_BENCH_BIG")); err == nil && v > 0 {
		return v
	}
	if srv.pg == nil && os.Getenv("RHEO_TEST_MONGO") == "" {
		return 20_000
	}
	return 1_000_000
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

// BenchmarkFetchAckBySize fetches and acks 10 events per op, then reads
// the lag, on a store holding a stream of 1,000 events and on a store (a
// database of its own) holding a large one, alternating op by op so that
// load from elsewhere falls on both alike: the cost per op must depend
// neither on the stream's length nor on the size of the collections (every
// hot-path read is a point lookup by _id). It reports each store's time per
// op and their ratio.
func BenchmarkFetchAckBySize(b *testing.B) {
	ctx := context.Background()
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	big := bigEvents()
	sizes := []int{1000, big}
	clients := make([]*rheo.Client, len(sizes))
	for i, n := range sizes {
		clients[i] = rheo.New(open(b), rheo.WithClock(clk))
		start := time.Now()
		loadStream(b, clients[i], "s", n)
		b.Logf("loaded %d events in %v", n, time.Since(start).Round(time.Millisecond))
		require.NoError(b, clients[i].CreateGroup(ctx, "s", "g", rheo.GroupConfig{Start: rheo.AfterSequence(int64(n - 1000))}))
	}
	var spent [2]time.Duration
	ops := 0
	b.ResetTimer()
	for b.Loop() {
		for i, n := range sizes {
			t0 := time.Now()
			fetchAckLag(b, clients[i], "s", n)
			spent[i] += time.Since(t0)
		}
		ops++
	}
	b.ReportMetric(float64(spent[0].Microseconds())/float64(ops), "µs/op-1k")
	b.ReportMetric(float64(spent[1].Microseconds())/float64(ops), fmt.Sprintf("µs/op-%dk", big/1000))
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "ratio")
}

// fetchAckLag fetches up to 10 events of stream's group g, acks them and
// reads the lag; when the group has consumed its window it replays it.
func fetchAckLag(b *testing.B, c *rheo.Client, stream string, n int) {
	ctx := context.Background()
	ls, err := c.Fetch(ctx, stream, "g", rheo.FetchOptions{Limit: 10})
	if err != nil {
		b.Fatal(err)
	}
	if len(ls) == 0 {
		// Start over on the same window: replay it.
		if _, err := c.Replay(ctx, stream, "g", rheo.FromSequence(int64(n-1000))); err != nil {
			b.Fatal(err)
		}
		return
	}
	if err := c.AckBatch(ctx, ls); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Lag(ctx, stream, "g"); err != nil {
		b.Fatal(err)
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
