package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
// the real memory: DSN cannot do (each Open is a new, empty store, and so
// the command refuses memory: but for demo and bench). Its DSN names no
// registered backend: the test's opener alone serves it.
func memoryCLI(t *testing.T) *cli {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	return &cli{t: t, dsn: "memtest:", backend: b,
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

// app is the command as the test runs it: the test's store, no environment.
func (c *cli) app(stdin string, out, errOut io.Writer) *app {
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

// start runs the command in the background, writing to out and errOut, and
// returns where its exit code will arrive.
func (c *cli) start(ctx context.Context, out, errOut io.Writer, args ...string) <-chan int {
	done := make(chan int, 1)
	a := c.app("", out, errOut)
	go func() { done <- a.run(ctx, append([]string{"--dsn", c.dsn}, args...)) }()
	return done
}

// exited waits (a minute at most) for a command started by start to exit
// and returns its exit code; what is the failure when it does not.
func (c *cli) exited(done <-chan int, what string) int {
	c.t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(time.Minute):
		c.t.Fatal(what)
		return -1
	}
}

// requireCode requires the exit code of the run of args, showing its output
// when it differs.
func (c *cli) requireCode(code int, r result, args []string) {
	c.t.Helper()
	require.Equal(c.t, code, r.code, "rheo %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.err)
}

// ok runs the command, requires exit 0 and returns stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	return c.okStdin("", args...)
}

// okStdin is ok with stdin.
func (c *cli) okStdin(stdin string, args ...string) string {
	c.t.Helper()
	r := c.runCtx(context.Background(), stdin, args...)
	c.requireCode(exitOK, r, args)
	return r.out
}

// fails runs the command and requires the exit code and a one-line
// "rheo: …" message on stderr containing want.
func (c *cli) fails(code int, want string, args ...string) result {
	c.t.Helper()
	return c.failsStdin("", code, want, args...)
}

// failsStdin is fails with stdin.
func (c *cli) failsStdin(stdin string, code int, want string, args ...string) result {
	c.t.Helper()
	r := c.runCtx(context.Background(), stdin, args...)
	c.requireCode(code, r, args)
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

// ordersWithGroup creates the stream orders holding one event per line of
// payloads, and group on it from the beginning.
func (c *cli) ordersWithGroup(group, payloads string) {
	c.t.Helper()
	c.ok("create-stream", "orders")
	c.okStdin(payloads, "append", "orders")
	c.ok("create-group", "orders", group)
}

// events returns the events `rheo query orders args…` lists, with the next
// page's cursor.
func (c *cli) events(args ...string) (evs []eventJSON, next string) {
	c.t.Helper()
	var page struct {
		Events     []eventJSON `json:"events"`
		NextCursor string      `json:"next_cursor"`
	}
	c.jsonOK(&page, append([]string{"query", "orders"}, args...)...)
	return page.Events, page.NextCursor
}

// fetchLeases leases up to limit events of the group straight from the store.
func fetchLeases(t *testing.T, cl *rheo.Client, stream, group string, limit int) []rheo.Lease {
	t.Helper()
	ls, err := cl.Fetch(context.Background(), stream, group, rheo.FetchOptions{Limit: limit})
	require.NoError(t, err)
	return ls
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
