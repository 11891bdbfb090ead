package rheotel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	nooptrace "go.opentelemetry.io/otel/trace/noop"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/teststore"
	"github.com/rheo-go/rheo/rheotel"
)

// stores are the backends the in-process tests run on.
var stores = []teststore.Store{teststore.Memory, teststore.SQLite, teststore.Postgres}

func eachStore(t *testing.T, f func(t *testing.T, b rheo.Backend)) {
	for _, s := range stores {
		t.Run(s.Name, func(t *testing.T) {
			b, _ := s.Open(t)
			f(t, b)
		})
	}
}

func newClient(t testing.TB, b rheo.Backend, tel *telemetry, clk rheo.Clock, opts ...rheo.Option) *rheo.Client {
	t.Helper()
	opts = append([]rheo.Option{rheo.WithClock(clk), rheo.WithInstrumentation(tel.ins),
		rheo.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	c := rheo.New(b, opts...)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, c.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{}))
	return c
}

// The append's producer span carries the messaging attributes, and its
// context travels inside the event; the caller's metadata map is untouched
// and a traceparent the caller set is kept.
func TestAppendInjectsTraceContext(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "request")
		md := map[string]string{"k": "v"}
		e, err := c.Append(ctx, "orders", rheo.Message{Key: "a", Metadata: md})
		require.NoError(t, err)
		parent.End()
		require.Equal(t, map[string]string{"k": "v"}, md, "caller's map untouched")

		spans := tel.ended("append orders")
		require.Len(t, spans, 1)
		s := spans[0]
		require.Equal(t, trace.SpanKindProducer, s.SpanKind())
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID())
		a := attrs(s.Attributes())
		require.Equal(t, "rheo", a["messaging.system"])
		require.Equal(t, "orders", a["messaging.destination.name"])
		require.Equal(t, "append", a["messaging.operation.name"])
		require.Equal(t, "send", a["messaging.operation.type"])
		require.Equal(t, int64(1), a["messaging.batch.message_count"])
		require.Equal(t, e.ID, a["messaging.message.id"])
		require.Equal(t, strconv.Itoa(e.Partition), a["messaging.destination.partition.id"])
		require.Equal(t, e.Sequence, a["rheo.sequence"])

		want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"
		require.Equal(t, want, e.Metadata["traceparent"])
		require.Equal(t, "v", e.Metadata["k"])
		stored, err := c.Read(context.Background(), "orders", rheo.ReadOptions{Partition: e.Partition})
		require.NoError(t, err)
		require.Equal(t, want, stored[0].Metadata["traceparent"], "the context is stored with the event")

		own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		e2, err := c.Append(ctx, "orders", rheo.Message{Metadata: map[string]string{"traceparent": own}})
		require.NoError(t, err)
		require.Equal(t, own, e2.Metadata["traceparent"], "a traceparent the producer set wins")

		rm := tel.collect(t)
		require.Equal(t, 2.0, sum(rm, rheotel.MetricSentMessages, map[string]any{"messaging.destination.name": "orders"}))
		require.Equal(t, 2.0, sum(rm, rheotel.MetricOperationDuration, map[string]any{"messaging.operation.name": "append"}))
	})
}

// A handler's process span is a child of the append's span and links to
// it; the handler's ctx carries it; settles, consumption, process duration
// and end-to-end latency are measured.
func TestProcessSpanIsChildOfAppend(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx := context.Background()
		e, err := c.Append(ctx, "orders", rheo.Message{Key: "a", Payload: json.RawMessage(`{"n":1}`)})
		require.NoError(t, err)
		appendSpan := tel.ended("append orders")[0]

		var mu sync.Mutex
		var handlerSpan trace.SpanContext
		k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing", ConsumerID: "w1",
			Handler: func(ctx context.Context, e rheo.Event) error {
				clk.Advance(2 * time.Second) // end-to-end latency the test can predict
				_, s := tel.tp.Tracer("app").Start(ctx, "charge")
				s.End()
				mu.Lock()
				handlerSpan = s.SpanContext()
				mu.Unlock()
				return nil
			}})
		require.NoError(t, err)
		runConsumer(t, k)
		eventually(t, "the process span", func() bool { _, ok := tel.processSpanOf("orders", e.ID, 1); return ok })
		p, _ := tel.processSpanOf("orders", e.ID, 1)

		require.Equal(t, trace.SpanKindConsumer, p.SpanKind())
		require.Equal(t, appendSpan.SpanContext().TraceID(), p.SpanContext().TraceID(), "one trace")
		require.Equal(t, appendSpan.SpanContext().SpanID(), p.Parent().SpanID())
		require.True(t, p.Parent().IsRemote())
		require.True(t, linkedTo(p, appendSpan.SpanContext()))
		a := attrs(p.Attributes())
		require.Equal(t, "rheo", a["messaging.system"])
		require.Equal(t, "orders", a["messaging.destination.name"])
		require.Equal(t, "billing", a["messaging.consumer.group.name"])
		require.Equal(t, "process", a["messaging.operation.type"])
		require.Equal(t, "w1", a["messaging.client.id"])
		require.Equal(t, e.Sequence, a["rheo.sequence"])
		require.Equal(t, int64(1), a["rheo.attempt"])
		require.NotEmpty(t, a["rheo.lease.id"])
		require.Equal(t, "ack", a["rheo.settle"])
		require.Equal(t, rheotel.OutcomeAcked, a["rheo.settle.outcome"])
		require.Equal(t, codes.Unset, p.Status().Code)

		mu.Lock()
		require.Equal(t, p.SpanContext().TraceID(), handlerSpan.TraceID())
		mu.Unlock()
		charge := tel.ended("charge")
		require.Len(t, charge, 1)
		require.Equal(t, p.SpanContext().SpanID(), charge[0].Parent().SpanID(), "the handler's spans nest under process")

		rm := tel.collect(t)
		group := map[string]any{"messaging.consumer.group.name": "billing"}
		require.Equal(t, 1.0, sum(rm, rheotel.MetricConsumedMessages, group))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricProcessDuration, group))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "acked"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricEndToEnd, group))
		require.Equal(t, 0.0, sum(rm, rheotel.MetricInflight, group))
		require.Positive(t, sum(rm, rheotel.MetricOperationDuration, map[string]any{"messaging.operation.name": "fetch"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricOperationDuration, map[string]any{"messaging.operation.name": "settle"}))
		requireE2E(t, tel, 2.0)
	})
}

// requireE2E checks the end-to-end histogram saw exactly want seconds in
// all.
func requireE2E(t *testing.T, tel *telemetry, want float64) {
	t.Helper()
	got := 0.0
	for _, sm := range tel.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == rheotel.MetricEndToEnd {
				for _, p := range h.DataPoints {
					got += p.Sum
				}
			}
		}
	}
	require.InDelta(t, want, got, 1e-6)
}

// A panic, a Reject and a RetryAfter each show on their own process span and
// in the counters.
func TestHandlerFailuresOnSpans(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx := context.Background()
		evs, err := c.AppendBatch(ctx, "orders", []rheo.Message{{Type: "panic"}, {Type: "reject"}, {Type: "retry"}})
		require.NoError(t, err)
		k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing", Concurrency: 3,
			Backoff: func(int) time.Duration { return 0 },
			Handler: func(ctx context.Context, e rheo.Event) error {
				l, _ := rheo.LeaseFromContext(ctx)
				if l.Attempt > 1 {
					return nil
				}
				switch e.Type {
				case "panic":
					panic("boom")
				case "reject":
					return rheo.Reject(errors.New("bad payload"))
				}
				return rheo.RetryAfter(0, errors.New("busy"))
			}})
		require.NoError(t, err)
		runConsumer(t, k)
		for _, e := range evs[:3] {
			attempts := 2
			if e.Type == "reject" {
				attempts = 1
			}
			eventually(t, e.Type+" spans", func() bool { _, ok := tel.processSpanOf("orders", e.ID, attempts); return ok })
		}

		p, _ := tel.processSpanOf("orders", evs[0].ID, 1)
		a := attrs(p.Attributes())
		require.Equal(t, true, a["rheo.handler.panicked"])
		require.Equal(t, "panic", a["error.type"])
		require.Equal(t, "nack", a["rheo.settle"])
		require.Equal(t, codes.Error, p.Status().Code)
		require.Contains(t, p.Status().Description, "panic: boom")
		require.True(t, hasEvent(p, "exception"))

		r, _ := tel.processSpanOf("orders", evs[1].ID, 1)
		a = attrs(r.Attributes())
		require.Equal(t, "reject", a["error.type"])
		require.Equal(t, "reject", a["rheo.settle"])
		require.Equal(t, rheotel.OutcomeRejected, a["rheo.settle.outcome"])
		require.Equal(t, codes.Error, r.Status().Code)

		y, _ := tel.processSpanOf("orders", evs[2].ID, 1)
		a = attrs(y.Attributes())
		require.Equal(t, "retry", a["error.type"])
		require.Equal(t, rheotel.OutcomeNacked, a["rheo.settle.outcome"])
		require.Equal(t, 0.0, a["rheo.retry.delay"])

		ok, _ := tel.processSpanOf("orders", evs[0].ID, 2)
		require.Equal(t, codes.Unset, ok.Status().Code, "the retry that succeeds is clean")

		rm := tel.collect(t)
		require.Equal(t, 1.0, sum(rm, rheotel.MetricProcessDuration, map[string]any{"error.type": "panic"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricProcessDuration, map[string]any{"error.type": "reject"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricProcessDuration, map[string]any{"error.type": "retry"}))
		require.Equal(t, 2.0, sum(rm, rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "nacked"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "rejected"}))
		require.Equal(t, 2.0, sum(rm, rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "acked"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricDeadLettered, map[string]any{"messaging.consumer.group.name": "billing"}))
	})
}

// A lease a renewal finds taken shows on the process span as lost, and in
// the lost-lease and renewal counters.
func TestLostLeaseOnSpan(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx := context.Background()
		e, err := c.Append(ctx, "orders", rheo.Message{})
		require.NoError(t, err)
		started := make(chan struct{})
		k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing", LeaseDuration: 100 * time.Millisecond,
			Handler: func(ctx context.Context, e rheo.Event) error {
				close(started)
				<-ctx.Done()
				return context.Cause(ctx)
			}})
		require.NoError(t, err)
		runConsumer(t, k)
		<-started
		// Another worker takes the delivery once its lease has expired; the
		// consumer's next renewal finds it gone.
		other := rheo.New(b, rheo.WithClock(clk))
		eventually(t, "another worker to take the lease", func() bool {
			clk.Advance(time.Hour)
			ls, err := other.Fetch(ctx, "orders", "billing", rheo.FetchOptions{ConsumerID: "thief", LeaseDuration: 24 * time.Hour})
			require.NoError(t, err)
			return len(ls) == 1
		})
		eventually(t, "the process span", func() bool { _, ok := tel.processSpanOf("orders", e.ID, 1); return ok })
		p, _ := tel.processSpanOf("orders", e.ID, 1)
		a := attrs(p.Attributes())
		require.Equal(t, "none", a["rheo.settle"])
		require.Equal(t, rheotel.OutcomeLost, a["rheo.settle.outcome"])
		require.True(t, hasEvent(p, "lease lost"))
		require.Equal(t, codes.Error, p.Status().Code)
		require.Contains(t, p.Status().Description, "stale lease")

		rm := tel.collect(t)
		require.GreaterOrEqual(t, sum(rm, rheotel.MetricLeasesLost, nil), 1.0)
		require.GreaterOrEqual(t, sum(rm, rheotel.MetricRenewals, map[string]any{"rheo.renew.outcome": "lost"}), 1.0)
		renews := tel.ended("renew orders")
		require.NotEmpty(t, renews)
		lost := renews[len(renews)-1]
		require.Equal(t, p.SpanContext().SpanID(), lost.Parent().SpanID(), "renewals nest under the process span")
		require.Equal(t, "stale_lease", attrs(lost.Attributes())["error.type"])
	})
}

// A stale ack, from the client and from a consumer, shows on the right span
// and in the stale settle and lost-lease counters.
func TestStaleAckOnSpan(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx := context.Background()
		other := rheo.New(b, rheo.WithClock(clk))

		// Client: a lease taken over after expiry acks stale.
		e1, err := c.Append(ctx, "orders", rheo.Message{})
		require.NoError(t, err)
		ls, err := c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{ConsumerID: "w1", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, ls, 1)
		clk.Advance(2 * time.Minute)
		taken, err := other.Fetch(ctx, "orders", "billing", rheo.FetchOptions{ConsumerID: "w2", LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.Len(t, taken, 1)
		require.ErrorIs(t, c.Ack(ctx, ls[0]), rheo.ErrStaleLease)
		acks := tel.ended("ack orders")
		require.Len(t, acks, 1)
		a := attrs(acks[0].Attributes())
		require.Equal(t, rheotel.OutcomeStale, a["rheo.settle.outcome"])
		require.Equal(t, "stale_lease", a["error.type"])
		require.Equal(t, e1.ID, a["messaging.message.id"])
		require.Equal(t, codes.Error, acks[0].Status().Code)
		require.NoError(t, other.Ack(ctx, taken[0]))

		// Consumer: the lease is taken while the handler runs (no renewal
		// within an hour's lease), so its ack is refused.
		e2, err := c.Append(ctx, "orders", rheo.Message{})
		require.NoError(t, err)
		k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing", LeaseDuration: time.Hour,
			Handler: func(ctx context.Context, e rheo.Event) error {
				clk.Advance(2 * time.Hour)
				ls, err := other.Fetch(ctx, "orders", "billing", rheo.FetchOptions{ConsumerID: "w2", LeaseDuration: time.Hour})
				if err != nil || len(ls) != 1 {
					return rheo.Reject(errors.New("test could not take the lease"))
				}
				return nil
			}})
		require.NoError(t, err)
		runConsumer(t, k)
		eventually(t, "the process span", func() bool { _, ok := tel.processSpanOf("orders", e2.ID, 1); return ok })
		p, _ := tel.processSpanOf("orders", e2.ID, 1)
		a = attrs(p.Attributes())
		require.Equal(t, "ack", a["rheo.settle"])
		require.Equal(t, rheotel.OutcomeStale, a["rheo.settle.outcome"])
		require.True(t, hasEvent(p, "settle refused"))
		require.Equal(t, codes.Error, p.Status().Code)

		rm := tel.collect(t)
		require.Equal(t, 2.0, sum(rm, rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "stale"}))
		require.Equal(t, 2.0, sum(rm, rheotel.MetricLeasesLost, nil))
	})
}

// The runtime's log records carry the delivery's coordinates and, through
// LogHandler, the process span's trace and span IDs.
func TestLogsCarryDeliveryAndTrace(t *testing.T) {
	clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tel := newTelemetry(t, clk)
	var buf syncBuffer
	logger := slog.New(rheotel.LogHandler(slog.NewJSONHandler(&buf, nil)))
	b, _ := teststore.Memory.Open(t)
	c := newClient(t, b, tel, clk, rheo.WithLogger(logger))
	e, err := c.Append(context.Background(), "orders", rheo.Message{Type: "panic"})
	require.NoError(t, err)
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing", ConsumerID: "w1",
		Handler: func(ctx context.Context, e rheo.Event) error {
			l, _ := rheo.LeaseFromContext(ctx)
			if l.Attempt == 1 {
				panic("boom")
			}
			return nil
		}, Backoff: func(int) time.Duration { return 0 }})
	require.NoError(t, err)
	runConsumer(t, k)
	eventually(t, "the retry", func() bool { _, ok := tel.processSpanOf("orders", e.ID, 2); return ok })
	p, _ := tel.processSpanOf("orders", e.ID, 1)

	var rec map[string]any
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "handler panicked") {
			require.NoError(t, json.Unmarshal([]byte(line), &rec))
		}
	}
	require.NotNil(t, rec, "a panic record: %s", buf.String())
	require.Equal(t, "orders", rec["stream"])
	require.Equal(t, "billing", rec["group"])
	require.Equal(t, "w1", rec["consumer"])
	require.Equal(t, e.ID, rec["event_id"])
	require.Equal(t, float64(e.Partition), rec["partition"])
	require.Equal(t, float64(e.Sequence), rec["sequence"])
	require.Equal(t, float64(1), rec["attempt"])
	require.NotEmpty(t, rec["lease"])
	require.Equal(t, attrs(p.Attributes())["rheo.lease.id"], rec["lease"])
	require.Equal(t, p.SpanContext().TraceID().String(), rec["trace_id"])
	require.Equal(t, p.SpanContext().SpanID().String(), rec["span_id"])
}

// Process spans start a trace of their own with LinkOnly, keeping the link.
func TestLinkOnly(t *testing.T) {
	clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tel := newTelemetry(t, clk)
	ins, err := rheotel.New(rheotel.Options{TracerProvider: tel.tp, MeterProvider: tel.mp,
		Propagator: propagation.TraceContext{}, LinkOnly: true, Clock: clk})
	require.NoError(t, err)
	tel.ins = ins
	b, _ := teststore.Memory.Open(t)
	c := newClient(t, b, tel, clk)
	e, err := c.Append(context.Background(), "orders", rheo.Message{})
	require.NoError(t, err)
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing",
		Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	runConsumer(t, k)
	eventually(t, "the process span", func() bool { _, ok := tel.processSpanOf("orders", e.ID, 1); return ok })
	p, _ := tel.processSpanOf("orders", e.ID, 1)
	app := tel.ended("append orders")[0]
	require.NotEqual(t, app.SpanContext().TraceID(), p.SpanContext().TraceID())
	require.False(t, p.Parent().IsValid())
	require.True(t, linkedTo(p, app.SpanContext()))
}

// Without instrumentation nothing is injected into events.
func TestNoInstrumentationNoMetadata(t *testing.T) {
	b, _ := teststore.Memory.Open(t)
	c := rheo.New(b)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{}))
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(ctx)
	sctx, s := tp.Tracer("t").Start(ctx, "request")
	defer s.End()
	e, err := c.Append(sctx, "orders", rheo.Message{})
	require.NoError(t, err)
	require.Empty(t, e.Metadata)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A nack at the group's attempt limit dead-letters the delivery, and is
// counted as dead-lettered, from the client and from the consumer runtime;
// a nack below the limit is not.
func TestNackAtTheLimitCountsAsDeadLettered(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx := context.Background()
		require.NoError(t, c.CreateGroup(ctx, "orders", "strict", rheo.GroupConfig{MaxAttempts: 2}))
		p := 0
		for range 2 {
			_, err := c.Append(ctx, "orders", rheo.Message{Partition: &p})
			require.NoError(t, err)
		}
		deadLettered := func(group string) float64 {
			return sum(tel.collect(t), rheotel.MetricDeadLettered, map[string]any{"messaging.consumer.group.name": group})
		}

		// Client: the first nack retries, the second (attempt 2 of 2)
		// dead-letters.
		for attempt := 1; attempt <= 2; attempt++ {
			ls, err := c.Fetch(ctx, "orders", "strict", rheo.FetchOptions{Limit: 1})
			require.NoError(t, err)
			require.Len(t, ls, 1)
			require.Equal(t, attempt, ls[0].Attempt)
			require.NoError(t, c.Nack(ctx, ls[0], "busy"))
			require.Equal(t, float64(attempt-1), deadLettered("strict"), "after the nack of attempt %d", attempt)
		}
		ls, err := c.Fetch(ctx, "orders", "billing", rheo.FetchOptions{Limit: 1})
		require.NoError(t, err)
		require.NoError(t, c.Nack(ctx, ls[0], "busy"))
		require.Zero(t, deadLettered("billing"), "a nack below the limit is not a dead letter")

		// Consumer: the second event fails twice and is dead-lettered.
		k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "strict",
			Handler: func(context.Context, rheo.Event) error { return rheo.RetryAfter(0, errors.New("busy")) }})
		require.NoError(t, err)
		runConsumer(t, k)
		eventually(t, "both dead letters", func() bool {
			dls, err := c.DeadLetters(ctx, "orders", "strict", rheo.DeadLetterOptions{})
			return err == nil && len(dls) == 2
		})
		eventually(t, "the consumer's nack counted", func() bool { return deadLettered("strict") == 2 })
	})
}

// With OpenTelemetry's no-op tracer provider no process span is started,
// yet the handler's ctx still carries the producer's context taken from the
// event, for the user's own tracing.
func TestNoopTracerStillCarriesTheProducerContext(t *testing.T) {
	b, _ := teststore.Memory.Open(t)
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(ctx)
	producer, err := rheotel.New(rheotel.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}})
	require.NoError(t, err)
	quiet, err := rheotel.New(rheotel.Options{TracerProvider: nooptrace.NewTracerProvider(), Propagator: propagation.TraceContext{}})
	require.NoError(t, err)
	pc := rheo.New(b, rheo.WithInstrumentation(producer))
	require.NoError(t, pc.CreateStream(ctx, "orders", rheo.StreamConfig{}))
	require.NoError(t, pc.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{}))
	sctx, s := tp.Tracer("t").Start(ctx, "request")
	_, err = pc.Append(sctx, "orders", rheo.Message{})
	require.NoError(t, err)
	s.End()

	cc := rheo.New(b, rheo.WithInstrumentation(quiet), rheo.WithLogger(slog.New(slog.DiscardHandler)))
	got := make(chan trace.SpanContext, 1)
	k, err := cc.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing",
		Handler: func(ctx context.Context, _ rheo.Event) error {
			got <- trace.SpanContextFromContext(ctx)
			return nil
		}})
	require.NoError(t, err)
	runConsumer(t, k)
	var sc trace.SpanContext
	select {
	case sc = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	require.Equal(t, s.SpanContext().TraceID(), sc.TraceID())
	require.True(t, sc.IsRemote(), "the producer's span, taken from the event")
}

// A handler returning rheo.Release shows on its process span and in the
// settle counter as released; the next delivery has the same attempt.
func TestReleaseOnSpan(t *testing.T) {
	eachStore(t, func(t *testing.T, b rheo.Backend) {
		clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		tel := newTelemetry(t, clk)
		c := newClient(t, b, tel, clk)
		ctx := context.Background()
		ev, err := c.Append(ctx, "orders", rheo.Message{Type: "later"})
		require.NoError(t, err)
		var calls atomic.Int32
		k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing",
			Handler: func(ctx context.Context, e rheo.Event) error {
				if calls.Add(1) == 1 {
					return rheo.Release(errors.New("not yet"))
				}
				return nil
			}})
		require.NoError(t, err)
		runConsumer(t, k)
		eventually(t, "two process spans", func() bool { return len(tel.ended("process orders")) == 2 })
		var settles []string
		for _, s := range tel.ended("process orders") {
			a := attrs(s.Attributes())
			require.Equal(t, ev.ID, a["messaging.message.id"])
			require.Equal(t, int64(1), a["rheo.attempt"], "the released claim is not counted")
			settles = append(settles, a["rheo.settle"].(string)+"/"+a["rheo.settle.outcome"].(string))
			if a["rheo.settle"] == "release" {
				require.Equal(t, "release", a["error.type"])
			}
		}
		require.ElementsMatch(t, []string{"release/released", "ack/acked"}, settles)
		rm := tel.collect(t)
		require.Equal(t, 1.0, sum(rm, rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "released"}))
		require.Equal(t, 1.0, sum(rm, rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "acked"}))
	})
}
