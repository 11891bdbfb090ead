package rheotel

import (
	"errors"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/rheo-go/rheo"
)

// Instrument names. Those the messaging conventions define keep their
// names; the rest live under rheo.
const (
	MetricSentMessages      = "messaging.client.sent.messages"
	MetricConsumedMessages  = "messaging.client.consumed.messages"
	MetricOperationDuration = "messaging.client.operation.duration"
	MetricProcessDuration   = "messaging.process.duration"
	MetricEndToEnd          = "rheo.message.end_to_end.duration"
	MetricSettles           = "rheo.settles"
	MetricLeasesLost        = "rheo.leases.lost"
	MetricRenewals          = "rheo.lease.renewals"
	MetricDeadLettered      = "rheo.dead_lettered"
	MetricInflight          = "rheo.consumer.inflight"

	MetricGroupLag           = "rheo.group.lag"
	MetricGroupInflight      = "rheo.group.inflight"
	MetricGroupAvailable     = "rheo.group.available"
	MetricGroupDeadLetters   = "rheo.group.dead_letters"
	MetricGroupOldestPending = "rheo.group.oldest_pending.age"
	MetricHighWatermark      = "rheo.stream.high_watermark"
)

// durationBuckets suit operations that take from a fraction of a
// millisecond (memory, SQLite) to seconds (a slow store, a long handler).
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

type instruments struct {
	sent, consumed  metric.Int64Counter
	opDuration      metric.Float64Histogram
	processDuration metric.Float64Histogram
	e2e             metric.Float64Histogram
	settles         metric.Int64Counter
	lost            metric.Int64Counter
	renewals        metric.Int64Counter
	deadLettered    metric.Int64Counter
	inflight        metric.Int64UpDownCounter
}

func (m *instruments) init(meter metric.Meter) error {
	var errs [10]error
	m.sent, errs[0] = meter.Int64Counter(MetricSentMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Events appended (or attempted, with error.type)."))
	m.consumed, errs[1] = meter.Int64Counter(MetricConsumedMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Leases claimed by fetches."))
	m.opDuration, errs[2] = meter.Float64Histogram(MetricOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of client operations: append, fetch, ack, nack, reject, settle, renew, replay."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.processDuration, errs[3] = meter.Float64Histogram(MetricProcessDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of handler calls."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.e2e, errs[4] = meter.Float64Histogram(MetricEndToEnd, metric.WithUnit("s"),
		metric.WithDescription("Time from an event's timestamp to its successful ack."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	m.settles, errs[5] = meter.Int64Counter(MetricSettles, metric.WithUnit("{settle}"),
		metric.WithDescription("Settles by outcome: acked, nacked, rejected, stale, ambiguous, failed."))
	m.lost, errs[6] = meter.Int64Counter(MetricLeasesLost, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases found to belong to someone else, by a renewal or a settle."))
	m.renewals, errs[7] = meter.Int64Counter(MetricRenewals, metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals by outcome: renewed, lost, failed."))
	m.deadLettered, errs[8] = meter.Int64Counter(MetricDeadLettered, metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries dead-lettered by a reject."))
	m.inflight, errs[9] = meter.Int64UpDownCounter(MetricInflight, metric.WithUnit("{handler}"),
		metric.WithDescription("Handlers running now."))
	return errors.Join(errs[:]...)
}

// attrCache keeps the measurement options of each attribute combination, so
// that a measurement costs a map lookup rather than building and sorting an
// attribute set.
type attrCache struct{ m sync.Map }

type attrKey struct {
	kind                int // 0: group only; 1: operation; 2: outcome
	op                  rheo.OperationKind
	stream, group, a, b string
}

func (c *attrCache) load(k attrKey, build func() []attribute.KeyValue) metric.MeasurementOption {
	if v, ok := c.m.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(build()...))
	v, _ := c.m.LoadOrStore(k, o)
	return v.(metric.MeasurementOption)
}

func base(stream, group string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{systemAttr, semconv.MessagingDestinationName(stream)}
	if group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(group))
	}
	return attrs
}

// group: system, stream, group.
func (c *attrCache) group(stream, group string) metric.MeasurementOption {
	return c.load(attrKey{stream: stream, group: group}, func() []attribute.KeyValue { return base(stream, group) })
}

// op: system, stream, group, operation name and type (op 0 is process),
// error.type when set.
func (c *attrCache) op(op rheo.OperationKind, stream, group, errType string) metric.MeasurementOption {
	return c.load(attrKey{kind: 1, op: op, stream: stream, group: group, a: errType}, func() []attribute.KeyValue {
		attrs := base(stream, group)
		name, typ := "process", "process"
		if op != 0 {
			name, typ = op.String(), opType(op)
		}
		attrs = append(attrs, semconv.MessagingOperationName(name))
		if typ != "" {
			attrs = append(attrs, semconv.MessagingOperationTypeKey.String(typ))
		}
		if errType != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
		}
		return attrs
	})
}

// outcome: system, stream, group, key=value.
func (c *attrCache) outcome(key attribute.Key, stream, group, value string) metric.MeasurementOption {
	return c.load(attrKey{kind: 2, stream: stream, group: group, a: string(key), b: value}, func() []attribute.KeyValue {
		return append(base(stream, group), key.String(value))
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
