package sqlite_test

import (
	"context"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/sample"
)

// BenchmarkConsumerRuntime drains a backlog of 40,000 events (4
// partitions, appended untimed) with the consumer runtime at its default
// settings but Concurrency 100 and a no-op handler, as the peers bench's
// SQLite pair does, and reports events/s: the runtime's own cost on SQLite,
// for profiles (-cpuprofile).
func BenchmarkConsumerRuntime(b *testing.B) {
	ctx := context.Background()
	const n = 40000
	var el time.Duration
	for range b.N {
		b.StopTimer()
		c := rheo.New(open(b))
		if err := c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}); err != nil {
			b.Fatal(err)
		}
		msgs := make([]rheo.Message, 0, 1000)
		for i := 0; i < n; i += 1000 {
			msgs = msgs[:0]
			for j := i; j < i+1000; j++ {
				msgs = append(msgs, rheo.Message{Type: "order.created", Key: strconv.Itoa(j), Payload: sample.Order(nil, j)})
			}
			if _, err := c.AppendBatch(ctx, "s", msgs); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}); err != nil {
			b.Fatal(err)
		}
		var h atomic.Int64
		all := make(chan struct{})
		k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g", Concurrency: 100,
			Handler: func(context.Context, rheo.Event) error {
				if h.Add(1) == n {
					close(all)
				}
				return nil
			}})
		if err != nil {
			b.Fatal(err)
		}
		rc, cancel := context.WithCancel(ctx)
		ran := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go pprof.Do(rc, pprof.Labels("phase", "consume"), func(rc context.Context) { ran <- k.Run(rc) })
		<-all
		if err := k.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		el += time.Since(start)
		b.StopTimer()
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/el.Seconds(), "events/s")
}
