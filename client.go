package rheo

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rheo-go/rheo/clock"
)

// Clock tells the time. All lease arithmetic reads the client's clock; tests
// inject a clock.Frozen.
type Clock = clock.Clock

// Defaults.
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultMaxAttempts   = 5
	DefaultFetchLimit    = 10
	DefaultMaxEventBytes = 1 << 20
	// MaxLimit bounds every Limit.
	MaxLimit = 10000
	// MaxPartitions bounds StreamConfig.Partitions.
	MaxPartitions = 1024
	// MaxNameBytes bounds stream, group, consumer and event IDs.
	MaxNameBytes = 200
)

// Option configures a Client.
type Option func(*options)

type options struct {
	clock         Clock
	leaseDuration time.Duration
	maxAttempts   int
	fetchLimit    int
	logger        *slog.Logger
	maxEventBytes int
	observer      Observer
	ins           Instrumentation
	// retentionEvery > 0 runs retention in the background (WithRetention).
	retentionEvery time.Duration
}

// WithClock sets the clock all lease arithmetic reads (default clock.System).
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithLeaseDuration sets the default lease duration (30s).
func WithLeaseDuration(d time.Duration) Option { return func(o *options) { o.leaseDuration = d } }

// WithMaxAttempts sets the default MaxAttempts of new groups (5).
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithFetchLimit sets the default Fetch limit (10).
func WithFetchLimit(n int) Option { return func(o *options) { o.fetchLimit = n } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMaxEventBytes bounds the stored size of one event: payload, metadata,
// ID, type and key (default 1 MiB).
func WithMaxEventBytes(n int) Option { return func(o *options) { o.maxEventBytes = n } }

// Client is rheo's facade over a Backend. It is safe for concurrent use.
type Client struct {
	b        Backend
	opts     options
	notifier Notifier
	closed   atomic.Bool

	// streams caches partition counts (a stream's never changes, but
	// another process may delete it and create another under its name with
	// another count): entries are read again after partitionCountAge, or
	// when the backend or a partition named in a request says they are out
	// of date; DeleteStream drops the entry in this client.
	streams sync.Map // string -> partitionCountEntry

	// retentionOwner names this client in stream retention leases.
	retentionOwner string
	retention      *retentionRunner

	runningMu sync.Mutex
	running   map[[2]string]bool // (stream, group) consumers running in this client

	// limits caches groups' attempt limits for instrumentation (a group's
	// limit never changes; a group deleted and created again may have
	// another, so entries are read again after limitTTL).
	limits sync.Map // [2]string -> groupLimit
}

// groupLimit is a cached attempt limit and when it was read.
type groupLimit struct {
	n    int
	read time.Time
}

const limitTTL = time.Minute

// groupMaxAttempts returns the group's attempt limit, cached; 0 when it
// cannot be read.
func (c *Client) groupMaxAttempts(ctx context.Context, stream, group string) int {
	k := [2]string{stream, group}
	if v, ok := c.limits.Load(k); ok && time.Since(v.(groupLimit).read) < limitTTL {
		return v.(groupLimit).n
	}
	st, err := c.b.GroupStats(ctx, stream, group, c.now())
	if err != nil || st.MaxAttempts <= 0 {
		return 0
	}
	c.limits.Store(k, groupLimit{n: st.MaxAttempts, read: time.Now()})
	return st.MaxAttempts
}

// nackLimit returns the group's attempt limit when reqs hold a nack that
// settled (so that instrumentation can tell a nack that dead-lettered), and
// 0 otherwise.
func (c *Client) nackLimit(ctx context.Context, stream, group string, reqs []SettleRequest, errs []error) int {
	for i, r := range reqs {
		if r.Kind == SettleNack && i < len(errs) && errs[i] == nil {
			return c.groupMaxAttempts(ctx, stream, group)
		}
	}
	return 0
}

// New returns a Client over b.
func New(b Backend, opts ...Option) *Client {
	o := options{
		clock:         clock.System,
		leaseDuration: DefaultLeaseDuration,
		maxAttempts:   DefaultMaxAttempts,
		fetchLimit:    DefaultFetchLimit,
		logger:        slog.Default(),
		maxEventBytes: DefaultMaxEventBytes,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = clock.System
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.leaseDuration <= 0 {
		o.leaseDuration = DefaultLeaseDuration
	}
	o.leaseDuration = normDuration(o.leaseDuration)
	if o.maxAttempts <= 0 {
		o.maxAttempts = DefaultMaxAttempts
	}
	if o.fetchLimit <= 0 || o.fetchLimit > MaxLimit {
		o.fetchLimit = DefaultFetchLimit
	}
	if o.maxEventBytes <= 0 {
		o.maxEventBytes = DefaultMaxEventBytes
	}
	c := &Client{b: b, opts: o, running: map[[2]string]bool{}}
	c.notifier, _ = b.(Notifier)
	c.startRetention()
	return c
}

// Open opens the backend registered for the DSN's scheme ("memory:",
// "sqlite:PATH", "postgres://…", "redis://…") and returns a Client over it.
// The backend package must be imported (for its registration), e.g.
//
//	import _ "github.com/rheo-go/rheo/backend/sqlite"
func Open(ctx context.Context, dsn string, opts ...Option) (*Client, error) {
	scheme, _, ok := strings.Cut(dsn, ":")
	if !ok || scheme == "" {
		return nil, Errorf(ErrInvalidArgument, "DSN %q has no scheme (want e.g. memory:, sqlite:PATH, postgres://…)", dsn)
	}
	registryMu.RLock()
	open, found := registry[scheme]
	registryMu.RUnlock()
	if !found {
		return nil, Errorf(ErrInvalidArgument, "no backend registered for DSN scheme %q (registered: %s); import its package",
			scheme, strings.Join(Schemes(), ", "))
	}
	b, err := open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return New(b, opts...), nil
}

// Schemes lists the registered DSN schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	s := make([]string, 0, len(registry))
	for k := range registry {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Backend returns the store behind the client.
func (c *Client) Backend() Backend { return c.b }

// Logger returns the client's logger.
func (c *Client) Logger() *slog.Logger { return c.opts.logger }

// Close closes the client and the backend it owns. Later calls return ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.stopRetention()
	return c.b.Close()
}

// Ping checks the backend is reachable.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.b.Ping(ctx)
}

// Migrate creates or upgrades the backend's schema; it is idempotent.
func (c *Client) Migrate(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.b.Migrate(ctx)
}

func (c *Client) check() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// now reads the client's clock, in UTC and truncated to microseconds (the
// precision every backend stores).
func (c *Client) now() time.Time { return normTime(c.opts.clock.Now()) }

func normTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// normDuration rounds a lease duration or a delay up to whole microseconds,
// the precision of every store's times, so that every store computes the
// same expiry or due time from it, and a lease lasts (a retry waits) at
// least as long as asked.
func normDuration(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r > 0 && d <= math.MaxInt64-time.Microsecond {
		return d - r + time.Microsecond
	}
	return d.Truncate(time.Microsecond)
}

// partitionCountAge is how long, by the client's clock, a cached partition
// count is used before it is read again: how long a client keeps routing
// keys by the count of a stream another process deleted and created again
// with another count (a partition named in a request that the cached count
// does not have is checked at once).
const partitionCountAge = 10 * time.Second

type partitionCountEntry struct {
	n  int
	at time.Time
}

// partitionCount returns the stream's partition count (ErrStreamNotFound),
// from the cache while it is fresh.
func (c *Client) partitionCount(ctx context.Context, stream string) (int, error) {
	n, _, err := c.cachedPartitionCount(ctx, stream)
	return n, err
}

// cachedPartitionCount is partitionCount, and whether the count came from
// the cache.
func (c *Client) cachedPartitionCount(ctx context.Context, stream string) (int, bool, error) {
	if v, ok := c.streams.Load(stream); ok {
		e := v.(partitionCountEntry)
		if age := c.opts.clock.Now().Sub(e.at); age >= 0 && age < partitionCountAge {
			return e.n, true, nil
		}
	}
	st, err := c.b.Stream(ctx, stream)
	if err != nil {
		if errors.Is(err, ErrStreamNotFound) {
			c.streams.Delete(stream)
		}
		return 0, false, err
	}
	c.streams.Store(stream, partitionCountEntry{st.Partitions, c.opts.clock.Now()})
	return st.Partitions, false, nil
}

// checkPartitions runs check with the stream's partition count and
// returns it. When check refuses a partition (ErrInvalidPartition) under a
// cached count, the count is read again and check runs once more: another
// process may have created the stream again with more partitions.
func (c *Client) checkPartitions(ctx context.Context, stream string, check func(n int) error) (int, error) {
	n, cached, err := c.cachedPartitionCount(ctx, stream)
	if err != nil {
		return 0, err
	}
	if err := check(n); err == nil || !cached || !errors.Is(err, ErrInvalidPartition) {
		return n, err
	}
	c.streams.Delete(stream)
	if n, _, err = c.cachedPartitionCount(ctx, stream); err != nil {
		return 0, err
	}
	return n, check(n)
}

// subscribe returns a channel signalled when work may have become claimable
// on stream, or a nil channel when the backend cannot notify.
func (c *Client) subscribe(stream string) (<-chan struct{}, func()) {
	if c.notifier == nil {
		return nil, func() {}
	}
	return c.notifier.Subscribe(stream)
}
