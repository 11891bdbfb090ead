package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

// rheoRun runs the command line in-process with no environment.
func rheoRun(args ...string) (stdout, stderr string, code int) {
	var out, errOut strings.Builder
	a := newApp(strings.NewReader(""), &out, &errOut)
	a.getenv = func(string) string { return "" }
	code = a.run(context.Background(), args)
	return out.String(), errOut.String(), code
}

func TestMigratePrintWritesPostgresSQLWithoutConnecting(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: printing must not connect.
	out, errOut, code := rheoRun("--dsn", "postgres://rheo@127.0.0.1:1/app", "migrate", "--print")
	require.Equal(t, exitOK, code, errOut)
	want, err := postgres.MigrationSQL("rheo")
	require.NoError(t, err)
	require.Equal(t, want, out)
	require.Contains(t, out, `CREATE SCHEMA IF NOT EXISTS "rheo"`)

	out, errOut, code = rheoRun("--dsn", "postgresql://rheo@127.0.0.1:1/app?sslmode=disable&rheo_schema=events", "migrate", "--print")
	require.Equal(t, exitOK, code, errOut)
	want, err = postgres.MigrationSQL("events")
	require.NoError(t, err)
	require.Equal(t, want, out)

	out, errOut, code = rheoRun("--json", "--dsn", "postgres://rheo:secret@127.0.0.1:1/app", "migrate", "--print")
	require.Equal(t, exitOK, code, errOut)
	var v struct{ DSN, SQL string }
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Contains(t, v.SQL, `CREATE SCHEMA IF NOT EXISTS "rheo"`)
	require.NotContains(t, v.DSN, "secret")

	_, errOut, code = rheoRun("--dsn", "postgres://rheo@127.0.0.1:1/app?rheo_schema=bad-name", "migrate", "--print")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "not a plain identifier")
}

func TestMigratePrintRefusesBackendsWithoutSQL(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"sqlite:" + t.TempDir() + "/x.db", "memory:", "redis://127.0.0.1:1/0"} {
		out, errOut, code := rheoRun("--dsn", dsn, "migrate", "--print")
		scheme, _, _ := strings.Cut(dsn, ":")
		require.Equal(t, exitError, code, dsn)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		require.Contains(t, errOut, "rheo: migrate --print: the "+scheme+": backend has no SQL to print")

		out, errOut, code = rheoRun("--dsn", dsn, "migrate", "--payload-index")
		require.Equal(t, exitError, code, dsn)
		require.Empty(t, out)
		require.Contains(t, errOut, "rheo: migrate --payload-index: the "+scheme+": backend has no payload index")
	}
}

// TestMigratePrintScriptMigrates applies the printed script as an outside
// tool would (one simple-protocol batch) and uses the schema it made; a
// later Migrate has nothing left to do. It needs the test PostgreSQL server
// (RHEO_TEST_POSTGRES), skipping loudly without it except under CI=true.
func TestMigratePrintScriptMigrates(t *testing.T) {
	t.Parallel()
	// Generous: CREATE INDEX CONCURRENTLY waits for every transaction of
	// the database that began before it, other clients' too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dsn, conn := testPostgres(ctx, t)
	defer conn.Close(ctx)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	schema := "rheo_cli_print_" + hex.EncodeToString(rnd[:])
	// A defer, not t.Cleanup: the connection closes when this function
	// returns, before cleanups run, and the schema must not outlive the test
	// (on a connection of its own when a statement that ran out of time
	// closed this one).
	defer func() {
		drop := conn
		if drop.IsClosed() {
			var err error
			drop, err = pgx.Connect(context.Background(), dsn)
			require.NoError(t, err, "connect to drop schema %s", schema)
			defer drop.Close(context.Background())
		}
		_, err := drop.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		require.NoError(t, err, "drop schema %s", schema)
	}()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	withSchema := dsn + sep + "rheo_schema=" + schema
	printed, errOut, code := rheoRun("--dsn", withSchema, "migrate", "--print", "--payload-index")
	require.Equal(t, exitOK, code, errOut)
	// The index's statement follows the script and runs on its own
	// (CREATE INDEX CONCURRENTLY cannot run inside a transaction).
	script, index, ok := strings.Cut(printed, "-- The payload and metadata index")
	require.True(t, ok, printed)
	_, err := conn.Exec(ctx, script, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	_, index, _ = strings.Cut(index, "\n")
	_, err = conn.Exec(ctx, strings.TrimSuffix(strings.TrimSpace(index), ";"), pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'rheo_events_json'`, schema).Scan(&n))
	require.Equal(t, 1, n, "the payload index was built")
	// migrate --payload-index over it: nothing left to do, the index stays.
	out, errOut, code := rheoRun("--dsn", withSchema, "migrate", "--payload-index")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "; the payload index is built")
	out, errOut, code = rheoRun("--json", "--dsn", withSchema, "migrate", "--payload-index")
	require.Equal(t, exitOK, code, errOut)
	var res struct {
		Migrated     bool `json:"migrated"`
		PayloadIndex bool `json:"payload_index"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.True(t, res.Migrated && res.PayloadIndex, out)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'rheo_events_json'`, schema).Scan(&n))
	require.Equal(t, 1, n)

	c, err := rheo.Open(ctx, withSchema)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Migrate(ctx))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	_, err = c.Append(ctx, "s", rheo.Message{Type: "t", Metadata: map[string]string{"k": "v"}})
	require.NoError(t, err)
	evs, err := c.Query(ctx, rheo.Query{Stream: "s", Metadata: map[string]string{"k": "v"}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
}

// TestMisconfiguredStoreNamesTheFix runs a read command against a missing
// database, an unknown role and a schema that was never migrated: one
// `rheo:` line naming the fix, exit 1, and no store created.
func TestMisconfiguredStoreNamesTheFix(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, conn := testPostgres(ctx, t)
	defer conn.Close(ctx)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	schema := "rheo_cli_unmigrated_" + hex.EncodeToString(rnd[:])
	change := func(f func(u *url.URL)) string {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		f(u)
		return u.String()
	}
	for _, tc := range []struct{ name, dsn, want string }{
		{"missing database", change(func(u *url.URL) { u.Path = "/rheo_no_such_database" }), "the database does not exist: create it or fix the DSN"},
		{"unknown role", change(func(u *url.URL) { u.User = url.UserPassword("rheo_no_such_role", "x") }), "check the user and password in the DSN"},
		{"unmigrated schema", change(func(u *url.URL) {
			q := u.Query()
			q.Set("rheo_schema", schema)
			u.RawQuery = q.Encode()
		}), "run `rheo migrate --dsn DSN`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := rheoRun("--dsn", tc.dsn, "streams")
			require.Equal(t, exitError, code, errOut)
			require.Empty(t, out)
			require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
			require.True(t, strings.HasPrefix(errOut, "rheo: "), errOut)
			require.Contains(t, errOut, "misconfigured")
			require.Contains(t, errOut, tc.want)

			// A write says the same, and does not blame its input.
			_, errOut, code = rheoRun("--dsn", tc.dsn, "append", "s", `{"a":1}`)
			require.Equal(t, exitError, code, errOut)
			require.Contains(t, errOut, tc.want)
			require.NotContains(t, errOut, "the payload")
		})
	}
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n))
	require.Zero(t, n, "a read command never creates the schema")
}

// testPostgres connects to the test server (RHEO_TEST_POSTGRES or the local
// one), skipping loudly when it is unreachable except under CI=true, where
// the test fails.
func testPostgres(ctx context.Context, t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	dsn := os.Getenv("RHEO_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at RHEO_TEST_POSTGRES (%s) is unreachable under CI: %v", dsn, err)
		}
		t.Skipf("SKIPPING: PostgreSQL at RHEO_TEST_POSTGRES (%s) is unreachable: %v", dsn, err)
	}
	return dsn, conn
}
