package rheotel_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	nooptrace "go.opentelemetry.io/otel/trace/noop"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/rheotel"
)

// discard is a span exporter that drops what it is given, so the real
// SDK's work (sampling, recording, batching) is measured without I/O.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

type ackCounter struct {
	acks atomic.Int64
	want int64
	done chan struct{}
}

func (a *ackCounter) ObserveConsumer(ev rheo.ConsumerEvent) {
	if ev.Kind == rheo.ConsumerAcked && ev.Err == nil && a.acks.Add(1) == a.want {
		close(a.done)
	}
}

// consumeOnce appends events through a client with opts, then times a
// consumer (Concurrency 8, no-op handler) until every event is acked.
func consumeOnce(b *testing.B, events int, opts ...rheo.Option) (wall, cpu time.Duration) {
	ctx := context.Background()
	obs := &ackCounter{want: int64(events), done: make(chan struct{})}
	opts = append(opts, rheo.WithObserver(obs), rheo.WithLogger(slog.New(slog.DiscardHandler)))
	c := rheo.New(memory.New(), opts...)
	defer c.Close()
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
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "bench", Group: "g", Concurrency: 8,
		Handler: func(context.Context, rheo.Event) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC() // start from the same heap state whatever ran before
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	cpu0 := cpuTime()
	start := time.Now()
	go func() { ran <- k.Run(runCtx) }()
	<-obs.done
	wall = time.Since(start)
	cpu = cpuTime() - cpu0
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	return wall, cpu
}

// cpuTime is the CPU time (user and system) the process has used: on a
// machine shared with other work, it measures what the consumer costs
// better than wall time does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInstrumentationOverhead measures consumer throughput (and CPU
// time per event) on the
// memory backend with instrumentation off, on with no-op providers, and on
// with the real SDK (every span sampled and batched to a discarding
// exporter, metrics aggregated by a manual reader). Each iteration runs the
// three side by side, so a busy machine slows them alike; it reports the
// events/s of each and the ratios to off.
func BenchmarkInstrumentationOverhead(b *testing.B) {
	const events = 20_000
	noop, err := rheotel.New(rheotel.Options{TracerProvider: nooptrace.NewTracerProvider(),
		MeterProvider: noopmetric.NewMeterProvider(), Propagator: propagation.TraceContext{}})
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discard{}))
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	sdk, err := rheotel.New(rheotel.Options{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}})
	if err != nil {
		b.Fatal(err)
	}
	type totals struct{ wall, cpu time.Duration }
	var off, onNoop, onSDK totals
	measure := func(t *totals, opts ...rheo.Option) func() {
		return func() {
			w, c := consumeOnce(b, events, opts...)
			t.wall += w
			t.cpu += c
		}
	}
	runs := []func(){
		measure(&off),
		measure(&onNoop, rheo.WithInstrumentation(noop)),
		measure(&onSDK, rheo.WithInstrumentation(sdk)),
	}
	round := 0
	for b.Loop() {
		// Rotate the order, so that none always runs first (or right
		// after the garbage of another).
		for k := range runs {
			runs[(k+round)%len(runs)]()
		}
		round++
	}
	n := float64(events) * float64(b.N)
	b.ReportMetric(n/off.wall.Seconds(), "off-events/s")
	b.ReportMetric(n/onNoop.wall.Seconds(), "noop-events/s")
	b.ReportMetric(n/onSDK.wall.Seconds(), "sdk-events/s")
	b.ReportMetric(off.wall.Seconds()/onNoop.wall.Seconds(), "noop/off-throughput")
	b.ReportMetric(off.wall.Seconds()/onSDK.wall.Seconds(), "sdk/off-throughput")
	b.ReportMetric(float64(off.cpu.Nanoseconds())/n, "off-cpu-ns/event")
	b.ReportMetric(float64(onNoop.cpu.Nanoseconds())/n, "noop-cpu-ns/event")
	b.ReportMetric(float64(onSDK.cpu.Nanoseconds())/n, "sdk-cpu-ns/event")
	b.ReportMetric(0, "ns/op")
}
