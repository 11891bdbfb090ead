package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

// privateServer is a PostgreSQL instance of this test alone, in a temporary
// directory, so that it can be crashed without disturbing the shared server
// other packages test against.
type privateServer struct {
	t    *testing.T
	bin  string // directory of initdb, pg_ctl, postgres
	dir  string // owned by the server's OS user
	data string
	port int
	cred *syscall.Credential // nil when not running as root
}

// skipOrFail skips loudly, or fails under CI=true, when the test cannot run.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (required under CI)", msg)
	}
	t.Skipf("SKIPPING: %s", msg)
}

// startPrivateServer initdbs a cluster in a fresh temporary directory and
// starts it on a free port, fsync on, sockets in the directory. PostgreSQL
// refuses to run as root: as root, the server runs as the "postgres" OS user.
func startPrivateServer(t *testing.T) *privateServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			bins = []string{p}
		}
	}
	if len(bins) == 0 {
		skipOrFail(t, "no PostgreSQL server binaries (initdb) under /usr/lib/postgresql/*/bin or on PATH")
	}
	// Highest major version first.
	sort.Slice(bins, func(i, j int) bool { return pgMajor(bins[i]) > pgMajor(bins[j]) })
	s := &privateServer{t: t, bin: filepath.Dir(bins[0])}

	dir, err := os.MkdirTemp("", "rheo-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skipOrFail(t, "running as root and there is no postgres OS user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	s.dir = dir
	s.data = filepath.Join(dir, "data")

	s.port = freeLowPort(t)

	s.run("initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
	s.run("pg_ctl", "-D", s.data, "-l", filepath.Join(dir, "log"), "-w", "-t", "30", "-o", s.options(), "start")
	t.Cleanup(func() {
		cmd := s.cmd("pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("stop private server: %v\n%s", err, out)
		}
	})
	return s
}

func pgMajor(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// options are the server's settings: a small footprint, durable commits.
func (s *privateServer) options() string {
	return fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on "+
		"-c max_connections=30 -c shared_buffers=16MB", s.port, s.dir)
}

func (s *privateServer) cmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func (s *privateServer) run(name string, args ...string) {
	s.t.Helper()
	out, err := s.cmd(name, args...).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("%s %v: %v\n%s\nserver log:\n%s", name, args, err, out, log)
	}
}

// crashRestart kills the server without a shutdown checkpoint (every
// backend process gets SIGQUIT) and starts it again, which replays the WAL:
// the restart a crash causes.
func (s *privateServer) crashRestart() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.data, "-l", filepath.Join(s.dir, "log"), "-m", "immediate", "-w", "-t", "30",
		"-o", s.options(), "restart")
}

func (s *privateServer) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", s.port)
}

// TestServerCrashRestart crashes the PostgreSQL server (pg_ctl restart -m
// immediate) while a consumer works through a stream that a producer keeps
// appending to. The consumer recovers by itself (its failed fetches and
// settles back off and retry; leases whose settle was lost expire and are
// redelivered), and in the end every event in the stream was handled at
// least once, every acknowledged append survived the crash (those made
// right before it included), nothing is dead-lettered and the lag is zero
// on every partition.
func TestServerCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("server restart test skipped in -short mode")
	}
	srv := startPrivateServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	be, err := postgres.Open(ctx, srv.dsn())
	require.NoError(t, err)
	// The crash makes every inflight settle log a warning: keep errors only.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c := rheo.New(be, rheo.WithLogger(quiet))
	defer c.Close()
	require.NoError(t, c.Migrate(ctx))
	const parts = 4
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 1000}))

	var (
		mu      sync.Mutex
		handled = map[string]int{}
		acked   []string // IDs of appends the server acknowledged
	)
	appendBatch := func(n, from int) error {
		msgs := make([]rheo.Message, n)
		for i := range msgs {
			msgs[i] = rheo.Message{Type: "t", Key: strconv.Itoa(from + i), Payload: []byte(`{"n":1}`)}
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		evs, err := c.AppendBatch(actx, "s", msgs)
		if err != nil {
			return err
		}
		mu.Lock()
		for _, e := range evs {
			acked = append(acked, e.ID)
		}
		mu.Unlock()
		return nil
	}
	for i := 0; i < 2000; i += 500 {
		require.NoError(t, appendBatch(500, i))
	}

	k, err := c.NewConsumer(rheo.ConsumerConfig{
		Stream: "s", Group: "g", Concurrency: 4, MaxInflight: 100,
		// Settles the crash loses leave their leases to expire: keep that short.
		LeaseDuration: time.Second,
		PollInterval:  50 * time.Millisecond,
		Backoff:       func(int) time.Duration { return 10 * time.Millisecond },
		Handler: func(_ context.Context, e rheo.Event) error {
			mu.Lock()
			handled[e.ID]++
			mu.Unlock()
			return nil
		},
	})
	require.NoError(t, err)
	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- k.Run(runCtx) }()

	// The producer keeps appending through the crash, so the consumer has
	// work on both sides of it. Failed appends (unavailable or ambiguous)
	// are not counted as acknowledged; the stream is read back at the end.
	var (
		restarted   atomic.Bool
		stopProduce = make(chan struct{})
		produced    = make(chan struct{})
		failures    atomic.Int64
	)
	go func() {
		defer close(produced)
		next, afterRestart := 2000, 0
		for afterRestart < 1500 {
			select {
			case <-stopProduce:
				return
			default:
			}
			if err := appendBatch(50, next); err != nil {
				failures.Add(1)
				time.Sleep(20 * time.Millisecond) // the server is down: do not spin
			} else if restarted.Load() {
				afterRestart += 50
			}
			next += 50
		}
	}()
	defer func() { close(stopProduce); <-produced }()

	// Crash once the consumer is well into the stream.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= 1000
	}, 20*time.Second, 5*time.Millisecond, "consumer made no progress before the crash")
	mu.Lock()
	beforeCrash := append([]string(nil), acked[max(0, len(acked)-100):]...)
	ackedBeforeCrash, handledBeforeCrash := len(acked), len(handled)
	mu.Unlock()
	srv.crashRestart()
	restarted.Store(true)
	t.Logf("crashed after %d acknowledged appends and %d handled events", ackedBeforeCrash, handledBeforeCrash)

	select {
	case <-produced:
	case <-time.After(25 * time.Second):
		t.Fatal("producer did not get 1,500 appends through after the restart")
	}

	// The consumer catches up by itself.
	var lag rheo.Lag
	require.Eventually(t, func() bool {
		lag, err = c.Lag(ctx, "s", "g")
		return err == nil && lag.Total == 0
	}, 25*time.Second, 20*time.Millisecond, "consumer did not catch up after the restart: %+v, %v", lag, err)
	stopRun()
	require.NoError(t, <-runErr)

	// Every partition's frontier is its high watermark.
	require.Len(t, lag.Partitions, parts)
	for _, p := range lag.Partitions {
		require.Equal(t, p.HighWatermark, p.Frontier, "partition %d", p.Partition)
		require.Zero(t, p.Lag, "partition %d", p.Partition)
	}
	// Acked, not given up on.
	dead, err := c.DeadLetters(ctx, "s", "g", rheo.DeadLetterOptions{})
	require.NoError(t, err)
	require.Empty(t, dead)

	// Every event in the stream was handled; every acknowledged append is
	// in the stream, those made right before the crash included.
	stored := map[string]bool{}
	for e, err := range c.QueryAll(ctx, rheo.Query{Stream: "s", Limit: 1000}) {
		require.NoError(t, err)
		stored[e.ID] = true
	}
	mu.Lock()
	defer mu.Unlock()
	var total int64
	for _, p := range lag.Partitions {
		total += p.HighWatermark
	}
	require.Equal(t, int64(len(stored)), total, "high watermarks count every stored event")
	for _, id := range beforeCrash {
		require.True(t, stored[id], "append %s acknowledged right before the crash is lost", id)
	}
	for _, id := range acked {
		require.True(t, stored[id], "acknowledged append %s is lost", id)
	}
	for id := range stored {
		require.Positive(t, handled[id], "event %s was never handled", id)
	}
	dups := 0
	for _, n := range handled {
		dups += n - 1
	}
	t.Logf("%d events stored (%d acknowledged appends, %d failed append batches), %d handled more than once",
		len(stored), len(acked), failures.Load(), dups)
}

// freeLowPort returns a loopback port that is free now and lies below the
// kernel's ephemeral range (32768 and up here): the server restarts on it,
// and while it is down no outgoing connection of a busy machine can take it.
func freeLowPort(t testing.TB) int {
	for range 1000 {
		p := 10000 + rand.IntN(22000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			require.NoError(t, l.Close())
			return p
		}
	}
	t.Fatal("no free loopback port below 32000")
	return 0
}
