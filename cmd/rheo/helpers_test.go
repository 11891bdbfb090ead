package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
)

// cli runs the command in-process against one store.
type cli struct {
	t   *testing.T
	dsn string
	// open replaces rheo.Open, to share one memory store between runs.
	open func(ctx context.Context, dsn string, opts ...rheo.Option) (*rheo.Client, error)
	// backend is the shared store when open is set.
	backend rheo.Backend
}

type result struct {
	out, err string
	code     int
}

// keepOpen shares one backend between clients: closing a client must not
// close the store the next invocation uses.
type keepOpen struct{ rheo.Backend }

func (keepOpen) Close() error { return nil }

// memoryCLI keeps one memory store for every invocation of the test, which
// the real memory: DSN cannot do (each Open is a new, empty store).
func memoryCLI(t *testing.T) *cli {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	return &cli{t: t, dsn: "memory:", backend: b,
		open: func(_ context.Context, _ string, opts ...rheo.Option) (*rheo.Client, error) {
			return rheo.New(keepOpen{b}, opts...), nil
		}}
}

// sqliteCLI uses a SQLite file of its own: every invocation opens and closes
// it, as separate runs of the command do.
func sqliteCLI(t *testing.T) *cli {
	return &cli{t: t, dsn: "sqlite:" + filepath.Join(t.TempDir(), "rheo.db")}
}

// newCLI returns the store most tests use: the command's default backend.
func newCLI(t *testing.T) *cli { return sqliteCLI(t) }

// client opens the test's store directly, to set up or inspect state.
func (c *cli) client() *rheo.Client {
	c.t.Helper()
	var (
		cl  *rheo.Client
		err error
	)
	if c.open != nil {
		cl, err = c.open(context.Background(), c.dsn)
	} else {
		cl, err = rheo.Open(context.Background(), c.dsn)
	}
	require.NoError(c.t, err)
	require.NoError(c.t, cl.Migrate(context.Background()))
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func (c *cli) app(stdin string, out, errOut *bytes.Buffer) *app {
	a := newApp(strings.NewReader(stdin), out, errOut)
	a.getenv = func(string) string { return "" }
	if c.open != nil {
		a.open = c.open
	}
	return a
}

// runCtx runs the command with stdin and returns its output and exit code.
func (c *cli) runCtx(ctx context.Context, stdin string, args ...string) result {
	var out, errOut bytes.Buffer
	code := c.app(stdin, &out, &errOut).run(ctx, append([]string{"--dsn", c.dsn}, args...))
	return result{out: out.String(), err: errOut.String(), code: code}
}

func (c *cli) run(args ...string) result {
	return c.runCtx(context.Background(), "", args...)
}

// ok runs the command, requires exit 0 and returns stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	require.Equal(c.t, 0, r.code, "rheo %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.err)
	return r.out
}

// okStdin is ok with stdin.
func (c *cli) okStdin(stdin string, args ...string) string {
	c.t.Helper()
	r := c.runCtx(context.Background(), stdin, args...)
	require.Equal(c.t, 0, r.code, "rheo %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.err)
	return r.out
}

// fails runs the command and requires the exit code and a one-line
// "rheo: …" message on stderr containing want.
func (c *cli) fails(code int, want string, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	require.Equal(c.t, code, r.code, "rheo %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.err)
	first, _, _ := strings.Cut(r.err, "\n")
	require.True(c.t, strings.HasPrefix(first, "rheo: "), "stderr: %q", r.err)
	require.Contains(c.t, first, want)
	return r
}

// jsonOK runs the command with --json and decodes stdout into v.
func (c *cli) jsonOK(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "--json")...)
	require.NoError(c.t, json.Unmarshal([]byte(out), v), "stdout: %s", out)
}

// syncBuffer is a bytes.Buffer safe to read while a command writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
