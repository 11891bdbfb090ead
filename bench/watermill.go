package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	goredis "github.com/redis/go-redis/v9"
)

const wmTopic = "orders"

// wmPubSub is one Watermill transport on fresh storage.
type wmPubSub struct {
	pub     message.Publisher
	sub     message.Subscriber
	topic   string
	cleanup func()
}

func (p *wmPubSub) close() {
	p.pub.Close()
	p.sub.Close()
	p.cleanup()
}

// wmSQL is watermill-sql on PostgreSQL in a fresh schema, with the
// consumer-group offsets adapter.
func wmSQL(ctx context.Context, e *env) (*wmPubSub, error) {
	schema, drop, err := e.schema(ctx, "watermill")
	if err != nil {
		return nil, err
	}
	db := wsql.BeginnerFromPgx(e.pool)
	// Batches of 100, as watermill-sql's documentation suggests for
	// throughput (and as the adapter's benchmark runs it).
	sa := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 100,
		GenerateMessagesTableName: func(t string) string { return schema + `."messages_` + t + `"` }}
	oa := wsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: func(t string) string { return schema + `."offsets_` + t + `"` }}
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: sa, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		drop()
		return nil, err
	}
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		ConsumerGroup: "g", SchemaAdapter: sa, OffsetsAdapter: oa, InitializeSchema: true,
		PollInterval: 10 * time.Millisecond,
	}, watermill.NopLogger{})
	if err != nil {
		pub.Close()
		drop()
		return nil, err
	}
	if err := sub.SubscribeInitialize(wmTopic); err != nil {
		pub.Close()
		sub.Close()
		drop()
		return nil, err
	}
	return &wmPubSub{pub: pub, sub: sub, topic: wmTopic, cleanup: drop}, nil
}

// wmRedis is watermill-redisstream under a fresh key prefix, with a
// consumer group reading from the stream's beginning.
func wmRedis(_ context.Context, e *env) (*wmPubSub, error) {
	p, del := e.prefix("watermill")
	// Watermill closes the client it is given: it gets its own.
	rdb := goredis.NewClient(&goredis.Options{Addr: e.rdb.Options().Addr, PoolSize: 20})
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, watermill.NopLogger{})
	if err != nil {
		rdb.Close()
		del()
		return nil, err
	}
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: rdb, ConsumerGroup: "g", Consumer: "c1", OldestId: "0",
	}, watermill.NopLogger{})
	if err != nil {
		pub.Close()
		rdb.Close()
		del()
		return nil, err
	}
	return &wmPubSub{pub: pub, sub: sub, topic: p + wmTopic, cleanup: del}, nil
}

func wmBatch(i, size int) []*message.Message {
	msgs := make([]*message.Message, size)
	for j := range msgs {
		msgs[j] = message.NewMessage(watermill.NewUUID(), payload(make([]byte, 0, 128), i+j))
	}
	return msgs
}

// wmConsume publishes n messages (setup), then times one subscription of
// the consumer group receiving and acking them all.
func wmConsume(open func(context.Context, *env) (*wmPubSub, error)) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		ps, err := open(ctx, e)
		if err != nil {
			return 0, err
		}
		defer ps.close()
		for i := 0; i < n; i += 100 {
			if err := ps.pub.Publish(ps.topic, wmBatch(i, min(100, n-i))...); err != nil {
				return 0, err
			}
		}
		subCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := e.start()
		ch, err := ps.sub.Subscribe(subCtx, ps.topic)
		if err != nil {
			return 0, err
		}
		timeout := time.NewTimer(10 * time.Minute)
		defer timeout.Stop()
		for got := 0; got < n; got++ {
			select {
			case m, ok := <-ch:
				if !ok {
					return 0, fmt.Errorf("watermill subscription closed after %d of %d messages", got, n)
				}
				m.Ack()
			case <-timeout.C:
				return 0, fmt.Errorf("watermill: %d of %d messages after 10m", got, n)
			}
		}
		// Closing waits for the last ack to be stored.
		cancel()
		if err := ps.sub.Close(); err != nil {
			return 0, err
		}
		return rate(n, e.stop(start)), nil
	}
}

// wmPublish times one producer publishing n messages in calls of size.
func wmPublish(open func(context.Context, *env) (*wmPubSub, error), size int) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		ps, err := open(ctx, e)
		if err != nil {
			return 0, err
		}
		defer ps.close()
		start := e.start()
		for i := 0; i < n; i += size {
			if err := ps.pub.Publish(ps.topic, wmBatch(i, min(size, n-i))...); err != nil {
				return 0, err
			}
		}
		return rate(n, e.stop(start)), nil
	}
}
