package rheotest

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// waitTimeout bounds every wait of the consumer cases. It is generous on
// purpose: it only decides how long a broken runtime takes to fail.
const waitTimeout = 30 * time.Second

// eventually polls cond until it holds, failing the test after waitTimeout.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// receive waits for a value on ch, failing the test after waitTimeout.
func receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// faultBackend wraps a Backend to count calls and to fail chosen ones.
// A fault returns the error to report (nil lets the call through); failed
// requests never reach the wrapped backend.
type faultBackend struct {
	rheo.Backend

	fetches atomic.Int64

	mu          sync.Mutex
	fetchLimits []int
	held        int // leases fetched and not settled (successful settles only)
	maxAsked    int
	settled     []rheo.SettleRequest // every settle request seen, failed or not
	settleFault func(rheo.SettleRequest) error
	renewFault  func(rheo.Lease) error
}

func (b *faultBackend) Subscribe(stream string) (<-chan struct{}, func()) {
	if n, ok := b.Backend.(rheo.Notifier); ok {
		return n.Subscribe(stream)
	}
	return nil, func() {}
}

func (b *faultBackend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	b.fetches.Add(1)
	b.mu.Lock()
	b.fetchLimits = append(b.fetchLimits, r.Limit)
	b.maxAsked = max(b.maxAsked, b.held+r.Limit)
	b.mu.Unlock()
	ls, err := b.Backend.Fetch(ctx, r)
	b.mu.Lock()
	b.held += len(ls)
	b.mu.Unlock()
	return ls, err
}

// maxHeldAndAsked is the most leases the consumer could have held, had
// every fetch been filled: leases fetched and not yet settled, plus the
// fetch's limit, maximised over fetches. Settles are counted when they
// return, before the consumer learns of them, so this never undercounts.
func (b *faultBackend) maxHeldAndAsked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxAsked
}

func (b *faultBackend) Renew(ctx context.Context, l rheo.Lease, expiresAt, now time.Time) error {
	b.mu.Lock()
	fault := b.renewFault
	b.mu.Unlock()
	if fault != nil {
		if err := fault(l); err != nil {
			return err
		}
	}
	return b.Backend.Renew(ctx, l, expiresAt, now)
}

func (b *faultBackend) Settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	errs := make([]error, len(reqs))
	var pass []rheo.SettleRequest
	var at []int
	b.mu.Lock()
	b.settled = append(b.settled, reqs...)
	fault := b.settleFault
	b.mu.Unlock()
	for i, r := range reqs {
		if fault != nil {
			if err := fault(r); err != nil {
				errs[i] = err
				continue
			}
		}
		pass = append(pass, r)
		at = append(at, i)
	}
	if len(pass) == 0 {
		return errs, nil
	}
	res, err := b.Backend.Settle(ctx, stream, group, pass, now)
	if err != nil {
		if len(pass) == len(reqs) {
			return nil, err
		}
		for _, i := range at {
			errs[i] = err
		}
		return errs, nil
	}
	for j, i := range at {
		errs[i] = res[j]
	}
	b.mu.Lock()
	for _, err := range res {
		if err == nil {
			b.held--
		}
	}
	b.mu.Unlock()
	return errs, nil
}

func (b *faultBackend) setSettleFault(f func(rheo.SettleRequest) error) {
	b.mu.Lock()
	b.settleFault = f
	b.mu.Unlock()
}

func (b *faultBackend) setRenewFault(f func(rheo.Lease) error) {
	b.mu.Lock()
	b.renewFault = f
	b.mu.Unlock()
}

// settles returns the settle requests of kind k seen so far.
func (b *faultBackend) settles(k rheo.SettleKind) []rheo.SettleRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []rheo.SettleRequest
	for _, r := range b.settled {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}

func (b *faultBackend) allSettles() []rheo.SettleRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.settled)
}

func (b *faultBackend) limits() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.fetchLimits)
}

// recorder is an Observer that keeps every consumer event.
type recorder struct {
	mu     sync.Mutex
	events []rheo.ConsumerEvent
}

func (r *recorder) ObserveConsumer(ev rheo.ConsumerEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// of returns the events of kind k that match pred (nil matches all).
func (r *recorder) of(k rheo.ConsumerEventKind, pred func(rheo.ConsumerEvent) bool) []rheo.ConsumerEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []rheo.ConsumerEvent
	for _, ev := range r.events {
		if ev.Kind == k && (pred == nil || pred(ev)) {
			out = append(out, ev)
		}
	}
	return out
}

func (r *recorder) count(k rheo.ConsumerEventKind, pred func(rheo.ConsumerEvent) bool) int {
	return len(r.of(k, pred))
}

// await waits until an event of kind k matching pred has been observed and
// returns the first such event.
func (r *recorder) await(t testing.TB, what string, k rheo.ConsumerEventKind, pred func(rheo.ConsumerEvent) bool) rheo.ConsumerEvent {
	t.Helper()
	var got []rheo.ConsumerEvent
	eventually(t, what, func() bool {
		got = r.of(k, pred)
		return len(got) > 0
	})
	return got[0]
}

func failed(ev rheo.ConsumerEvent) bool    { return ev.Err != nil }
func succeeded(ev rheo.ConsumerEvent) bool { return ev.Err == nil }

// cenv is the environment of a consumer case: a client over a fault
// wrapper of a fresh backend, a frozen clock, an observer, and one stream
// with one group.
type cenv struct {
	*env
	b   *faultBackend
	rec *recorder
	s   string
	g   string
}

func newConsumerEnv(t *testing.T, f Factory, gcfg rheo.GroupConfig) *cenv {
	t.Helper()
	b := &faultBackend{Backend: f(t)}
	rec := &recorder{}
	clk := clock.NewFrozen(Epoch)
	c := rheo.New(b, rheo.WithClock(clk), rheo.WithObserver(rec),
		rheo.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	e := &cenv{env: &env{t: t, ctx: context.Background(), c: c, clk: clk}, b: b, rec: rec}
	e.s = e.stream(1)
	e.g = e.group(e.s, gcfg)
	return e
}

// running is a consumer started by cenv.start.
type running struct {
	k      *rheo.Consumer
	cancel context.CancelFunc
	result chan error
	once   sync.Once
	err    error
}

// start runs a consumer of the env's group (cfg's Stream and Group are
// filled in when empty) until the test ends or stop is called.
func (e *cenv) start(cfg rheo.ConsumerConfig) *running {
	e.t.Helper()
	if cfg.Stream == "" {
		cfg.Stream = e.s
	}
	if cfg.Group == "" {
		cfg.Group = e.g
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	k, err := e.c.NewConsumer(cfg)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{k: k, cancel: cancel, result: make(chan error, 1)}
	go func() { r.result <- k.Run(ctx) }()
	t := e.t
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the consumer's context and returns what Run returned.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		r.err = receive(t, "Run to return", r.result)
	})
	return r.err
}

// wait returns what Run returned once it returns on its own.
func (r *running) wait(t testing.TB) error {
	t.Helper()
	r.once.Do(func() {
		r.err = receive(t, "Run to return", r.result)
		r.cancel()
	})
	return r.err
}

// seen collects the deliveries a handler saw, safely across goroutines.
type seen struct {
	mu     sync.Mutex
	leases []rheo.Lease
}

func (s *seen) add(ctx context.Context, ev rheo.Event) rheo.Lease {
	l, ok := rheo.LeaseFromContext(ctx)
	if !ok {
		l = rheo.Lease{Event: ev}
	}
	s.mu.Lock()
	s.leases = append(s.leases, l)
	s.mu.Unlock()
	return l
}

func (s *seen) all() []rheo.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.leases)
}

func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}
