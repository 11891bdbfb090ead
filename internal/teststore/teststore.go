// Package teststore gives tests fresh, migrated stores of every backend, each
// in its own namespace (a temporary SQLite file, a PostgreSQL schema, a Redis
// key prefix) that is removed when the test ends, with the DSN that opens
// the same namespace from another process.
//
// PostgreSQL and Redis are found through RHEO_TEST_POSTGRES and
// RHEO_TEST_REDIS (default the local servers). When one is unreachable the
// test is skipped loudly, or fails under CI=true.
package teststore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	// The DSN schemes the stores open with.
	_ "github.com/rheo-go/rheo/backend/postgres"
	_ "github.com/rheo-go/rheo/backend/redis"
	_ "github.com/rheo-go/rheo/backend/sqlite"
)

// Store makes fresh stores of one backend.
type Store struct {
	Name string
	// Open returns a fresh migrated backend and the DSN that opens the same
	// store ("" for memory, which no other process can see).
	Open func(t testing.TB) (rheo.Backend, string)
}

// Memory, SQLite, Postgres and Redis are the backends.
var (
	Memory   = Store{"memory", openMemory}
	SQLite   = Store{"sqlite", openSQLite}
	Postgres = Store{"postgres", openPostgres}
	Redis    = Store{"redis", openRedis}
)

// All lists every backend.
func All() []Store { return []Store{Memory, SQLite, Postgres, Redis} }

func openMemory(testing.TB) (rheo.Backend, string) { return memory.New(), "" }

func openSQLite(t testing.TB) (rheo.Backend, string) {
	t.Helper()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "rheo.db")
	return migrated(t, dsn)
}

func migrated(t testing.TB, dsn string) (rheo.Backend, string) {
	t.Helper()
	b, err := rheo.Open(context.Background(), dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	if err := b.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b.Backend(), dsn
}

// PostgresDSN is the test server's DSN.
func PostgresDSN() string {
	if v := os.Getenv("RHEO_TEST_POSTGRES"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisURL is the test server's URL.
func RedisURL() string {
	if v := os.Getenv("RHEO_TEST_REDIS"); v != "" {
		return v
	}
	return "redis://127.0.0.1:6379/0"
}

func unreachable(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is unreachable: %v", what, err)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (required under CI)", msg)
	}
	t.Skip("SKIPPING: " + msg)
}

func token() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func withParam(dsn, k, v string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func openPostgres(t testing.TB) (rheo.Backend, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, PostgresDSN())
	if err != nil {
		unreachable(t, "PostgreSQL at RHEO_TEST_POSTGRES ("+PostgresDSN()+")", err)
	}
	_ = conn.Close(ctx)
	schema := "rheotest_" + token()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, PostgresDSN())
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		DropSchema(t, conn, schema)
	})
	return migrated(t, withParam(PostgresDSN(), "rheo_schema", schema))
}

func openRedis(t testing.TB) (rheo.Backend, string) {
	t.Helper()
	o, err := goredis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("RHEO_TEST_REDIS: %v", err)
	}
	c := goredis.NewClient(o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		unreachable(t, "Redis at RHEO_TEST_REDIS ("+RedisURL()+")", err)
	}
	prefix := "rheotest:" + token() + ":"
	t.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
			if err != nil {
				t.Logf("cleanup of %s: %v", prefix, err)
				return
			}
			if len(keys) > 0 {
				c.Unlink(ctx, keys...)
			}
			if next == 0 {
				return
			}
			cursor = next
		}
	})
	return migrated(t, withParam(RedisURL(), "key_prefix", prefix))
}

// Execer runs a statement: a *pgx.Conn or a *pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DropSchema drops a test's PostgreSQL schema. A statement of the test
// still running (a fetch of a goroutine that outlived it, say) can make the
// DROP lose a deadlock the server breaks; it is tried again, for up to 30
// seconds, so that the schema is not left behind. A last failure is logged.
func DropSchema(t testing.TB, db Execer, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		_, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		if err == nil {
			return
		}
		var pe *pgconn.PgError
		lostLock := errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "55P03") // deadlock, lock not available
		if !lostLock || ctx.Err() != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}
