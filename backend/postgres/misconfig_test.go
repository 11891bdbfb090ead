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

// TestDSNParameterMistakesAreRefusedAtOpen: a mistake in rheo's own DSN
// parameter is an ErrInvalidArgument from Open naming the parameter and the
// fix, before anything connects; and the parameter is percent-decoded.
func TestDSNParameterMistakesAreRefusedAtOpen(t *testing.T) {
	ctx := context.Background()
	const base = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&" // Open does not connect
	for query, want := range map[string]string{
		"rheo_schema=":                    "rheo_schema is empty: give it a value, or leave it out for the default",
		"rheo_schema":                     "rheo_schema is empty",
		"rheo_schema=a_one&rheo_schema=b": `rheo_schema is given twice ("a_one" and "b"): give it once`,
		"rheo_schem=app":                  `unknown parameter "rheo_schem": did you mean rheo_schema?`,
		"RHEO_SCHEMA=app":                 `unknown parameter "RHEO_SCHEMA": did you mean rheo_schema?`,
		"rheo_schema=50%":                 "rheo_schema=50% does not decode",
	} {
		t.Run(query, func(t *testing.T) {
			_, err := rheo.Open(ctx, base+query)
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			require.ErrorContains(t, err, "postgres DSN: ")
			require.ErrorContains(t, err, want)
			_, err = postgres.MigrationSQLForDSN(base + query)
			require.ErrorIs(t, err, rheo.ErrInvalidArgument, "rheo migrate --print refuses it too")
		})
	}

	b, err := postgres.Open(ctx, base+"rheo_schema=my%5Fschema&application_name=x")
	require.NoError(t, err)
	defer b.Close()
	require.Equal(t, "my_schema", b.Schema(), "rheo_schema is percent-decoded")
}

// A password with an unencoded '@' leaves the rest of the password in the
// host name: Open refuses the DSN, says to percent-encode, and shows no part
// of the password.
func TestAtInPasswordIsRefused(t *testing.T) {
	for _, dsn := range []string{
		"postgres://po:sup3r@secret@127.0.0.1:5432/test",
		"postgres://po:sup3r@secret@127.0.0.1:5432,127.0.0.2:5432/test",
	} {
		_, err := rheo.Open(context.Background(), dsn)
		require.ErrorIs(t, err, rheo.ErrInvalidArgument, dsn)
		require.ErrorContains(t, err, "percent-encode any '@' in the user name or password (for example '@' as %40)")
		require.NotContains(t, err.Error(), "secret")
		require.NotContains(t, err.Error(), "sup3r")
	}
	b, err := postgres.Open(context.Background(), "postgres://po:sup3r%40secret@127.0.0.1:1/test")
	require.NoError(t, err, "an encoded '@' is fine")
	b.Close()
}

// A DSN parameter that is not rheo's goes to the server as a setting; one
// the server does not know, or whose value it refuses, fails the connection:
// that is ErrMisconfigured naming the parameter, not an unavailable store.
func TestUnknownServerSettingIsMisconfigured(t *testing.T) {
	typo := changedDSN(t, func(u *url.URL) {
		q := u.Query()
		q.Set("schema", "app") // meant rheo_schema
		u.RawQuery = q.Encode()
	})
	requireMisconfigured(t, typo, "a DSN parameter is not a PostgreSQL setting: fix its name or remove it")
	requireMisconfigured(t, typo, `unrecognized configuration parameter "schema"`)
	requireMisconfigured(t, changedDSN(t, func(u *url.URL) {
		q := u.Query()
		q.Set("statement_timeout", "soon")
		u.RawQuery = q.Encode()
	}), "a DSN parameter has a value PostgreSQL refuses")
}
