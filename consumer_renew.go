package rheo

import (
	"context"
	"errors"
	"sync"
	"time"
)

// minRenewInterval keeps very short leases from turning renewal into a busy
// loop.
const minRenewInterval = 10 * time.Millisecond

func (r *run) renewInterval() time.Duration {
	return max(r.cfg.LeaseDuration/2, minRenewInterval)
}

// renewLoop renews every held lease every half lease until stopNow closes.
// Renewal goes on while the consumer stops, so handlers finishing within the
// shutdown budget keep their leases.
func (r *run) renewLoop() {
	t := time.NewTicker(r.renewInterval())
	defer t.Stop()
	for {
		select {
		case <-r.stopNow:
			return
		case <-t.C:
			r.renewAll()
		}
	}
}

// errQueuedTooLong is the reason of a lease released because it waited in
// the queue until too little of it was left to start a handler on.
var errQueuedTooLong = errors.New("lease queued too long to start a handler")

// late reports whether a queued lease has too little time left to start a
// handler on: less than a renewal round plus a margin for the renewal's
// round trip, so that the handler's first renewal might come too late.
// A lease never counts as late before a quarter of it has passed (with
// leases so short that the renewal interval's floor exceeds half of them),
// and never on a backend that refused a release: there a release becomes a
// nack, which counts an attempt, so queued leases are renewed instead.
func (r *run) late(l *Lease) bool {
	if r.noRelease.Load() {
		return false
	}
	d := r.cfg.LeaseDuration
	left := min(r.renewInterval()+min(d/4, 5*time.Second), d*3/4)
	return l.ExpiresAt.Sub(r.c.now()) < left
}

// renewAll renews the leases of running handlers. Queued leases are not
// renewed (a deep window would cost a round trip each): those that are
// late (see late) are released instead, in one settle batch, so that
// another worker of the group takes them at once, their claims not
// counted; the others are started or released by the worker that pops
// them.
func (r *run) renewAll() {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.inflight))
	var late []settleReq
	for j := range r.inflight {
		switch {
		case j.dropped || j.state == jobSettling:
		case j.state == jobQueued && r.noRelease.Load():
			jobs = append(jobs, j)
		case j.state == jobQueued:
			if !r.hard && r.late(j.lease) {
				// The worker that pops it leaves it to the settler.
				j.releasing, j.state = true, jobSettling
				late = append(late, settleReq{j: j, lease: j.lease, kind: SettleRelease, reason: errQueuedTooLong.Error()})
			}
		default:
			jobs = append(jobs, j)
		}
	}
	r.mu.Unlock()
	// Never blocks: the channel holds a request per held lease.
	for _, req := range late {
		r.settles <- req
	}
	// Renewals are independent: up to renewPipeline go out at once, so a
	// deep window of leases is renewed in a fraction of its round trips.
	sem := make(chan struct{}, renewPipeline)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, j := range jobs {
		select {
		case <-r.stopNow:
			return
		case sem <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.renew(j)
		})
	}
}

// renewPipeline bounds the renewals one round has in flight at once.
const renewPipeline = 16

// renew renews one job's lease unless it settles or was lost meanwhile.
func (r *run) renew(j *job) {
	r.mu.Lock()
	skip := j.dropped || j.state == jobSettling
	lease, hctx := *j.lease, j.hctx
	r.mu.Unlock()
	if skip {
		return
	}
	base := r.bg
	if r.ins != nil {
		// The renewal's span belongs under the handler's process span,
		// but must not die with the handler's context.
		base = context.WithoutCancel(hctx)
	}
	ctx, cancel := context.WithTimeout(base, r.renewInterval())
	renewed, err := r.c.Renew(ctx, lease, r.cfg.LeaseDuration)
	cancel()
	switch Classify(err) {
	case Settled:
		r.mu.Lock()
		if j.state != jobSettling {
			l := *j.lease
			l.ExpiresAt = renewed.ExpiresAt
			j.lease = &l
		}
		r.mu.Unlock()
		r.observe(ConsumerEvent{Kind: ConsumerRenewed, Lease: renewed})
	case Lost:
		r.observe(ConsumerEvent{Kind: ConsumerRenewed, Lease: lease, Err: err})
		if r.lose(j, err) {
			r.log.WarnContext(hctx, "lease lost; cancelling its handler", append(leaseAttrs(lease), "err", err)...)
			r.observe(ConsumerEvent{Kind: ConsumerLost, Lease: lease, Err: err})
		}
	default:
		// Keep the lease: the next round may succeed before it expires.
		r.observe(ConsumerEvent{Kind: ConsumerRenewed, Lease: lease, Err: err})
		r.log.WarnContext(hctx, "lease renewal failed; will retry", append(leaseAttrs(lease), "err", err)...)
	}
}

// lose drops a job whose lease renewal found taken: its handler's context is
// cancelled with cause ErrStaleLease and the lease is never settled. It
// reports false when the job was already settling (its settle decides).
func (r *run) lose(j *job, err error) bool {
	r.mu.Lock()
	if j.dropped || j.state == jobSettling || !r.tracked(j) {
		r.mu.Unlock()
		return false
	}
	j.dropped = true
	running := j.state == jobRunning
	if running {
		// A queued job stays tracked until a worker pops and releases it,
		// so the queue never holds more than MaxInflight jobs.
		delete(r.inflight, j)
	}
	r.mu.Unlock()
	cause := err
	if !errors.Is(err, ErrStaleLease) {
		cause = Wrap(ErrStaleLease, err, "lease %s", j.id)
	}
	j.cancel(cause)
	if running {
		select {
		case r.slotFreed <- struct{}{}:
		default:
		}
	}
	return true
}
