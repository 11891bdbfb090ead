package rheo

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Check them with errors.Is; the errors rheo returns wrap them
// with a message naming the stream, group, partition or field at fault.
var (
	ErrStreamNotFound     = errors.New("stream not found")
	ErrGroupNotFound      = errors.New("group not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidPartition   = errors.New("invalid partition")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrStaleLease         = errors.New("stale lease")
	ErrReceiptMismatch    = errors.New("receipt mismatch")
	ErrCursorNotFound     = errors.New("cursor not found")
	ErrConfirmRequired    = errors.New("confirm required")
	ErrNoEventsInRange    = errors.New("no events in range")
	ErrUnsupported        = errors.New("unsupported")
	ErrBackendUnavailable = errors.New("backend unavailable")
	// ErrMisconfigured: the store refuses this client's configuration (a
	// wrong password or role, a missing database, a schema that was never
	// migrated, TLS against a plain server). Retrying cannot help; the
	// message says what to fix. The consumer runtime stops on it.
	ErrMisconfigured   = errors.New("misconfigured")
	ErrAmbiguous       = errors.New("ambiguous outcome")
	ErrAlreadyRunning  = errors.New("already running")
	ErrAlreadyDraining = errors.New("already draining")
	ErrClosed          = errors.New("client closed")
)

// Errorf returns an error that wraps the sentinel kind with a message that
// says what is at fault. Backends use it so every error they return carries
// rheo's vocabulary: Errorf(ErrStreamNotFound, "stream %q", name).
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Wrap classifies a cause (a driver error, say) as kind, keeping the cause
// reachable through errors.Is and errors.As.
func Wrap(kind error, cause error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...), cause: cause}
}

type kindError struct {
	kind  error
	msg   string
	cause error
}

func (e *kindError) Error() string {
	var b strings.Builder
	b.WriteString(e.kind.Error())
	if e.msg != "" {
		b.WriteString(": ")
		b.WriteString(e.msg)
	}
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	return b.String()
}

func (e *kindError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

// BatchError reports the per-lease outcome of AckBatch. Errs has one entry per
// lease, in input order; nil means that lease settled.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	failed := 0
	var first error
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	return fmt.Sprintf("%d of %d leases not settled; first: %v", failed, len(e.Errs), first)
}

// Is reports whether every failed lease failed with target, so that
// errors.Is(err, ErrStaleLease) holds for a batch whose only failures are stale.
func (e *BatchError) Is(target error) bool {
	matched := false
	for _, err := range e.Errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, target) {
			return false
		}
		matched = true
	}
	return matched
}

// Settlement is what a caller should do with a lease after a settle, renew or
// fetch error. See Classify.
type Settlement int

const (
	// Settled means there was no error.
	Settled Settlement = iota
	// Lost: the lease is no longer current (stale lease or receipt mismatch).
	// Drop it; never nack it.
	Lost
	// Unknown: the store was unreachable or the outcome is ambiguous. The
	// settle may be durable; leave the lease to expire.
	Unknown
	// Failed: a definite failure (or invalid input). Nack now.
	Failed
	// Fatal: the store refuses the client's configuration
	// (ErrMisconfigured). Leave the lease to expire and stop: no retry can
	// succeed until the configuration is fixed.
	Fatal
)

func (s Settlement) String() string {
	switch s {
	case Settled:
		return "settled"
	case Lost:
		return "lost"
	case Unknown:
		return "unknown"
	case Failed:
		return "failed"
	case Fatal:
		return "fatal"
	}
	return fmt.Sprintf("Settlement(%d)", int(s))
}

// Classify maps an error onto the settlement policy: Lost for a stale lease or
// a receipt mismatch, Fatal for a misconfiguration, Unknown for an
// unavailable backend or an ambiguous
// outcome (including context deadlines and cancellations, whose outcome is not
// known), Failed for anything else, and Settled for nil.
func Classify(err error) Settlement {
	switch {
	case err == nil:
		return Settled
	case errors.Is(err, ErrStaleLease), errors.Is(err, ErrReceiptMismatch):
		return Lost
	case errors.Is(err, ErrMisconfigured):
		return Fatal
	case errors.Is(err, ErrBackendUnavailable), errors.Is(err, ErrAmbiguous),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return Unknown
	}
	return Failed
}
