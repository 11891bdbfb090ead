package mongotest

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDemoOnMongo builds the rheo command and runs its crash demo (worker
// processes, a SIGKILL, a lease moving to another worker, a stale ack) on a
// mongodb:// DSN served by the embedded server.
func TestDemoOnMongo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the rheo command")
	}
	bin := filepath.Join(t.TempDir(), "rheo")
	// Built in the root module, whose go.sum covers the command's
	// dependencies (this test module does not need them).
	build := exec.Command("go", "build", "-o", bin, "./cmd/rheo")
	build.Dir = filepath.Join("..", "..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	dsn := dsnFor(srv.URI, srv.Database(t, client))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--dsn", dsn)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	s := string(out)
	for _, step := range []string{"kill", "stale ack", "worker B", "query"} {
		require.Contains(t, s, step, "%s", s)
	}
	require.True(t, strings.Contains(s, "mongodb://"), "the demo names its store: %s", s)
}
