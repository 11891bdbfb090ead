package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/backend/postgres"
	rheoredis "github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/backend/sqlite"
	"github.com/rheo-go/rheo/internal/sample"
)

// env holds the connections every workload shares. Each workload run makes
// its own fresh PostgreSQL schema, Redis key prefix or SQLite file and removes
// it before it returns, so runs never see each other's data.
type env struct {
	pool    *pgxpool.Pool
	rdb     *goredis.Client
	tmp     string
	parts   int      // partitions of every rheo stream
	workers int      // handler concurrency of the runtime and of River
	cpu     bool     // -cpu: record the CPU of each timed part (cpu.go)
	spent   cpuTimes // the CPU of the last timed part, with cpu
	// noCheckpoint: the role may not run CHECKPOINT (see start).
	noCheckpoint bool
}

func newEnv(ctx context.Context, pgDSN, redisAddr string, parts, workers int) (*env, error) {
	e := &env{parts: parts, workers: workers}
	cfg, err := pgxpool.ParseConfig(pgDSN)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL DSN %q: %w", pgDSN, err)
	}
	// Enough connections for River's 100 workers, its completer and
	// producer, and rheo's runtime; the same pool serves every peer.
	cfg.MaxConns = 20
	e.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := e.pool.Ping(ctx); err != nil {
		e.pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %q is not answering: %w", pgDSN, err)
	}
	e.rdb = goredis.NewClient(&goredis.Options{Addr: redisAddr, PoolSize: 20})
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		e.close()
		return nil, fmt.Errorf("Redis at %s is not answering: %w", redisAddr, err)
	}
	e.tmp, err = os.MkdirTemp("", "rheo-peers-")
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.pool != nil {
		e.pool.Close()
	}
	if e.rdb != nil {
		e.rdb.Close()
	}
	if e.tmp != "" {
		os.RemoveAll(e.tmp)
	}
}

func token() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// schema creates a fresh PostgreSQL schema and returns its name and a
// function that drops it.
func (e *env) schema(ctx context.Context, peer string) (string, func(), error) {
	name := "peers_" + peer + "_" + token()
	if _, err := e.pool.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", nil, err
	}
	return name, func() {
		if _, err := e.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "peers: drop schema %s: %v\n", name, err)
		}
	}, nil
}

// prefix returns a fresh Redis key prefix and a function that deletes every
// key under it. UNLINK, not DEL: the keys leave the keyspace at once and
// Redis frees their memory in the background, where a DEL of a scale
// case's hash of 10 M fields blocked the server for longer than the
// client's read timeout.
func (e *env) prefix(peer string) (string, func()) {
	p := "peers:" + peer + ":" + token() + ":"
	return p, func() {
		ctx := context.Background()
		iter := e.rdb.Scan(ctx, 0, p+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "peers: scan %s*: %v\n", p, err)
		}
		for len(keys) > 0 {
			n := min(len(keys), 500)
			if err := e.rdb.Unlink(ctx, keys[:n]...).Err(); err != nil {
				fmt.Fprintf(os.Stderr, "peers: delete %s*: %v\n", p, err)
			}
			keys = keys[n:]
		}
	}
}

// file returns a fresh SQLite path and a function that removes its files.
func (e *env) file(peer string) (string, func()) {
	dir := filepath.Join(e.tmp, peer+"-"+token())
	path := filepath.Join(dir, "db.sqlite")
	return path, func() { os.RemoveAll(dir) }
}

// rheoClient opens rheo on store in fresh storage.
func (e *env) rheoClient(ctx context.Context, store string) (*rheo.Client, func(), error) {
	switch store {
	case "memory":
		c := rheo.New(memory.New())
		return c, func() { c.Close() }, nil
	case "postgres":
		name, drop, err := e.schema(ctx, "rheo")
		if err != nil {
			return nil, nil, err
		}
		b, err := postgres.New(e.pool, postgres.WithSchema(name))
		if err != nil {
			drop()
			return nil, nil, err
		}
		c := rheo.New(b)
		if err := c.Migrate(ctx); err != nil {
			c.Close()
			drop()
			return nil, nil, err
		}
		return c, func() { c.Close(); drop() }, nil
	case "redis":
		p, del := e.prefix("rheo")
		b, err := rheoredis.New(e.rdb, rheoredis.WithKeyPrefix(p))
		if err != nil {
			del()
			return nil, nil, err
		}
		c := rheo.New(b)
		return c, func() { c.Close(); del() }, nil
	case "sqlite", "sqlite-full":
		path, rm := e.file("rheo")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, nil, err
		}
		var opts []sqlite.Option
		if store == "sqlite-full" {
			opts = append(opts, sqlite.WithSynchronous(sqlite.SynchronousFull))
		}
		b, err := sqlite.Open(ctx, path, opts...)
		if err != nil {
			rm()
			return nil, nil, err
		}
		c := rheo.New(b)
		return c, func() { c.Close(); rm() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", store)
}

// payload builds a fresh JSON object of about 100 bytes; every workload of
// every peer carries the same bytes, built anew for each message.
func payload(buf []byte, i int) []byte { return sample.Order(buf, i) }

// payloadString is payload as a string, for drivers that want text.
func payloadString(i int) string { return string(payload(make([]byte, 0, 128), i)) }

// until waits for cond with a deadline generous enough for a busy machine.
func until(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", d)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
