package sqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/rheotest"
)

// BenchmarkAppendBatch appends batches of 100 events whose keys cycle over
// 1,024 values (as rheo bench does); events/s is the figure. Every event
// lands in a different leaf of the key index, which dominates the pages a
// commit writes once the stream is large.
func BenchmarkAppendBatch(b *testing.B) {
	ctx := context.Background()
	c := rheo.New(open(b))
	require.NoError(b, c.CreateStream(ctx, "bench", rheo.StreamConfig{Partitions: 1}))
	ms := make([]rheo.Message, 100)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		for i := range ms {
			ms[i] = rheo.Message{Type: "order.created", Key: fmt.Sprintf("k-%d", n%1024),
				Payload:  []byte(`{"order":12345,"amount":99.5,"currency":"EUR"}`),
				Metadata: map[string]string{"producer": "bench"}}
			n++
		}
		if _, err := c.AppendBatch(ctx, "bench", ms); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkConsume fetches 100 leases at a time and acks them in one
// batch, over events appended beforehand (not timed). Frontier upkeep and
// compaction are part of every ack.
func BenchmarkConsume(b *testing.B) {
	ctx := context.Background()
	c := rheo.New(open(b))
	require.NoError(b, c.CreateStream(ctx, "bench", rheo.StreamConfig{Partitions: 1}))
	require.NoError(b, c.CreateGroup(ctx, "bench", "g", rheo.GroupConfig{}))
	total := b.N * 100
	ms := make([]rheo.Message, 0, 100)
	for i := 0; i < total; i++ {
		ms = append(ms, rheo.Message{Type: "order.created", Payload: []byte(`{"order":12345,"amount":99.5,"currency":"EUR"}`),
			Metadata: map[string]string{"producer": "bench"}})
		if len(ms) == 100 {
			_, err := c.AppendBatch(ctx, "bench", ms)
			require.NoError(b, err)
			ms = ms[:0]
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < total {
		ls, err := c.Fetch(ctx, "bench", "g", rheo.FetchOptions{Limit: 100, ConsumerID: "w"})
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) == 0 {
			b.Fatalf("fetched nothing after %d of %d", done, total)
		}
		if err := c.AckBatch(ctx, ls); err != nil {
			b.Fatal(err)
		}
		done += len(ls)
	}
	b.StopTimer()
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "events/s")
	lag, err := c.Lag(ctx, "bench", "g")
	require.NoError(b, err)
	require.Zero(b, lag.Total)
}

// BenchmarkFetchRedeliveries fetches 100 leases at a time from 64
// partitions that each hold 10 nacked deliveries, and nacks them back, so
// that every fetch reads the deliveries available at once in every
// partition (the reads of many partitions a statement, each with the
// fetch's time).
func BenchmarkFetchRedeliveries(b *testing.B) {
	ctx := context.Background()
	c := rheo.New(open(b))
	const parts = 64
	require.NoError(b, c.CreateStream(ctx, "bench", rheo.StreamConfig{Partitions: parts}))
	require.NoError(b, c.CreateGroup(ctx, "bench", "g", rheo.GroupConfig{MaxAttempts: 1 << 30}))
	ms := make([]rheo.Message, 0, parts*10)
	for p := range parts {
		for range 10 {
			ms = append(ms, rheo.Message{Type: "order.created", Partition: &p, Payload: []byte(`{"order":12345}`)})
		}
	}
	_, err := c.AppendBatch(ctx, "bench", ms)
	require.NoError(b, err)
	nack := func(ls []rheo.Lease) {
		reqs := make([]rheo.SettleRequest, len(ls))
		for i, l := range ls {
			reqs[i] = rheo.SettleRequest{Kind: rheo.SettleNack, Lease: l, Reason: "again"}
		}
		_, err := c.Backend().Settle(ctx, "bench", "g", reqs, time.Now())
		require.NoError(b, err)
	}
	// Every delivery becomes a row, nacked.
	ls, err := c.Fetch(ctx, "bench", "g", rheo.FetchOptions{Limit: parts * 10})
	require.NoError(b, err)
	require.Len(b, ls, parts*10)
	nack(ls)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ls, err := c.Fetch(ctx, "bench", "g", rheo.FetchOptions{Limit: 100})
		if err != nil || len(ls) != 100 {
			b.Fatalf("fetched %d: %v", len(ls), err)
		}
		b.StopTimer()
		nack(ls)
		b.StartTimer()
	}
}

// BenchmarkFetchAckFresh is rheotest.BenchFetchAckFresh on SQLite:
// fetch, ack and lag read of 100 fresh events on 4 and 1,024 partitions
// (on the second, each fetch and ack touches about 95 partitions).
func BenchmarkFetchAckFresh(b *testing.B) {
	rheotest.BenchFetchAckFresh(b, func(t testing.TB) rheo.Backend { return open(t) })
}
