package redis_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
)

// withURL returns the test server's URL changed by f.
func withURL(t *testing.T, f func(u *url.URL)) string {
	t.Helper()
	testClient(t) // the server must be there: the point is a wrong setting
	u, err := url.Parse(testURL())
	require.NoError(t, err)
	f(u)
	return u.String()
}

func requireMisconfigured(t *testing.T, dsn, want string) {
	t.Helper()
	b, err := redis.Open(context.Background(), dsn)
	require.NoError(t, err, "Open does not connect")
	c := rheo.New(b)
	defer c.Close()

	// Ping answers within its caller's deadline, whatever the fault (a
	// TLS handshake with a plain server gets no reply: the dial timeout,
	// 5 s, has to pass before the cause is known).
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	start := time.Now()
	err = c.Ping(pctx)
	t.Logf("Ping answered in %v: %v", time.Since(start), err)
	require.ErrorIs(t, err, rheo.ErrMisconfigured)
	require.Equal(t, rheo.Fatal, rheo.Classify(err))
	require.ErrorContains(t, err, want)

	cons, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g",
		Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start = time.Now()
	err = cons.Run(ctx)
	t.Logf("Run returned in %v: %v", time.Since(start), err)
	require.ErrorIs(t, err, rheo.ErrMisconfigured, "Run stops on a misconfiguration instead of retrying")
}

func TestWrongPasswordIsMisconfigured(t *testing.T) {
	dsn := withURL(t, func(u *url.URL) { u.User = url.UserPassword("nobody", "wrong") })
	requireMisconfigured(t, dsn, "check the user and password")
}

func TestMissingDatabaseNumberIsMisconfigured(t *testing.T) {
	dsn := withURL(t, func(u *url.URL) { u.Path = "/100000" })
	requireMisconfigured(t, dsn, "the server has no database of the DSN's number")
}

func TestTLSAgainstPlainServerIsMisconfigured(t *testing.T) {
	// A plain server never answers a TLS handshake, so each dial waits out
	// its timeout; a short one keeps the test quick, the diagnosis is the
	// same.
	dsn := withURL(t, func(u *url.URL) {
		u.Scheme = "rediss"
		q := u.Query()
		q.Set("dial_timeout", "1s")
		u.RawQuery = q.Encode()
	})
	requireMisconfigured(t, dsn, "use redis:// instead of rediss://")
}

// TestDSNParameterMistakesAreRefusedAtOpen: a mistake in one of rheo's DSN
// parameters is an ErrInvalidArgument from Open naming the parameter and the
// fix; Open connects to nothing, so nothing is written.
func TestDSNParameterMistakesAreRefusedAtOpen(t *testing.T) {
	ctx := context.Background()
	const base = "redis://127.0.0.1:1/0?"
	for query, want := range map[string]string{
		"key_prefix=":                           "key_prefix is empty: give it a value, or leave it out for the default",
		"key_prefix=a:&key_prefix=b:":           `key_prefix is given twice ("a:" and "b:"): give it once`,
		"query_scan_limit=5&query_scan_limit=6": `query_scan_limit is given twice`,
		"KEY_PREFIX=app:":                       `unknown parameter "KEY_PREFIX": did you mean key_prefix?`,
		"rheo_prefix=app:":                      `unknown parameter "rheo_prefix"`,
		"key_prefix=app%7B1%7D:":                `key_prefix "app{1}:" must not contain '{' or '}' (they delimit hash tags): remove them, for example "app1:"`,
		"wait_replicas=1&wait_timeout=":         "wait_timeout is empty",
	} {
		t.Run(query, func(t *testing.T) {
			_, err := rheo.Open(ctx, base+query)
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			require.ErrorContains(t, err, "redis DSN: ")
			require.ErrorContains(t, err, want)
		})
	}

	c, err := rheo.Open(ctx, base+"key_prefix=my%3Aapp%20x:")
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, "my:app x:", c.Backend().(*redis.Backend).KeyPrefix(), "key_prefix is percent-decoded")
}

// TestNewRefusesABadKeyPrefix: as postgres.New refuses a schema that is not
// a plain identifier, redis.New refuses a prefix it cannot use instead of
// falling back to the default one.
func TestNewRefusesABadKeyPrefix(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never used
	defer client.Close()
	for prefix, want := range map[string]string{
		"app{1}:": `redis: key prefix "app{1}:" must not contain '{' or '}'`,
		"}":       `redis: key prefix "}" must not contain '{' or '}'`,
		"":        `redis: key prefix is empty: give one such as "myapp:", or leave it out for the default "rheo:"`,
	} {
		b, err := redis.New(client, redis.WithKeyPrefix(prefix))
		require.ErrorIs(t, err, rheo.ErrInvalidArgument, "prefix %q", prefix)
		require.ErrorContains(t, err, want)
		require.Nil(t, b)
	}
	_, err := redis.New(nil)
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	for opt, want := range map[string]redis.Option{
		"redis: query scan limit -1 is negative": redis.WithQueryScanLimit(-1),
		"redis: wait for -1 replicas within 1s":  redis.WithWaitReplicas(-1, time.Second),
		"redis: wait for 1 replicas within -1s":  redis.WithWaitReplicas(1, -time.Second),
	} {
		b, err := redis.New(client, want)
		require.ErrorIs(t, err, rheo.ErrInvalidArgument, opt)
		require.ErrorContains(t, err, opt)
		require.Nil(t, b)
	}
	_, err = redis.New(client, redis.WithQueryScanLimit(0), redis.WithWaitReplicas(0, 0))
	require.NoError(t, err, "0 means no bound and no waiting")

	b, err := redis.New(client)
	require.NoError(t, err)
	require.Equal(t, redis.DefaultKeyPrefix, b.KeyPrefix())
}
