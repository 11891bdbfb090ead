package redis_test

import (
	"context"
	"net/url"
	"testing"
	"time"

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
