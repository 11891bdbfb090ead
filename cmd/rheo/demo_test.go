package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// demoSteps is the demo's timeline: step number and verb of every line.
var demoSteps = []string{"append", "group", "worker A", "fetch", "kill", "lag", "expire", "worker B",
	"stale ack", "lag", "read", "query"}

var timelineLine = regexp.MustCompile(`^t(\d+)\s+(\S+(?: [AB]|\sack)?)\s{2,}(.*)$`)

// timeline returns the verbs of the demo's timeline lines, in order, and
// their texts.
func timeline(t *testing.T, out string) (verbs, texts []string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		m := timelineLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		require.Equal(t, len(verbs), atoi(t, m[1]), "steps are numbered in order: %q", l)
		verbs = append(verbs, m[2])
		texts = append(texts, m[3])
	}
	return verbs, texts
}

func atoi(t *testing.T, s string) int {
	n := 0
	for _, r := range s {
		require.True(t, r >= '0' && r <= '9')
		n = n*10 + int(r-'0')
	}
	return n
}

func TestDemoInProcessOnMemory(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--dsn", "memory:"}, strings.NewReader(""), &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.Contains(t, out.String(), "a crash demo needs a store shared between processes")

	verbs, texts := timeline(t, out.String())
	want := slices.Clone(demoSteps)
	want[4] = "abandon"
	require.Equal(t, want, verbs, out.String())
	require.Equal(t, "5 events to orders (seq 1..5)", texts[0])
	require.Regexp(t, `^A leased order-1001 \(seq 1\) under L1=\w{8}, attempt 1, expires in 2s$`, texts[3])
	require.Regexp(t, `^5: order-1001 still counts`, texts[5])
	require.Regexp(t, `^frozen clock moved 2s`, texts[6])
	require.Regexp(t, `^in-process B leased order-1001 under L2=\w{8}, attempt 2, and acked it`, texts[7])
	require.Regexp(t, `-> stale_lease`, texts[8])
	require.Regexp(t, `^0: every event acked`, texts[9])
	require.Regexp(t, `^order-1001 read back unchanged`, texts[10])
	require.Regexp(t, `^type=order_placed country=NL -> seq 2, 4; all 5 events still in the log$`, texts[11])
	require.Regexp(t, `(?m)^ok: every fact held in \d+\.\ds\.`, out.String())
}

// lostAckFailure is the demo's stderr when worker B's acks never reach the
// store (--fault skip-ack), in process or with real workers.
const lostAckFailure = "rheo: demo failed at t9 (lag): after worker B's acks, lag is 5 with 5 leases inflight; " +
	"want 0 and 0: the store did not record the acks\n"

func TestDemoFailsLoudlyWhenAnAckIsLost(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--dsn", "memory:", "--fault", "skip-ack"}, strings.NewReader(""), &out, &errOut)
	require.Equal(t, exitError, code)
	require.Equal(t, lostAckFailure, errOut.String())
	require.NotContains(t, out.String(), "ok: every fact held")
}

func TestDemoRejectsUnknownFault(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.fails(exitUsage, `unknown fault "nosuch"`, "demo", "--fault", "nosuch")
	c.fails(exitUsage, "--lease", "demo", "--lease", "0s")
}

func TestDemoWorkerAcksALeaseFromStdin(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ordersWithGroup("fulfillment", "{}")
	out := c.ok("demo-worker", "--mode", "fetch-and-ack", "--consumer", "w")
	var rep workerBReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Len(t, rep.Leases, 1)
	require.Equal(t, 1, rep.Acked)

	in, err := json.Marshal(toLeaseJSON(rep.Leases[0].lease()))
	require.NoError(t, err)
	out = c.okStdin(string(in), "demo-worker", "--mode", "ack")
	require.Contains(t, out, `"result":"stale_lease"`, "a second ack of one lease is stale")
	c.fails(exitUsage, `unknown mode "dance"`, "demo-worker", "--mode", "dance")
}

// buildRheo builds the command into a temporary directory, so that the
// demo's worker processes exist.
func buildRheo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rheo")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

func requireSQLite(t *testing.T) {
	t.Helper()
	if !slices.Contains(rheo.Schemes(), "sqlite") {
		t.Skip("the sqlite backend is not built into the command")
	}
}

// runBinary runs the built command in a fresh directory with RHEO_DSN unset.
func runBinary(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	// A failed demo keeps its temporary store; TMPDIR puts it in the test's.
	cmd.Env = append(cmd.Environ(), "RHEO_DSN=", "TMPDIR="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// checkProcessTimeline checks the timeline of a demo run with real worker
// processes.
func checkProcessTimeline(t *testing.T, out, errOut string, code int) {
	t.Helper()
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	verbs, texts := timeline(t, out)
	require.Equal(t, demoSteps, verbs, out)
	require.Regexp(t, `^started as process \d+ \(rheo demo-worker --mode fetch-and-hang\)$`, texts[2])
	require.Regexp(t, `^A leased order-1001 \(seq 1\) under L1=\w{8}, attempt 1, expires in 2s$`, texts[3])
	require.Regexp(t, `^SIGKILL worker A \(pid \d+\) before it acked: signal: killed$`, texts[4])
	require.Regexp(t, `^5: order-1001 still counts \(L1 is held by a dead worker; 1 lease inflight\)$`, texts[5])
	require.Regexp(t, `^waited \d\.\ds of real time: L1 expired at`, texts[6])
	require.Regexp(t, `^process \d+ leased order-1001 under L2=\w{8}, attempt 2, and acked it \(with 4 newer events\)$`, texts[7])
	require.Regexp(t, `^resurrected A acks order-1001 with L1=\w{8} -> stale_lease`, texts[8])
	require.Regexp(t, `^0: every event acked`, texts[9])
	require.Regexp(t, `^order-1001 read back unchanged after 2 deliveries: \{.*"order_id":"order-1001"`, texts[10])
	require.Regexp(t, `^type=order_placed country=NL -> seq 2, 4; all 5 events still in the log$`, texts[11])
	require.Regexp(t, `(?m)^ok: every fact held in \d+\.\ds\.`, out)
	require.Empty(t, errOut)
}

// TestDemoKillsARealWorkerProcess runs the demo as a user does: the built
// binary on a fresh SQLite file, with worker processes it starts and kills.
func TestDemoKillsARealWorkerProcess(t *testing.T) {
	requireSQLite(t)
	bin := buildRheo(t)

	t.Run("timeline", func(t *testing.T) {
		t.Parallel()
		out, errOut, code := runBinary(t, bin, "demo")
		require.Regexp(t, `^rheo demo on sqlite:\S+demo\.db, lease 2s`, out)
		checkProcessTimeline(t, out, errOut, code)
	})

	t.Run("lost ack", func(t *testing.T) {
		t.Parallel()
		out, errOut, code := runBinary(t, bin, "demo", "--fault", "skip-ack")
		require.Equal(t, exitError, code, "stdout:\n%s", out)
		require.Equal(t, lostAckFailure, errOut)
		verbs, _ := timeline(t, out)
		require.Equal(t, demoSteps[:9], verbs, "the demo stops at the broken fact")
		require.Regexp(t, `(?m)^store kept: rheo --dsn sqlite:\S+demo\.db info orders fulfillment$`, out, "the evidence stays")
	})

	t.Run("worker B too early", func(t *testing.T) {
		t.Parallel()
		out, errOut, code := runBinary(t, bin, "demo", "--fault", "early-b")
		require.Equal(t, exitError, code, "stdout:\n%s", out)
		require.Contains(t, errOut, "rheo: demo failed at t7 (worker B): worker B did not get order-1001 (it got 4 other events)")
	})
}

// redisTestURL is the server the Redis test uses: RHEO_TEST_REDIS or the
// local one.
func redisTestURL() string {
	if u := os.Getenv("RHEO_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// TestDemoKillsARealWorkerProcessOnRedis runs the process demo on a shared
// Redis server, under a key prefix of its own that it deletes afterwards.
func TestDemoKillsARealWorkerProcessOnRedis(t *testing.T) {
	t.Parallel()
	opts, err := goredis.ParseURL(redisTestURL())
	require.NoError(t, err)
	rc := goredis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		_ = rc.Close()
		msg := fmt.Sprintf("REDIS NOT REACHABLE at %s (set RHEO_TEST_REDIS): %v", redisTestURL(), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	prefix := fmt.Sprintf("rheoclitest:%d:%06x:", os.Getpid(), rand.Uint32()&0xffffff)
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rc.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rc.Del(ctx, keys...)
		}
		_ = rc.Close()
	})
	sep := "?"
	if strings.Contains(redisTestURL(), "?") {
		sep = "&"
	}
	dsn := redisTestURL() + sep + "key_prefix=" + prefix

	keys := func() []string {
		k, err := rc.Keys(context.Background(), prefix+"*").Result()
		require.NoError(t, err)
		return k
	}
	bin := buildRheo(t)
	out, errOut, code := runBinary(t, bin, "demo", "--dsn", dsn)
	require.Regexp(t, `^rheo demo on redis://\S+, lease 2s`, out)
	checkProcessTimeline(t, out, errOut, code)
	require.Regexp(t, `(?m)^deleted the demo's stream orders and its group \(rheo demo --keep keeps them\)$`, out)
	require.Empty(t, keys(), "a successful demo leaves nothing in a store the user named")

	// --keep keeps the stream, and says how to look at it.
	out, errOut, code = runBinary(t, bin, "demo", "--dsn", dsn, "--keep")
	require.Zero(t, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Regexp(t, `(?m)^stream kept: rheo --dsn redis://\S+ info orders fulfillment$`, out)
	require.NotEmpty(t, keys())
}
