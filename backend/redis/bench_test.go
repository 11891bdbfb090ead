package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
)

func benchPayload(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"order":%d,"customer":"c-%d","amount":12.5}`, i, i%97))
}

// BenchmarkAppendBatch100 appends batches of 100 events to a 4-partition
// stream; ns/op is per event.
func BenchmarkAppendBatch100(b *testing.B) {
	be, _ := newBackend(b)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(b, c.CreateStream(ctx, "bench", rheo.StreamConfig{Partitions: 4}))
	batch := make([]rheo.Message, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i += 100 {
		for j := range batch {
			batch[j] = rheo.Message{Type: "order.placed", Key: fmt.Sprint(i + j), Payload: benchPayload(i + j)}
		}
		_, err := c.AppendBatch(ctx, "bench", batch)
		require.NoError(b, err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendBatch100Parallel is BenchmarkAppendBatch100 with two
// producers (GOMAXPROCS goroutines), so client work overlaps Redis work.
func BenchmarkAppendBatch100Parallel(b *testing.B) {
	be, _ := newBackend(b)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(b, c.CreateStream(ctx, "bench", rheo.StreamConfig{Partitions: 4}))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		batch := make([]rheo.Message, 100)
		i := 0
		for pb.Next() {
			if i%100 == 0 {
				for j := range batch {
					batch[j] = rheo.Message{Type: "order.placed", Key: fmt.Sprint(i + j), Payload: benchPayload(i + j)}
				}
				_, err := c.AppendBatch(ctx, "bench", batch)
				if err != nil {
					b.Error(err)
					return
				}
			}
			i++
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkConsume fetches 100 leases and acks them in one AckBatch, over
// events appended beforehand; ns/op is per event.
func BenchmarkConsume(b *testing.B) {
	be, _ := newBackend(b)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(b, c.CreateStream(ctx, "bench", rheo.StreamConfig{Partitions: 4}))
	batch := make([]rheo.Message, 100)
	for i := 0; i < b.N; i += 100 {
		for j := range batch {
			batch[j] = rheo.Message{Type: "order.placed", Key: fmt.Sprint(i + j), Payload: benchPayload(i + j)}
		}
		_, err := c.AppendBatch(ctx, "bench", batch)
		require.NoError(b, err)
	}
	require.NoError(b, c.CreateGroup(ctx, "bench", "workers", rheo.GroupConfig{}))
	b.ResetTimer()
	done := 0
	for done < b.N {
		ls, err := c.Fetch(ctx, "bench", "workers", rheo.FetchOptions{Limit: 100, ConsumerID: "w1"})
		require.NoError(b, err)
		if len(ls) == 0 {
			break
		}
		require.NoError(b, c.AckBatch(ctx, ls))
		done += len(ls)
	}
	b.StopTimer()
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "events/s")
	lag, err := c.Lag(ctx, "bench", "workers")
	require.NoError(b, err)
	require.Zero(b, lag.Total)
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(b *testing.B, rc interface {
	Info(ctx context.Context, section ...string) *goredis.StringCmd
}) int64 {
	info, err := rc.Info(context.Background(), "memory").Result()
	require.NoError(b, err)
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(b, err)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkMemory reports Redis memory per retained event (entry plus ID
// index) and per in-flight lease (fence, due-time entry and pending entry),
// from INFO memory deltas over 20,000 events with the payload of the other
// benchmarks. Run it alone: other clients of the server skew the deltas.
func BenchmarkMemory(b *testing.B) {
	const n = 20000
	for range b.N {
		be, rc := newBackend(b)
		c := rheo.New(be)
		ctx := context.Background()
		require.NoError(b, c.CreateStream(ctx, "mem", rheo.StreamConfig{Partitions: 4}))
		require.NoError(b, c.CreateGroup(ctx, "mem", "g", rheo.GroupConfig{}))
		m0 := usedMemory(b, rc)
		batch := make([]rheo.Message, 100)
		for i := 0; i < n; i += 100 {
			for j := range batch {
				batch[j] = rheo.Message{Type: "order.placed", Key: fmt.Sprint(i + j), Payload: benchPayload(i + j)}
			}
			_, err := c.AppendBatch(ctx, "mem", batch)
			require.NoError(b, err)
		}
		m1 := usedMemory(b, rc)
		for i := 0; i < n; i += 1000 {
			_, err := c.Fetch(ctx, "mem", "g", rheo.FetchOptions{Limit: 1000, LeaseDuration: time.Hour})
			require.NoError(b, err)
		}
		m2 := usedMemory(b, rc)
		b.ReportMetric(float64(m1-m0)/n, "bytes/event")
		b.ReportMetric(float64(m2-m1)/n, "bytes/lease")
	}
}

// BenchmarkWakeLatency measures the time from an append returning to a
// subscriber of another backend (another connection) being signalled.
func BenchmarkWakeLatency(b *testing.B) {
	be, _ := newBackend(b)
	other := redis.New(testClient(b), redis.WithKeyPrefix(be.KeyPrefix()))
	c := rheo.New(other)
	ctx := context.Background()
	require.NoError(b, c.CreateStream(ctx, "wake", rheo.StreamConfig{}))
	ch, cancel := be.Subscribe("wake")
	defer cancel()
	var worst time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		_, err := c.Append(ctx, "wake", rheo.Message{})
		require.NoError(b, err)
		<-ch
		worst = max(worst, time.Since(start))
	}
	b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
}
