package rheo

import (
	"sync/atomic"
	"time"
)

// Observer receives what every Consumer of a client does, for metrics and
// tracing. It is called synchronously on the consumer's goroutines, so it must
// be safe for concurrent use and quick. Install one with WithObserver;
// Counters is a ready-made implementation.
type Observer interface {
	ObserveConsumer(ConsumerEvent)
}

// ConsumerEventKind says what a ConsumerEvent reports.
type ConsumerEventKind int

// The kinds of ConsumerEvent. Err is set when the step failed.
const (
	// ConsumerFetched: a fetch returned Count leases after Duration.
	ConsumerFetched ConsumerEventKind = iota + 1
	// ConsumerHandled: the handler for Lease returned after Duration. Err is
	// the handler's error (a recovered panic has Panicked set).
	ConsumerHandled
	// ConsumerAcked: Lease was acked.
	ConsumerAcked
	// ConsumerRetried: Lease was nacked with Reason and Delay.
	ConsumerRetried
	// ConsumerRejected: Lease was rejected (dead-lettered) with Reason.
	ConsumerRejected
	// ConsumerRenewed: Lease was renewed (Lease.ExpiresAt is the new expiry).
	ConsumerRenewed
	// ConsumerLost: Lease turned out to belong to someone else (Err says
	// how: ErrStaleLease or ErrReceiptMismatch, found by a renewal or a
	// settle); the consumer dropped it without settling.
	ConsumerLost
	// ConsumerReleased: Lease was handed back unhandled (Client.Release),
	// its attempt not counted: queued when the consumer stopped, or its
	// handler returned Release.
	ConsumerReleased
)

func (k ConsumerEventKind) String() string {
	switch k {
	case ConsumerFetched:
		return "fetched"
	case ConsumerHandled:
		return "handled"
	case ConsumerAcked:
		return "acked"
	case ConsumerRetried:
		return "retried"
	case ConsumerRejected:
		return "rejected"
	case ConsumerRenewed:
		return "renewed"
	case ConsumerLost:
		return "lost"
	case ConsumerReleased:
		return "released"
	}
	return "unknown"
}

// ConsumerEvent is one step of a Consumer, reported to an Observer.
type ConsumerEvent struct {
	Kind                      ConsumerEventKind
	Stream, Group, ConsumerID string
	// Lease is the lease concerned (zero for ConsumerFetched).
	Lease Lease
	// Count is the number of leases a fetch returned.
	Count int
	// Duration is how long a fetch or a handler took.
	Duration time.Duration
	// Reason and Delay are those of a nack or a reject.
	Reason string
	Delay  time.Duration
	// Panicked is set when a handler panicked.
	Panicked bool
	// Err is the failure, if any.
	Err error
}

// WithObserver sends every consumer step of the client to o.
func WithObserver(o Observer) Option { return func(opts *options) { opts.observer = o } }

// Counters is an Observer that counts. Read its fields with Load; it must not
// be copied after first use.
type Counters struct {
	Fetches, FetchErrors atomic.Int64
	// Leases is the number of leases fetched.
	Leases atomic.Int64
	// Handled counts handler returns; HandlerErrors those with an error
	// (panics included), Panics the recovered panics, and HandlerTime the
	// total handler time in nanoseconds.
	Handled, HandlerErrors, Panics, HandlerTime atomic.Int64
	// Acks, Retries and DeadLetters count settled acks, nacks and rejects;
	// Rejects counts handlers that asked for a reject.
	Acks, Retries, Rejects, DeadLetters atomic.Int64
	// SettleErrors counts settles that failed (Lost ones included).
	SettleErrors atomic.Int64
	// Renewals and RenewErrors count lease renewals.
	Renewals, RenewErrors atomic.Int64
	// Lost counts leases found to belong to someone else.
	Lost atomic.Int64
	// Releases counts leases handed back unhandled.
	Releases atomic.Int64
}

// ObserveConsumer counts ev.
func (c *Counters) ObserveConsumer(ev ConsumerEvent) {
	switch ev.Kind {
	case ConsumerFetched:
		if ev.Err != nil {
			c.FetchErrors.Add(1)
			return
		}
		c.Fetches.Add(1)
		c.Leases.Add(int64(ev.Count))
	case ConsumerHandled:
		c.Handled.Add(1)
		c.HandlerTime.Add(int64(ev.Duration))
		if ev.Err != nil {
			c.HandlerErrors.Add(1)
			if isReject(ev.Err) {
				c.Rejects.Add(1)
			}
		}
		if ev.Panicked {
			c.Panics.Add(1)
		}
	case ConsumerAcked:
		c.settled(ev, &c.Acks)
	case ConsumerRetried:
		c.settled(ev, &c.Retries)
	case ConsumerRejected:
		c.settled(ev, &c.DeadLetters)
	case ConsumerReleased:
		c.settled(ev, &c.Releases)
	case ConsumerRenewed:
		if ev.Err != nil {
			c.RenewErrors.Add(1)
			return
		}
		c.Renewals.Add(1)
	case ConsumerLost:
		c.Lost.Add(1)
	}
}

func (c *Counters) settled(ev ConsumerEvent, n *atomic.Int64) {
	if ev.Err != nil {
		c.SettleErrors.Add(1)
		return
	}
	n.Add(1)
}
