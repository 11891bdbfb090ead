package rheo

import (
	"context"
	"errors"
	"time"
)

// maxSettleBatch bounds how many settles go to the backend in one call.
const maxSettleBatch = 512

// settleReq asks the settler to settle one job's lease.
type settleReq struct {
	j      *job
	lease  Lease
	kind   SettleKind
	reason string
	delay  time.Duration
}

// settleLoop settles leases in batches, group-commit style: whatever queued
// up while the previous batch was at the backend goes out together in the
// next one. An idle consumer thus settles at once, and a busy one coalesces
// its acks without a timer. It returns once the channel is closed and every
// request (follow-up nacks included) has been sent.
func (r *run) settleLoop() {
	var batch []settleReq
	open := true
	for open || len(batch) > 0 {
		if len(batch) == 0 {
			req, ok := <-r.settles
			if !ok {
				return
			}
			batch = append(batch, req)
		}
	more:
		for open && len(batch) < maxSettleBatch {
			select {
			case req, ok := <-r.settles:
				if !ok {
					open = false
					break more
				}
				batch = append(batch, req)
			default:
				break more
			}
		}
		batch = r.flush(batch)
	}
}

// settleTimeout bounds one settle call: past a lease's life an answer no
// longer matters much, since fencing protects the lease either way.
func (r *run) settleTimeout() time.Duration { return max(r.cfg.LeaseDuration, time.Second) }

// flush settles batch and applies rheo's settle policy to each result; it
// returns the follow-ups to send next (nacks after definitely failed acks).
func (r *run) flush(batch []settleReq) []settleReq {
	now := r.c.now()
	reqs := make([]SettleRequest, len(batch))
	for i, b := range batch {
		reqs[i] = SettleRequest{Kind: b.kind, Lease: b.lease, Reason: b.reason}
		if b.kind == SettleNack {
			reqs[i].AvailableAt = now.Add(b.delay)
		}
	}
	errs := make([]error, len(batch))
	if err := r.c.check(); err != nil {
		for i := range errs {
			errs[i] = err
		}
	} else {
		ctx, cancel := context.WithTimeout(r.bg, r.settleTimeout())
		err := r.c.settleBatch(ctx, reqs)
		cancel()
		var be *BatchError
		switch {
		case errors.As(err, &be) && len(be.Errs) == len(errs):
			copy(errs, be.Errs)
		case err != nil:
			for i := range errs {
				errs[i] = err
			}
		}
	}

	var next []settleReq
	for i, b := range batch {
		err := errs[i]
		ev := ConsumerEvent{Lease: b.lease, Reason: b.reason, Err: err}
		switch b.kind {
		case SettleAck:
			ev.Kind = ConsumerAcked
		case SettleNack:
			ev.Kind, ev.Delay = ConsumerRetried, b.delay
		default:
			ev.Kind = ConsumerRejected
		}
		r.observe(ev)
		if err == nil {
			r.release(b.j)
			continue
		}
		log := r.log.With("event_id", b.lease.Event.ID, "partition", b.lease.Event.Partition,
			"sequence", b.lease.Event.Sequence, "lease", b.lease.ID, "settle", ev.Kind.String(), "err", err)
		switch Classify(err) {
		case Lost:
			// Someone else owns the delivery now; nacking would be fenced
			// too and would only add noise.
			log.Warn("lease lost before it settled")
			r.observe(ConsumerEvent{Kind: ConsumerLost, Lease: b.lease, Err: err})
			r.release(b.j)
		case Failed:
			if b.kind == SettleAck {
				log.Warn("ack failed; nacking")
				next = append(next, settleReq{j: b.j, lease: b.lease, kind: SettleNack, reason: "ack failed: " + err.Error()})
				continue
			}
			log.Warn("settle failed; leaving the lease to expire")
			r.release(b.j)
		default:
			// Unavailable or ambiguous: the settle may be durable. Fencing
			// keeps a late duplicate harmless; expiry redelivers otherwise.
			log.Warn("settle outcome unknown; leaving the lease to expire")
			r.release(b.j)
		}
	}
	return next
}
