package rheo

import (
	"context"
	"errors"
	"time"
)

// Handler processes one event for a Consumer. Its return value settles the
// lease:
//
//   - nil acks the delivery;
//   - Reject(err) dead-letters it for this group, with reason err.Error();
//   - RetryAfter(d, err) nacks it so that it comes back after d;
//   - Release(err) hands it back unhandled, its attempt not counted;
//   - any other error nacks it with the delay of ConsumerConfig.Backoff;
//   - a panic is recovered, logged with its stack and nacked like an error,
//     with reason "panic: <value>".
//
// The reason stored with a nack or a reject is the returned error's message,
// with U+FFFD in place of each run of bytes that is not UTF-8 and of each
// NUL (which Client.Nack and Client.Reject refuse): every error settles its
// lease.
// Delivery is at least once: a handler must be idempotent on Event.ID.
//
// ctx is cancelled when the consumer stops after its shutdown budget (cause
// ErrConsumerStopped) or when renewal finds that the lease now belongs to
// someone else (cause ErrStaleLease); context.Cause tells which. A long
// handler should watch ctx and give up early.
type Handler func(ctx context.Context, e Event) error

// Reject wraps err so that a Handler returning it dead-letters the event
// instead of retrying it: use it for events that can never succeed (bad
// payload, unknown type). The stored reason is the returned error's message.
// The wrapped error stays reachable through errors.Is and errors.As.
func Reject(err error) error {
	if err == nil {
		err = errors.New("rejected")
	}
	return &rejectError{err: err}
}

// RetryAfter wraps err so that a Handler returning it nacks the event with
// delay d (instead of the Backoff delay): use it when the handler knows when
// a retry can succeed (a rate limit's Retry-After, say). A negative d means
// no delay. The wrapped error stays reachable through errors.Is and errors.As.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry")
	}
	return &retryError{delay: max(d, 0), err: err}
}

// Release wraps err so that a Handler returning it hands the lease back
// unhandled (Client.Release): the delivery is available again at once and
// this claim does not count as an attempt. Use it only when the handler did
// nothing with the event, such as a handler that finds its own process
// shutting down before it starts; since a released event is never
// dead-lettered, a handler that failed should return the error as it is.
// A Reject or RetryAfter anywhere in the same error chain wins over it. The
// wrapped error stays reachable through errors.Is and errors.As.
func Release(err error) error {
	if err == nil {
		err = errors.New("released")
	}
	return &releaseError{err: err}
}

type releaseError struct{ err error }

func (e *releaseError) Error() string { return e.err.Error() }
func (e *releaseError) Unwrap() error { return e.err }

type rejectError struct{ err error }

func (e *rejectError) Error() string { return e.err.Error() }
func (e *rejectError) Unwrap() error { return e.err }

type retryError struct {
	delay time.Duration
	err   error
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// DefaultBackoff is the retry delay a Consumer uses when ConsumerConfig.Backoff
// is nil: 1s on the first attempt, doubling with every attempt, capped at 1m.
func DefaultBackoff(attempt int) time.Duration {
	const base, ceiling = time.Second, time.Minute
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 7 { // 2^6 s already exceeds the cap
		return ceiling
	}
	return min(base<<(attempt-1), ceiling)
}

func isReject(err error) bool {
	var r *rejectError
	return errors.As(err, &r)
}
