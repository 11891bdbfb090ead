package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/internal/sample"
)

// benchEvents is how many events BenchmarkConsume appends beforehand
// (RHEO_BENCH_EVENTS; 200,000 for the headline figure).
func benchEvents(def int) int {
	if v, err := strconv.Atoi(os.Getenv("RHEO_BENCH_EVENTS")); err == nil && v > 0 {
		return v
	}
	return def
}

func fill(b testing.TB, c *rheo.Client, stream string, n int) {
	ctx := context.Background()
	msgs := make([]rheo.Message, 0, 1000)
	for i := 0; i < n; i += 1000 {
		msgs = msgs[:0]
		for j := 0; j < 1000 && i+j < n; j++ {
			msgs = append(msgs, rheo.Message{Type: "bench", Key: strconv.Itoa(i + j), Payload: []byte(`{"n":1}`)})
		}
		_, err := c.AppendBatch(ctx, stream, msgs)
		require.NoError(b, err)
	}
}

// stream4 returns a backend over a fresh schema and a client of it whose
// stream "s" has 4 partitions.
func stream4(tb testing.TB) (*postgres.Backend, *rheo.Client) {
	be := newBackend(tb)
	c := rheo.New(be)
	require.NoError(tb, c.CreateStream(context.Background(), "s", rheo.StreamConfig{Partitions: 4}))
	return be, c
}

// backlog returns a client over a fresh schema whose stream "s" of the
// given partitions holds n events, with group "g" created and the events
// table analyzed, as a long-running table would be.
func backlog(b *testing.B, partitions, n int) *rheo.Client {
	be := newBackend(b)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(b, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: partitions}))
	fill(b, c, "s", n)
	require.NoError(b, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err := be.Pool().Exec(ctx, "VACUUM ANALYZE "+be.Schema()+".rheo_events")
	require.NoError(b, err)
	return c
}

// BenchmarkAppendBatch100 appends batches of 100 events from 2 goroutines.
func BenchmarkAppendBatch100(b *testing.B) {
	be, c := stream4(b)
	ctx := context.Background()
	// RHEO_BENCH_DROP_INDEX=name measures append without one index.
	if idx := os.Getenv("RHEO_BENCH_DROP_INDEX"); idx != "" {
		_, err := be.Pool().Exec(ctx, "DROP INDEX "+be.Schema()+"."+idx)
		require.NoError(b, err)
	}
	msgs := make([]rheo.Message, 100)
	for i := range msgs {
		msgs[i] = rheo.Message{Type: "bench", Key: strconv.Itoa(i), Payload: []byte(`{"n":1,"name":"x"}`)}
	}
	b.ResetTimer()
	b.SetParallelism(1) // GOMAXPROCS (2) goroutines
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.AppendBatch(ctx, "s", msgs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*100)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkAppendBatch1000 is one producer appending batches of 1,000
// freshly built ~100-byte JSON payloads, as the peers benchmark's
// "postgres append 1000" does; run with -cpuprofile or -memprofile to see
// the client's side.
func BenchmarkAppendBatch1000(b *testing.B) {
	_, c := stream4(b)
	ctx := context.Background()
	msgs := make([]rheo.Message, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	start, k := time.Now(), 0
	for range b.N {
		for j := range msgs {
			msgs[j] = rheo.Message{Type: "order.created", Key: strconv.Itoa(k), Payload: sample.Order(make([]byte, 0, 128), k)}
			k++
		}
		if _, err := c.AppendBatch(ctx, "s", msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(k)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkConsume measures the burn-down of a backlog: N events appended
// beforehand (RHEO_BENCH_EVENTS, default 20,000), 2 consumer goroutines
// each looping Fetch(Limit 100) + AckBatch until the lag is zero. Frontier
// and compaction are included: acks delete their rows and the frontier is
// derived. b.N repeats the whole burn-down.
func BenchmarkConsume(b *testing.B) {
	n := benchEvents(20000)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := backlog(b, 4, n)
		ctx := context.Background()
		b.StartTimer()
		start := time.Now()
		var done atomic.Int64
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Load() < int64(n) {
					ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100, ConsumerID: fmt.Sprint("w", w)})
					if err != nil {
						b.Error(err)
						return
					}
					if len(ls) == 0 {
						continue
					}
					if err := c.AckBatch(ctx, ls); err != nil {
						b.Error(err)
						return
					}
					done.Add(int64(len(ls)))
				}
			}()
		}
		wg.Wait()
		total += time.Since(start)
		b.StopTimer()
		lag, err := c.Lag(ctx, "s", "g")
		require.NoError(b, err)
		require.Zero(b, lag.Total)
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}

// BenchmarkBareSkipLocked is the baseline: claim 100 rows with SKIP LOCKED in
// one transaction and delete them in a second, 2 goroutines, on a plain
// table of the same backlog size.
func BenchmarkBareSkipLocked(b *testing.B) {
	n := benchEvents(20000)
	be := newBackend(b)
	pool := be.Pool()
	ctx := context.Background()
	tbl := be.Schema() + ".bare"
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+tbl)
		require.NoError(b, err)
		_, err = pool.Exec(ctx, "CREATE TABLE "+tbl+" (id bigserial PRIMARY KEY, state int NOT NULL DEFAULT 0, payload jsonb NOT NULL)")
		require.NoError(b, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+tbl+" (payload) SELECT '{\"n\":1}' FROM generate_series(1, $1)", n)
		require.NoError(b, err)
		_, err = pool.Exec(ctx, "VACUUM ANALYZE "+tbl)
		require.NoError(b, err)
		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					var ids []int64
					err := pool.QueryRow(ctx, "WITH c AS (SELECT id FROM "+tbl+" WHERE state = 0 ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED), "+
						"u AS (UPDATE "+tbl+" t SET state = 1 FROM c WHERE t.id = c.id RETURNING t.id) SELECT COALESCE(array_agg(id), '{}') FROM u").Scan(&ids)
					if err != nil {
						b.Error(err)
						return
					}
					if len(ids) == 0 {
						return
					}
					if _, err := pool.Exec(ctx, "DELETE FROM "+tbl+" WHERE id = ANY($1)", ids); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		total += time.Since(start)
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "rows/s")
}

// BenchmarkCycle measures one Fetch(100) + AckBatch + Lag cycle on a
// stream with 1,000 consumed events and on one with many more (1,000,000
// with RHEO_BENCH_LARGE=1, whose setup appends a million events; 100,000
// otherwise), alternating between the two in the same run so that load on
// the machine affects both alike. It reports the mean cycle time of each
// and their ratio. Each group starts after the consumed prefix, which
// leaves the store as acking it would (acked deliveries are deleted), then
// consumes a first stretch for real so deliveries have churned.
func BenchmarkCycle(b *testing.B) {
	large := 100000
	if os.Getenv("RHEO_BENCH_LARGE") != "" {
		large = 1000000
	}
	be := newBackend(b)
	c := rheo.New(be)
	ctx := context.Background()
	for _, st := range []struct {
		name string
		n    int
	}{{"small", 1000}, {"large", large}} {
		require.NoError(b, c.CreateStream(ctx, st.name, rheo.StreamConfig{Partitions: 1}))
		fill(b, c, st.name, st.n)
		require.NoError(b, c.CreateGroup(ctx, st.name, "g", rheo.GroupConfig{Start: rheo.Latest()}))
		fill(b, c, st.name, 2000+100*b.N+100)
		cycle(b, c, st.name, 20)
	}
	_, err := be.Pool().Exec(ctx, "VACUUM ANALYZE "+be.Schema()+".rheo_events")
	require.NoError(b, err)
	_, err = be.Pool().Exec(ctx, "VACUUM ANALYZE "+be.Schema()+".rheo_deliveries")
	require.NoError(b, err)
	var small, big time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		cycle(b, c, "small", 1)
		t1 := time.Now()
		cycle(b, c, "large", 1)
		small += t1.Sub(t0)
		big += time.Since(t1)
	}
	b.ReportMetric(float64(small.Microseconds())/float64(b.N), "µs/cycle-1k")
	b.ReportMetric(float64(big.Microseconds())/float64(b.N), fmt.Sprintf("µs/cycle-%dk", large/1000))
	b.ReportMetric(float64(big)/float64(small), "ratio")
}

func cycle(b *testing.B, c *rheo.Client, stream string, n int) {
	ctx := context.Background()
	for range n {
		ls, err := c.Fetch(ctx, stream, "g", rheo.FetchOptions{Limit: 100})
		require.NoError(b, err)
		require.NotEmpty(b, ls)
		require.NoError(b, c.AckBatch(ctx, ls))
		_, err = c.Lag(ctx, stream, "g")
		require.NoError(b, err)
	}
}

// BenchmarkBareInsert100 is the append baseline: a multi-row INSERT of 100
// rows (text id, jsonb payload, one primary key) from 2 goroutines.
func BenchmarkBareInsert100(b *testing.B) {
	be := newBackend(b)
	pool := be.Pool()
	ctx := context.Background()
	tbl := be.Schema() + ".bare_insert"
	_, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (id bigserial PRIMARY KEY, eid text NOT NULL, payload jsonb NOT NULL)")
	require.NoError(b, err)
	ids := make([]string, 100)
	payloads := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("0190aaaa-0000-7000-8000-%012d", i)
		payloads[i] = `{"n":1,"name":"x"}`
	}
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pool.Exec(ctx, "INSERT INTO "+tbl+" (eid, payload) SELECT i, p::jsonb FROM unnest($1::text[], $2::text[]) AS t(i, p)", ids, payloads); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*100)/time.Since(start).Seconds(), "rows/s")
}

// BenchmarkWakeLatency measures the time from an append's commit (Append
// returning) to the LISTEN connection's signal reaching a subscriber.
func BenchmarkWakeLatency(b *testing.B) {
	be := newBackend(b)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(b, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	ch, cancel := be.Subscribe("s")
	defer cancel()
	// Wait for the listener to come up.
	for ready := false; !ready; {
		_, err := c.Append(ctx, "s", rheo.Message{})
		require.NoError(b, err)
		select {
		case <-ch:
			ready = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	var total, worst time.Duration
	b.ResetTimer()
	for range b.N {
		_, err := c.Append(ctx, "s", rheo.Message{})
		require.NoError(b, err)
		committed := time.Now()
		<-ch
		d := time.Since(committed)
		total += d
		worst = max(worst, d)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-mean")
	b.ReportMetric(float64(worst.Microseconds()), "µs-max")
}

var _ = postgres.DefaultSchema

// BenchmarkAppendBatch100PerPartition appends batches of 100 from 2
// goroutines that each write their own partition of one stream: appends
// serialize per partition (commit order is sequence order), so producers
// of different partitions run in parallel.
func BenchmarkAppendBatch100PerPartition(b *testing.B) {
	_, c := stream4(b)
	ctx := context.Background()
	var next atomic.Int32
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		p := int(next.Add(1)-1) % 4
		msgs := make([]rheo.Message, 100)
		for i := range msgs {
			msgs[i] = rheo.Message{Type: "bench", Partition: &p, Payload: []byte(`{"n":1,"name":"x"}`)}
		}
		for pb.Next() {
			if _, err := c.AppendBatch(ctx, "s", msgs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*100)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkAckSpanInParts measures what settling a span in parts costs
// against settling it whole: one partition, fetches of 500 (one span
// each), each acked in one AckBatch ("whole") or in AckBatches of 250, 100
// or 10 leases. The consumer runtime settles a fetch's leases together for
// this reason (see docs/performance-log.md, "Settles by whole fetches").
func BenchmarkAckSpanInParts(b *testing.B) {
	const fetch = 500
	for _, part := range []int{fetch, 250, 100, 10} {
		name := "whole"
		if part < fetch {
			name = fmt.Sprint("parts-of-", part)
		}
		b.Run(name, func(b *testing.B) {
			c := backlog(b, 1, b.N*fetch)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			var acking time.Duration
			for range b.N {
				ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: fetch, ConsumerID: "w"})
				require.NoError(b, err)
				t := time.Now()
				for rest := ls; len(rest) > 0; {
					n := min(part, len(rest))
					require.NoError(b, c.AckBatch(ctx, rest[:n]))
					rest = rest[n:]
				}
				acking += time.Since(t)
			}
			b.ReportMetric(float64(b.N*fetch)/time.Since(start).Seconds(), "events/s")
			b.ReportMetric(float64(acking.Microseconds())/float64(b.N), "ack-µs/fetch")
		})
	}
}
