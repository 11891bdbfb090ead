// Package redis is rheo's Redis Streams backend.
//
// Each partition of a rheo stream is one Redis stream whose entry IDs are
// "<sequence>-0"; each rheo group is one Redis consumer group on every
// partition stream, whose last-delivered ID is the group's cursor; the
// group's own hashes and sorted sets hold its leases, due times and
// frontier. Fetches read with NOACK, so no lease enters Redis's
// pending-entries list (settles still XACK the entries that earlier
// versions put there). A lease's Receipt is the Redis entry ID. Every
// claim, renew, settle and append is one Lua script, so Redis applies it
// atomically; leases expire on rheo's clock (the time the client passes),
// never on Redis idle time.
//
// All keys of one stream share a hash tag ("<prefix>{<stream>}:…"), so a
// stream lives in one hash slot and works unchanged on Redis Cluster.
// Redis 7.0 or later is required (sharded pub/sub wakes waiting fetchers).
//
// Open a backend from a DSN (the package registers "redis" and "rediss"):
//
//	c, err := rheo.Open(ctx, "redis://localhost:6379/0?key_prefix=myapp:")
//
// or borrow a client you already have (a *redis.Client, a *redis.ClusterClient
// or any UniversalClient):
//
//	b, err := redis.New(client, redis.WithKeyPrefix("myapp:"))
//	c := rheo.New(b)
//
// Durability is Redis's: without AOF (appendonly yes, appendfsync everysec
// or always) a restart loses acknowledged appends and settles. See
// docs/redis.md.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
	rdsn "github.com/rheo-go/rheo/internal/dsn"
)

func init() {
	rheo.Register("redis", Open)
	rheo.Register("rediss", Open)
}

// DefaultKeyPrefix starts every key the backend writes.
const DefaultKeyPrefix = "rheo:"

// DefaultQueryScanLimit bounds how many entries one Query call may read.
const DefaultQueryScanLimit = 1_000_000

// Option configures a Backend.
type Option func(*Backend)

// WithKeyPrefix sets the prefix of every key (default "rheo:"). Use distinct
// prefixes to keep several applications, or tests, apart in one database.
// The prefix must not be empty and must not contain '{' or '}' (they
// delimit hash tags); New refuses such a prefix with rheo.ErrInvalidArgument.
func WithKeyPrefix(p string) Option { return func(b *Backend) { b.prefix = p } }

// WithQueryScanLimit bounds how many stream entries one Query call may read
// before it fails with rheo.ErrUnsupported (default 1,000,000; 0 means no
// bound; New refuses a negative n with rheo.ErrInvalidArgument). Redis has
// no secondary indexes: queries scan partitions by sequence range, so
// narrow ones with Partitions, AfterSequence and UntilSequence.
func WithQueryScanLimit(n int) Option { return func(b *Backend) { b.scanLimit = n } }

// Backend is a rheo.Backend and rheo.Notifier over Redis. It is safe for
// concurrent use.
type Backend struct {
	c         goredis.UniversalClient
	owned     bool
	prefix    string
	scanLimit int

	waitReplicas int
	waitTimeout  time.Duration

	hubMu sync.Mutex
	hub   map[string]*wakeSub
	done  bool

	lastTLS *atomic.Pointer[tlsError] // rediss:// DSNs: the last failed handshake

	rrMu sync.Mutex
	rr   map[string]int // next first partition per group base, this process only
}

var (
	_ rheo.Backend  = (*Backend)(nil)
	_ rheo.Notifier = (*Backend)(nil)
)

// New returns a backend over client. The client is borrowed: Close does not
// close it. A key prefix New cannot use (see WithKeyPrefix) is refused with
// rheo.ErrInvalidArgument.
func New(client goredis.UniversalClient, opts ...Option) (*Backend, error) {
	if client == nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis: client is nil")
	}
	quietDriver.Do(func() { goredis.SetLogger(slogLogger{}) })
	b := &Backend{c: client, prefix: DefaultKeyPrefix, scanLimit: DefaultQueryScanLimit, hub: map[string]*wakeSub{}, rr: map[string]int{}}
	for _, o := range opts {
		o(b)
	}
	if err := checkPrefix(b.prefix); err != nil {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis: key prefix %v", err)
	}
	if b.scanLimit < 0 {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis: query scan limit %d is negative: give 0 for no bound, or leave it out for the default %d", b.scanLimit, DefaultQueryScanLimit)
	}
	if b.waitReplicas < 0 || b.waitTimeout < 0 {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis: wait for %d replicas within %v: neither may be negative (0 replicas: do not wait)", b.waitReplicas, b.waitTimeout)
	}
	return b, nil
}

// checkPrefix says what is wrong with a key prefix, or returns nil.
func checkPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("is empty: give one such as %q, or leave it out for the default %q", "myapp:", DefaultKeyPrefix)
	case strings.ContainsAny(p, "{}"):
		return fmt.Errorf("%q must not contain '{' or '}' (they delimit hash tags): remove them, for example %q", p, strings.NewReplacer("{", "", "}", "").Replace(p))
	}
	return nil
}

// Open opens a backend from a DSN, "redis://[user:password@]host:port/db" or
// "rediss://…" for TLS, with go-redis's URL options plus key_prefix (default
// "rheo:"), query_scan_limit, and wait_replicas with wait_timeout (default
// 1s; see WithWaitReplicas). Each of these is percent-decoded and may be
// given once, with a value; a parameter starting with "rheo" is refused as
// a misspelling. The backend owns the client it creates.
func Open(_ context.Context, dsn string) (rheo.Backend, error) {
	o, opts, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	var lastTLS *atomic.Pointer[tlsError]
	if o.TLSConfig != nil {
		lastTLS = tlsDial(o)
	}
	b, err := New(goredis.NewClient(o), opts...)
	if err != nil {
		return nil, err // parseDSN checked the options: not reached
	}
	b.lastTLS = lastTLS
	b.owned = true
	return b, nil
}

// parseDSN splits a DSN into go-redis's options and the backend's; it
// connects to nothing, so it can be checked on any input. Its errors never
// show the DSN's password: they are those of the DSN with it hidden.
func parseDSN(dsn string) (*goredis.Options, []Option, error) {
	o, opts, err := parseDSNText(dsn)
	if err == nil {
		return o, opts, nil
	}
	err = rdsn.ParseError(dsn, func(s string) error {
		_, _, err := parseDSNText(s)
		return err
	})
	if !errors.Is(err, rheo.ErrInvalidArgument) {
		err = rheo.Wrap(rheo.ErrInvalidArgument, err, "redis DSN")
	}
	return nil, nil, err
}

func parseDSNText(dsn string) (*goredis.Options, []Option, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, nil, rheo.Wrap(rheo.ErrInvalidArgument, err, "redis DSN does not parse")
	}
	rest, params, err := rdsn.TakeParams(u.RawQuery, "key_prefix", "query_scan_limit", "wait_replicas", "wait_timeout")
	if err != nil {
		return nil, nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis DSN: %v", err)
	}
	var opts []Option
	if p, ok := params["key_prefix"]; ok {
		if err := checkPrefix(p); err != nil {
			return nil, nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis DSN: key_prefix %v", err)
		}
		opts = append(opts, WithKeyPrefix(p))
	}
	if v, ok := params["query_scan_limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis DSN: query_scan_limit %q is not a non-negative integer", v)
		}
		opts = append(opts, WithQueryScanLimit(n))
	}
	if v, ok := params["wait_replicas"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis DSN: wait_replicas %q is not a non-negative integer", v)
		}
		timeout := time.Second
		if t, ok := params["wait_timeout"]; ok {
			if timeout, err = time.ParseDuration(t); err != nil || timeout < 0 {
				return nil, nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis DSN: wait_timeout %q is not a duration such as 500ms", t)
			}
		}
		opts = append(opts, WithWaitReplicas(n, timeout))
	} else if _, ok := params["wait_timeout"]; ok {
		return nil, nil, rheo.Errorf(rheo.ErrInvalidArgument, "redis DSN: wait_timeout needs wait_replicas")
	}
	u.RawQuery = rest
	// A driver retry of a write whose reply was lost runs it twice: a settle
	// retried that way answers "stale" for its own first ack instead of
	// ErrAmbiguous. rheo retries what is safe itself, so the driver does
	// not, unless the DSN asks for it.
	_, retries := u.Query()["max_retries"]
	o, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, nil, rheo.Wrap(rheo.ErrInvalidArgument, err, "redis DSN")
	}
	if !retries {
		o.MaxRetries = -1
	}
	return o, opts, nil
}

// Client returns the Redis client the backend uses.
func (b *Backend) Client() goredis.UniversalClient { return b.c }

// KeyPrefix returns the prefix of every key the backend writes.
func (b *Backend) KeyPrefix() string { return b.prefix }

// Ping implements rheo.Backend.
func (b *Backend) Ping(ctx context.Context) error {
	return b.readErr(b.c.Ping(ctx).Err(), "ping")
}

// Migrate implements rheo.Backend. Redis needs no schema: Migrate checks the
// server is Redis 7.0 or later and loads the scripts so later calls go by SHA.
func (b *Backend) Migrate(ctx context.Context) error {
	info, err := b.c.Info(ctx, "server").Result()
	if err != nil {
		return b.readErr(err, "migrate")
	}
	for line := range strings.SplitSeq(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err == nil && n < 7 {
			return rheo.Errorf(rheo.ErrUnsupported, "redis %s: rheo needs Redis 7.0 or later", v)
		}
	}
	for _, s := range allScripts {
		if err := s.Load(ctx, b.c).Err(); err != nil {
			return b.readErr(err, "migrate: load scripts")
		}
	}
	return nil
}

// Close implements rheo.Backend: it ends the wake-up subscriptions and
// closes the client when the backend opened it.
func (b *Backend) Close() error {
	b.hubMu.Lock()
	b.done = true
	subs := b.hub
	b.hub = map[string]*wakeSub{}
	b.hubMu.Unlock()
	for _, s := range subs {
		s.close()
	}
	if b.owned {
		return b.c.Close()
	}
	return nil
}

// streamBase is the key base of a stream: "<prefix>{<escaped stream>}:".
func (b *Backend) streamBase(stream string) string {
	return b.prefix + "{" + escape(stream) + "}:"
}

// metaKey is the stream's meta hash, the key every script declares.
func (b *Backend) metaKey(base string) string { return base + "meta" }

// groupBase is the key base of a group within a stream.
func groupBase(base, group string) string { return base + "g:" + escape(group) + ":" }

// registryKey is the hash of every stream (name -> "partitions:created").
// It lives outside the streams' hash slots.
func (b *Backend) registryKey() string { return b.prefix + "streams" }

// escape makes a name safe as a key part: '%', '{', '}' and ':' are
// percent-encoded, so hash tags and key segments stay unambiguous.
func escape(s string) string {
	if !strings.ContainsAny(s, "%{}:") {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '{', '}', ':':
			sb.WriteByte('%')
			sb.WriteByte("0123456789ABCDEF"[c>>4])
			sb.WriteByte("0123456789ABCDEF"[c&15])
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

// quietDriver routes go-redis's own log lines (pool and reconnect notices it
// otherwise prints to stderr) to log/slog's default logger at debug level:
// a library must not write to stderr behind its user's back, and every
// failure that matters reaches the caller as an error anyway. go-redis has
// one process-wide logger, so this is done once, when the first backend is
// made.
var quietDriver sync.Once

type slogLogger struct{}

func (slogLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "redis driver: "+fmt.Sprintf(format, v...))
}

// tlsDial makes the client's TLS handshakes answer within the dial timeout
// (and the caller's deadline) and say what most likely went wrong: a
// rediss:// DSN pointed at a plain server gets no handshake reply at all,
// and would otherwise look like an unreachable server.
//
// It returns where the last failed handshake is kept: go-redis retries a
// failed dial until the caller's deadline and then reports only that the
// deadline passed, so the backend looks there to name the real cause.
func tlsDial(o *goredis.Options) *atomic.Pointer[tlsError] {
	last := new(atomic.Pointer[tlsError])
	cfg := o.TLSConfig
	o.TLSConfig = nil
	timeout := o.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		// Leave the caller time to hear why: fail the handshake a little
		// before its deadline.
		t := timeout
		if dl, ok := ctx.Deadline(); ok && time.Until(dl)*4/5 < t {
			t = time.Until(dl) * 4 / 5
		}
		hctx, cancel := context.WithTimeout(ctx, t)
		defer cancel()
		tc := tls.Client(raw, c)
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			te := &tlsError{addr: addr, err: err}
			last.Store(te)
			return nil, te
		}
		last.Store(nil)
		return tc, nil
	}
	return last
}

// tlsError is a failed TLS handshake; see misconfigured.
type tlsError struct {
	addr string
	err  error
}

func (e *tlsError) Error() string {
	return fmt.Sprintf("TLS handshake with %s failed: %v", e.addr, e.err)
}

func (e *tlsError) Unwrap() error { return e.err }
