package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

// requireMisconfigured checks that a client on dsn reports ErrMisconfigured
// naming the fix from Ping and from a consumer's Run, without retrying.
func requireMisconfigured(t *testing.T, dsn, want string) {
	t.Helper()
	b, err := postgres.Open(context.Background(), dsn)
	require.NoError(t, err, "Open does not connect")
	c := rheo.New(b)
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = c.Ping(ctx)
	t.Logf("Ping answered in %v: %v", time.Since(start), err)
	require.ErrorIs(t, err, rheo.ErrMisconfigured)
	require.Equal(t, rheo.Fatal, rheo.Classify(err))
	require.ErrorContains(t, err, want)

	cons, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g",
		Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	start = time.Now()
	err = cons.Run(ctx)
	t.Logf("Run returned in %v: %v", time.Since(start), err)
	require.ErrorIs(t, err, rheo.ErrMisconfigured, "Run stops instead of retrying")
}

func changedDSN(t *testing.T, f func(u *url.URL)) string {
	t.Helper()
	testPool(t) // the server must be there: the point is a wrong setting
	u, err := url.Parse(dsn())
	require.NoError(t, err)
	f(u)
	return u.String()
}

func TestUnknownRoleIsMisconfigured(t *testing.T) {
	requireMisconfigured(t, changedDSN(t, func(u *url.URL) { u.User = url.UserPassword("rheo_no_such_role", "wrong") }),
		"check the user and password")
}

func TestMissingDatabaseIsMisconfigured(t *testing.T) {
	requireMisconfigured(t, changedDSN(t, func(u *url.URL) { u.Path = "/rheo_no_such_database" }),
		"the database does not exist")
}

func TestUnmigratedSchemaIsMisconfigured(t *testing.T) {
	requireMisconfigured(t, changedDSN(t, func(u *url.URL) {
		q := u.Query()
		q.Set("rheo_schema", schemaName()) // never created
		u.RawQuery = q.Encode()
	}), "run `rheo migrate")
}
