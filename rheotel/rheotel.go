// Package rheotel instruments rheo with OpenTelemetry: spans for every client
// operation and every handler call, W3C trace context carried inside events,
// client and consumer metrics, and group health gauges.
//
// Install it on a client:
//
//	ins, err := rheotel.New(rheotel.Options{}) // global providers and propagator
//	c := rheo.New(backend, rheo.WithInstrumentation(ins), rheo.WithLogger(
//		slog.New(rheotel.LogHandler(slog.NewJSONHandler(os.Stdout, nil)))))
//	stop, err := ins.WatchGroups(c) // lag, inflight, … of every group
//
// Nothing is exported unless the program configures an OpenTelemetry SDK:
// with the default global providers every span and instrument is a no-op.
//
// # Trace structure
//
// Append and AppendBatch start a producer span ("append STREAM") and inject
// its context into every event's Metadata (traceparent, tracestate through
// the configured propagator). A Consumer starts a consumer span ("process
// STREAM") per handler call whose parent is the context extracted from the
// event, and which also links to it: the messaging conventions require the
// link (a batch cannot have many parents) and allow the parent when one
// message is processed, which is always the case here, so that producer and
// consumer land in one trace. Options.LinkOnly starts each process span in
// a trace of its own instead, keeping only the link (useful when events are
// replayed long after they were produced). The handler's context carries the
// process span, so the user's own spans and logs nest under it.
//
// See docs/observability.md for every span attribute, instrument and alert.
package rheotel

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	nooptrace "go.opentelemetry.io/otel/trace/noop"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// ScopeName is the instrumentation scope of rheo's tracer and meter.
const ScopeName = "github.com/rheo-go/rheo/rheotel"

// Options configures New. The zero Options uses the global tracer provider,
// meter provider and propagator (otel.GetTracerProvider, …), which are
// no-ops until the program installs an SDK.
type Options struct {
	// TracerProvider creates rheo's tracer (default the global one).
	TracerProvider trace.TracerProvider
	// MeterProvider creates rheo's meter (default the global one).
	MeterProvider metric.MeterProvider
	// Propagator injects the trace context into events and extracts it
	// from them (default the global one; install
	// propagation.TraceContext{} for W3C traceparent and tracestate).
	Propagator propagation.TextMapPropagator
	// LinkOnly starts every process span in a new trace, linked to the
	// producer's span, instead of as its child.
	LinkOnly bool
	// Clock tells the time for end-to-end latency and the age of the
	// oldest pending delivery (default clock.System). Give it the client's
	// clock when the client has one of its own.
	Clock rheo.Clock
}

// Instrumentation implements rheo.Instrumentation with OpenTelemetry.
// Create it with New; it is safe for concurrent use.
type Instrumentation struct {
	tracer   trace.Tracer
	meter    metric.Meter
	prop     propagation.TextMapPropagator
	linkOnly bool
	clock    rheo.Clock
	m        instruments
	attrs    attrCache
	// noTrace: the tracer provider is OpenTelemetry's no-op one, so process
	// spans are not started at all (the producer's context is still
	// extracted into the handler's ctx, for the user's own tracing).
	noTrace bool
}

var _ rheo.Instrumentation = (*Instrumentation)(nil)

// New creates the tracer, meter and instruments. It fails only when the
// meter provider refuses an instrument.
func New(opts Options) (*Instrumentation, error) {
	if opts.TracerProvider == nil {
		opts.TracerProvider = otel.GetTracerProvider()
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = otel.GetMeterProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = otel.GetTextMapPropagator()
	}
	if opts.Clock == nil {
		opts.Clock = clock.System
	}
	i := &Instrumentation{
		tracer:   opts.TracerProvider.Tracer(ScopeName),
		meter:    opts.MeterProvider.Meter(ScopeName),
		prop:     opts.Propagator,
		linkOnly: opts.LinkOnly,
		clock:    opts.Clock,
	}
	_, i.noTrace = opts.TracerProvider.(nooptrace.TracerProvider)
	if err := i.m.init(i.meter); err != nil {
		return nil, err
	}
	return i, nil
}

// Attribute keys rheo adds where the messaging conventions have none.
const (
	// AttrSequence is the event's sequence in its partition.
	AttrSequence = attribute.Key("rheo.sequence")
	// AttrAttempt is the delivery attempt (1 on the first delivery).
	AttrAttempt = attribute.Key("rheo.attempt")
	// AttrLeaseID is the lease's fencing token.
	AttrLeaseID = attribute.Key("rheo.lease.id")
	// AttrSettle is the settle a consumer sent: ack, nack, reject, release
	// or none.
	AttrSettle = attribute.Key("rheo.settle")
	// AttrSettleOutcome is how a settle or a lease ended: acked, nacked,
	// rejected, released (handed back unhandled), stale (refused: the lease was no longer current),
	// ambiguous (may or may not have been applied), failed, or lost (a
	// renewal found the lease taken while its handler ran).
	AttrSettleOutcome = attribute.Key("rheo.settle.outcome")
	// AttrRetryDelay is a nack's delay, in seconds.
	AttrRetryDelay = attribute.Key("rheo.retry.delay")
	// AttrPanicked is set on a process span whose handler panicked.
	AttrPanicked = attribute.Key("rheo.handler.panicked")
	// AttrRenewOutcome is how a renewal ended: renewed, lost or failed.
	AttrRenewOutcome = attribute.Key("rheo.renew.outcome")
	// AttrPartition is a partition number on group health instruments.
	AttrPartition = semconv.MessagingDestinationPartitionIDKey
)

// Settle outcomes (AttrSettleOutcome values).
const (
	OutcomeAcked     = "acked"
	OutcomeNacked    = "nacked"
	OutcomeRejected  = "rejected"
	OutcomeStale     = "stale"
	OutcomeAmbiguous = "ambiguous"
	OutcomeFailed    = "failed"
	OutcomeLost      = "lost"
	OutcomeReleased  = "released"
)

var systemAttr = semconv.MessagingSystemKey.String("rheo")

// opType maps an operation onto messaging.operation.type ("" when the
// conventions have no type for it).
func opType(k rheo.OperationKind) string {
	switch k {
	case rheo.OpAppend:
		return "send"
	case rheo.OpFetch:
		return "receive"
	case rheo.OpAck, rheo.OpNack, rheo.OpReject, rheo.OpRelease, rheo.OpSettle:
		return "settle"
	}
	return ""
}

// StartOperation starts the operation's span (producer for an append,
// client otherwise). It implements rheo.Instrumentation.
func (i *Instrumentation) StartOperation(ctx context.Context, op rheo.Operation) (context.Context, func(rheo.OperationResult)) {
	kind := trace.SpanKindClient
	if op.Kind == rheo.OpAppend {
		kind = trace.SpanKindProducer
	}
	name := op.Kind.String()
	ctx, span := i.tracer.Start(ctx, name+" "+op.Stream, trace.WithSpanKind(kind))
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 12)
		attrs = append(attrs, systemAttr,
			semconv.MessagingDestinationName(op.Stream),
			semconv.MessagingOperationName(name))
		if t := opType(op.Kind); t != "" {
			attrs = append(attrs, semconv.MessagingOperationTypeKey.String(t))
		}
		if op.Group != "" {
			attrs = append(attrs, semconv.MessagingConsumerGroupName(op.Group))
		}
		if op.ConsumerID != "" {
			attrs = append(attrs, semconv.MessagingClientID(op.ConsumerID))
		}
		if op.Kind == rheo.OpAppend || op.Kind == rheo.OpSettle || op.Kind == rheo.OpAck && op.Lease.ID == "" {
			attrs = append(attrs, semconv.MessagingBatchMessageCount(op.Count))
		}
		if op.Lease.ID != "" {
			attrs = append(attrs, leaseAttrs(op.Lease)...)
		}
		span.SetAttributes(attrs...)
	}
	start := time.Now()
	return ctx, func(res rheo.OperationResult) {
		i.endOperation(span, op, res, time.Since(start))
	}
}

func leaseAttrs(l rheo.Lease) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingMessageID(l.Event.ID),
		semconv.MessagingDestinationPartitionID(itoa(l.Event.Partition)),
		AttrSequence.Int64(l.Event.Sequence),
		AttrAttempt.Int(l.Attempt),
		AttrLeaseID.String(l.ID),
	}
}

func (i *Instrumentation) endOperation(span trace.Span, op rheo.Operation, res rheo.OperationResult, d time.Duration) {
	errType := errorType(res.Err)
	i.m.opDuration.Record(context.Background(), d.Seconds(), i.attrs.op(op.Kind, op.Stream, op.Group, errType).rec...)
	switch op.Kind {
	case rheo.OpAppend:
		n := len(res.Events)
		if res.Err != nil {
			n = op.Count
		}
		i.m.sent.Add(context.Background(), int64(n), i.attrs.op(op.Kind, op.Stream, "", errType).add...)
		if span.IsRecording() && len(res.Events) == 1 {
			e := res.Events[0]
			span.SetAttributes(semconv.MessagingMessageID(e.ID),
				semconv.MessagingDestinationPartitionID(itoa(e.Partition)), AttrSequence.Int64(e.Sequence))
		}
	case rheo.OpFetch:
		if len(res.Leases) > 0 {
			i.m.consumed.Add(context.Background(), int64(len(res.Leases)), i.attrs.group(op.Stream, op.Group).add...)
		}
		if span.IsRecording() {
			span.SetAttributes(semconv.MessagingBatchMessageCount(len(res.Leases)))
		}
	case rheo.OpRenew:
		outcome := "renewed"
		switch rheo.Classify(res.Err) {
		case rheo.Settled:
		case rheo.Lost:
			outcome = OutcomeLost
			i.m.lost.Add(context.Background(), 1, i.attrs.group(op.Stream, op.Group).add...)
		default:
			outcome = OutcomeFailed
		}
		i.m.renewals.Add(context.Background(), 1, i.attrs.outcome(AttrRenewOutcome, op.Stream, op.Group, outcome).add...)
		if span.IsRecording() {
			span.SetAttributes(AttrRenewOutcome.String(outcome))
		}
	case rheo.OpAck, rheo.OpNack, rheo.OpReject, rheo.OpRelease, rheo.OpSettle:
		i.countSettles(span, op, res)
	}
	if res.Err != nil && span.IsRecording() {
		span.RecordError(res.Err)
		span.SetStatus(codes.Error, res.Err.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(errType))
	}
	span.End()
}

// countSettles counts the settles by outcome, one Add per outcome present
// (a batch's settles share stream and group); a single settle's outcome
// also goes on the span.
func (i *Instrumentation) countSettles(span trace.Span, op rheo.Operation, res rheo.OperationResult) {
	if len(res.Settles) == 0 {
		return
	}
	now := i.clock.Now()
	ga := i.attrs.get(op.Stream, op.Group)
	var outcomes []string
	var counts []int64
	var dead, lost int64
	for j, r := range res.Settles {
		var err error
		if j < len(res.SettleErrs) {
			err = res.SettleErrs[j]
		} else {
			err = res.Err
		}
		outcome := settleOutcome(r.Kind, err)
		k := slices.Index(outcomes, outcome)
		if k < 0 {
			outcomes, counts = append(outcomes, outcome), append(counts, 0)
			k = len(outcomes) - 1
		}
		counts[k]++
		switch outcome {
		case OutcomeAcked:
			i.m.e2e.Record(context.Background(), now.Sub(r.Lease.Event.Timestamp).Seconds(), ga.base.rec...)
		case OutcomeRejected:
			dead++
		case OutcomeNacked:
			if res.MaxAttempts > 0 && r.Lease.Attempt >= res.MaxAttempts {
				dead++
			}
		case OutcomeStale:
			lost++
		}
		if len(res.Settles) == 1 && span.IsRecording() {
			span.SetAttributes(AttrSettleOutcome.String(outcome))
		}
	}
	for k, outcome := range outcomes {
		i.m.settles.Add(context.Background(), counts[k], ga.outcomes[outcomeKey{AttrSettleOutcome, outcome}].add...)
	}
	if dead > 0 {
		i.m.deadLettered.Add(context.Background(), dead, ga.base.add...)
	}
	if lost > 0 {
		i.m.lost.Add(context.Background(), lost, ga.base.add...)
	}
}

// settleOutcome names how one settle ended.
func settleOutcome(kind rheo.SettleKind, err error) string {
	switch rheo.Classify(err) {
	case rheo.Settled:
		switch kind {
		case rheo.SettleAck:
			return OutcomeAcked
		case rheo.SettleNack:
			return OutcomeNacked
		case rheo.SettleRelease:
			return OutcomeReleased
		default:
			return OutcomeRejected
		}
	case rheo.Lost:
		return OutcomeStale
	case rheo.Failed:
		return OutcomeFailed
	}
	return OutcomeAmbiguous
}

// Inject writes ctx's trace context into carrier through the propagator.
// It implements rheo.Instrumentation.
func (i *Instrumentation) Inject(ctx context.Context, carrier map[string]string) {
	i.prop.Inject(ctx, propagation.MapCarrier(carrier))
}

// Extract returns ctx with the trace context carried in the event's
// metadata (for code that reads events without a Consumer, after Fetch or
// Read, say).
func (i *Instrumentation) Extract(ctx context.Context, e rheo.Event) context.Context {
	if len(e.Metadata) == 0 {
		return ctx
	}
	return i.prop.Extract(ctx, propagation.MapCarrier(e.Metadata))
}

// noopSpan is the span of process calls when tracing is off.
var noopSpan = trace.SpanFromContext(context.Background())

// consumerSpan are the start options of a process span with no link (shared:
// never appended to).
var consumerSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// StartProcess starts the consumer span of one handler call. It implements
// rheo.Instrumentation.
func (i *Instrumentation) StartProcess(ctx context.Context, l rheo.Lease) (context.Context, rheo.Process) {
	ga := i.attrs.get(l.Stream, l.Group)
	// Extracting into ctx gives the parent context directly; the producer
	// is whatever remote span the event carried.
	parent := i.Extract(ctx, l.Event)
	if i.noTrace {
		i.m.inflight.Add(context.Background(), 1, ga.base.add...)
		return parent, &process{i: i, span: noopSpan, ga: ga}
	}
	producer := trace.SpanContextFromContext(parent)
	opts := consumerSpan
	if producer.IsValid() && producer.IsRemote() && !producer.Equal(trace.SpanContextFromContext(ctx)) {
		opts = []trace.SpanStartOption{consumerSpan[0], trace.WithLinks(trace.Link{SpanContext: producer})}
		if i.linkOnly {
			opts = append(opts, trace.WithNewRoot())
		}
	} else {
		parent = ctx
	}
	ctx, span := i.tracer.Start(parent, ga.processName, opts...)
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 11)
		attrs = append(attrs, systemAttr,
			semconv.MessagingDestinationName(l.Stream),
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeKey.String("process"),
			semconv.MessagingConsumerGroupName(l.Group),
			semconv.MessagingClientID(l.ConsumerID))
		attrs = append(attrs, leaseAttrs(l)...)
		span.SetAttributes(attrs...)
	}
	i.m.inflight.Add(context.Background(), 1, ga.base.add...)
	return ctx, &process{i: i, span: span, ga: ga}
}

// process follows one handler call.
type process struct {
	i    *Instrumentation
	span trace.Span
	ga   *groupAttrs
}

func (p *process) Handled(err error, panicked bool, d time.Duration) {
	p.i.m.inflight.Add(context.Background(), -1, p.ga.base.add...)
	errType := ""
	switch {
	case err == nil:
	case panicked:
		errType = "panic"
	default:
		errType = handlerErrorType(err)
	}
	p.i.m.processDuration.Record(context.Background(), d.Seconds(), p.i.attrs.op(0, p.ga.stream, p.ga.group, errType).rec...)
	if err == nil || !p.span.IsRecording() {
		return
	}
	if panicked {
		p.span.SetAttributes(AttrPanicked.Bool(true))
	}
	p.span.RecordError(err)
	p.span.SetStatus(codes.Error, err.Error())
	p.span.SetAttributes(semconv.ErrorTypeKey.String(errType))
}

func (p *process) End(e rheo.ProcessEnd) {
	if !p.span.IsRecording() {
		p.span.End()
		return
	}
	settle := "none"
	switch e.Settle {
	case rheo.SettleAck:
		settle = "ack"
	case rheo.SettleNack:
		settle = "nack"
		p.span.SetAttributes(AttrRetryDelay.Float64(e.Delay.Seconds()))
	case rheo.SettleReject:
		settle = "reject"
	case rheo.SettleRelease:
		settle = "release"
	}
	var outcome string
	switch {
	case e.Settle == 0:
		outcome = OutcomeLost
		p.span.AddEvent("lease lost", trace.WithAttributes(attribute.String("exception.message", errString(e.Err))))
		p.span.SetStatus(codes.Error, "lease lost: "+errString(e.Err))
	default:
		outcome = settleOutcome(e.Settle, e.Err)
		if e.Err != nil {
			p.span.AddEvent("settle refused", trace.WithAttributes(attribute.String("exception.message", e.Err.Error())))
			p.span.SetStatus(codes.Error, settle+" "+outcome+": "+e.Err.Error())
		}
	}
	p.span.SetAttributes(AttrSettle.String(settle), AttrSettleOutcome.String(outcome))
	p.span.End()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// handlerErrorType names a handler error for error.type: reject, retry,
// release or error (in that precedence, as the consumer settles them).
func handlerErrorType(err error) string {
	if rheo.IsReject(err) {
		return "reject"
	}
	if _, ok := rheo.RetryDelay(err); ok {
		return "retry"
	}
	if rheo.IsRelease(err) {
		return "release"
	}
	return "error"
}

// errorType maps an operation error onto a low-cardinality error.type: the
// name of the rheo sentinel it wraps, or _OTHER.
func errorType(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "deadline_exceeded"
	}
	return "_OTHER"
}

var sentinels = []struct {
	err  error
	name string
}{
	{rheo.ErrStaleLease, "stale_lease"},
	{rheo.ErrReceiptMismatch, "receipt_mismatch"},
	{rheo.ErrAmbiguous, "ambiguous"},
	{rheo.ErrBackendUnavailable, "backend_unavailable"},
	{rheo.ErrStreamNotFound, "stream_not_found"},
	{rheo.ErrGroupNotFound, "group_not_found"},
	{rheo.ErrInvalidPartition, "invalid_partition"},
	{rheo.ErrInvalidArgument, "invalid_argument"},
	{rheo.ErrNoEventsInRange, "no_events_in_range"},
	{rheo.ErrAlreadyExists, "already_exists"},
	{rheo.ErrClosed, "closed"},
}
