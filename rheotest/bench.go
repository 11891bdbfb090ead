package rheotest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rheo-go/rheo"
)

// BenchFetchAckFresh measures a caught-up consumer's cycle on streams of
// 4 and 1,024 partitions of a backend from f: it appends 100 events with
// distinct keys (not timed), fetches them with a limit of 100, acks them
// in one batch and reads the group's lag. On 1,024 partitions each fetch
// and ack touches about 95 partitions, one event each, and the lag lists
// 1,024. fetch-µs, ack-µs and lag-µs are the figures.
func BenchFetchAckFresh(b *testing.B, f Factory) {
	for _, parts := range []int{4, 1024} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			ctx := context.Background()
			c := rheo.New(f(b))
			if err := c.CreateStream(ctx, "bench", rheo.StreamConfig{Partitions: parts}); err != nil {
				b.Fatal(err)
			}
			if err := c.CreateGroup(ctx, "bench", "g", rheo.GroupConfig{}); err != nil {
				b.Fatal(err)
			}
			ms := make([]rheo.Message, 100)
			var fetch, ack, lag, lag4 time.Duration
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				for i := range ms {
					ms[i] = rheo.Message{Type: "order.created", Key: fmt.Sprintf("k-%d", n), Payload: []byte(`{"order":12345}`)}
					n++
				}
				if _, err := c.AppendBatch(ctx, "bench", ms); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				ls, err := c.Fetch(ctx, "bench", "g", rheo.FetchOptions{Limit: 100})
				if err != nil || len(ls) != 100 {
					b.Fatalf("fetched %d: %v", len(ls), err)
				}
				t1 := time.Now()
				if err := c.AckBatch(ctx, ls); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if _, err := c.Lag(ctx, "bench", "g"); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				if _, err := c.Lag(ctx, "bench", "g", 0, 1, 2, 3); err != nil {
					b.Fatal(err)
				}
				fetch += t1.Sub(t0)
				ack += t2.Sub(t1)
				lag += t3.Sub(t2)
				lag4 += time.Since(t3)
			}
			b.ReportMetric(float64(fetch.Microseconds())/float64(b.N), "fetch-µs")
			b.ReportMetric(float64(ack.Microseconds())/float64(b.N), "ack-µs")
			b.ReportMetric(float64(lag.Nanoseconds())/1e3/float64(b.N), "lag-µs")
			b.ReportMetric(float64(lag4.Nanoseconds())/1e3/float64(b.N), "lag4-µs")
		})
	}
}
