package rheotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/teststore"
	"github.com/rheo-go/rheo/rheotel"
)

// The multi-process test re-executes this test binary as a producer and a
// consumer; these environment variables tell a process which it is.
const (
	envRole = "RHEOTEL_MP_ROLE" // producer or consumer
	envDSN  = "RHEOTEL_MP_DSN"
	envOut  = "RHEOTEL_MP_OUT" // where the process writes what it recorded
)

// spanRec is a recorded span as a process reports it to the parent test.
type spanRec struct {
	Name, TraceID, SpanID, Parent string
	ParentRemote                  bool
	Links                         []string // "traceID/spanID"
	Attrs                         map[string]any
	Status                        string
	Events                        []string
}

// pointRec is one metric data point (a counter's value, a histogram's count).
type pointRec struct {
	Name  string
	Attrs map[string]any
	Value float64
}

type recording struct {
	Spans  []spanRec
	Points []pointRec
}

func record(spans []sdktrace.ReadOnlySpan, rm *metricdata.ResourceMetrics) recording {
	var out recording
	for _, s := range spans {
		r := spanRec{Name: s.Name(), TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
			Attrs: attrs(s.Attributes()), Status: s.Status().Code.String()}
		if s.Parent().IsValid() {
			r.Parent, r.ParentRemote = s.Parent().SpanID().String(), s.Parent().IsRemote()
		}
		for _, l := range s.Links() {
			r.Links = append(r.Links, l.SpanContext.TraceID().String()+"/"+l.SpanContext.SpanID().String())
		}
		for _, e := range s.Events() {
			r.Events = append(r.Events, e.Name)
		}
		out.Spans = append(out.Spans, r)
	}
	if rm != nil {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				add := func(set attribute.Set, v float64) {
					out.Points = append(out.Points, pointRec{Name: m.Name, Attrs: attrs(set.ToSlice()), Value: v})
				}
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						add(p.Attributes, float64(p.Value))
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						add(p.Attributes, float64(p.Count))
					}
				}
			}
		}
	}
	return out
}

// TestMultiProcessHelper is the producer or consumer side of
// TestMultiProcessTrace; run directly it does nothing.
func TestMultiProcessHelper(t *testing.T) {
	role := os.Getenv(envRole)
	if role == "" {
		t.Skip("runs only as a process of TestMultiProcessTrace")
	}
	var err error
	switch role {
	case "producer":
		err = runProducer(t, os.Getenv(envDSN), os.Getenv(envOut))
	case "consumer":
		err = runConsumerProcess(t, os.Getenv(envDSN), os.Getenv(envOut))
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		os.Exit(1)
	}
}

func writeRecording(path string, r recording) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// runProducer appends, under one request span, an event on its own and a
// batch of two.
func runProducer(t *testing.T, dsn, out string) error {
	ctx := context.Background()
	tel := newTelemetry(t, nil)
	c, err := rheo.Open(ctx, dsn, rheo.WithInstrumentation(tel.ins))
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, req := tel.tp.Tracer("shop").Start(ctx, "checkout")
	if _, err := c.Append(rctx, "orders", rheo.Message{Type: "ok", Key: "a"}); err != nil {
		return err
	}
	if _, err := c.AppendBatch(rctx, "orders", []rheo.Message{{Type: "panic", Key: "b"}, {Type: "reject", Key: "c"}}); err != nil {
		return err
	}
	req.End()
	return writeRecording(out, record(tel.spans.Ended(), nil))
}

// runConsumerProcess consumes until the group has no lag: the "ok" event
// is acked inside a span of the handler's own, the "panic" one panics once
// and succeeds on its retry, the "reject" one is rejected.
func runConsumerProcess(t *testing.T, dsn, out string) error {
	ctx := context.Background()
	tel := newTelemetry(t, nil)
	c, err := rheo.Open(ctx, dsn, rheo.WithInstrumentation(tel.ins), rheo.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer c.Close()
	k, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "orders", Group: "billing", ConsumerID: "worker-1",
		Backoff: func(int) time.Duration { return 0 },
		Handler: func(ctx context.Context, e rheo.Event) error {
			l, _ := rheo.LeaseFromContext(ctx)
			switch {
			case e.Type == "panic" && l.Attempt == 1:
				panic("boom")
			case e.Type == "reject":
				return rheo.Reject(errors.New("bad order"))
			}
			_, s := tel.tp.Tracer("shop").Start(ctx, "charge")
			s.End()
			return nil
		}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- k.Run(rctx) }()
	deadline := time.Now().Add(time.Minute)
	for {
		lag, err := c.Lag(ctx, "orders", "billing")
		if err != nil {
			cancel()
			return err
		}
		if lag.Total == 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			return fmt.Errorf("lag still %d after a minute", lag.Total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-ran; err != nil {
		return err
	}
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(ctx, &rm); err != nil {
		return err
	}
	return writeRecording(out, record(tel.spans.Ended(), &rm))
}

// A producer process and a consumer process, sharing only the store,
// produce one trace: every process span is a child of (and linked to) the
// append span that stored its event, the handler's own span nests under
// it, and the panic and the reject show on their spans and counters.
func TestMultiProcessTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, s := range []teststore.Store{teststore.SQLite, teststore.Postgres} {
		t.Run(s.Name, func(t *testing.T) {
			b, dsn := s.Open(t)
			c := rheo.New(b)
			ctx := context.Background()
			require.NoError(t, c.CreateStream(ctx, "orders", rheo.StreamConfig{Partitions: 2}))
			require.NoError(t, c.CreateGroup(ctx, "orders", "billing", rheo.GroupConfig{}))

			dir := t.TempDir()
			run := func(role string) recording {
				t.Helper()
				pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				out := filepath.Join(dir, role+".json")
				cmd := exec.CommandContext(pctx, os.Args[0], "-test.run=^TestMultiProcessHelper$", "-test.count=1")
				cmd.Env = append(os.Environ(), envRole+"="+role, envDSN+"="+dsn, envOut+"="+out)
				cmd.Stderr = os.Stderr
				require.NoError(t, cmd.Run(), role)
				raw, err := os.ReadFile(out)
				require.NoError(t, err)
				var r recording
				require.NoError(t, json.Unmarshal(raw, &r))
				return r
			}
			prod := run("producer")
			cons := run("consumer")

			byName := func(r recording, name string) []spanRec {
				var out []spanRec
				for _, s := range r.Spans {
					if s.Name == name {
						out = append(out, s)
					}
				}
				return out
			}
			checkout := byName(prod, "checkout")
			require.Len(t, checkout, 1)
			appends := byName(prod, "append orders")
			require.Len(t, appends, 2)
			appendOf := map[string]spanRec{} // event type -> its append span
			for _, a := range appends {
				require.Equal(t, checkout[0].SpanID, a.Parent)
				require.Equal(t, "send", a.Attrs["messaging.operation.type"])
				if a.Attrs["messaging.batch.message_count"] == float64(1) {
					appendOf["ok"] = a
					require.NotEmpty(t, a.Attrs["messaging.message.id"])
				} else {
					require.Equal(t, float64(2), a.Attrs["messaging.batch.message_count"])
					appendOf["panic"], appendOf["reject"] = a, a
				}
			}
			require.Len(t, appendOf, 3)

			events, err := c.Read(ctx, "orders", rheo.ReadOptions{Partition: 0})
			require.NoError(t, err)
			more, err := c.Read(ctx, "orders", rheo.ReadOptions{Partition: 1})
			require.NoError(t, err)
			typeOf := map[string]string{}
			for _, e := range append(events, more...) {
				typeOf[e.ID] = e.Type
			}
			require.Len(t, typeOf, 3)

			procs := byName(cons, "process orders")
			require.Len(t, procs, 4, "ok, panic twice, reject")
			seen := map[string]spanRec{}
			for _, p := range procs {
				typ := typeOf[p.Attrs["messaging.message.id"].(string)]
				ap := appendOf[typ]
				require.Equal(t, checkout[0].TraceID, p.TraceID, "one trace across processes (%s)", typ)
				require.Equal(t, ap.SpanID, p.Parent, "child of the append span (%s)", typ)
				require.True(t, p.ParentRemote)
				require.Contains(t, p.Links, ap.TraceID+"/"+ap.SpanID)
				require.Equal(t, "rheo", p.Attrs["messaging.system"])
				require.Equal(t, "orders", p.Attrs["messaging.destination.name"])
				require.Equal(t, "billing", p.Attrs["messaging.consumer.group.name"])
				require.Equal(t, "worker-1", p.Attrs["messaging.client.id"])
				require.Equal(t, "process", p.Attrs["messaging.operation.type"])
				require.NotEmpty(t, p.Attrs["rheo.lease.id"])
				require.Positive(t, p.Attrs["rheo.sequence"])
				seen[fmt.Sprintf("%s/%v", typ, p.Attrs["rheo.attempt"])] = p
			}
			require.Len(t, seen, 4)
			require.Equal(t, rheotel.OutcomeAcked, seen["ok/1"].Attrs["rheo.settle.outcome"])
			require.Equal(t, codes.Unset.String(), seen["ok/1"].Status)
			require.Equal(t, true, seen["panic/1"].Attrs["rheo.handler.panicked"])
			require.Equal(t, codes.Error.String(), seen["panic/1"].Status)
			require.Contains(t, seen["panic/1"].Events, "exception")
			require.Equal(t, rheotel.OutcomeNacked, seen["panic/1"].Attrs["rheo.settle.outcome"])
			require.Equal(t, rheotel.OutcomeAcked, seen["panic/2"].Attrs["rheo.settle.outcome"])
			require.Equal(t, rheotel.OutcomeRejected, seen["reject/1"].Attrs["rheo.settle.outcome"])
			require.Equal(t, "reject", seen["reject/1"].Attrs["error.type"])

			charges := byName(cons, "charge")
			require.Len(t, charges, 2)
			parents := []string{charges[0].Parent, charges[1].Parent}
			require.ElementsMatch(t, []string{seen["ok/1"].SpanID, seen["panic/2"].SpanID}, parents)

			total := func(name string, match map[string]any) float64 {
				v := 0.0
			next:
				for _, p := range cons.Points {
					if p.Name != name {
						continue
					}
					for k, want := range match {
						if p.Attrs[k] != want {
							continue next
						}
					}
					v += p.Value
				}
				return v
			}
			require.Equal(t, 4.0, total(rheotel.MetricConsumedMessages, nil))
			require.Equal(t, 2.0, total(rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "acked"}))
			require.Equal(t, 1.0, total(rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "nacked"}))
			require.Equal(t, 1.0, total(rheotel.MetricSettles, map[string]any{"rheo.settle.outcome": "rejected"}))
			require.Equal(t, 1.0, total(rheotel.MetricDeadLettered, nil))
			require.Equal(t, 1.0, total(rheotel.MetricProcessDuration, map[string]any{"error.type": "panic"}))
			require.Equal(t, 4.0, total(rheotel.MetricProcessDuration, nil))
		})
	}
}
