package rheowatermill_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	rheowatermill "github.com/rheo-go/rheo/watermill"
)

func newPubSub(t *testing.T, c *rheo.Client, cfg rheowatermill.SubscriberConfig) (*rheowatermill.Publisher, *rheowatermill.Subscriber) {
	t.Helper()
	pub, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c})
	require.NoError(t, err)
	cfg.Client = c
	sub, err := rheowatermill.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = pub.Close()
		_ = sub.Close()
	})
	return pub, sub
}

func receive(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.True(t, ok, "channel closed")
		return msg
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
		return nil
	}
}

func forEachStore(t *testing.T, f func(t *testing.T, store string)) {
	for _, store := range storeNames {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			f(t, store)
		})
	}
}

// Payloads and metadata come back as they were published, on every store:
// bytes exactly for wrapped payloads, JSON-equal for JSON objects (exactly
// where the store keeps JSON as text).
func TestPayloadsAndMetadataRoundTrip(t *testing.T) {
	payloads := [][]byte{
		nil, []byte("x"), []byte("42"), []byte(`"s"`), []byte(`[1,2]`), {0, 1, 0xff, 0xfe},
		[]byte(`{"a":1,"b":{"c":[true,null]}}`), []byte(`{"b":1,"a":2}`),
		[]byte(`{ "spaced": 1 }`), []byte(`{"$bytes":"AAEC"}`), []byte(`{"$bytes":"not base64!"}`),
		[]byte(`{"z":"\u0000"}`), []byte("{\"bad\":\"\xff\"}"), []byte(`{"x":1`),
		[]byte(`{"x":}`), []byte(`{"a":1}}`), []byte(`{"a":"}`),
	}
	forEachStore(t, func(t *testing.T, store string) {
		c := newClient(t, store)
		pub, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{})
		msgs := make([]*message.Message, len(payloads))
		for i, p := range payloads {
			msgs[i] = message.NewMessage(watermill.NewUUID(), p)
			msgs[i].Metadata.Set("i", fmt.Sprint(i))
			msgs[i].Metadata.Set("unicode", "é ✓")
		}
		require.NoError(t, pub.Publish("roundtrip", msgs...))
		ch, err := sub.Subscribe(context.Background(), "roundtrip")
		require.NoError(t, err)
		for i := range payloads {
			got := receive(t, ch)
			got.Ack()
			want := msgs[i]
			require.Equal(t, want.UUID, got.UUID, "in order on one partition")
			assert.Equal(t, fmt.Sprint(i), got.Metadata.Get("i"))
			assert.Equal(t, "é ✓", got.Metadata.Get("unicode"))
			if store == "postgres" && string(got.Payload) == `{"a":2,"b":1}` {
				// A PostgreSQL store that keeps payloads as jsonb alone
				// orders keys; the compact spelling is kept.
				assert.Equal(t, `{"b":1,"a":2}`, string(want.Payload))
				continue
			}
			assert.Equal(t, string(want.Payload), string(got.Payload), "payload %d", i)
		}
	})
}

// Publishing a message again (same UUID) stores nothing new, whether alone
// or inside a batch, and the group receives it once.
func TestIdempotentRepublish(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		c := newClient(t, store)
		pub, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{})
		first := message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))
		require.NoError(t, pub.Publish("orders", first))
		// A retry after an ambiguous error, then inside a later batch.
		require.NoError(t, pub.Publish("orders", message.NewMessage(first.UUID, []byte(`{"n":1}`))))
		second := message.NewMessage(watermill.NewUUID(), []byte(`{"n":2}`))
		require.NoError(t, pub.Publish("orders", message.NewMessage(first.UUID, []byte(`{"n":1}`)), second))

		evs, err := c.Read(context.Background(), "orders", rheo.ReadOptions{})
		require.NoError(t, err)
		require.Len(t, evs, 2)
		assert.Equal(t, first.UUID, evs[0].ID)
		assert.Equal(t, second.UUID, evs[1].ID)

		ch, err := sub.Subscribe(context.Background(), "orders")
		require.NoError(t, err)
		for _, want := range []string{first.UUID, second.UUID} {
			m := receive(t, ch)
			assert.Equal(t, want, m.UUID)
			m.Ack()
		}
		eventually(t, "both acked", func() bool {
			info, err := c.GroupInfo(context.Background(), "orders", rheowatermill.DefaultConsumerGroup)
			return err == nil && info.Lag.Total == 0 && info.Inflight == 0
		})
		select {
		case m := <-ch:
			t.Fatalf("unexpected redelivery of %s", m.UUID)
		case <-time.After(100 * time.Millisecond):
		}
	})
}

// The partition key comes from metadata by default, or from the configured
// function; messages with one key land in one partition.
func TestPartitionKey(t *testing.T) {
	c := newClient(t, "memory")
	pub, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c, Partitions: 8})
	require.NoError(t, err)
	custom, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{
		Client: c, PartitionKey: func(_ string, m *message.Message) string { return m.Metadata.Get("customer") },
	})
	require.NoError(t, err)
	var msgs []*message.Message
	for i := range 20 {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set(rheowatermill.MetadataPartitionKey, "customer-7")
		m.Metadata.Set("customer", fmt.Sprintf("c%d", i))
		msgs = append(msgs, m)
	}
	require.NoError(t, pub.Publish("keyed", msgs[:10]...))
	require.NoError(t, custom.Publish("keyed", msgs[10:]...))
	sameKey := map[int]bool{} // partitions of the messages keyed customer-7
	ownKeys := map[int]bool{} // partitions of the messages keyed c10..c19
	n := 0
	for e, err := range c.QueryAll(context.Background(), rheo.Query{Stream: "keyed", Limit: 100}) {
		require.NoError(t, err)
		n++
		if e.Key == "customer-7" {
			sameKey[e.Partition] = true
		} else {
			require.Regexp(t, `^c1[0-9]$`, e.Key, "the custom function's key")
			ownKeys[e.Partition] = true
		}
	}
	require.Equal(t, 20, n)
	assert.Len(t, sameKey, 1, "one key, one partition")
	assert.Greater(t, len(ownKeys), 1, "ten keys spread over the partitions")
}

// Bad input is refused with an error naming what is wrong, and nothing is
// written.
func TestPublishBadInput(t *testing.T) {
	c := newClient(t, "memory")
	pub, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c})
	require.NoError(t, err)
	good := message.NewMessage(watermill.NewUUID(), []byte("x"))
	bad := message.NewMessage(watermill.NewUUID(), []byte("x"))
	bad.Metadata.Set("tab\tkey", "v")
	err = pub.Publish("bad", good, bad)
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "metadata key")
	evs, err := c.Read(context.Background(), "bad", rheo.ReadOptions{})
	require.NoError(t, err)
	assert.Empty(t, evs, "all or nothing")

	long := message.NewMessage(strings.Repeat("u", 201), []byte("x"))
	require.ErrorIs(t, pub.Publish("bad", long), rheo.ErrInvalidArgument, "UUID over 200 bytes")

	strict, err := rheowatermill.NewPublisher(rheowatermill.PublisherConfig{Client: c, DoNotCreateStreams: true})
	require.NoError(t, err)
	require.ErrorIs(t, strict.Publish("missing", good), rheo.ErrStreamNotFound)

	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish("bad", good), rheowatermill.ErrPublisherClosed)

	_, err = rheowatermill.NewPublisher(rheowatermill.PublisherConfig{})
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = rheowatermill.NewSubscriber(rheowatermill.SubscriberConfig{Client: c, Concurrency: 4, Prefetch: 2})
	require.ErrorContains(t, err, "Prefetch")
	_, err = rheowatermill.NewSubscriber(rheowatermill.SubscriberConfig{Client: c, ConsumerGroup: "bad\ngroup"})
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = rheowatermill.NewSubscriber(rheowatermill.SubscriberConfig{Client: c, NackDelay: -time.Second})
	require.ErrorContains(t, err, "NackDelay")

	strictSub, err := rheowatermill.NewSubscriber(rheowatermill.SubscriberConfig{Client: c, DoNotCreate: true})
	require.NoError(t, err)
	_, err = strictSub.Subscribe(context.Background(), "missing")
	require.ErrorIs(t, err, rheo.ErrStreamNotFound)
}

// A second subscription of one topic and group through one client is an
// error from Subscribe (rheo runs one consumer per group and client); once
// the first ends, subscribing again works.
func TestSubscribeTwiceOnOneClient(t *testing.T) {
	c := newClient(t, "memory")
	_, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, "twice")
	require.NoError(t, err)
	_, err = sub.Subscribe(context.Background(), "twice")
	require.ErrorIs(t, err, rheo.ErrAlreadyRunning)
	cancel()
	for range ch {
	}
	_, err = sub.Subscribe(context.Background(), "twice")
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	_, err = sub.Subscribe(context.Background(), "twice")
	require.ErrorIs(t, err, rheowatermill.ErrSubscriberClosed)
}

// A lease lost while the handler holds the message (it expired and another
// worker claimed it) is logged and cancels the message's context with
// rheo.ErrStaleLease; the late Ack does not settle anything.
func TestLeaseLostMidHandler(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		c := newClient(t, store, rheo.WithClock(clk))
		// A short lease so that renewal (every half lease, real time)
		// comes round quickly; expiry itself follows the frozen clock.
		// Prefetch 1: while it holds the message the subscriber does not
		// fetch, so it cannot reclaim its own expired lease first.
		pub, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{LeaseDuration: 100 * time.Millisecond, Prefetch: 1})
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		require.NoError(t, pub.Publish("lost", m))
		ch, err := sub.Subscribe(context.Background(), "lost")
		require.NoError(t, err)
		got := receive(t, ch)
		lease, ok := rheowatermill.LeaseOf(got)
		require.True(t, ok)
		require.Equal(t, 1, lease.Attempt)

		// Another worker takes the delivery once the lease has expired.
		var stolen []rheo.Lease
		eventually(t, "another worker claims the expired lease", func() bool {
			clk.Advance(time.Hour)
			stolen, err = c.Fetch(context.Background(), "lost", rheowatermill.DefaultConsumerGroup,
				rheo.FetchOptions{ConsumerID: "thief", LeaseDuration: time.Hour})
			require.NoError(t, err)
			return len(stolen) == 1
		})
		require.Equal(t, 2, stolen[0].Attempt)

		select {
		case <-got.Context().Done():
		case <-time.After(30 * time.Second):
			t.Fatal("message context not cancelled after its lease was lost")
		}
		require.ErrorIs(t, context.Cause(got.Context()), rheo.ErrStaleLease)
		got.Ack() // too late: fenced, never settled

		info, err := c.GroupInfo(context.Background(), "lost", rheowatermill.DefaultConsumerGroup)
		require.NoError(t, err)
		assert.EqualValues(t, 1, info.Inflight, "the thief still holds it")
		require.NoError(t, c.Ack(context.Background(), stolen[0]), "the thief's lease is current")
	})
}

// Close while a handler holds a message waits for its Ack and settles it;
// a message never acked is nacked once CloseTimeout passes (its context
// cancelled with rheo.ErrConsumerStopped) and comes back to the next
// subscriber. Prefetched messages never handed out come back too, released
// (their attempts not counted).
func TestCloseDuringHandler(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		c := newClient(t, store)
		ctx := context.Background()
		pub, _ := newPubSub(t, c, rheowatermill.SubscriberConfig{})
		var msgs []*message.Message
		for range 5 {
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte("x")))
		}
		require.NoError(t, pub.Publish("close", msgs...))

		// 1. Acked during Close: settled, Close waits for it.
		_, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{Prefetch: 5, CloseTimeout: time.Minute})
		ch, err := sub.Subscribe(ctx, "close")
		require.NoError(t, err)
		held := receive(t, ch)
		require.Equal(t, msgs[0].UUID, held.UUID)
		closed := make(chan struct{})
		go func() {
			assert.NoError(t, sub.Close())
			close(closed)
		}()
		select {
		case <-closed:
			t.Fatal("Close returned while a handed-out message was neither acked nor nacked")
		case <-time.After(200 * time.Millisecond):
		}
		held.Ack()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatal("Close did not return after the Ack")
		}
		_, open := <-ch
		require.False(t, open, "channel closed after Close")
		info, err := c.GroupInfo(ctx, "close", rheowatermill.DefaultConsumerGroup)
		require.NoError(t, err)
		assert.EqualValues(t, 0, info.Inflight, "no lease left behind")
		assert.EqualValues(t, 4, info.Lag.Total, "one acked, four handed back")

		// 2. Never acked: nacked after CloseTimeout, context cancelled.
		_, sub2 := newPubSub(t, c, rheowatermill.SubscriberConfig{CloseTimeout: 100 * time.Millisecond})
		ch2, err := sub2.Subscribe(ctx, "close")
		require.NoError(t, err)
		stuck := receive(t, ch2)
		require.Equal(t, msgs[1].UUID, stuck.UUID, "handed back, not lost")
		require.NoError(t, sub2.Close())
		require.ErrorIs(t, context.Cause(stuck.Context()), rheo.ErrConsumerStopped)
		stuck.Ack() // after Close: not settled as an ack

		// 3. Everything left comes back, none acked twice.
		_, sub3 := newPubSub(t, c, rheowatermill.SubscriberConfig{})
		ch3, err := sub3.Subscribe(ctx, "close")
		require.NoError(t, err)
		for i, want := range msgs[1:] {
			m := receive(t, ch3)
			assert.Equal(t, want.UUID, m.UUID)
			// Handed back unhandled twice (prefetched by sub and sub2),
			// the last three are released, their claims not counted; the
			// first was handed out by sub2 and nacked by its Close.
			l, ok := rheo.LeaseFromContext(m.Context())
			require.True(t, ok)
			assert.Equal(t, map[bool]int{true: 2, false: 1}[i == 0], l.Attempt, "attempt of %s", want.UUID)
			m.Ack()
		}
		require.NoError(t, sub3.Close())
		info, err = c.GroupInfo(ctx, "close", rheowatermill.DefaultConsumerGroup)
		require.NoError(t, err)
		assert.EqualValues(t, 0, info.Lag.Total)
		assert.EqualValues(t, 0, info.Inflight)
		assert.EqualValues(t, 0, info.DeadLetters)
	})
}

var errPermanent = errors.New("unknown product")

// A Router with Retry and DeadLetter middleware: transient failures are
// retried until they succeed, permanent ones are rejected at once into
// rheo's dead letters with the error as reason, and errors that never stop
// are retried by rheo up to MaxAttempts and then dead-lettered. Watermill's
// PoisonQueue over the Publisher works too, its poison topic a rheo stream.
func TestRouterDeadLetters(t *testing.T) {
	forEachStore(t, func(t *testing.T, store string) {
		c := newClient(t, store)
		ctx := context.Background()
		pub, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{Group: rheo.GroupConfig{MaxAttempts: 3}})
		_, poisonSub := newPubSub(t, c, rheowatermill.SubscriberConfig{ConsumerGroup: "poisoned"})

		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(
			middleware.Recoverer,
			middleware.CorrelationID,
			rheowatermill.DeadLetter(func(err error) bool { return errors.Is(err, errPermanent) }),
			middleware.Retry{MaxRetries: 1}.Middleware,
		)
		var mu sync.Mutex
		calls := map[string]int{}
		var handled atomic.Int64
		router.AddConsumerHandler("orders", "orders", sub, func(msg *message.Message) error {
			mu.Lock()
			calls[string(msg.Payload)]++
			n := calls[string(msg.Payload)]
			mu.Unlock()
			switch string(msg.Payload) {
			case `{"kind":"flaky"}`:
				if n < 3 { // fails the first delivery (and its one retry)
					return errors.New("timeout")
				}
			case `{"kind":"bad"}`:
				return fmt.Errorf("order: %w", errPermanent)
			case `{"kind":"down"}`:
				return errors.New("service down")
			}
			handled.Add(1)
			return nil
		})
		poisonQ, err := middleware.PoisonQueueWithFilter(pub, "orders-poison", func(err error) bool { return errors.Is(err, errPermanent) })
		require.NoError(t, err)
		h := router.AddConsumerHandler("payments", "payments", sub, func(msg *message.Message) error {
			if string(msg.Payload) == `{"kind":"bad"}` {
				return errPermanent
			}
			return nil
		})
		h.AddMiddleware(poisonQ)

		routerDone := make(chan error, 1)
		go func() { routerDone <- router.Run(ctx) }()
		<-router.Running()

		kinds := []string{"ok", "flaky", "bad", "down", "ok2"}
		ids := map[string]string{}
		for _, k := range kinds {
			m := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"kind":%q}`, k))
			ids[k] = m.UUID
			require.NoError(t, pub.Publish("orders", m))
		}
		badPayment := message.NewMessage(watermill.NewUUID(), []byte(`{"kind":"bad"}`))
		require.NoError(t, pub.Publish("payments", message.NewMessage(watermill.NewUUID(), []byte(`{}`)), badPayment))

		eventually(t, "orders settled", func() bool {
			info, err := c.GroupInfo(ctx, "orders", rheowatermill.DefaultConsumerGroup)
			return err == nil && info.Lag.Total == 0 && info.DeadLetters == 2
		})
		dls, err := c.DeadLetters(ctx, "orders", rheowatermill.DefaultConsumerGroup, rheo.DeadLetterOptions{})
		require.NoError(t, err)
		require.Len(t, dls, 2)
		reasons := map[string]rheo.DeadLetter{}
		for _, d := range dls {
			reasons[d.EventID] = d
		}
		bad := reasons[ids["bad"]]
		assert.Equal(t, "order: unknown product", bad.Reason, "rejected at once with the handler's error")
		assert.Equal(t, 1, bad.Attempts)
		down := reasons[ids["down"]]
		assert.Equal(t, "max_attempts: service down", down.Reason)
		assert.Equal(t, 3, down.Attempts)
		assert.EqualValues(t, 3, handled.Load(), "ok, flaky (after retries), ok2")

		// PoisonQueue: the failed payment is acked and republished to the
		// poison topic, a rheo stream of its own.
		poisoned, err := poisonSub.Subscribe(ctx, "orders-poison")
		require.NoError(t, err)
		pm := receive(t, poisoned)
		assert.Equal(t, `{"kind":"bad"}`, string(pm.Payload))
		assert.Equal(t, "unknown product", pm.Metadata.Get(middleware.ReasonForPoisonedKey))
		pm.Ack()

		require.NoError(t, router.Close())
		require.NoError(t, <-routerDone)
	})
}

// An event the marshaler cannot decode (written by another producer) is
// rejected into the group's dead letters with the error, not retried.
func TestUndecodableEventIsDeadLettered(t *testing.T) {
	c := newClient(t, "memory")
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "raw", rheo.StreamConfig{}))
	_, err := c.Append(ctx, "raw", rheo.Message{ID: "broken", Payload: []byte(`{"$bytes":"%%%"}`)})
	require.NoError(t, err)
	_, err = c.Append(ctx, "raw", rheo.Message{ID: "fine", Payload: []byte(`{"$bytes":"aGk="}`)})
	require.NoError(t, err)
	_, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{})
	ch, err := sub.Subscribe(ctx, "raw")
	require.NoError(t, err)
	m := receive(t, ch)
	assert.Equal(t, "fine", m.UUID)
	assert.Equal(t, "hi", string(m.Payload))
	m.Ack()
	eventually(t, "the broken event dead-lettered", func() bool {
		info, err := c.GroupInfo(ctx, "raw", rheowatermill.DefaultConsumerGroup)
		return err == nil && info.DeadLetters == 1 && info.Lag.Total == 0
	})
	dls, err := c.DeadLetters(ctx, "raw", rheowatermill.DefaultConsumerGroup, rheo.DeadLetterOptions{})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	assert.Equal(t, "broken", dls[0].EventID)
	assert.Contains(t, dls[0].Reason, "base64")
}

// Concurrency hands out that many messages at once, each held (and
// renewed) until its own Ack.
func TestConcurrency(t *testing.T) {
	c := newClient(t, "memory")
	pub, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{Concurrency: 4})
	require.NoError(t, pub.Publish("conc", benchMessages(6)...))
	ch, err := sub.Subscribe(context.Background(), "conc")
	require.NoError(t, err)
	var held []*message.Message
	for range 4 {
		held = append(held, receive(t, ch))
	}
	select {
	case m := <-ch:
		t.Fatalf("a fifth message %s was handed out before any Ack", m.UUID)
	case <-time.After(100 * time.Millisecond):
	}
	held[2].Ack()
	fifth := receive(t, ch)
	for _, m := range append(held, fifth) {
		m.Ack()
	}
	receive(t, ch).Ack()
}

// Objects that look storable but that rheo refuses to keep as they are
// (duplicate names, an unpaired surrogate escape, invalid JSON) are wrapped
// by Publish, in the same batch as payloads stored as they are, and come
// back exactly.
func TestPublishWrapsWhatRheoRefuses(t *testing.T) {
	c := newClient(t, "memory")
	pub, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{})
	payloads := []string{`{"ok":1}`, `{"a":1,"a":2}`, `{"s":"\ud800"}`, `{"x":}`, `{"ok":2}`}
	var msgs []*message.Message
	for _, p := range payloads {
		msgs = append(msgs, message.NewMessage(watermill.NewUUID(), []byte(p)))
	}
	require.NoError(t, pub.Publish("refused", msgs...))
	ch, err := sub.Subscribe(context.Background(), "refused")
	require.NoError(t, err)
	for i, p := range payloads {
		m := receive(t, ch)
		assert.Equal(t, msgs[i].UUID, m.UUID)
		assert.Equal(t, p, string(m.Payload))
		m.Ack()
	}
	evs, err := c.Read(context.Background(), "refused", rheo.ReadOptions{})
	require.NoError(t, err)
	assert.Equal(t, `{"ok":1}`, string(evs[0].Payload), "stored as it is")
	assert.Contains(t, string(evs[3].Payload), `"$bytes"`, "invalid JSON wrapped")
}

// fetchCounts records the size of every successful fetch of a consumer.
type fetchCounts struct {
	mu      sync.Mutex
	largest int
}

func (f *fetchCounts) ObserveConsumer(ev rheo.ConsumerEvent) {
	if ev.Kind == rheo.ConsumerFetched && ev.Err == nil {
		f.mu.Lock()
		f.largest = max(f.largest, ev.Count)
		f.mu.Unlock()
	}
}

// With Prefetch left at 0 a subscription sizes its window as rheo's
// consumer does: for a handler that acks at once it fetches far more than
// Concurrency (the default before was 10). An explicit Prefetch caps it.
// SQLite, whose fetches take much longer than the handler here.
func TestDefaultPrefetchGrowsForQuickHandlers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prefetch int
		check    func(t *testing.T, largest int)
	}{
		{"default", 0, func(t *testing.T, largest int) {
			require.Greater(t, largest, 10, "largest fetch with the default Prefetch and Concurrency 1")
		}},
		{"explicit", 3, func(t *testing.T, largest int) {
			require.LessOrEqual(t, largest, 3, "largest fetch with Prefetch 3")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &fetchCounts{}
			c := newClient(t, "sqlite", rheo.WithObserver(obs))
			pub, sub := newPubSub(t, c, rheowatermill.SubscriberConfig{Prefetch: tc.prefetch})
			const n = 2000
			publishAll(t, pub, "window", benchMessages(n))
			ch, err := sub.Subscribe(context.Background(), "window")
			require.NoError(t, err)
			for range n {
				receive(t, ch).Ack()
			}
			require.NoError(t, sub.Close())
			tc.check(t, obs.largest)
		})
	}
}
