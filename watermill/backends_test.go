package rheowatermill_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
)

// The stores every test runs on.
var storeNames = []string{"memory", "sqlite", "postgres", "redis"}

func postgresDSN() string {
	if v := os.Getenv("RHEO_TEST_POSTGRES"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func redisURL() string {
	if v := os.Getenv("RHEO_TEST_REDIS"); v != "" {
		return v
	}
	return "redis://127.0.0.1:6379/0"
}

// unavailable skips the test loudly, or fails it under CI=true.
func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s NOT REACHABLE: %v", what, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING: " + msg)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var (
	pgOnce sync.Once
	pgPool *pgxpool.Pool
	pgErr  error
)

func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(postgresDSN())
		if err != nil {
			pgErr = err
			return
		}
		cfg.MaxConns = 16
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = p.Ping(ctx)
		}
		if err != nil {
			pgErr = err
			return
		}
		pgPool = p
	})
	if pgErr != nil {
		unavailable(t, "PostgreSQL at RHEO_TEST_POSTGRES ("+postgresDSN()+")", pgErr)
	}
	return pgPool
}

func testRedis(t testing.TB) goredis.UniversalClient {
	t.Helper()
	o, err := goredis.ParseURL(redisURL())
	require.NoError(t, err)
	c := goredis.NewClient(o)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		unavailable(t, "Redis at RHEO_TEST_REDIS ("+redisURL()+")", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dropRedisKeys deletes every key under prefix.
func dropRedisKeys(t testing.TB, c goredis.UniversalClient, prefix string) {
	ctx := context.Background()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			t.Logf("scan %s: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Logf("del %s: %v", prefix, err)
			}
		}
		cursor = next
		if cursor == 0 {
			return
		}
	}
}

// newBackend returns a migrated backend of the named store on a fresh
// schema, key prefix or file, removed when t ends.
func newBackend(t testing.TB, store string) rheo.Backend {
	t.Helper()
	ctx := context.Background()
	var b rheo.Backend
	switch store {
	case "memory":
		b = memory.New()
		t.Cleanup(func() { _ = b.Close() })
	case "sqlite":
		sb, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "rheo.db"))
		require.NoError(t, err)
		b = sb
		t.Cleanup(func() { _ = b.Close() })
	case "postgres":
		pool := testPool(t)
		schema := "rheowm_" + randHex(6)
		pb, err := postgres.New(pool, postgres.WithSchema(schema))
		require.NoError(t, err)
		b = pb
		t.Cleanup(func() {
			_ = b.Close()
			if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
				t.Logf("drop schema %s: %v", schema, err)
			}
		})
	case "redis":
		c := testRedis(t)
		prefix := "rheowm:" + randHex(6) + ":"
		rb, err := redis.New(c, redis.WithKeyPrefix(prefix))
		require.NoError(t, err)
		b = rb
		t.Cleanup(func() {
			_ = b.Close()
			dropRedisKeys(t, c, prefix)
		})
	default:
		t.Fatalf("unknown store %q", store)
	}
	require.NoError(t, b.Migrate(ctx))
	return b
}

// newClient returns a client over a fresh backend of the named store.
// The client is not closed: the backend's cleanup closes the store.
func newClient(t testing.TB, store string, opts ...rheo.Option) *rheo.Client {
	return rheo.New(newBackend(t, store), opts...)
}

// eventually waits for cond with a generous deadline.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
