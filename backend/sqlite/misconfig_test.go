package sqlite_test

import (
	"context"
	"os"
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

// TestDSNParameterMistakesAreRefused: a mistake in a DSN parameter is an
// ErrInvalidArgument naming the parameter and the fix, and no file is made.
func TestDSNParameterMistakesAreRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "never.db")
	for query, want := range map[string]string{
		"busy_timeout=-1s":                       "busy_timeout=-1s is negative (want a duration such as 5s; 0 does not wait)",
		"synchronous=sometimes&synchronous=full": `synchronous is given twice ("sometimes" and "full"): give it once`,
		"synchronous=full&synchronous=full":      `synchronous is given twice ("full" and "full")`,
		"busy_timeout=1s&busy_timeout=2s":        "busy_timeout is given twice",
		"synchronous=":                           "synchronous is empty: give it a value, or leave it out for the default",
		"SYNCHRONOUS=full":                       `unknown parameter "SYNCHRONOUS": did you mean synchronous?`,
		"busy_timeout=1s&cache=shared":           `unknown parameter "cache" (want synchronous, busy_timeout)`,
	} {
		t.Run(query, func(t *testing.T) {
			_, err := rheo.Open(ctx, "sqlite:"+path+"?"+query)
			require.ErrorIs(t, err, rheo.ErrInvalidArgument)
			require.ErrorContains(t, err, want)
		})
	}
	_, err := sqlite.Open(ctx, path, sqlite.WithBusyTimeout(-time.Second))
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	require.ErrorContains(t, err, "sqlite: busy timeout -1s is negative")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing is written")

	c, err := rheo.Open(ctx, "sqlite:"+filepath.Join(dir, "ok.db")+"?synchronous=FULL&busy_timeout=0s")
	require.NoError(t, err, "a busy timeout of 0 does not wait")
	defer c.Close()
	require.Contains(t, c.Backend().(*sqlite.Backend).Settings(), "synchronous=FULL busy_timeout=0s")
}

// A file SQLite cannot open (in a directory that does not exist, or a
// directory itself) is ErrMisconfigured saying what to check, not the
// ErrBackendUnavailable a caller would retry; nothing is created.
func TestUnopenableFileIsMisconfigured(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for name, path := range map[string]string{
		"missing directory": filepath.Join(dir, "no", "such", "dir", "rheo.db"),
		"a directory":       dir,
	} {
		_, err := sqlite.Open(ctx, path)
		require.ErrorIs(t, err, rheo.ErrMisconfigured, name)
		require.ErrorContains(t, err, "SQLite cannot open the file: check that it is a file (not a directory), that its directory exists", name)
		require.Equal(t, rheo.Fatal, rheo.Classify(err), name)
	}
	_, err := os.Stat(filepath.Join(dir, "no"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
