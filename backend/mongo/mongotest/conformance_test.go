package mongotest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/rheo-go/rheo"
	rmongo "github.com/rheo-go/rheo/backend/mongo"
	"github.com/rheo-go/rheo/rheotest"
)

var (
	srv    *Server
	client *mongo.Client
	tmpDir string // the embedded server's directory, removed after the tests
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorkerDSN) != "" {
		os.Exit(m.Run()) // a worker of TestMultiProcessKill: it brings its server's DSN
	}
	dir, err := os.MkdirTemp("", "rheo-ferretdb-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpDir = dir
	srv, err = Start(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	client, err = mongo.Connect(options.Client().ApplyURI(srv.URI))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = client.Disconnect(context.Background())
	srv.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// open returns a fresh, migrated backend on a database of its own.
func open(t testing.TB, opts ...rmongo.Option) *rmongo.Backend {
	t.Helper()
	db := srv.Database(t, client)
	b, err := rmongo.New(client, db, opts...)
	require.NoError(t, err)
	require.NoError(t, b.Migrate(context.Background()))
	require.NoError(t, srv.IndexIDs(context.Background(), db))
	t.Cleanup(func() { b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	rheotest.RunBackend(t, func(t testing.TB) rheo.Backend { return open(t) })
}

func TestShared(t *testing.T) {
	rheotest.RunShared(t, func(t testing.TB) (rheo.Backend, rheo.Backend) {
		db := srv.Database(t, client)
		var bs [2]rheo.Backend
		for i := range bs {
			b, err := rmongo.New(client, db)
			require.NoError(t, err)
			require.NoError(t, b.Migrate(context.Background()))
			t.Cleanup(func() { b.Close() })
			bs[i] = b
		}
		require.NoError(t, srv.IndexIDs(context.Background(), db))
		return bs[0], bs[1]
	})
}
