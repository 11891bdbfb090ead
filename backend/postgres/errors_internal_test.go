package postgres

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		write bool
		want  error
	}{
		{"unique violation", &pgconn.PgError{Code: "23505"}, true, rheo.ErrAlreadyExists},
		{"NUL in jsonb", &pgconn.PgError{Code: "22P05"}, true, rheo.ErrInvalidArgument},
		{"missing schema", &pgconn.PgError{Code: "3F000"}, false, rheo.ErrMisconfigured},
		{"missing table", &pgconn.PgError{Code: "42P01"}, true, rheo.ErrMisconfigured},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false, rheo.ErrMisconfigured},
		{"unknown role", &pgconn.PgError{Code: "28000"}, false, rheo.ErrMisconfigured},
		{"missing database", &pgconn.PgError{Code: "3D000"}, false, rheo.ErrMisconfigured},
		{"permission denied", &pgconn.PgError{Code: "42501"}, true, rheo.ErrMisconfigured},
		{"server rejected a write", &pgconn.PgError{Code: "57014"}, true, rheo.ErrBackendUnavailable},
		{"connection failure reported by server", &pgconn.PgError{Code: "08006"}, true, rheo.ErrAmbiguous},
		{"deadline during a write", context.DeadlineExceeded, true, rheo.ErrAmbiguous},
		{"cancelled write", context.Canceled, true, rheo.ErrAmbiguous},
		{"deadline during a read", context.DeadlineExceeded, false, rheo.ErrBackendUnavailable},
		{"connection lost mid-write", io.ErrUnexpectedEOF, true, rheo.ErrAmbiguous},
		{"connection lost mid-read", io.ErrUnexpectedEOF, false, rheo.ErrBackendUnavailable},
		{"already classified", rheo.Errorf(rheo.ErrStaleLease, "x"), true, rheo.ErrStaleLease},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err, c.write, "op")
			require.ErrorIs(t, got, c.want)
			require.ErrorIs(t, got, c.err, "the cause stays reachable")
		})
	}
	require.NoError(t, classify(nil, true, "op"))
	require.True(t, retryable(&pgconn.PgError{Code: "40P01"}))
	require.True(t, retryable(&pgconn.PgError{Code: "23505", ConstraintName: "rheo_events_id"}))
	require.False(t, retryable(&pgconn.PgError{Code: "23505", ConstraintName: "rheo_streams_name_key"}))
	require.False(t, retryable(errors.New("x")))
}

func TestSplitSchema(t *testing.T) {
	dsn, schema, err := splitSchema("postgres://u@h/db?sslmode=disable&rheo_schema=app_rheo")
	require.NoError(t, err)
	require.Equal(t, "postgres://u@h/db?sslmode=disable", dsn)
	require.Equal(t, "app_rheo", schema)
	dsn, schema, _ = splitSchema("postgres://u@h/db?rheo_schema=s")
	require.Equal(t, "postgres://u@h/db", dsn)
	require.Equal(t, "s", schema)
	dsn, schema, _ = splitSchema("postgres://u@h/db")
	require.Equal(t, "postgres://u@h/db", dsn)
	require.Empty(t, schema)
	dsn, schema, err = splitSchema("postgres://u@h/db?application_name=a%20b&rheo_schema=my%5Fschema&search_path=x")
	require.NoError(t, err)
	require.Equal(t, "postgres://u@h/db?application_name=a%20b&search_path=x", dsn, "other parameters go to pgx as they were")
	require.Equal(t, "my_schema", schema, "decoded")
}

func TestRebindQualifiesTables(t *testing.T) {
	d := dialect{q: `"s".`}
	require.Equal(t, `SELECT a FROM "s".rheo_events e JOIN "s".rheo_groups g ON x = $1 WHERE y = $2`,
		d.Rebind("SELECT a FROM rheo_events e JOIN rheo_groups g ON x = ? WHERE y = ?"))
	require.Equal(t, `CREATE INDEX rheo_events_id ON "s".rheo_events (id)`,
		d.Rebind("CREATE INDEX rheo_events_id ON rheo_events (id)"), "index names stay bare")
}
