package dashboard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/backend/sqlite"
	"github.com/rheo-go/rheo/internal/teststore"
)

// unreachable skips loudly, or fails under CI=true, when a server is missing.
func unreachable(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is unreachable: %v", what, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newBackend returns an empty, migrated store of the named kind, removed
// when the test ends. PostgreSQL and Redis come from RHEO_TEST_POSTGRES and
// RHEO_TEST_REDIS (default: the local servers).
func newBackend(t testing.TB, kind string) rheo.Backend {
	t.Helper()
	ctx := context.Background()
	switch kind {
	case "memory":
		return memory.New()
	case "sqlite":
		b, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "rheo.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	case "postgres":
		dsn := os.Getenv("RHEO_TEST_POSTGRES")
		if dsn == "" {
			dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		pool, err := pgxpool.New(cctx, dsn)
		if err == nil {
			err = pool.Ping(cctx)
		}
		if err != nil {
			unreachable(t, "PostgreSQL at RHEO_TEST_POSTGRES ("+dsn+")", err)
		}
		schema := "rheodash_" + randomSuffix()
		b, err := postgres.New(pool, postgres.WithSchema(schema))
		require.NoError(t, err)
		require.NoError(t, b.Migrate(ctx))
		t.Cleanup(func() {
			_ = b.Close()
			teststore.DropSchema(t, pool, schema)
			pool.Close()
		})
		return b
	case "redis":
		url := os.Getenv("RHEO_TEST_REDIS")
		if url == "" {
			url = "redis://127.0.0.1:6379/0"
		}
		o, err := goredis.ParseURL(url)
		require.NoError(t, err)
		c := goredis.NewClient(o)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := c.Ping(cctx).Err(); err != nil {
			_ = c.Close()
			unreachable(t, "Redis at RHEO_TEST_REDIS ("+url+")", err)
		}
		prefix := "rheodash:" + randomSuffix() + ":"
		b, err := redis.New(c, redis.WithKeyPrefix(prefix))
		require.NoError(t, err)
		require.NoError(t, b.Migrate(ctx))
		t.Cleanup(func() {
			_ = b.Close()
			var cursor uint64
			for {
				keys, next, err := c.Scan(context.Background(), cursor, prefix+"*", 1000).Result()
				if err != nil {
					t.Logf("cleanup of %s: %v", prefix, err)
					break
				}
				if len(keys) > 0 {
					c.Unlink(context.Background(), keys...)
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
			_ = c.Close()
		})
		return b
	}
	t.Fatalf("unknown store %q", kind)
	return nil
}
