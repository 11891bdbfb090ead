package rheotel

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

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
		metric.WithDescription("Settles by outcome: acked, nacked, rejected, released, stale, ambiguous, failed."))
	m.lost, errs[6] = meter.Int64Counter(MetricLeasesLost, metric.WithUnit("{lease}"),
		metric.WithDescription("Leases found to belong to someone else, by a renewal or a settle."))
	m.renewals, errs[7] = meter.Int64Counter(MetricRenewals, metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals by outcome: renewed, lost, failed."))
	m.deadLettered, errs[8] = meter.Int64Counter(MetricDeadLettered, metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries dead-lettered by a reject, or by a nack at the attempt limit."))
	m.inflight, errs[9] = meter.Int64UpDownCounter(MetricInflight, metric.WithUnit("{handler}"),
		metric.WithDescription("Handlers running now."))
	return errors.Join(errs[:]...)
}

// attrCache keeps the measurement options of each (stream, group), so that
// a measurement costs a pointer comparison (the runtime of one consumer
// always measures the same group) or a map lookup, rather than building and
// sorting an attribute set.
type attrCache struct {
	last atomic.Pointer[groupAttrs]
	mu   sync.RWMutex
	m    map[[2]string]*groupAttrs
}

// groupAttrs are the measurement options of one (stream, group) (group is
// empty for appends).
type groupAttrs struct {
	stream, group string
	processName   string  // the process span's name
	base          measure // system, stream, group
	// outcomes holds base plus one settle or renew outcome.
	outcomes map[outcomeKey]measure
	// ops holds base plus the operation (kind 0 is process) and no
	// error.type; errOps those with one, made on first use.
	ops    [rheo.OpReplay + 1]measure
	mu     sync.Mutex
	errOps map[opErr]measure
}

type outcomeKey struct {
	key   attribute.Key
	value string
}

type opErr struct {
	op      rheo.OperationKind
	errType string
}

func (c *attrCache) get(stream, group string) *groupAttrs {
	if g := c.last.Load(); g != nil && g.stream == stream && g.group == group {
		return g
	}
	k := [2]string{stream, group}
	c.mu.RLock()
	g := c.m[k]
	c.mu.RUnlock()
	if g == nil {
		c.mu.Lock()
		if g = c.m[k]; g == nil {
			g = newGroupAttrs(stream, group)
			if c.m == nil {
				c.m = map[[2]string]*groupAttrs{}
			}
			c.m[k] = g
		}
		c.mu.Unlock()
	}
	c.last.Store(g)
	return g
}

func base(stream, group string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{systemAttr, semconv.MessagingDestinationName(stream)}
	if group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(group))
	}
	return attrs
}

// measure is one attribute set ready for every kind of measurement; the
// slices are made once so that a measurement allocates nothing.
type measure struct {
	o   metric.MeasurementOption
	add []metric.AddOption
	rec []metric.RecordOption
}

func withAttrs(kvs ...attribute.KeyValue) measure {
	o := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return measure{o: o, add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

func newGroupAttrs(stream, group string) *groupAttrs {
	g := &groupAttrs{stream: stream, group: group, processName: "process " + stream, base: withAttrs(base(stream, group)...),
		outcomes: map[outcomeKey]measure{}, errOps: map[opErr]measure{}}
	for _, o := range []string{OutcomeAcked, OutcomeNacked, OutcomeRejected, OutcomeReleased, OutcomeStale, OutcomeAmbiguous, OutcomeFailed} {
		g.outcomes[outcomeKey{AttrSettleOutcome, o}] = withAttrs(append(base(stream, group), AttrSettleOutcome.String(o))...)
	}
	for _, o := range []string{"renewed", OutcomeLost, OutcomeFailed} {
		g.outcomes[outcomeKey{AttrRenewOutcome, o}] = withAttrs(append(base(stream, group), AttrRenewOutcome.String(o))...)
	}
	for k := range g.ops {
		g.ops[k] = withAttrs(opAttrs(rheo.OperationKind(k), stream, group, "")...)
	}
	return g
}

// opAttrs: system, stream, group, operation name and type (op 0 is
// process), error.type when set.
func opAttrs(op rheo.OperationKind, stream, group, errType string) []attribute.KeyValue {
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
}

// group: system, stream, group.
func (c *attrCache) group(stream, group string) measure {
	return c.get(stream, group).base
}

// op: the operation's attributes (op 0 is process), error.type when set.
func (c *attrCache) op(op rheo.OperationKind, stream, group, errType string) measure {
	g := c.get(stream, group)
	if errType == "" {
		return g.ops[op]
	}
	k := opErr{op, errType}
	g.mu.Lock()
	defer g.mu.Unlock()
	o, ok := g.errOps[k]
	if !ok {
		o = withAttrs(opAttrs(op, stream, group, errType)...)
		g.errOps[k] = o
	}
	return o
}

// outcome: system, stream, group, key=value (a settle or renew outcome).
func (c *attrCache) outcome(key attribute.Key, stream, group, value string) measure {
	return c.get(stream, group).outcomes[outcomeKey{key, value}]
}

func itoa(n int) string { return strconv.Itoa(n) }
