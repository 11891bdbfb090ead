package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/internal/teststore"
	"github.com/rheo-go/rheo/rheotest"
)

const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func dsn() string {
	if v := os.Getenv("RHEO_TEST_POSTGRES"); v != "" {
		return v
	}
	return defaultDSN
}

var (
	poolOnce sync.Once
	shared   *pgxpool.Pool
	poolErr  error
)

// testPool returns a pool shared by the package's tests, skipping the test
// loudly when the server is unreachable (failing under CI=true).
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	poolOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(dsn())
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = 16
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = p.Ping(ctx)
		}
		if err != nil {
			poolErr = err
			return
		}
		shared = p
	})
	if poolErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at RHEO_TEST_POSTGRES (%s) is unreachable under CI: %v", dsn(), poolErr)
		}
		t.Skipf("SKIPPING: PostgreSQL at RHEO_TEST_POSTGRES (%s) is unreachable: %v", dsn(), poolErr)
	}
	return shared
}

func schemaName() string {
	var b [6]byte
	rand.Read(b[:])
	return "rheotest_" + hex.EncodeToString(b[:])
}

// newBackend returns a migrated backend on a fresh schema, dropped at cleanup.
func newBackend(t testing.TB) *postgres.Backend {
	t.Helper()
	pool := testPool(t)
	schema := schemaName()
	b, err := postgres.New(pool, postgres.WithSchema(schema))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, b.Migrate(ctx))
	t.Cleanup(func() {
		b.Close()
		teststore.DropSchema(t, pool, schema)
	})
	return b
}

func TestConformance(t *testing.T) {
	testPool(t)
	rheotest.RunBackend(t, func(t testing.TB) rheo.Backend { return newBackend(t) })
}

func TestDifferential(t *testing.T) {
	testPool(t)
	rheotest.RunDifferential(t, func(t testing.TB) rheo.Backend { return newBackend(t) }, rheotest.DifferentialOptions{
		// Round trips make a step slow here: fewer seeds keep the default
		// run short; RHEO_DIFF_SEEDS and RHEO_DIFF_STEPS run long ones.
		Seeds: 3,
	})
}

// TestDifferentialWide runs the differential test on streams of 40
// partitions: fetches from many partitions, few of which have work, take
// paths of their own (cursors with new events only, runs of idle
// partitions read at once).
func TestDifferentialWide(t *testing.T) {
	rheotest.RunDifferential(t, func(t testing.TB) rheo.Backend { return newBackend(t) }, rheotest.DifferentialOptions{
		Seeds: 2, Partitions: 40,
	})
}

func TestShared(t *testing.T) {
	testPool(t)
	rheotest.RunShared(t, func(t testing.TB) (rheo.Backend, rheo.Backend) {
		a := newBackend(t)
		b, err := postgres.New(testPool(t), postgres.WithSchema(a.Schema()))
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		return a, b
	})
}
