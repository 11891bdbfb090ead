package mongotest

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

var (
	buildOnce sync.Once
	rheoBin   string
	buildErr  error
	buildOut  []byte
)

// rheoCommand builds the rheo command once per test binary.
func rheoCommand(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the rheo command")
	}
	buildOnce.Do(func() {
		rheoBin = filepath.Join(tmpDir, "rheo")
		// Built in the root module, whose go.sum covers the command's
		// dependencies (this test module does not need them).
		build := exec.Command("go", "build", "-o", rheoBin, "./cmd/rheo")
		build.Dir = filepath.Join("..", "..", "..")
		buildOut, buildErr = build.CombinedOutput()
	})
	require.NoError(t, buildErr, "%s", buildOut)
	return rheoBin
}

// runRheo runs the command and returns its combined output and exit code.
func runRheo(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("rheo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if ee != nil {
		return string(out), ee.ExitCode()
	}
	return string(out), 0
}

// TestDemoOnMongo builds the rheo command and runs its crash demo (worker
// processes, a SIGKILL, a lease moving to another worker, a stale ack) on a
// mongodb:// DSN served by the embedded server, migrated first with
// 'rheo migrate' as every shared store is.
func TestDemoOnMongo(t *testing.T) {
	bin := rheoCommand(t)
	dsn := dsnFor(srv.URI, srv.Database(t, client))
	out, code := runRheo(t, bin, "migrate", "--dsn", dsn)
	require.Zero(t, code, "%s", out)
	out, code = runRheo(t, bin, "demo", "--dsn", dsn)
	require.Zero(t, code, "%s", out)
	for _, step := range []string{"kill", "stale ack", "worker B", "query"} {
		require.Contains(t, out, step, "%s", out)
	}
	require.True(t, strings.Contains(out, "mongodb://"), "the demo names its store: %s", out)
	require.Contains(t, out, "deleted the demo's stream orders and its group", "a successful demo leaves nothing behind")
	out, code = runRheo(t, bin, "streams", "--dsn", dsn)
	require.Zero(t, code, "%s", out)
	require.NotContains(t, out, "orders")
}

// TestCommandMigratesOnlyWithMigrate: the rheo command leaves a MongoDB
// database alone until 'rheo migrate' (as it does a PostgreSQL schema): a
// command naming a database that was never migrated (a typo, say) fails,
// names the fix and creates nothing.
func TestCommandMigratesOnlyWithMigrate(t *testing.T) {
	bin := rheoCommand(t)
	db := srv.Database(t, client)
	dsn := dsnFor(srv.URI, db)
	exists := func() bool {
		names, err := client.ListDatabaseNames(context.Background(), bson.D{})
		require.NoError(t, err)
		return slices.Contains(names, db)
	}
	for _, args := range [][]string{
		{"streams"},
		{"create-stream", "orders"},
		{"append", "orders", `{"n":1}`},
		{"lag", "orders", "g"},
		{"demo"},
	} {
		out, code := runRheo(t, bin, append(args, "--dsn", dsn)...)
		require.Equal(t, 1, code, "rheo %s: %s", args[0], out)
		require.Contains(t, out, "database "+db+" is not migrated: run `rheo migrate --dsn DSN` first", "rheo %s", args[0])
		require.False(t, exists(), "rheo %s created the database", args[0])
	}

	out, code := runRheo(t, bin, "migrate", "--dsn", dsn)
	require.Zero(t, code, "%s", out)
	require.True(t, exists())
	out, code = runRheo(t, bin, "create-stream", "orders", "--dsn", dsn)
	require.Zero(t, code, "%s", out)
	out, code = runRheo(t, bin, "streams", "--dsn", dsn)
	require.Zero(t, code, "%s", out)
	require.Contains(t, out, "orders")
}
