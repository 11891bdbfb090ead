package rheo

import (
	"context"
	"errors"
	"slices"
	"time"
)

// maxSettleBatch bounds how many settles go to the backend in one call.
const maxSettleBatch = MaxLimit

// settleReq asks the settler to settle one job's lease.
type settleReq struct {
	j *job
	// lease is the job's when it began to settle: renewals skip a settling
	// job, and replace a job's lease rather than write it, so the settler
	// reads it without r.mu.
	lease  *Lease
	kind   SettleKind
	reason string
	delay  time.Duration
}

// settled is the ConsumerEvent kind that reports b.
func (b settleReq) settled() ConsumerEventKind {
	switch b.kind {
	case SettleAck:
		return ConsumerAcked
	case SettleNack:
		return ConsumerRetried
	case SettleRelease:
		return ConsumerReleased
	}
	return ConsumerRejected
}

// fetchGroup is the leases of one fetch: unsent counts those whose settle
// has not reached the settler yet. Only the settle loop touches it.
type fetchGroup struct{ unsent int }

// settleLinger is the longest the settler waits for another settle to
// arrive before it sends what it holds; settleMaxLinger the longest any
// settle waits for others to share its backend call.
const (
	settleLinger    = time.Millisecond
	settleMaxLinger = 10 * time.Millisecond
)

// settleLoop settles leases in batches. It sends what it holds at once when
// that is a settle for every lease the consumer holds (nothing else could
// join it), and the settles of whole fetches as soon as a fetch's last one
// arrives: a store that leases the fresh events of a fetch together (the
// spans of PostgreSQL and SQLite) then settles them together too, in one
// small statement, where part of a fetch costs it more than the whole. The
// settles of fetches still in progress wait for the rest of their fetch, or
// go out after settleLinger without a new settle or settleMaxLinger in all:
// an idle consumer settles at once, and a busy one coalesces its acks into
// few backend calls, which in turn frees its slots in groups, so that
// fetches claim in groups too. It returns once the channel is closed and
// every request (follow-up nacks included) was sent.
func (r *run) settleLoop() {
	var pending, out []settleReq
	var oldest time.Time // when the oldest pending settle arrived
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	open := true
	for open || len(pending) > 0 {
		complete := false // a fetch's last settle arrived
		add := func(req settleReq) {
			if len(pending) == 0 {
				oldest = time.Now()
			}
			pending = append(pending, req)
			req.j.group.unsent--
			complete = complete || req.j.group.unsent == 0
		}
		if len(pending) == 0 {
			req, ok := <-r.settles
			if !ok {
				return
			}
			add(req)
		}
		all := true // send everything pending, not only whole fetches
	collect:
		for open && len(pending) < maxSettleBatch {
			select {
			case req, ok := <-r.settles:
				if !ok {
					open = false
					break collect
				}
				add(req)
				continue
			default:
			}
			if len(pending) >= r.count() {
				break // every held lease is in the batch
			}
			if complete {
				// Whole fetches go now; the rest wait too, unless the
				// oldest has waited its most (a stalled handler's fetch
				// must not hold back the rest of it while others flow).
				all = time.Since(oldest) >= r.maxLinger
				break
			}
			wait := min(r.linger, r.maxLinger-time.Since(oldest))
			if wait <= 0 {
				break
			}
			linger.Reset(wait)
			select {
			case req, ok := <-r.settles:
				linger.Stop()
				if !ok {
					open = false
					break collect
				}
				add(req)
			case <-linger.C:
				break collect
			}
		}
		out = out[:0]
		if all {
			out = append(out, pending...)
			clear(pending)
			pending = pending[:0]
		} else {
			// Send the settles of whole fetches; keep the rest, in order.
			keep := pending[:0]
			for _, q := range pending {
				if q.j.group.unsent <= 0 {
					out = append(out, q)
				} else {
					keep = append(keep, q)
				}
			}
			clear(pending[len(keep):])
			pending = keep
		}
		next := r.flush(out)
		// Reuse the batches' backing arrays: a settleReq carries a whole
		// Lease, and regrowing a batch from nothing for every flush was a
		// tenth of the runtime's own CPU time with fast handlers.
		clear(out)
		if len(next) > 0 {
			if len(pending) == 0 {
				oldest = time.Now()
			}
			pending = append(pending, next...)
		}
	}
}

// releasesToNacks turns the releases of a batch into nacks due now (their
// reason kept) and reports whether it held any.
func releasesToNacks(batch []settleReq, reqs []SettleRequest, now time.Time) bool {
	found := false
	for i := range reqs {
		if reqs[i].Kind == SettleRelease {
			reqs[i].Kind, reqs[i].AvailableAt = SettleNack, now
			batch[i].kind, batch[i].delay = SettleNack, 0
			found = true
		}
	}
	return found
}

// settleTimeout bounds one settle call: past a lease's life an answer no
// longer matters much, since fencing protects the lease either way.
func (r *run) settleTimeout() time.Duration { return max(r.cfg.LeaseDuration, time.Second) }

// flush settles batch and applies rheo's settle policy to each result; it
// returns the follow-ups to send next (nacks after definitely failed acks).
func (r *run) flush(batch []settleReq) []settleReq {
	now := r.c.now()
	// The requests' array is reused from flush to flush, like the batches'
	// (a SettleRequest carries a whole Lease).
	reqs := slices.Grow(r.reqs[:0], len(batch))[:len(batch)]
	defer func() {
		clear(reqs)
		r.reqs = reqs[:0]
	}()
	for i, b := range batch {
		reqs[i] = SettleRequest{Kind: b.kind, Lease: *b.lease, Reason: b.reason}
		if b.kind == SettleNack {
			reqs[i].AvailableAt = now.Add(normDuration(b.delay))
		}
	}
	errs := make([]error, len(batch))
	if err := r.c.check(); err != nil {
		for i := range errs {
			errs[i] = err
		}
	} else {
		// The leases came from this stream and group through Fetch, so the
		// facade's checks (settleBatch) would only repeat themselves; the
		// backend still fences and classifies each one.
		ctx, cancel := context.WithTimeout(r.bg, r.settleTimeout())
		var end func(OperationResult)
		if r.ins != nil {
			ctx, end = r.ins.StartOperation(ctx, Operation{Kind: OpSettle, Stream: r.cfg.Stream, Group: r.cfg.Group,
				Count: len(reqs), ConsumerID: r.cfg.ConsumerID})
		}
		start := time.Now()
		res, err := r.c.b.Settle(ctx, r.cfg.Stream, r.cfg.Group, reqs, now)
		if err != nil && errors.Is(err, ErrInvalidArgument) && releasesToNacks(batch, reqs, now) {
			// A backend written before releases existed, refusing the
			// whole batch: send it again with the releases as nacks.
			r.log.Warn("settle batch refused; sending its releases as nacks", "err", err)
			r.noRelease.Store(true)
			res, err = r.c.b.Settle(ctx, r.cfg.Stream, r.cfg.Group, reqs, now)
		}
		cancel()
		if r.win != nil && err == nil {
			r.win.observeSettle(time.Since(start))
		}
		if end != nil {
			var limit int
			if err == nil {
				// A cached read, refreshed once a minute: bounded like the
				// settle, so a slow store cannot hold the settle loop.
				lctx, lcancel := context.WithTimeout(r.bg, r.settleTimeout())
				limit = r.c.nackLimit(lctx, r.cfg.Stream, r.cfg.Group, reqs, res)
				lcancel()
			}
			end(OperationResult{Err: err, Settles: reqs, SettleErrs: res, MaxAttempts: limit})
		}
		switch {
		case err == nil && len(res) == len(errs):
			copy(errs, res)
		case err == nil:
			err = Errorf(ErrAmbiguous, "backend answered %d results for %d settles of group %q on stream %q",
				len(res), len(errs), r.cfg.Group, r.cfg.Stream)
			fallthrough
		default:
			for i := range errs {
				errs[i] = err
			}
		}
	}

	var next []settleReq
	done := make([]*job, 0, len(batch))
	defer func() { r.release(done...) }()
	// end tells the job's Process how its lease ended.
	end := func(b settleReq, err error) {
		if b.j.proc != nil {
			b.j.proc.End(ProcessEnd{Settle: b.kind, Reason: b.reason, Delay: b.delay, Err: err})
		}
	}
	for i, b := range batch {
		err := errs[i]
		if r.obs != nil {
			ev := ConsumerEvent{Kind: b.settled(), Lease: *b.lease, Reason: b.reason, Err: err}
			if b.kind == SettleNack {
				ev.Delay = b.delay
			}
			r.observe(ev)
		}
		if err == nil {
			end(b, nil)
			done = append(done, b.j)
			continue
		}
		r.mu.Lock()
		hctx := b.j.hctx
		r.mu.Unlock()
		attrs := append(leaseAttrs(*b.lease), "settle", b.settled().String(), "err", err)
		switch Classify(err) {
		case Lost:
			// Someone else owns the delivery now; nacking would be fenced
			// too and would only add noise.
			r.log.WarnContext(hctx, "lease lost before it settled", attrs...)
			r.observe(ConsumerEvent{Kind: ConsumerLost, Lease: *b.lease, Err: err})
			end(b, err)
			done = append(done, b.j)
		case Failed:
			if b.kind == SettleRelease && errors.Is(err, ErrInvalidArgument) {
				// A backend written before releases existed: hand the
				// lease back with a nack, which counts its attempt.
				r.log.WarnContext(hctx, "release refused; nacking", attrs...)
				r.noRelease.Store(true)
				next = append(next, settleReq{j: b.j, lease: b.lease, kind: SettleNack, reason: b.reason})
				continue
			}
			if b.kind == SettleAck {
				r.log.WarnContext(hctx, "ack failed; nacking", attrs...)
				next = append(next, settleReq{j: b.j, lease: b.lease, kind: SettleNack, reason: storedReason("ack failed: " + err.Error())})
				continue
			}
			r.log.WarnContext(hctx, "settle failed; leaving the lease to expire", attrs...)
			end(b, err)
			done = append(done, b.j)
		default:
			// Unavailable or ambiguous: the settle may be durable. Fencing
			// keeps a late duplicate harmless; expiry redelivers otherwise.
			r.log.WarnContext(hctx, "settle outcome unknown; leaving the lease to expire", attrs...)
			end(b, err)
			done = append(done, b.j)
		}
	}
	return next
}
