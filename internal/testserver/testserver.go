// Package testserver starts private database servers for tests that must
// crash or restart them without disturbing the shared servers other
// packages test against: a PostgreSQL cluster (initdb in a temporary
// directory) and a redis-server with an fsynced append-only file. Each
// listens on a loopback port below the ephemeral range, so that while it is
// down no outgoing connection of a busy machine can take its port, and is
// stopped and removed when the test ends. A missing binary skips the test
// loudly, or fails it under CI=true.
package testserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// SkipOrFail skips loudly, or fails under CI=true, when a test cannot run.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (required under CI)", msg)
	}
	t.Skipf("SKIPPING: %s", msg)
}

// FreeLowPort returns a loopback port that is free now and lies below the
// kernel's ephemeral range (32768 and up here): a server restarts on it,
// and while it is down no outgoing connection of a busy machine can take it.
func FreeLowPort(t testing.TB) int {
	t.Helper()
	for range 1000 {
		p := 10000 + rand.IntN(22000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatal("no free loopback port below 32000")
	return 0
}

// Postgres is a PostgreSQL cluster of one test, in a temporary directory.
type Postgres struct {
	t    testing.TB
	bin  string // directory of initdb, pg_ctl, postgres
	dir  string // owned by the server's OS user
	data string
	port int
	cred *syscall.Credential // nil when not running as root
}

// StartPostgres initdbs a cluster in a fresh temporary directory and starts
// it on a free low port, fsync on, sockets in the directory. PostgreSQL
// refuses to run as root: as root, the server runs as the "postgres" OS
// user.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			bins = []string{p}
		}
	}
	if len(bins) == 0 {
		SkipOrFail(t, "no PostgreSQL server binaries (initdb) under /usr/lib/postgresql/*/bin or on PATH")
	}
	// Highest major version first.
	sort.Slice(bins, func(i, j int) bool { return pgMajor(bins[i]) > pgMajor(bins[j]) })
	s := &Postgres{t: t, bin: filepath.Dir(bins[0])}

	dir, err := os.MkdirTemp("", "rheo-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			SkipOrFail(t, "running as root and there is no postgres OS user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	s.dir = dir
	s.data = filepath.Join(dir, "data")
	s.port = FreeLowPort(t)

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
func (s *Postgres) options() string {
	return fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on "+
		"-c max_connections=60 -c shared_buffers=16MB", s.port, s.dir)
}

func (s *Postgres) cmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func (s *Postgres) run(name string, args ...string) {
	s.t.Helper()
	out, err := s.cmd(name, args...).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("%s %v: %v\n%s\nserver log:\n%s", name, args, err, out, log)
	}
}

// CrashRestart kills the server without a shutdown checkpoint (every
// backend process gets SIGQUIT) and starts it again, which replays the WAL:
// the restart a crash causes.
func (s *Postgres) CrashRestart() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.data, "-l", filepath.Join(s.dir, "log"), "-m", "immediate", "-w", "-t", "30",
		"-o", s.options(), "restart")
}

// DSN opens the server's postgres database.
func (s *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", s.port)
}

// Redis is a redis-server of one test, with AOF fsynced on every write
// (appendonly yes, appendfsync always), in a temporary directory.
type Redis struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
}

// StartRedis starts the server on a free low port, which restarts reuse.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		SkipOrFail(t, "REDIS-SERVER BINARY NOT FOUND: a private Redis needs it on PATH")
	}
	s := &Redis{t: t, bin: bin, dir: t.TempDir(), port: FreeLowPort(t)}
	s.Start()
	t.Cleanup(func() {
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	return s
}

// Start starts the server (again, after Kill9) and waits until it answers.
func (s *Redis) Start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server did not start on port %d; its log:\n%s", s.port, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill9 kills the server without letting it shut down cleanly.
func (s *Redis) Kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Addr is the server's host:port.
func (s *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }
