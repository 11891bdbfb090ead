package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
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
