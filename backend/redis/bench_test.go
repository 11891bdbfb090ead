package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	rheoid "github.com/rheo-go/rheo/internal/id"
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
	return memoryInfo(b, rc, "used_memory")
}

// memoryInfo reads one figure of INFO memory.
func memoryInfo(b *testing.B, rc interface {
	Info(ctx context.Context, section ...string) *goredis.StringCmd
}, name string) int64 {
	info, err := rc.Info(context.Background(), "memory").Result()
	require.NoError(b, err)
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(b, err)
			return n
		}
	}
	b.Fatalf("no %s in INFO memory", name)
	return 0
}

// BenchmarkMemory reports Redis memory per retained event (entry plus ID
// index) and per in-flight lease (fence and due-time entry),
// from INFO memory deltas over 20,000 events with the payload of the other
// benchmarks. Run it alone, with a small -benchtime (1x is enough): other
// clients of the server skew the deltas, and each iteration loads 20,000
// events (its keys are dropped before the next one, so a large count is
// slow, not a server filled up).
func BenchmarkMemory(b *testing.B) {
	const n = 20000
	for range b.N {
		be, rc := newBackend(b)
		c := rheo.New(be)
		ctx := context.Background()
		require.NoError(b, c.CreateStream(ctx, "mem", rheo.StreamConfig{Partitions: 4}))
		require.NoError(b, c.CreateGroup(ctx, "mem", "g", rheo.GroupConfig{}))
		m0 := usedMemory(b, rc)
		appendOrders(b, c, "mem", n)
		m1 := usedMemory(b, rc)
		for i := 0; i < n; i += 1000 {
			_, err := c.Fetch(ctx, "mem", "g", rheo.FetchOptions{Limit: 1000, LeaseDuration: time.Hour})
			require.NoError(b, err)
		}
		m2 := usedMemory(b, rc)
		b.ReportMetric(float64(m1-m0)/n, "bytes/event")
		b.ReportMetric(float64(m2-m1)/n, "bytes/lease")
		// Free this iteration's keys before the next one measures (they
		// are unlinked: freed in the background, which would show in the
		// next deltas).
		dropKeys(b, rc, be.KeyPrefix())
		require.Eventually(b, func() bool { return memoryInfo(b, rc, "lazyfree_pending_objects") == 0 },
			time.Minute, 10*time.Millisecond, "Redis did not finish freeing the keys")
	}
}

// BenchmarkWakeLatency measures the time from an append returning to a
// subscriber of another backend (another connection) being signalled.
func BenchmarkWakeLatency(b *testing.B) {
	be, _ := newBackend(b)
	other := mustNew(b, testClient(b), redis.WithKeyPrefix(be.KeyPrefix()))
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

// cmdStat is a command's line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads INFO commandstats, and the main thread's CPU time
// (user plus system) from INFO cpu as "cpu".
func commandStats(b testing.TB, rc goredis.UniversalClient) map[string]cmdStat {
	info, err := rc.Info(context.Background(), "commandstats", "cpu").Result()
	require.NoError(b, err)
	out := map[string]cmdStat{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys_main_thread" || name == "used_cpu_user_main_thread") {
			sec, err := strconv.ParseFloat(rest, 64)
			require.NoError(b, err)
			st := out["cpu"]
			st.usec += int64(sec * 1e6)
			out["cpu"] = st
			continue
		}
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" {
			continue
		}
		var st cmdStat
		for f := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, err = strconv.ParseInt(v, 10, 64)
			}
			require.NoError(b, err)
		}
		out[name] = st
	}
	return out
}

// topLevel is a go-redis hook that records the names of the commands a
// client sends (the ones Redis runs at top level, as opposed to those a
// script calls).
type topLevel struct {
	mu    sync.Mutex
	names map[string]bool
}

func (h *topLevel) note(cmds ...goredis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.names[strings.ToLower(c.Name())] = true
	}
}

func (h *topLevel) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *topLevel) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h *topLevel) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.note(cmds...)
		return next(ctx, cmds)
	}
}

// BenchmarkConsumerServerTime drains a backlog of 50,000 events on 4
// partitions through the consumer runtime at its default settings
// (Concurrency 100, no-op handler) and reports the Redis server time per
// consumed event from INFO commandstats deltas, and the drain rate.
//
// Redis 7 counts the commands a script calls under their own names and
// also in the script's own usec (EVALSHA's time is the whole script's), so
// summing every line would count them twice: server-µs/event sums the
// commands the client sent (EVALSHA and the few others, by name), which
// includes the commands the scripts called, and script-cmd-µs/event is the
// part of it those took. server-cpu-µs/event is the main thread's CPU time
// (INFO cpu), which also covers reading requests and writing replies and
// suffers less from other processes taking the CPU. The deltas are the
// whole server's: run it against a Redis no one else uses
// (RHEO_TEST_REDIS), e.g.
//
//	redis-server --port 6390 --save '' --appendonly no &
//	RHEO_TEST_REDIS=redis://127.0.0.1:6390/0 go test -run X -bench ConsumerServerTime -benchtime 1x -count 5 ./backend/redis/
func BenchmarkConsumerServerTime(b *testing.B) {
	const n = 50000
	var server, nested, cpu int64
	var took time.Duration
	for range b.N {
		b.StopTimer()
		be, rc := newBackend(b)
		hook := &topLevel{names: map[string]bool{}}
		rc.AddHook(hook)
		c := rheo.New(be)
		ctx := context.Background()
		require.NoError(b, c.CreateStream(ctx, "srv", rheo.StreamConfig{Partitions: 4}))
		require.NoError(b, c.CreateGroup(ctx, "srv", "g", rheo.GroupConfig{}))
		appendOrders(b, c, "srv", n)
		var handled atomic.Int64
		all := make(chan struct{})
		k, err := c.NewConsumer(rheo.ConsumerConfig{
			Stream: "srv", Group: "g", Concurrency: 100,
			Handler: func(context.Context, rheo.Event) error {
				if handled.Add(1) == n {
					close(all)
				}
				return nil
			},
		})
		require.NoError(b, err)
		hook.mu.Lock()
		clear(hook.names)
		hook.mu.Unlock()
		s0 := commandStats(b, rc)
		runCtx, cancel := context.WithCancel(ctx)
		ran := make(chan error, 1)
		b.StartTimer()
		start := time.Now()
		go func() { ran <- k.Run(runCtx) }()
		select {
		case <-all:
		case err := <-ran:
			cancel()
			b.Fatalf("consumer stopped early: %v", err)
		}
		require.NoError(b, k.Drain(ctx))
		elapsed := time.Since(start)
		b.StopTimer()
		require.NoError(b, <-ran)
		cancel()
		s1 := commandStats(b, rc)
		hook.mu.Lock()
		top := maps.Clone(hook.names)
		hook.mu.Unlock()
		cpu += s1["cpu"].usec - s0["cpu"].usec
		delete(s1, "cpu")
		for _, name := range slices.Sorted(maps.Keys(s1)) {
			d := s1[name].usec - s0[name].usec
			if calls := s1[name].calls - s0[name].calls; calls > 0 {
				b.Logf("%-16s %8d calls %9d µs %6.3f µs/event", name, calls, d, float64(d)/n)
			}
			switch {
			case strings.HasPrefix(name, "eval"), top[name], name == "hello", strings.HasPrefix(name, "ssub"), strings.HasPrefix(name, "sunsub"):
				// Sent by the client (the subscriber connection's
				// commands bypass the hook).
				server += d
			default:
				nested += d
			}
		}
		lag, err := c.Lag(ctx, "srv", "g")
		require.NoError(b, err)
		require.Zero(b, lag.Total)
		took += elapsed
	}
	events := float64(n * b.N)
	b.ReportMetric(float64(server)/events, "server-µs/event")
	b.ReportMetric(float64(nested)/events, "script-cmd-µs/event")
	b.ReportMetric(float64(cpu)/events, "server-cpu-µs/event")
	b.ReportMetric(events/took.Seconds(), "events/s")
}

// appendOrders appends n order events to stream in batches of 100.
func appendOrders(b *testing.B, c *rheo.Client, stream string, n int) {
	batch := make([]rheo.Message, 100)
	for i := 0; i < n; i += 100 {
		for j := range batch {
			batch[j] = rheo.Message{Type: "order.placed", Key: fmt.Sprint(i + j), Payload: benchPayload(i + j)}
		}
		_, err := c.AppendBatch(context.Background(), stream, batch)
		require.NoError(b, err)
	}
}

// BenchmarkScriptEntryCost measures what the Redis server spends per entry
// when a script, rather than the client, reads stream entries or writes
// hash fields: the cost model behind the fetch and settle scripts, whose
// per-event share of the server's time is mostly conversion (replies into
// Lua values, Lua values back into a reply, argument strings built in
// Lua) rather than the commands themselves. Each case works on 500
// entries shaped as rheo's (a 150-byte packed event in field e; a lease
// value of a 36-character lease ID, attempt, claim time and consumer):
//
//   - xrange/native: the client reads 500 entries with XRANGE;
//   - xrange/script-count: a script reads them and returns their count;
//   - xrange/script-return: a script reads them and returns (seq, packed)
//     pairs, as the fetch script returns fresh leases;
//   - hset/native: the client writes 500 lease fields in one HSET, then
//     deletes the hash;
//   - hset/script-built: a script builds the 500 values from the lease ID
//     and writes them the same way, as the fetch script does.
//
// It reports server-µs/entry, from INFO commandstats deltas of the
// commands the client sent (the whole server's: run it against a Redis no
// one else uses, as BenchmarkConsumerServerTime).
func BenchmarkScriptEntryCost(b *testing.B) {
	const n = 500
	ctx := context.Background()
	rc := testClient(b)
	prefix := uniquePrefix()
	b.Cleanup(func() { dropKeys(b, rc, prefix) })
	sk, hk := prefix+"{x}s", prefix+"{x}h"
	packed := strings.Repeat("p", 150)
	pipe := rc.Pipeline()
	for i := 1; i <= 20*n; i++ {
		pipe.XAdd(ctx, &goredis.XAddArgs{Stream: sk, ID: strconv.Itoa(i) + "-0", Values: []string{"e", packed}})
	}
	_, err := pipe.Exec(ctx)
	require.NoError(b, err)
	lease := "0190b1c2-7d4e-4f5a-9b6c-1d2e3f405162"
	claimed := ":1:1764950400000000:consumer-1a2b3c4d"
	kv := make([]any, 0, 2*n)
	for i := range n {
		kv = append(kv, strconv.Itoa(i+1), lease+claimed)
	}
	count := goredis.NewScript(`return #redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])`)
	pairs := goredis.NewScript(`
local out = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])) do
  out[#out + 1] = string.match(e[1], '^(%d+)')
  out[#out + 1] = e[2][2]
end
return out`)
	built := goredis.NewScript(`
local kv = {}
for i = 1, tonumber(ARGV[2]) do
  kv[#kv + 1] = string.format('%d', i)
  kv[#kv + 1] = ARGV[1] .. ARGV[3]
end
redis.call('HSET', KEYS[1], unpack(kv))
return redis.call('DEL', KEYS[1])`)
	from := func(i int) string { return strconv.Itoa((i%19)*n+1) + "-0" }
	cases := []struct {
		name string
		run  func(i int) error
	}{
		{"xrange/native", func(i int) error { return rc.XRangeN(ctx, sk, from(i), "+", n).Err() }},
		{"xrange/script-count", func(i int) error { return count.Run(ctx, rc, []string{sk}, from(i), n).Err() }},
		{"xrange/script-return", func(i int) error { return pairs.Run(ctx, rc, []string{sk}, from(i), n).Err() }},
		{"hset/native", func(int) error {
			if err := rc.HSet(ctx, hk, kv...).Err(); err != nil {
				return err
			}
			return rc.Del(ctx, hk).Err()
		}},
		{"hset/script-built", func(int) error { return built.Run(ctx, rc, []string{hk}, lease, n, claimed).Err() }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			require.NoError(b, c.run(0)) // loads the script
			s0 := commandStats(b, rc)
			b.ResetTimer()
			for i := range b.N {
				if err := c.run(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			s1 := commandStats(b, rc)
			// A script's commands count under their own names as well as
			// in EVALSHA's time: a script case counts EVALSHA alone.
			usec := s1["evalsha"].usec - s0["evalsha"].usec
			if s1["evalsha"].calls == s0["evalsha"].calls {
				for _, name := range []string{"xrange", "hset", "del"} {
					usec += s1[name].usec - s0[name].usec
				}
			}
			b.ReportMetric(float64(usec)/float64(b.N*n), "server-µs/entry")
		})
	}
}

// BenchmarkIDHashSize measures what an append pays to the ID index when
// one hash holds every ID of a stream, as streams of earlier versions do:
// an HMGET of 100 fresh UUIDv7s (the check for stored IDs) and an HSET of
// them, into a hash of 1,000 up to 12,000,000 fields (filled in turn, so
// the run takes a minute and about 1.5 GB of the server's memory). It
// reports server-µs/op from INFO commandstats deltas: run it against a
// Redis no one else uses, as BenchmarkConsumerServerTime. The cost swings
// with the size: at 5 M and 10 M fields the hash is rehashing into a
// table twice the size (DEBUG HTSTATS-KEY shows both tables), which each
// command on it moves along, and those sizes cost several times the
// 1,000-field case, as do sizes whose table is nearly full; the reason a
// stream's IDs are kept in buckets of 4.096 s.
func BenchmarkIDHashSize(b *testing.B) {
	ctx := context.Background()
	rc := testClient(b)
	prefix := uniquePrefix()
	b.Cleanup(func() { dropKeys(b, rc, prefix) })
	key := prefix + "{x}ids"
	have := 0
	id := rheoid.Event
	for _, size := range []int{1000, 500_000, 1_000_000, 2_000_000, 3_000_000, 5_000_000, 7_000_000, 9_000_000, 10_000_000, 12_000_000} {
		for have < size {
			pipe := rc.Pipeline()
			for k := 0; k < 100 && have < size; k++ {
				kv := make([]any, 0, 2000)
				for j := 0; j < 1000 && have < size; j++ {
					kv = append(kv, id(), "1:"+strconv.Itoa(have))
					have++
				}
				pipe.HSet(ctx, key, kv...)
			}
			_, err := pipe.Exec(ctx)
			require.NoError(b, err)
		}
		b.Run(fmt.Sprintf("fields=%d", size), func(b *testing.B) {
			ids := make([]string, 100)
			kv := make([]any, 200)
			s0 := commandStats(b, rc)
			b.ResetTimer()
			for range b.N {
				for j := range ids {
					ids[j] = id()
					kv[2*j], kv[2*j+1] = ids[j], "1:1"
				}
				if err := rc.HMGet(ctx, key, ids...).Err(); err != nil {
					b.Fatal(err)
				}
				if err := rc.HSet(ctx, key, kv...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			s1 := commandStats(b, rc)
			usec := s1["hmget"].usec - s0["hmget"].usec + s1["hset"].usec - s0["hset"].usec
			b.ReportMetric(float64(usec)/float64(b.N), "server-µs/op")
			have += 100 * b.N // the fields this run added
		})
	}
}

// BenchmarkWideServerTime measures the server's time (INFO commandstats:
// EVALSHA, which counts the script's commands too) of a fetch of 100, of
// the ack of what it got and of a lag read, on streams of 4 and 1,024 partitions, as the scale cases of
// `bench -scale` run them: each iteration appends 100 events with fresh
// keys, fetches them, acks them and reads the lag. Run it against a Redis
// no one else uses, as BenchmarkConsumerServerTime.
func BenchmarkWideServerTime(b *testing.B) {
	for _, parts := range []int{4, 1024} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			ctx := context.Background()
			be, rc := newBackend(b)
			c := rheo.New(be)
			require.NoError(b, c.CreateStream(ctx, "w", rheo.StreamConfig{Partitions: parts}))
			require.NoError(b, c.CreateGroup(ctx, "w", "g", rheo.GroupConfig{}))
			ms := make([]rheo.Message, 100)
			var fetch, ack, lag, lag4Server int64
			var lag4 time.Duration
			b.ResetTimer()
			for i := range b.N {
				for j := range ms {
					ms[j] = rheo.Message{Key: strconv.Itoa(i*100 + j), Payload: benchPayload(j)}
				}
				_, err := c.AppendBatch(ctx, "w", ms)
				require.NoError(b, err)
				s0 := commandStats(b, rc)
				ls, err := c.Fetch(ctx, "w", "g", rheo.FetchOptions{Limit: 100})
				require.NoError(b, err)
				s1 := commandStats(b, rc)
				require.NoError(b, c.AckBatch(ctx, ls))
				s2 := commandStats(b, rc)
				_, err = c.Lag(ctx, "w", "g")
				require.NoError(b, err)
				s3 := commandStats(b, rc)
				t := time.Now()
				_, err = c.Lag(ctx, "w", "g", 0, 1, 2, 3)
				require.NoError(b, err)
				lag4 += time.Since(t)
				s4 := commandStats(b, rc)
				fetch += s1["evalsha"].usec - s0["evalsha"].usec
				ack += s2["evalsha"].usec - s1["evalsha"].usec
				lag += s3["evalsha"].usec - s2["evalsha"].usec
				lag4Server += s4["evalsha"].usec - s3["evalsha"].usec
			}
			b.ReportMetric(float64(fetch)/float64(b.N), "fetch-server-µs")
			b.ReportMetric(float64(ack)/float64(b.N), "ack-server-µs")
			b.ReportMetric(float64(lag)/float64(b.N), "lag-server-µs")
			b.ReportMetric(float64(lag4Server)/float64(b.N), "lag4-server-µs")
			b.ReportMetric(float64(lag4.Microseconds())/float64(b.N), "lag4-µs")
		})
	}
}
