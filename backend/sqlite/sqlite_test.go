package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/sqlite"
	"github.com/rheo-go/rheo/rheotest"
)

// open returns a fresh, migrated backend on a file in t's temp dir.
func open(t testing.TB, opts ...sqlite.Option) *sqlite.Backend {
	t.Helper()
	b, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rheo.db"), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	rheotest.RunBackend(t, func(t testing.TB) rheo.Backend { return open(t) })
}

func TestMigrateIsIdempotent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "rheo.db")
	b, err := sqlite.Open(ctx, path, sqlite.WithoutMigrate())
	require.NoError(t, err)
	_, err = b.SchemaVersion(ctx)
	require.ErrorIs(t, err, rheo.ErrMisconfigured, "no version table before Migrate: not migrated")
	require.NoError(t, b.Migrate(ctx))
	v, err := b.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, v)

	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	_, err = c.Append(ctx, "s", rheo.Message{ID: "e1", Payload: []byte(`{"a":1}`)})
	require.NoError(t, err)
	require.NoError(t, b.Migrate(ctx))
	require.NoError(t, b.Close())

	// Reopening migrates again: a no-op that keeps the data.
	b, err = sqlite.Open(ctx, path)
	require.NoError(t, err)
	defer b.Close()
	v, err = b.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, v)
	evs, err := b.Read(ctx, "s", 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, `{"a":1}`, string(evs[0].Payload))
}

func TestOpenDSN(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dsn.db")
	c, err := rheo.Open(ctx, "sqlite:"+path+"?synchronous=full&busy_timeout=2s")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Ping(ctx))
	require.Contains(t, c.Backend().(*sqlite.Backend).Settings(), "synchronous=FULL")

	_, err = rheo.Open(ctx, "sqlite:"+path+"?synchronous=sometimes")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = rheo.Open(ctx, "sqlite:")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = rheo.Open(ctx, "sqlite::memory:")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = rheo.Open(ctx, "sqlite:"+path+"?cache=shared")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
}

func TestDifferential(t *testing.T) {
	rheotest.RunDifferential(t, func(t testing.TB) rheo.Backend { return open(t) }, rheotest.DifferentialOptions{
		// The race detector slows the pure-Go SQLite driver tenfold, and
		// this package's other tests are long already: two short seeds keep
		// the default run short; RHEO_DIFF_SEEDS and RHEO_DIFF_STEPS run
		// long ones.
		Seeds: 2, Steps: 120,
	})
}

// TestDifferentialWide runs the differential test on streams of 40
// partitions: fetches from many partitions, few of which have work, take
// paths of their own (cursors with new events only, runs of idle
// partitions read at once).
func TestDifferentialWide(t *testing.T) {
	rheotest.RunDifferential(t, func(t testing.TB) rheo.Backend { return open(t) }, rheotest.DifferentialOptions{
		Seeds: 1, Steps: 120, Partitions: 40,
	})
}

func TestShared(t *testing.T) {
	rheotest.RunShared(t, func(t testing.TB) (rheo.Backend, rheo.Backend) {
		path := filepath.Join(t.TempDir(), "rheo.db")
		var bs [2]rheo.Backend
		for i := range bs {
			b, err := sqlite.Open(context.Background(), path)
			require.NoError(t, err)
			t.Cleanup(func() { b.Close() })
			bs[i] = b
		}
		return bs[0], bs[1]
	})
}
