package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/sqlite"
)

func TestUnmigratedStoreIsMisconfigured(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fresh.db")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := sqlite.Open(ctx, path, sqlite.WithoutMigrate())
	require.NoError(t, err)
	c := rheo.New(b)
	defer c.Close()

	err = c.Ping(ctx)
	require.ErrorIs(t, err, rheo.ErrMisconfigured)
	require.ErrorContains(t, err, "run `rheo migrate")
	require.Equal(t, rheo.Fatal, rheo.Classify(err))

	_, err = c.ListStreams(ctx)
	require.ErrorIs(t, err, rheo.ErrMisconfigured)

	cons, err := c.NewConsumer(rheo.ConsumerConfig{Stream: "s", Group: "g",
		Handler: func(context.Context, rheo.Event) error { return nil }})
	require.NoError(t, err)
	start := time.Now()
	err = cons.Run(ctx)
	t.Logf("Run returned in %v: %v", time.Since(start), err)
	require.ErrorIs(t, err, rheo.ErrMisconfigured)

	require.NoError(t, c.Migrate(ctx))
	require.NoError(t, c.Ping(ctx), "a migrated store pings")
}
