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
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Server is a running MongoDB-compatible server.
type Server struct {
	// URI is the server's mongodb:// URI, without a database.
	URI  string
	stop func()
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
	if pg := os.Getenv("RHEO_FERRETDB_POSTGRES"); pg != "" {
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
	return &Server{URI: uri, stop: func() { cancel(); <-done }}, nil
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
