package rheo

import (
	"context"
	"errors"
	"time"
)

// Instrumentation traces and measures what a Client and its consumers do.
// Package rheotel implements it with OpenTelemetry; the root package knows
// no telemetry library, so a program that installs none (WithInstrumentation
// unset) pays one nil check per operation and nothing else.
//
// The client calls it from the goroutine of each operation, so it must be
// safe for concurrent use and quick. Backends never see it: every hook sits
// in the facade or the consumer runtime.
type Instrumentation interface {
	// StartOperation is called when a client operation begins, after
	// nothing but the closed-client check. The operation runs with the
	// returned context (so a span it carries is the parent of anything the
	// operation starts), and end is called exactly once with its outcome.
	StartOperation(ctx context.Context, op Operation) (_ context.Context, end func(OperationResult))
	// Inject writes the propagation fields of ctx (W3C traceparent and
	// tracestate, say) into carrier. Every appended event's Metadata gets
	// them, except keys the message sets itself, so the trace context
	// travels with the event across processes and stores.
	Inject(ctx context.Context, carrier map[string]string)
	// StartProcess is called by a Consumer before it runs its handler for
	// l; the handler runs with the returned context. The Process hears when
	// the handler returned and how the lease ended.
	StartProcess(ctx context.Context, l Lease) (context.Context, Process)
}

// Process follows one handler call of a Consumer, from its start to the
// end of its lease.
type Process interface {
	// Handled is called when the handler returns: err is its error
	// (a recovered panic has panicked set), d how long it ran.
	Handled(err error, panicked bool, d time.Duration)
	// End is called once, when the consumer is done with the lease.
	End(ProcessEnd)
}

// ProcessEnd is how a consumer finished with a lease.
type ProcessEnd struct {
	// Settle is the settle the consumer sent (0 when it sent none: the
	// lease was lost while the handler ran, or left to expire).
	Settle SettleKind
	// Reason and Delay are those of a nack or reject.
	Reason string
	Delay  time.Duration
	// Err is the settle's error, or the cause the lease was lost
	// (ErrStaleLease) when a renewal found it taken.
	Err error
}

// OperationKind names a client operation reported to Instrumentation.
type OperationKind int

// The operations reported to Instrumentation.
const (
	// OpAppend is Append, AppendBatch (Operation.Count messages).
	OpAppend OperationKind = iota + 1
	// OpFetch is Fetch (Operation.Count is the limit asked for).
	OpFetch
	// OpAck is Ack or AckBatch (Operation.Count leases).
	OpAck
	// OpNack is Nack.
	OpNack
	// OpReject is Reject.
	OpReject
	// OpSettle is a Consumer settling a batch of leases (acks, nacks,
	// rejects and releases mixed).
	OpSettle
	// OpRenew is Renew.
	OpRenew
	// OpReplay is Replay.
	OpReplay
	// OpRelease is Release.
	OpRelease
)

// String returns the operation's name: append, fetch, ack, nack, reject,
// settle, renew, replay or release.
func (k OperationKind) String() string {
	switch k {
	case OpAppend:
		return "append"
	case OpFetch:
		return "fetch"
	case OpAck:
		return "ack"
	case OpNack:
		return "nack"
	case OpReject:
		return "reject"
	case OpSettle:
		return "settle"
	case OpRenew:
		return "renew"
	case OpReplay:
		return "replay"
	case OpRelease:
		return "release"
	}
	return "unknown"
}

// Operation describes a client operation as it begins.
type Operation struct {
	Kind OperationKind
	// Stream and Group are those named by the call (Group is empty for an
	// append; for AckBatch, those of the first lease).
	Stream, Group string
	// Count is the number of messages appended or leases settled, or the
	// fetch limit (0 for the client's default).
	Count int
	// ConsumerID is the fetching worker's ID, when the caller gave one.
	ConsumerID string
	// Lease is the lease of an Ack, Nack, Reject or Renew (zero otherwise).
	Lease Lease
}

// OperationResult is how a client operation ended.
type OperationResult struct {
	// Err is the operation's error (for AckBatch, a *BatchError).
	Err error
	// Events are the events an append returned.
	Events []Event
	// Leases are the leases a fetch claimed.
	Leases []Lease
	// Settles are the settles sent, and SettleErrs their results (index
	// for index) when the backend answered.
	//
	// The slices of a result are lent for the call: the consumer runtime
	// reuses Settles' array once End returns and hands Leases to its
	// handlers, so an Instrumentation reads them without changing them and
	// copies what it keeps.
	Settles    []SettleRequest
	SettleErrs []error
	// MaxAttempts is the group's attempt limit when Settles hold a nack
	// that settled (0 otherwise): such a nack whose lease's Attempt reached
	// it dead-lettered the delivery.
	MaxAttempts int
}

// WithInstrumentation installs tracing and metrics on the client and its
// consumers (see package rheotel). Without it, nothing is measured.
func WithInstrumentation(i Instrumentation) Option {
	return func(o *options) { o.ins = i }
}

// injectTrace returns m with the carrier's fields added to a copy of its
// metadata, leaving keys the message sets itself alone.
func injectTrace(m *Message, carrier map[string]string) *Message {
	cp := *m
	md := make(map[string]string, len(m.Metadata)+len(carrier))
	for k, v := range carrier {
		md[k] = v
	}
	for k, v := range m.Metadata {
		md[k] = v
	}
	cp.Metadata = md
	return &cp
}

// traceCarrier returns the propagation fields of ctx to put into appended
// events, or nil when there are none.
func (c *Client) traceCarrier(ctx context.Context) map[string]string {
	if c.opts.ins == nil {
		return nil
	}
	carrier := map[string]string{}
	c.opts.ins.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}

// IsReject reports whether err is, or wraps, an error made by Reject: the
// handler asked for a dead letter rather than a retry.
func IsReject(err error) bool { return isReject(err) }

// IsRelease reports whether err is or wraps a Release error.
func IsRelease(err error) bool {
	var r *releaseError
	return errors.As(err, &r)
}

// RetryDelay reports the delay of the RetryAfter error that err is or wraps.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryError
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}
