package rheowatermill_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	rheowatermill "github.com/rheo-go/rheo/watermill"
)

// Benchmarks compare, in one run, the adapter with the Watermill adapter a
// user would otherwise pick for the same store, and with rheo's own API.
// Each benchmark runs its variants in turn, benchRounds times (sub-benchmark
// names get #01, #02), so that load on a shared machine hits all of them
// alike; read the ratios of one run:
//
//	go test -run '^$' -bench 'Consume' -benchtime 20000x
//	go test -run '^$' -bench PublishPostgres -benchtime 5000x
//	go test -run '^$' -bench PublishMemory -benchtime 200000x
//
// Consume benchmarks publish b.N messages untimed, then time one subscriber
// receiving and acking all of them; they report msgs/s.

const benchRounds = 3

type variant struct {
	name string
	f    func(b *testing.B)
}

// alternate runs the variants in turn, benchRounds times.
func alternate(b *testing.B, vs ...variant) {
	for range benchRounds {
		for _, v := range vs {
			b.Run(v.name, v.f)
		}
	}
}

// cpuTime is the CPU time this process has used (user and system): on a
// loaded machine a better measure of in-process work than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const benchPayload = `{"order":"o-123456","amount":4200,"currency":"EUR"}`

func benchMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(benchPayload))
	}
	return msgs
}

// publishAll publishes msgs in batches of 100.
func publishAll(b testing.TB, pub message.Publisher, topic string, msgs []*message.Message) {
	for len(msgs) > 0 {
		n := min(len(msgs), 100)
		require.NoError(b, pub.Publish(topic, msgs[:n]...))
		msgs = msgs[n:]
	}
}

// consumeAll times receiving and acking n messages from sub, up to the
// return of sub.Close, by which every adapter has sent its acks.
func consumeAll(b *testing.B, sub message.Subscriber, topic string, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ResetTimer()
	start := time.Now()
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(b, err)
	seen := make(map[string]struct{}, n)
	timeout := time.After(5 * time.Minute)
	for len(seen) < n {
		select {
		case msg := <-ch:
			seen[msg.UUID] = struct{}{}
			msg.Ack()
		case <-timeout:
			b.Fatalf("received %d of %d", len(seen), n)
		}
	}
	require.NoError(b, sub.Close())
	b.StopTimer()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
}

func rheoConsume(b *testing.B, c *rheo.Client, topic string, concurrency int) {
	pub, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c})
	require.NoError(b, err)
	publishAll(b, pub, topic, benchMessages(b.N))
	analyze(b, c)
	// The subscriber's defaults but for Concurrency: its window grows to
	// 2,000 leases here (rheo.DefaultMaxInflight), fetched up to 500 at a
	// time.
	sub, err := rheowatermill.NewSubscriber(rheowatermill.SubscriberConfig{Client: c, Concurrency: concurrency})
	require.NoError(b, err)
	consumeAll(b, sub, topic, b.N)
}

// rheoRuntime times rheo's own consumer runtime (no Watermill) on the same
// backlog, at its defaults as the adapter: the adapter's overhead is the
// difference.
func rheoRuntime(b *testing.B, c *rheo.Client, topic string) {
	pub, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c})
	require.NoError(b, err)
	publishAll(b, pub, topic, benchMessages(b.N))
	analyze(b, c)
	ctx := context.Background()
	require.NoError(b, c.CreateGroup(ctx, topic, "bench", rheo.GroupConfig{}))
	var n atomic.Int64
	done := make(chan struct{})
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: topic, Group: "bench",
		Handler: func(context.Context, rheo.Event) error {
			if n.Add(1) == int64(b.N) {
				close(done)
			}
			return nil
		}})
	require.NoError(b, err)
	b.ResetTimer()
	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- k.Run(runCtx) }()
	<-done
	require.NoError(b, k.Drain(ctx))
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	cancel()
	require.NoError(b, <-ran)
}

// analyze gives PostgreSQL's planner statistics of the fresh backlog, as
// a long-running table would have (the other side gets the same).
func analyze(b *testing.B, c *rheo.Client) {
	if pb, ok := c.Backend().(*postgres.Backend); ok {
		_, err := pb.Pool().Exec(context.Background(), "VACUUM ANALYZE "+pb.Schema()+".rheo_events")
		require.NoError(b, err)
	}
}

// BenchmarkConsumePostgres: the adapter on rheo's PostgreSQL store against
// watermill-sql (default PostgreSQL schema and offsets adapter, batch-100
// subscriber), on the same server.
func BenchmarkConsumePostgres(b *testing.B) {
	alternate(b, adapterVariant("postgres", 1), adapterVariant("postgres", 8), runtimeVariant("postgres"),
		variant{"watermill-sql", watermillSQLConsume})
}

// adapterVariant consumes through the adapter with the given Concurrency:
// 1 hands out one message at a time, as watermill-sql and
// watermill-redisstream do; more lets the next message wait in a handler
// while the previous one is acked (a Router handles them concurrently).
func adapterVariant(store string, concurrency int) variant {
	return variant{fmt.Sprintf("adapter-c%d", concurrency), func(b *testing.B) {
		rheoConsume(b, newClient(b, store), "bench-"+randHex(4), concurrency)
	}}
}

func runtimeVariant(store string) variant {
	return variant{"rheo-consumer", func(b *testing.B) {
		rheoRuntime(b, newClient(b, store), "bench-"+randHex(4))
	}}
}

func watermillSQLConsume(b *testing.B) {
	{
		pool := testPool(b)
		schema := "wmsql_" + randHex(6)
		ctx := context.Background()
		_, err := pool.Exec(ctx, "CREATE SCHEMA "+schema)
		require.NoError(b, err)
		b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
		// A pool of its own whose connections use the schema, so that
		// watermill-sql's tables land there and are dropped with it.
		cfg, err := pgxpool.ParseConfig(postgresDSN())
		require.NoError(b, err)
		cfg.MaxConns = 16
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		wpool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(b, err)
		b.Cleanup(wpool.Close)
		db := wmsql.BeginnerFromPgx(wpool)
		topic := "bench_" + randHex(4)
		pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{
			SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true,
		}, watermill.NopLogger{})
		require.NoError(b, err)
		publishAll(b, pub, topic, benchMessages(b.N))
		_, err = wpool.Exec(ctx, `VACUUM ANALYZE "watermill_`+topic+`"`)
		require.NoError(b, err)
		sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
			ConsumerGroup:    "bench",
			SchemaAdapter:    wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 100},
			OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
			InitializeSchema: true,
			PollInterval:     10 * time.Millisecond,
		}, watermill.NopLogger{})
		require.NoError(b, err)
		consumeAll(b, sub, topic, b.N)
	}
}

// BenchmarkConsumeRedis: the adapter on rheo's Redis store against
// watermill-redisstream (consumer group, defaults), on the same server.
func BenchmarkConsumeRedis(b *testing.B) {
	alternate(b, adapterVariant("redis", 1), adapterVariant("redis", 8), runtimeVariant("redis"),
		variant{"watermill-redisstream", redisstreamConsume})
}

func redisstreamConsume(b *testing.B) {
	rc := testRedis(b)
	prefix := "rheowm:wmredis:" + randHex(6) + ":"
	b.Cleanup(func() { dropRedisKeys(b, rc, prefix) })
	topic := prefix + "bench"
	// watermill-redisstream closes the client it is given when its
	// publisher or subscriber closes: give each its own, and keep rc for
	// the cleanup.
	newClient := func() goredis.UniversalClient {
		o, err := goredis.ParseURL(redisURL())
		require.NoError(b, err)
		return goredis.NewClient(o)
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: newClient()}, watermill.NopLogger{})
	require.NoError(b, err)
	publishAll(b, pub, topic, benchMessages(b.N))
	require.NoError(b, pub.Close())
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: newClient(), ConsumerGroup: "bench", OldestId: "0",
	}, watermill.NopLogger{})
	require.NoError(b, err)
	consumeAll(b, sub, topic, b.N)
}

// BenchmarkPublishMemory and BenchmarkPublishPostgres: Publish through the
// adapter against rheo's own AppendBatch, both in batches of 100 messages of
// the same payload, each with an ID of its own. Messages are built before
// the timer starts on both sides: what is timed is the call.
func BenchmarkPublishMemory(b *testing.B)   { benchPublish(b, "memory") }
func BenchmarkPublishPostgres(b *testing.B) { benchPublish(b, "postgres") }

func benchPublish(b *testing.B, store string) {
	const batch = 100
	// timed runs each batch's call with the timer and the CPU clock on;
	// inputs are built between calls, so that no side keeps a large heap
	// of prepared messages alive (its GC cost would be the benchmark's).
	timed := func(b *testing.B, prepare func(n int), call func()) {
		var cpu time.Duration
		b.StopTimer()
		b.ResetTimer()
		for i := 0; i < b.N; i += batch {
			prepare(min(batch, b.N-i))
			c0 := cpuTime()
			b.StartTimer()
			call()
			b.StopTimer()
			cpu += cpuTime() - c0
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
	}
	alternate(b, variant{"AppendBatch", func(b *testing.B) {
		c := newClient(b, store)
		topic := "bench-" + randHex(4)
		require.NoError(b, c.CreateStream(context.Background(), topic, rheo.StreamConfig{}))
		var ms []rheo.Message
		timed(b, func(n int) {
			ms = make([]rheo.Message, n)
			for i := range ms {
				ms[i] = rheo.Message{ID: watermill.NewUUID(), Payload: []byte(benchPayload)}
			}
		}, func() {
			_, err := c.AppendBatch(context.Background(), topic, ms)
			require.NoError(b, err)
		})
	}}, variant{"adapter", func(b *testing.B) {
		c := newClient(b, store)
		topic := "bench-" + randHex(4)
		require.NoError(b, c.CreateStream(context.Background(), topic, rheo.StreamConfig{}))
		pub, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c})
		require.NoError(b, err)
		var msgs []*message.Message
		timed(b, func(n int) { msgs = benchMessages(n) }, func() {
			require.NoError(b, pub.Publish(topic, msgs...))
		})
	}})
}
