package rheotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/rheotel"
)

// telemetry is an SDK setup whose spans and metrics a test can read.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	ins    *rheotel.Instrumentation
}

func newTelemetry(t testing.TB, clk rheo.Clock) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	ins, err := rheotel.New(rheotel.Options{
		TracerProvider: tel.tp, MeterProvider: tel.mp,
		Propagator: propagation.TraceContext{}, Clock: clk,
	})
	require.NoError(t, err)
	tel.ins = ins
	return tel
}

// ended returns the ended spans named name.
func (tel *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// processSpanOf returns the ended process span of the event with the given
// ID and attempt, if any.
func (tel *telemetry) processSpanOf(stream, eventID string, attempt int) (sdktrace.ReadOnlySpan, bool) {
	for _, s := range tel.ended("process " + stream) {
		a := attrs(s.Attributes())
		if a["messaging.message.id"] == eventID && a["rheo.attempt"] == int64(attempt) {
			return s, true
		}
	}
	return nil, false
}

// attrs flattens attributes for assertions.
func attrs(kvs []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// collect reads the metrics.
func (tel *telemetry) collect(t testing.TB) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	return rm
}

// sum adds up the data points of the named counter (or the counts of the
// named histogram) whose attributes include match.
func sum(rm metricdata.ResourceMetrics, name string, match map[string]any) float64 {
	total := 0.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			ok := func(set attribute.Set) bool {
				got := attrs(set.ToSlice())
				for k, v := range match {
					if got[k] != v {
						return false
					}
				}
				return true
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if ok(p.Attributes) {
						total += float64(p.Value)
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if ok(p.Attributes) {
						total += float64(p.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if ok(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if ok(p.Attributes) {
						total += float64(p.Count)
					}
				}
			}
		}
	}
	return total
}

// hasEvent reports whether the span recorded an event with the name.
func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// linkedTo reports whether s links to sc.
func linkedTo(s sdktrace.ReadOnlySpan, sc trace.SpanContext) bool {
	for _, l := range s.Links() {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

// eventually waits for cond with a generous deadline (the machine is busy).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runConsumer runs k until the test ends.
func runConsumer(t testing.TB, k *rheo.Consumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}
