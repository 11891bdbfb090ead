package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the database/sql driver rheo's SQLite store uses
)

// pgBareClaimDelete is the PostgreSQL floor for a queue: n rows, two
// goroutines, each claiming 100 rows with FOR UPDATE SKIP LOCKED in one
// transaction and deleting them in a second.
func pgBareClaimDelete(ctx context.Context, e *env, n int) (float64, error) {
	schema, drop, err := e.schema(ctx, "bare")
	if err != nil {
		return 0, err
	}
	defer drop()
	tbl := schema + ".q"
	for _, q := range []string{
		"CREATE TABLE " + tbl + " (id bigserial PRIMARY KEY, state int NOT NULL DEFAULT 0, payload jsonb NOT NULL)",
		fmt.Sprintf(`INSERT INTO %s (payload) SELECT jsonb_build_object('order_id', i, 'customer', 'c-' || (i %% 977),
			'amount_cents', 1000 + i %% 50000, 'currency', 'EUR', 'status', 'created', 'items', 3) FROM generate_series(1, %d) i`, tbl, n),
		"VACUUM ANALYZE " + tbl,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			return 0, err
		}
	}
	claim := "WITH c AS (SELECT id FROM " + tbl + " WHERE state = 0 ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED), " +
		"u AS (UPDATE " + tbl + " t SET state = 1 FROM c WHERE t.id = c.id RETURNING t.id, t.payload) " +
		"SELECT id, payload FROM u"
	var done atomic.Int64
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	start := e.start()
	for range 2 {
		wg.Go(func() {
			ids := make([]int64, 0, 100)
			for done.Load() < int64(n) {
				ids = ids[:0]
				rows, err := e.pool.Query(ctx, claim)
				if err != nil {
					errs <- err
					return
				}
				for rows.Next() {
					var id int64
					var p []byte
					if err := rows.Scan(&id, &p); err != nil {
						rows.Close()
						errs <- err
						return
					}
					ids = append(ids, id)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					errs <- err
					return
				}
				if len(ids) == 0 {
					continue
				}
				if _, err := e.pool.Exec(ctx, "DELETE FROM "+tbl+" WHERE id = ANY($1)", ids); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	elapsed := e.stop(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return rate(n, elapsed), nil
}

// pgBareInsert is the PostgreSQL floor for appends: one producer inserting
// n freshly built rows (text id, jsonb payload, one primary key) with a
// multi-row INSERT of size rows per statement.
func pgBareInsert(size int) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		schema, drop, err := e.schema(ctx, "bare")
		if err != nil {
			return 0, err
		}
		defer drop()
		tbl := schema + ".ins"
		if _, err := e.pool.Exec(ctx, "CREATE TABLE "+tbl+" (id bigserial PRIMARY KEY, eid text NOT NULL, payload jsonb NOT NULL)"); err != nil {
			return 0, err
		}
		q := "INSERT INTO " + tbl + " (eid, payload) SELECT i, p::jsonb FROM unnest($1::text[], $2::text[]) AS t(i, p)"
		ids := make([]string, size)
		ps := make([]string, size)
		start := e.start()
		for i := 0; i < n; i += size {
			m := min(size, n-i)
			for j := range m {
				ids[j] = strconv.Itoa(i + j)
				ps[j] = payloadString(i + j)
			}
			if _, err := e.pool.Exec(ctx, q, ids[:m], ps[:m]); err != nil {
				return 0, err
			}
		}
		return rate(n, e.stop(start)), nil
	}
}

// redisBareXAdd is the Redis floor for appends: one producer sending n
// XADDs, size per pipeline.
func redisBareXAdd(size int) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		p, del := e.prefix("bare")
		defer del()
		start := e.start()
		if err := xadd(ctx, e.rdb, p+"s", n, size); err != nil {
			return 0, err
		}
		return rate(n, e.stop(start)), nil
	}
}

func xadd(ctx context.Context, rdb *goredis.Client, key string, n, size int) error {
	for i := 0; i < n; i += size {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+size, n); j++ {
			pipe.XAdd(ctx, &goredis.XAddArgs{Stream: key, Values: []any{"type", "order.created", "key", strconv.Itoa(j), "payload", payload(make([]byte, 0, 128), j)}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// redisBareGroup is the Redis floor for a consumer group: n entries (setup),
// then two goroutines each looping XREADGROUP COUNT 100 + XACK.
func redisBareGroup(ctx context.Context, e *env, n int) (float64, error) {
	p, del := e.prefix("bare")
	defer del()
	key := p + "s"
	if err := xadd(ctx, e.rdb, key, n, 1000); err != nil {
		return 0, err
	}
	if err := e.rdb.XGroupCreate(ctx, key, "g", "0").Err(); err != nil {
		return 0, err
	}
	var done atomic.Int64
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	start := e.start()
	for w := range 2 {
		wg.Go(func() {
			for done.Load() < int64(n) {
				res, err := e.rdb.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: "g", Consumer: fmt.Sprint("w", w), Streams: []string{key, ">"}, Count: 100, Block: -1}).Result()
				if err == goredis.Nil {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				var ids []string
				for _, s := range res {
					for _, m := range s.Messages {
						ids = append(ids, m.ID)
					}
				}
				if len(ids) == 0 {
					continue
				}
				if err := e.rdb.XAck(ctx, key, "g", ids...).Err(); err != nil {
					errs <- err
					return
				}
				done.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	elapsed := e.stop(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return rate(n, elapsed), nil
}

// openSQLite opens a fresh SQLite file with the settings rheo's SQLite
// store uses (WAL, synchronous NORMAL unless full), one writer connection.
func openSQLite(e *env, full bool) (*sql.DB, func(), error) {
	path, rm := e.file("bare")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, err
	}
	sync := "NORMAL"
	if full {
		sync = "FULL"
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+sync+")&_pragma=busy_timeout(5000)")
	if err != nil {
		rm()
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE q (id INTEGER PRIMARY KEY, eid TEXT NOT NULL, payload TEXT NOT NULL)"); err != nil {
		db.Close()
		rm()
		return nil, nil, err
	}
	return db, func() { db.Close(); rm() }, nil
}

// sqliteBareInsert is the SQLite floor for appends: one producer inserting
// n rows with a multi-row INSERT of size rows per transaction.
func sqliteBareInsert(size int) workload {
	return func(ctx context.Context, e *env, n int) (float64, error) {
		db, cleanup, err := openSQLite(e, false)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		start := e.start()
		if err := sqliteInsert(ctx, db, n, size); err != nil {
			return 0, err
		}
		return rate(n, e.stop(start)), nil
	}
}

func sqliteInsert(ctx context.Context, db *sql.DB, n, size int) error {
	args := make([]any, 0, 2*size)
	var q strings.Builder
	for i := 0; i < n; i += size {
		m := min(size, n-i)
		args = args[:0]
		q.Reset()
		q.WriteString("INSERT INTO q (eid, payload) VALUES ")
		for j := range m {
			if j > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?)")
			args = append(args, strconv.Itoa(i+j), payloadString(i+j))
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// sqliteBareQueue is the naive SQLite queue: one transaction per row,
// selecting the oldest row and deleting it, until n rows are gone.
func sqliteBareQueue(ctx context.Context, e *env, n int) (float64, error) {
	return sqliteBareQueueSync(ctx, e, n, false)
}

// sqliteBareQueueFull is sqliteBareQueue with synchronous FULL: every
// commit is on disk when it returns.
func sqliteBareQueueFull(ctx context.Context, e *env, n int) (float64, error) {
	return sqliteBareQueueSync(ctx, e, n, true)
}

func sqliteBareQueueSync(ctx context.Context, e *env, n int, full bool) (float64, error) {
	db, cleanup, err := openSQLite(e, full)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	if err := sqliteInsert(ctx, db, n, 500); err != nil {
		return 0, err
	}
	start := e.start()
	for range n {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		var id int64
		var p string
		if err := tx.QueryRowContext(ctx, "SELECT id, payload FROM q ORDER BY id LIMIT 1").Scan(&id, &p); err != nil {
			tx.Rollback()
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM q WHERE id = ?", id); err != nil {
			tx.Rollback()
			return 0, err
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
	return rate(n, e.stop(start)), nil
}
