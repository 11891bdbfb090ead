// Package mongotest runs rheo's MongoDB backend against an embedded FerretDB
// (a MongoDB wire-protocol server over SQLite), or against a real MongoDB
// named by RHEO_TEST_MONGO. It is a nested module so that FerretDB never
// enters the dependency graph of rheo's users.
package mongotest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Server is a running MongoDB-compatible server.
type Server struct {
	// URI is the server's mongodb:// URI, without a database.
	URI  string
	stop func()
	// pg reaches the PostgreSQL under FerretDB's PostgreSQL handler (nil
	// under its SQLite handler or a real MongoDB).
	pg *pgxpool.Pool
}

// Close stops an embedded server (a no-op for RHEO_TEST_MONGO).
func (s *Server) Close() { s.stop() }

// Start returns the server named by RHEO_TEST_MONGO when set, or starts an
// embedded FerretDB on a free loopback port: with its SQLite handler (data
// in dir), or with its PostgreSQL handler on the database named by
// RHEO_FERRETDB_POSTGRES (each test database becomes a schema there, and is
// dropped with it). FerretDB's SQLite handler checks an insert's _id
// against the whole collection, so loading grows quadratically with its
// size; the PostgreSQL handler keeps _id in a unique index.
func Start(dir string) (*Server, error) {
	if uri := os.Getenv("RHEO_TEST_MONGO"); uri != "" {
		return &Server{URI: uri, stop: func() {}}, nil
	}
	cfg := &ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:  "sqlite",
		// Durability is not under test: skip the fsyncs.
		SQLiteURL: "file:" + dir + "/?_pragma=synchronous(OFF)",
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	pg := os.Getenv("RHEO_FERRETDB_POSTGRES")
	if pg != "" {
		u, err := url.Parse(pg)
		if err != nil {
			return nil, fmt.Errorf("RHEO_FERRETDB_POSTGRES: %w", err)
		}
		// FerretDB's lookups by _id are served by the GIN index IndexIDs
		// adds only when planned with the _id key as a constant (a
		// prepared statement's generic plan has it as a parameter), and
		// even on a table whose statistics are not yet gathered.
		q := u.Query()
		q.Set("plan_cache_mode", "force_custom_plan")
		q.Set("enable_seqscan", "off")
		u.RawQuery = q.Encode()
		pg = u.String()
		cfg.Handler, cfg.SQLiteURL, cfg.PostgreSQLURL = "postgresql", "", pg
	}
	f, err := ferretdb.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("start FerretDB: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	uri := f.MongoDBURI()
	// Wait until it answers.
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err == nil {
		pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = client.Ping(pctx, nil)
		pcancel()
		_ = client.Disconnect(context.Background())
	}
	if err != nil {
		cancel()
		<-done
		return nil, fmt.Errorf("FerretDB at %s does not answer: %w", uri, err)
	}
	s := &Server{URI: uri, stop: func() { cancel(); <-done }}
	if pg != "" {
		if s.pg, err = pgxpool.New(context.Background(), pg); err != nil {
			s.stop()
			return nil, fmt.Errorf("RHEO_FERRETDB_POSTGRES: %w", err)
		}
		s.stop = func() { s.pg.Close(); cancel(); <-done }
	}
	return s, nil
}

// IndexIDs makes FerretDB's PostgreSQL handler serve a find by _id from an
// index, as MongoDB's _id index does: that handler filters _id with the
// jsonb containment operator @>, which its own btree index on _id cannot
// serve, so every point lookup would scan the collection. It adds a GIN
// index on _id to every table of the database's schema, without a pending
// list (fastupdate, which every lookup would scan through). With the SQLite
// handler or a real MongoDB it does nothing.
func (s *Server) IndexIDs(ctx context.Context, database string) error {
	if s.pg == nil {
		return nil
	}
	rows, err := s.pg.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_name NOT LIKE '\_ferretdb\_%'`, database)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING gin ((_jsonb->'_id') jsonb_path_ops) WITH (fastupdate = off)`,
			pgx.Identifier{t + "_id_gin"}.Sanitize(), pgx.Identifier{database, t}.Sanitize())
		if _, err := s.pg.Exec(ctx, q); err != nil {
			return fmt.Errorf("index _id of %s.%s: %w", database, t, err)
		}
	}
	return nil
}

var dbSeq atomic.Int64

// Database returns a fresh database name, unique in this process, and
// registers its removal with tb.
func (s *Server) Database(tb testing.TB, client *mongo.Client) string {
	name := fmt.Sprintf("rheo_t%d_%d", os.Getpid(), dbSeq.Add(1))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Database(name).Drop(ctx)
	})
	return name
}
