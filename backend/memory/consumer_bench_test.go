package memory_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

var consumerBenchLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// benchAckCounter closes done once want acks have settled.
type benchAckCounter struct {
	acks atomic.Int64
	want int64
	done chan struct{}
}

func (a *benchAckCounter) ObserveConsumer(ev rheo.ConsumerEvent) {
	if ev.Kind == rheo.ConsumerAcked && ev.Err == nil && a.acks.Add(1) == a.want {
		close(a.done)
	}
}

// BenchmarkConsumerThroughput consumes 100,000 events appended beforehand
// with a no-op handler and Concurrency 8, and reports events/s (handled and
// acked). The MaxInflight cases show what prefetching adds.
func BenchmarkConsumerThroughput(b *testing.B) {
	for _, bc := range []struct {
		name        string
		maxInflight int
	}{
		{"inflight=8", 0},
		{"inflight=64", 64},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const events = 100_000
			ctx := context.Background()
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				obs := &benchAckCounter{want: events, done: make(chan struct{})}
				c := rheo.New(memory.New(), rheo.WithObserver(obs), rheo.WithLogger(consumerBenchLogger))
				if err := c.CreateStream(ctx, "bench", rheo.StreamConfig{}); err != nil {
					b.Fatal(err)
				}
				if err := c.CreateGroup(ctx, "bench", "g", rheo.GroupConfig{}); err != nil {
					b.Fatal(err)
				}
				batch := make([]rheo.Message, 1000)
				for i := range batch {
					batch[i] = rheo.Message{Type: "t", Payload: json.RawMessage(`{"n":1}`)}
				}
				for range events / len(batch) {
					if _, err := c.AppendBatch(ctx, "bench", batch); err != nil {
						b.Fatal(err)
					}
				}
				k, err := c.NewConsumer(rheo.ConsumerConfig{
					Stream: "bench", Group: "g", Concurrency: 8, MaxInflight: bc.maxInflight,
					Handler: func(context.Context, rheo.Event) error { return nil },
				})
				if err != nil {
					b.Fatal(err)
				}
				runCtx, cancel := context.WithCancel(ctx)
				ran := make(chan error, 1)
				b.StartTimer()
				start := time.Now()
				go func() { ran <- k.Run(runCtx) }()
				<-obs.done
				elapsed += time.Since(start)
				b.StopTimer()
				cancel()
				if err := <-ran; err != nil {
					b.Fatal(err)
				}
				if lag, err := c.Lag(ctx, "bench", "g"); err != nil || lag.Total != 0 {
					b.Fatalf("lag %d, %v", lag.Total, err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(events)*float64(b.N)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkConsumerLatency appends one event at a time to an idle consumer
// and reports the median (and p99) time from Append to the handler's start.
// PollInterval is the default 200ms: a median well below it means the
// consumer was woken by the append, not by its poll.
func BenchmarkConsumerLatency(b *testing.B) {
	ctx := context.Background()
	c := rheo.New(memory.New(), rheo.WithLogger(consumerBenchLogger))
	if err := c.CreateStream(ctx, "lat", rheo.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	if err := c.CreateGroup(ctx, "lat", "g", rheo.GroupConfig{}); err != nil {
		b.Fatal(err)
	}
	var sent atomic.Int64 // UnixNano of the pending Append
	started := make(chan time.Duration, 1)
	k, err := c.NewConsumer(rheo.ConsumerConfig{
		Stream: "lat", Group: "g",
		Handler: func(context.Context, rheo.Event) error {
			started <- time.Duration(time.Now().UnixNano() - sent.Load())
			return nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- k.Run(runCtx) }()
	var lat []time.Duration
	msg := rheo.Message{Type: "t", Payload: json.RawMessage(`{"n":1}`)}
	for b.Loop() {
		// Let the consumer settle into its idle wait.
		b.StopTimer()
		time.Sleep(time.Millisecond)
		b.StartTimer()
		sent.Store(time.Now().UnixNano())
		if _, err := c.Append(ctx, "lat", msg); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, <-started)
	}
	b.StopTimer()
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
