package rheo

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/rheo-go/rheo/internal/id"
)

// ErrConsumerStopped is the context cause a handler sees when its consumer
// stopped and the shutdown budget ran out. A handler that then returns an
// error has its event nacked at once, with this error's message as reason, so
// another worker takes it without delay.
var ErrConsumerStopped = errors.New("consumer stopped")

// Consumer defaults.
const (
	DefaultPollInterval    = 200 * time.Millisecond
	DefaultShutdownTimeout = 5 * time.Second
)

// ConsumerConfig configures a Consumer. Only Stream, Group and Handler are
// required.
type ConsumerConfig struct {
	// Stream and Group name the group to consume; both must exist when the
	// consumer fetches (until they do, fetches fail and are retried).
	Stream, Group string
	// Handler processes each event; see Handler for how its result settles
	// the lease.
	Handler Handler
	// Concurrency is how many handlers run at once (default 1).
	Concurrency int
	// MaxInflight is how many leases the consumer holds at once, running or
	// waiting for a handler (at most 10,000). Holding more than Concurrency
	// prefetches work; fewer caps the handlers too.
	//
	// By default (0) the consumer sizes this window itself: it starts at
	// Concurrency and, from the observed handler, fetch and settle times,
	// holds enough leases beyond Concurrency that the handlers never wait
	// for a fetch or a settle (at most DefaultMaxInflight(Concurrency)).
	// Fast handlers get a deep window, refilled by fetches of half of it,
	// at least 100 and at most 500 leases each, so that the next fetch is
	// on its way while the handlers work through the last; slow handlers
	// get barely more than Concurrency, so the consumer never sits on work
	// that other workers of the group could take. A window set here is
	// refilled the same way: while handlers have queued work, the consumer
	// waits until a quarter of it (at most 500 leases) is free before it
	// fetches. Set it where the latency of a quick consumer's handler
	// stalling matters: the leases queued behind a stalled handler wait
	// for it.
	MaxInflight int
	// LeaseDuration is the lease the consumer asks for (default the client's
	// WithLeaseDuration, 30s). Leases are renewed every half lease while
	// their handler runs, so a handler may take longer than this. Leases
	// queued for a handler are not renewed: one that waits until less than
	// a renewal round and a margin (a quarter lease, at most 5s) is left is
	// released (Client.Release) instead of started, so that another worker
	// of the group takes it, its claim not counted.
	LeaseDuration time.Duration
	// PollInterval is the longest the consumer waits between fetches when it
	// is idle (default 200ms). Backends that can notify wake it sooner, on
	// appends, nacks, replays and redrives.
	PollInterval time.Duration
	// ConsumerID names this worker in leases (default host name plus a
	// random suffix).
	ConsumerID string
	// Partitions restricts the consumer to some partitions (default all).
	Partitions []int
	// Backoff returns the retry delay after a failed attempt (attempt is 1 on
	// the first delivery). Default DefaultBackoff: 1s doubling to 1m.
	Backoff func(attempt int) time.Duration
	// ShutdownTimeout is how long Run lets inflight handlers finish after its
	// context is cancelled, before cancelling their contexts (default 5s).
	// Leases still queued then are released unrun (Client.Release): their
	// claims do not count as attempts (see docs/operations.md, "Shutting
	// down").
	ShutdownTimeout time.Duration
}

// Consumer runs a Handler over a group: it fetches leases, runs handlers,
// renews leases while handlers run, settles leases from handlers' results,
// and stops cleanly. Many processes may consume one group; inside one client
// a group has at most one running Consumer (scale with Concurrency).
type Consumer struct {
	c   *Client
	cfg ConsumerConfig
	log *slog.Logger

	// adaptive: MaxInflight was left at 0, so it is the ceiling of a window
	// the runtime sizes from what it observes.
	adaptive bool
	// linger and maxLinger bound how long settles wait for others
	// (settleLinger, settleMaxLinger; tests change them).
	linger, maxLinger time.Duration

	mu  sync.Mutex
	cur *run // the current Run, nil when not running
}

// DefaultMaxInflight is the most leases a consumer with the given
// Concurrency holds when its MaxInflight is left at 0: ten per handler, at
// least 2,000 (room for four fetches of 500 leases, the most one asks for:
// one being handled, one on its way, and the settles of the ones before),
// at most MaxLimit. The window only grows that far for handlers that are
// fast next to a fetch and a settle; a handler of 1 ms at Concurrency 1,
// say, with fetches and settles of 1 ms each, gets a window of about 5.
func DefaultMaxInflight(concurrency int) int {
	return min(max(10*max(concurrency, 1), 2000), MaxLimit)
}

// maxWindowFetch is the most leases the consumer asks for in one fetch: a
// larger fetch only makes the handlers wait longer for its first lease
// and the store hold its locks (PostgreSQL) or its one thread (Redis)
// longer, where the per-call cost it saves is already small.
const maxWindowFetch = 500

// NewConsumer checks cfg and returns a Consumer; start it with Run. An
// invalid config is ErrInvalidArgument naming the field.
func (c *Client) NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	if err := checkName("ConsumerConfig.Stream", cfg.Stream); err != nil {
		return nil, err
	}
	if err := checkName("ConsumerConfig.Group", cfg.Group); err != nil {
		return nil, err
	}
	if cfg.Handler == nil {
		return nil, Errorf(ErrInvalidArgument, "ConsumerConfig.Handler is nil")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Concurrency", int64(cfg.Concurrency)},
		{"MaxInflight", int64(cfg.MaxInflight)},
		{"LeaseDuration", int64(cfg.LeaseDuration)},
		{"PollInterval", int64(cfg.PollInterval)},
		{"ShutdownTimeout", int64(cfg.ShutdownTimeout)},
	} {
		if f.v < 0 {
			return nil, Errorf(ErrInvalidArgument, "ConsumerConfig.%s is negative (%d)", f.name, f.v)
		}
	}
	if cfg.MaxInflight > MaxLimit {
		return nil, Errorf(ErrInvalidArgument, "ConsumerConfig.MaxInflight %d exceeds %d", cfg.MaxInflight, MaxLimit)
	}
	if cfg.Concurrency > MaxLimit {
		return nil, Errorf(ErrInvalidArgument, "ConsumerConfig.Concurrency %d exceeds %d", cfg.Concurrency, MaxLimit)
	}
	for _, p := range cfg.Partitions {
		if p < 0 || p >= MaxPartitions {
			return nil, Errorf(ErrInvalidPartition, "ConsumerConfig.Partitions: partition %d of stream %q", p, cfg.Stream)
		}
	}
	if cfg.ConsumerID != "" {
		if err := checkName("ConsumerConfig.ConsumerID", cfg.ConsumerID); err != nil {
			return nil, err
		}
	} else {
		cfg.ConsumerID = defaultConsumerID()
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	adaptive := cfg.MaxInflight == 0
	if adaptive {
		cfg.MaxInflight = DefaultMaxInflight(cfg.Concurrency)
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = c.opts.leaseDuration
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	cfg.Partitions = append([]int(nil), cfg.Partitions...)
	return &Consumer{
		c:         c,
		cfg:       cfg,
		adaptive:  adaptive,
		linger:    settleLinger,
		maxLinger: settleMaxLinger,
		log:       c.Logger().With("stream", cfg.Stream, "group", cfg.Group, "consumer", cfg.ConsumerID),
	}, nil
}

func defaultConsumerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" || checkName("host", host) != nil || len(host) > 100 {
		host = "consumer"
	}
	return host + "-" + id.Token()[:8]
}

// ID returns the consumer ID its leases carry.
func (k *Consumer) ID() string { return k.cfg.ConsumerID }

// Run consumes until ctx is cancelled or Drain finishes, then returns nil
// after a clean stop.
//
// On cancellation it stops fetching and lets inflight handlers finish for up
// to ShutdownTimeout; then it cancels their contexts (cause
// ErrConsumerStopped) and waits for them to return, so handlers must honour
// their context. Leases it could not settle are left to expire. No goroutine
// of the consumer outlives Run.
//
// A second Run of the same (stream, group) on one client, while the first
// runs, returns ErrAlreadyRunning. A configuration the backend refuses
// (partitions out of range, say) or a closed client ends Run with that error;
// other fetch errors are logged and retried with backoff (100ms doubling to 5s).
func (k *Consumer) Run(ctx context.Context) error {
	if err := k.c.check(); err != nil {
		return err
	}
	key := [2]string{k.cfg.Stream, k.cfg.Group}
	k.c.runningMu.Lock()
	if k.c.running[key] {
		k.c.runningMu.Unlock()
		return Errorf(ErrAlreadyRunning, "a consumer of group %q on stream %q already runs on this client", k.cfg.Group, k.cfg.Stream)
	}
	k.c.running[key] = true
	k.c.runningMu.Unlock()

	r := newRun(k, ctx)
	k.mu.Lock()
	k.cur = r
	k.mu.Unlock()

	err := r.run(ctx)

	k.c.runningMu.Lock()
	delete(k.c.running, key)
	k.c.runningMu.Unlock()
	k.mu.Lock()
	k.cur = nil
	k.mu.Unlock()
	close(r.done)
	return err
}

// Drain stops fetching and waits until every inflight lease is settled (or
// left to expire), which also ends Run with nil. When ctx ends first it
// returns ctx's error and the consumer keeps draining (it never fetches
// again); cancel Run's context to stop it for good. Drain on a consumer that
// is not running returns nil at once; a Drain while another is waiting is
// ErrAlreadyDraining. A handler must not call Drain (it would wait for
// itself); it may cancel Run's context instead.
func (k *Consumer) Drain(ctx context.Context) error {
	k.mu.Lock()
	r := k.cur
	if r == nil {
		k.mu.Unlock()
		return nil
	}
	if r.drainWaiting {
		k.mu.Unlock()
		return Errorf(ErrAlreadyDraining, "group %q on stream %q is already draining", k.cfg.Group, k.cfg.Stream)
	}
	r.drainWaiting = true
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		r.drainWaiting = false
		k.mu.Unlock()
	}()
	r.drainOnce.Do(func() { close(r.drainReq) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		err := Errorf(ctx.Err(), "drain of group %q on stream %q: %d leases still inflight", k.cfg.Group, k.cfg.Stream, r.count())
		if cause := context.Cause(ctx); cause != ctx.Err() {
			err = Wrap(ctx.Err(), cause, "drain of group %q on stream %q: %d leases still inflight", k.cfg.Group, k.cfg.Stream, r.count())
		}
		return err
	}
}

type leaseKey struct{}

// LeaseFromContext returns the lease of the event a handler is processing,
// as it was fetched (Attempt tells how many deliveries this is).
func LeaseFromContext(ctx context.Context) (Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	if !ok {
		return Lease{}, false
	}
	return *l, true
}
