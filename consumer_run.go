package rheo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Fetch errors are retried after 100ms, doubling up to 5s; a successful fetch
// resets the delay.
const (
	fetchBackoffMin = 100 * time.Millisecond
	fetchBackoffMax = 5 * time.Second
)

func nextFetchBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return fetchBackoffMin
	}
	return min(2*d, fetchBackoffMax)
}

type jobState int

const (
	jobQueued   jobState = iota // waiting for a handler slot
	jobRunning                  // its handler runs
	jobSettling                 // its settle is on the way; renewal leaves it alone
)

// job is one held lease.
type job struct {
	id     string // the lease ID
	ctx    context.Context
	cancel context.CancelCauseFunc
	vctx   leaseCtx // ctx's parent

	// group is the fetch the lease came in (see settleLoop).
	group *fetchGroup

	// proc follows the handler call when the client is instrumented; set
	// by the worker before the handler runs, read after it returns.
	proc Process

	// Guarded by run.mu.
	hctx context.Context // the handler's context (ctx, plus what instrumentation adds); for logs
	// lease is never written: a renewal replaces it with a copy that has
	// the new ExpiresAt, so a pointer taken under mu (a settle request's,
	// the handler context's first lease) reads without it.
	lease   *Lease
	state   jobState
	dropped bool // lost to someone else: never settled
	// inQueue: the job is in run.queue. A job stays tracked (and counted
	// against MaxInflight) until it is out of the queue and its lease is
	// settled, lost or given up: done marks the second of those when it
	// comes first, and the worker that pops the job then forgets it.
	inQueue, done bool
	// releasing: the renewer found it late in the queue and sent its
	// release; the worker that pops it leaves it to the settler.
	releasing bool
}

// leaseCtx is the runtime's context with a job's first lease as the value
// of leaseKey (see LeaseFromContext): a context.WithValue kept in the job,
// one allocation fewer a lease.
type leaseCtx struct {
	context.Context
	l *Lease
}

func (c *leaseCtx) Value(key any) any {
	if _, ok := key.(leaseKey); ok {
		return c.l
	}
	return c.Context.Value(key)
}

// run is the state of one Run call. The Run goroutine fetches; Concurrency
// workers run handlers; one goroutine settles in batches; one renews.
type run struct {
	c   *Client
	cfg ConsumerConfig
	log *slog.Logger
	obs Observer
	ins Instrumentation
	win *window // nil unless MaxInflight is sized by the runtime

	linger, maxLinger time.Duration   // see settleLoop
	reqs              []SettleRequest // flush's, reused (settler only)

	// bg outlives the caller's cancellation (with its values) so that
	// settles and renewals still go out while the consumer stops. Handler
	// contexts derive from it too; the consumer cancels them one by one
	// (they are all tracked), which spares every dispatch a registration
	// with a shared parent.
	bg context.Context

	// noRelease is set once the backend refused a release (a backend
	// written before releases existed): queued leases are renewed again,
	// never released when late.
	noRelease atomic.Bool
	// cancelledAt is when the caller's context ended (Unix nanoseconds; 0
	// before): the shutdown budget runs from then.
	cancelledAt atomic.Int64
	// fetchCtx is the context of fetches: it outlives the caller's by
	// ShutdownTimeout (see fetch).
	fetchCtx context.Context

	mu       sync.Mutex
	inflight map[*job]struct{}
	// undispatched counts fetched leases not yet in inflight (see
	// fetchLoop); they count against the window.
	undispatched int
	hard         bool // handler contexts cancelled: queued jobs are released unrun

	drainWaiting bool // guarded by Consumer.mu
	drainReq     chan struct{}
	drainOnce    sync.Once
	done         chan struct{} // closed once Run has returned

	queue     chan *job      // to workers; never holds more than MaxInflight
	settles   chan settleReq // to the settler
	slotFreed chan struct{}  // signalled (coalescing) whenever a lease is released
	stopNow   chan struct{}  // closed to end the renewer
}

func newRun(k *Consumer, ctx context.Context) *run {
	var win *window
	if k.adaptive {
		win = newWindow(k.cfg.Concurrency, k.cfg.MaxInflight)
	}
	return &run{
		win:       win,
		linger:    k.linger,
		maxLinger: k.maxLinger,
		c:         k.c,
		cfg:       k.cfg,
		log:       k.log,
		obs:       k.c.opts.observer,
		ins:       k.c.opts.ins,
		bg:        context.WithoutCancel(ctx),
		inflight:  make(map[*job]struct{}, k.cfg.MaxInflight),
		drainReq:  make(chan struct{}),
		done:      make(chan struct{}),
		queue:     make(chan *job, k.cfg.MaxInflight),
		settles:   make(chan settleReq, k.cfg.MaxInflight),
		slotFreed: make(chan struct{}, 1),
		stopNow:   make(chan struct{}),
	}
}

func (r *run) run(ctx context.Context) error {
	r.log.Debug("consumer started", "concurrency", r.cfg.Concurrency, "max_inflight", r.cfg.MaxInflight,
		"lease", r.cfg.LeaseDuration)
	var workers sync.WaitGroup
	for range min(r.cfg.Concurrency, r.cfg.MaxInflight) {
		workers.Go(r.work)
	}
	var settler, renewer sync.WaitGroup
	settler.Go(r.settleLoop)
	renewer.Go(r.renewLoop)

	// When ctx ends, the shutdown budget starts, and fetches still in
	// flight are cut off once it is spent.
	fetchCtx, cutOff := context.WithCancel(r.bg)
	defer cutOff()
	r.fetchCtx = fetchCtx
	var cutOffTimer atomic.Pointer[time.Timer]
	stopWatch := context.AfterFunc(ctx, func() {
		r.cancelledAt.Store(time.Now().UnixNano())
		cutOffTimer.Store(time.AfterFunc(r.cfg.ShutdownTimeout, cutOff))
	})
	defer func() {
		if !stopWatch() {
			if t := cutOffTimer.Load(); t != nil {
				t.Stop()
			}
		}
	}()
	err := r.fetchLoop(ctx)
	r.stop(ctx, err != nil)

	close(r.queue)
	workers.Wait()
	// The renewer sends releases to the settler: it stops first.
	close(r.stopNow)
	renewer.Wait()
	close(r.settles)
	settler.Wait()
	r.log.Debug("consumer stopped", "unsettled", r.count())
	return err
}

// count returns the leases the run holds: tracked, or fetched and on their
// way to the queue.
func (r *run) count() int {
	n, _ := r.load()
	return n
}

// load returns count and whether some of those leases are still on their
// way to the queue (fetched, not yet tracked).
func (r *run) load() (n int, onTheirWay bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight) + r.undispatched, r.undispatched > 0
}

// tracked reports whether j is held; r.mu must be held.
func (r *run) tracked(j *job) bool {
	_, ok := r.inflight[j]
	return ok
}

func (r *run) draining() bool {
	select {
	case <-r.drainReq:
		return true
	default:
		return false
	}
}

// fetchLoop fetches until ctx is cancelled or a drain is requested (nil), or
// a fetch fails in a way retrying cannot fix (that error).
func (r *run) fetchLoop(ctx context.Context) error {
	// Subscribe before the first fetch so that no wakeup between a fetch and
	// the wait is lost. A nil channel (no notifications) never fires.
	wake, unsubscribe := r.c.subscribe(r.cfg.Stream)
	defer unsubscribe()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// wait blocks for d (none when 0), a wakeup or a freed slot; false
	// means stop.
	wait := func(d time.Duration, wake, slot <-chan struct{}) bool {
		var tick <-chan time.Time
		if d > 0 {
			timer.Reset(d)
			tick = timer.C
			defer timer.Stop()
		}
		select {
		case <-tick:
		case <-wake:
		case <-slot:
		case <-ctx.Done():
			return false
		case <-r.drainReq:
			return false
		}
		return true
	}
	opts := FetchOptions{ConsumerID: r.cfg.ConsumerID, LeaseDuration: r.cfg.LeaseDuration, Partitions: r.cfg.Partitions}
	// A fetch's leases are dispatched on a goroutine of their own, in
	// order, while the loop goes on to the next fetch; it returns only
	// once every fetched lease is tracked.
	var dispatched chan struct{}
	defer func() {
		if dispatched != nil {
			<-dispatched
		}
	}()
	var backoff time.Duration
	for ctx.Err() == nil && !r.draining() {
		size, minFetch := r.cfg.MaxInflight, refillMin(r.cfg.MaxInflight)
		if r.win != nil {
			size, minFetch = r.win.limits()
		}
		held, onTheirWay := r.load()
		free := size - held
		// A small fetch while handlers still have queued work (or leases
		// on their way to the queue) would only add a round trip: wait
		// until enough slots are free.
		if free <= 0 || (free < minFetch && (onTheirWay || len(r.queue) > 0)) {
			if !wait(0, nil, r.slotFreed) {
				return nil
			}
			continue
		}
		// At most half the window (but 100, and at most maxWindowFetch) at
		// once, so that the next fetch can be on its way while the
		// handlers work through this one.
		opts.Limit = min(free, max(min(size/2, maxWindowFetch), 100))
		start := time.Now()
		leases, err := r.fetch(opts)
		took := time.Since(start)
		r.observe(ConsumerEvent{Kind: ConsumerFetched, Count: len(leases), Duration: took, Err: err})
		if r.win != nil && err == nil && len(leases) > 0 {
			r.win.observeFetch(took)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrInvalidPartition) || errors.Is(err, ErrClosed) ||
				errors.Is(err, ErrMisconfigured) {
				r.log.Error("consumer cannot fetch; stopping", "err", err)
				return err
			}
			backoff = nextFetchBackoff(backoff)
			r.log.Warn("fetch failed; retrying", "err", err, "retry_in", backoff)
			if !wait(backoff, nil, nil) {
				return nil
			}
			continue
		}
		backoff = 0
		if len(leases) > 0 {
			r.mu.Lock()
			r.undispatched += len(leases)
			r.mu.Unlock()
			prev, done := dispatched, make(chan struct{})
			dispatched = done
			go func() {
				defer close(done)
				if prev != nil {
					<-prev
				}
				r.dispatch(leases)
			}()
			continue
		}
		if !wait(r.cfg.PollInterval, wake, nil) {
			return nil
		}
	}
	return nil
}

// fetch claims leases. A stop does not cancel a fetch in flight at once: a
// claim the store committed but whose answer was cut off would leave its
// leases to expire, each having used an attempt, where the leases it
// returns are handled or released like the others. The stop cuts it off
// only once ShutdownTimeout has passed (a store that does not answer);
// every fetch is bounded like a settle.
func (r *run) fetch(opts FetchOptions) ([]Lease, error) {
	ctx, cancel := context.WithTimeout(r.fetchCtx, r.settleTimeout())
	defer cancel()
	return r.c.Fetch(ctx, r.cfg.Stream, r.cfg.Group, opts)
}

// dispatch tracks fresh leases and queues them for the workers.
func (r *run) dispatch(leases []Lease) {
	jobs := make([]*job, len(leases))
	g := &fetchGroup{unsent: len(leases)}
	r.mu.Lock()
	r.undispatched -= len(leases)
	for i := range leases {
		// The context holds the fetched lease by pointer: leases is the
		// runtime's own and is never written again.
		l := &leases[i]
		j := &job{id: l.ID, lease: l, inQueue: true, group: g}
		j.vctx = leaseCtx{Context: r.bg, l: l}
		j.ctx, j.cancel = context.WithCancelCause(&j.vctx)
		j.hctx = j.ctx
		r.inflight[j] = struct{}{}
		jobs[i] = j
	}
	r.mu.Unlock()
	for _, j := range jobs {
		r.queue <- j
	}
}

// release forgets jobs: their leases are settled, lost or left to expire.
// A job still in the queue is forgotten by the worker that pops it, so that
// the queue never holds more jobs than are tracked.
func (r *run) release(jobs ...*job) {
	if len(jobs) == 0 {
		return
	}
	freed := false
	r.mu.Lock()
	for _, j := range jobs {
		if j.inQueue {
			j.done = true
			continue
		}
		delete(r.inflight, j)
		freed = true
	}
	r.mu.Unlock()
	for _, j := range jobs {
		j.cancel(nil)
	}
	if freed {
		r.freed()
	}
}

// freed signals the fetch loop that a slot is free.
func (r *run) freed() {
	select {
	case r.slotFreed <- struct{}{}:
	default:
	}
}

// stop waits for inflight leases to settle: without limit while draining,
// for ShutdownTimeout once ctx is cancelled. Then it cancels the handlers'
// contexts.
func (r *run) stop(ctx context.Context, fatal bool) {
	n := r.count()
	r.log.Debug("consumer stopping", "inflight", n)
	if !fatal && n > 0 {
		var deadline <-chan time.Time
		cancelled := ctx.Done()
		if ctx.Err() != nil {
			// The budget started when ctx ended (a fetch in flight may
			// have used some of it).
			budget := r.cfg.ShutdownTimeout
			if at := r.cancelledAt.Load(); at != 0 {
				budget = max(budget-time.Since(time.Unix(0, at)), 0)
			}
			t := time.NewTimer(budget)
			defer t.Stop()
			deadline, cancelled = t.C, nil
		}
	wait:
		for r.count() > 0 {
			select {
			case <-r.slotFreed:
			case <-cancelled:
				t := time.NewTimer(r.cfg.ShutdownTimeout)
				defer t.Stop()
				deadline, cancelled = t.C, nil
			case <-deadline:
				r.log.Warn("shutdown budget spent; cancelling handlers", "inflight", r.count(),
					"budget", r.cfg.ShutdownTimeout)
				break wait
			}
		}
	}
	r.mu.Lock()
	r.hard = true
	held := make([]*job, 0, len(r.inflight))
	for j := range r.inflight {
		held = append(held, j)
	}
	r.mu.Unlock()
	for _, j := range held {
		j.cancel(ErrConsumerStopped)
	}
}

// work runs handlers for queued jobs until the queue closes.
func (r *run) work() {
	for j := range r.queue {
		r.mu.Lock()
		j.inQueue = false
		if j.done || j.releasing {
			// Released while queued (by the renewer): forget it now if the
			// release has settled, else the settler will.
			forget := j.done
			if forget {
				delete(r.inflight, j)
			}
			r.mu.Unlock()
			if forget {
				r.freed()
			}
			continue
		}
		dropped, hard := j.dropped, r.hard
		late := !dropped && !hard && r.late(j.lease)
		switch {
		case dropped:
		case hard, late:
			j.state = jobSettling
		default:
			j.state = jobRunning
		}
		lease := j.lease
		r.mu.Unlock()
		switch {
		case dropped:
			r.release(j)
		case hard, late:
			// Never started: hand it back at once rather than sit on it,
			// without counting the attempt its claim made.
			reason := errQueuedTooLong
			if hard {
				reason = ErrConsumerStopped
			}
			r.settles <- settleReq{j: j, lease: lease, kind: SettleRelease, reason: reason.Error()}
		default:
			r.handle(j, lease)
		}
	}
}

func (r *run) handle(j *job, lease *Lease) {
	hctx := j.ctx
	if r.ins != nil {
		hctx, j.proc = r.ins.StartProcess(j.ctx, *lease)
		r.mu.Lock()
		j.hctx = hctx
		r.mu.Unlock()
	}
	start := time.Now()
	err, panicked := r.call(j, hctx, lease.Event)
	elapsed := time.Since(start)
	if j.proc != nil {
		j.proc.Handled(err, panicked, elapsed)
	}
	if r.win != nil {
		r.win.observeHandler(elapsed)
	}
	stopped := err != nil && errors.Is(context.Cause(j.ctx), ErrConsumerStopped)
	r.mu.Lock()
	dropped := j.dropped
	j.state = jobSettling
	lease = j.lease
	r.mu.Unlock()
	if r.obs != nil {
		r.observe(ConsumerEvent{Kind: ConsumerHandled, Lease: *lease, Duration: elapsed, Err: err, Panicked: panicked})
	}
	if dropped {
		// Renewal found the lease taken by someone else and released it.
		if j.proc != nil {
			j.proc.End(ProcessEnd{Err: context.Cause(j.ctx)})
		}
		return
	}
	if err != nil && !panicked {
		r.log.DebugContext(hctx, "handler failed", append(leaseAttrs(*lease), "err", err)...)
	}
	req := settleReq{j: j, lease: lease}
	if err == nil {
		req.kind = SettleAck
	} else {
		r.failed(&req, err, stopped)
	}
	r.settles <- req
}

// failed sets what req does with the lease whose handler returned err.
// (Apart from handle, so that a handler that succeeds allocates no
// errors.As target.)
func (r *run) failed(req *settleReq, err error, stopped bool) {
	var retry *retryError
	switch {
	case IsRelease(err) && !isReject(err) && !errors.As(err, &retry):
		// Reject and RetryAfter say the handler worked on the event:
		// either wins over a Release in the same chain.
		req.kind, req.reason = SettleRelease, storedReason(err.Error())
	case stopped:
		req.kind, req.reason = SettleNack, ErrConsumerStopped.Error()
	case isReject(err):
		req.kind, req.reason = SettleReject, storedReason(err.Error())
	case errors.As(err, &retry):
		req.kind, req.reason, req.delay = SettleNack, storedReason(err.Error()), retry.delay
	default:
		req.kind, req.reason, req.delay = SettleNack, storedReason(err.Error()), max(r.cfg.Backoff(req.lease.Attempt), 0)
	}
}

// call runs the handler, turning a panic into an error.
func (r *run) call(j *job, ctx context.Context, e Event) (err error, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			err, panicked = fmt.Errorf("panic: %v", v), true
			r.mu.Lock()
			lease := j.lease
			r.mu.Unlock()
			r.log.ErrorContext(ctx, "handler panicked", append(leaseAttrs(*lease), "panic", v, "stack", string(debug.Stack()))...)
		}
	}()
	return r.cfg.Handler(ctx, e), false
}

// leaseAttrs are the log attributes that place a record on one delivery (the
// consumer's logger already names stream, group and consumer).
func leaseAttrs(l Lease) []any {
	return []any{"event_id", l.Event.ID, "partition", l.Event.Partition, "sequence", l.Event.Sequence,
		"attempt", l.Attempt, "lease", l.ID}
}

func (r *run) observe(ev ConsumerEvent) {
	if r.obs == nil {
		return
	}
	ev.Stream, ev.Group, ev.ConsumerID = r.cfg.Stream, r.cfg.Group, r.cfg.ConsumerID
	r.obs.ObserveConsumer(ev)
}
