package rheowatermill

import (
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/rheo-go/rheo"
)

// delivery records, for a handed-out message, what its Nack should do:
// the reason to store and whether to dead-letter at once.
type delivery struct {
	mu     sync.Mutex
	reason string
	reject bool
}

type deliveryKey struct{}

func deliveryOf(msg *message.Message) *delivery {
	d, _ := msg.Context().Value(deliveryKey{}).(*delivery)
	return d
}

// result is the handler result for a nacked message.
func (d *delivery) result(delay time.Duration) error {
	d.mu.Lock()
	reason, reject := d.reason, d.reject
	d.mu.Unlock()
	err := errNacked
	if reason != "" {
		err = errors.New(reason)
	}
	if reject {
		return rheo.Reject(err)
	}
	return rheo.RetryAfter(delay, err)
}

// Reject marks a message received from a Subscriber so that its next
// msg.Nack() dead-letters it for the group at once, with reason's message,
// instead of retrying it. It reports false (and does nothing) for a message
// that did not come from a Subscriber.
func Reject(msg *message.Message, reason error) bool {
	d := deliveryOf(msg)
	if d == nil {
		return false
	}
	if reason == nil {
		reason = errors.New("rejected")
	}
	d.mu.Lock()
	d.reason, d.reject = reason.Error(), true
	d.mu.Unlock()
	return true
}

// SetNackReason records the reason rheo stores if msg is nacked (shown with
// the dead letter when the group's MaxAttempts is reached). It reports false
// for a message that did not come from a Subscriber.
func SetNackReason(msg *message.Message, reason error) bool {
	d := deliveryOf(msg)
	if d == nil || reason == nil {
		return false
	}
	d.mu.Lock()
	d.reason = reason.Error()
	d.mu.Unlock()
	return true
}

// DeadLetter returns a Router middleware that ends in rheo's dead letters:
// when the handler fails with an error for which permanent returns true, the
// message is rejected (dead-lettered at once with the error as its reason);
// any other error is recorded as the nack reason, so that the message is
// retried and, after the group's MaxAttempts, dead-lettered with it. It
// plays the part of Watermill's PoisonQueue without a poison topic: the
// failed message stays in its stream, listed by rheo's DeadLetters and
// brought back by Redrive. A nil permanent treats every error as permanent.
//
// Put it outside Retry (added before it), so that it sees the error Retry
// finally gives up with.
func DeadLetter(permanent func(error) bool) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil {
				if permanent == nil || permanent(err) {
					Reject(msg, err)
				} else {
					SetNackReason(msg, err)
				}
			}
			return out, err
		}
	}
}

// LeaseOf returns the rheo lease of a message received from a Subscriber
// (its Attempt counts deliveries), as it was fetched.
func LeaseOf(msg *message.Message) (rheo.Lease, bool) {
	return rheo.LeaseFromContext(msg.Context())
}
