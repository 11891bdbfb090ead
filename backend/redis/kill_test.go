package redis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// Environment of the worker processes TestKillAndRestart starts.
const (
	envWorker = "RHEO_REDIS_KILL_WORKER"
	envPrefix = "RHEO_REDIS_KILL_PREFIX"
	envLog    = "RHEO_REDIS_KILL_LOG"
	// envHang makes a worker stop dead after that many fetches, holding
	// their leases, so the parent kills it while it surely holds some.
	envHang = "RHEO_REDIS_KILL_HANG"
)

const (
	killStream = "kill"
	killGroup  = "workers"
	killEvents = 20000
	killParts  = 4
	// The lease is long enough that a live worker never loses one under a
	// loaded machine; only the killed worker's leases expire.
	killLease = 6 * time.Second
)

func killDSN(prefix string) string {
	return testURL() + "?key_prefix=" + url.QueryEscape(prefix)
}

// TestKillAndRestart runs three worker processes (this test binary, run
// again) on one group of 20,000 events, SIGKILLs one mid-run and starts it
// again. Every event must end acked, the frontier must reach the high
// watermark on every partition, no event may be acked twice, duplicates may
// only be events the killed worker held, and a settle of a lease that
// expired and was taken over must fail as stale.
func TestKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	b, _ := newBackend(t)
	ctx := context.Background()
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, killStream, rheo.StreamConfig{Partitions: killParts}))
	appendN(t, c, killStream, killParts, killEvents)
	require.NoError(t, c.CreateGroup(ctx, killStream, killGroup, rheo.GroupConfig{MaxAttempts: 100}))
	// A lease this process takes and never settles in time: a worker takes
	// the event over once it expires, and then this settle must be stale.
	held, err := c.Fetch(ctx, killStream, killGroup, rheo.FetchOptions{Limit: 1, LeaseDuration: time.Second, ConsumerID: "parent"})
	require.NoError(t, err)
	require.Len(t, held, 1)

	dir := t.TempDir()
	start := func(name string, extraEnv ...string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillWorker$", "-test.count=1")
		cmd.Env = append(os.Environ(), envWorker+"="+name, envPrefix+"="+b.KeyPrefix(),
			envLog+"="+filepath.Join(dir, name+".log"))
		cmd.Env = append(cmd.Env, extraEnv...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	workers := map[string]*exec.Cmd{}
	workers["w1"] = start("w1")
	workers["w2"] = start("w2", envHang+"=20")
	workers["w3"] = start("w3")
	t.Cleanup(func() {
		for _, w := range workers {
			_ = w.Process.Kill()
		}
	})

	// Kill w2 once the group is under way but far from done.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		lag, err := c.Lag(ctx, killStream, killGroup)
		require.NoError(t, err)
		if lag.Total < killEvents-3000 {
			break
		}
		require.True(t, time.Now().Before(deadline), "workers made no progress")
		time.Sleep(5 * time.Millisecond)
	}
	// Kill it while it holds leases: it stops dead after its 20th fetch,
	// with the fetch logged and nothing acked.
	victim := workers["w2"]
	for !holdsLeases(filepath.Join(dir, "w2.log")) {
		require.True(t, time.Now().Before(deadline), "w2 never held leases")
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	_ = victim.Wait()
	lagAtKill, err := c.Lag(ctx, killStream, killGroup)
	require.NoError(t, err)
	t.Logf("killed w2 with lag %d", lagAtKill.Total)
	workers["w2-restarted"] = start("w2-restarted")
	delete(workers, "w2")

	for name, w := range workers {
		done := make(chan error, 1)
		go func() { done <- w.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "worker %s", name)
		case <-time.After(time.Until(deadline)):
			t.Fatalf("worker %s did not finish", name)
		}
	}

	lag, err := c.Lag(ctx, killStream, killGroup)
	require.NoError(t, err)
	require.Len(t, lag.Partitions, killParts)
	for _, pl := range lag.Partitions {
		require.Equal(t, int64(killEvents/killParts), pl.HighWatermark)
		require.Equal(t, pl.HighWatermark, pl.Frontier, "partition %d", pl.Partition)
	}
	info, err := c.GroupInfo(ctx, killStream, killGroup)
	require.NoError(t, err)
	require.Zero(t, info.Inflight)
	require.Zero(t, info.Available)
	require.Zero(t, info.DeadLetters)

	require.ErrorIs(t, c.Ack(ctx, held[0]), rheo.ErrStaleLease, "the expired, taken-over lease must not settle")

	// Logs: every ack that succeeded, and every fetch.
	acked := map[string]string{}
	fetched := map[string][]string{}
	stale := 0
	for _, name := range []string{"w1", "w2", "w3", "w2-restarted"} {
		f, err := os.Open(filepath.Join(dir, name+".log"))
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			kind, id, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue // the killed worker's last line may be torn
			}
			switch kind {
			case "F":
				fetched[id] = append(fetched[id], name)
			case "A":
				if prev, dup := acked[id]; dup {
					t.Fatalf("event %s acked twice (by %s and %s)", id, prev, name)
				}
				acked[id] = name
			case "S":
				stale++
			}
		}
		require.NoError(t, f.Close())
	}
	// The held event was acked by a worker; events acked by the killed
	// worker before its log line was written may be missing.
	require.GreaterOrEqual(t, len(acked), killEvents-200)
	require.Contains(t, acked, held[0].Event.ID)
	dups := 0
	defer func() { require.Positive(t, dups, "the killed worker held leases, so some events come twice") }()
	for id, by := range fetched {
		if len(by) < 2 {
			continue
		}
		dups++
		if id == held[0].Event.ID {
			continue
		}
		require.Contains(t, by, "w2", "event %s was delivered twice (%v) but the killed worker never held it", id, by)
	}
	t.Logf("%d events, %d delivered twice (in flight in the killed worker), %d stale settles refused", killEvents, dups, stale)
}

// TestKillWorker is the worker process of TestKillAndRestart.
func TestKillWorker(t *testing.T) {
	name := os.Getenv(envWorker)
	if name == "" {
		t.Skip("worker process of TestKillAndRestart")
	}
	ctx := context.Background()
	c, err := rheo.Open(ctx, killDSN(os.Getenv(envPrefix)))
	require.NoError(t, err)
	defer c.Close()
	f, err := os.OpenFile(os.Getenv(envLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	w := bufio.NewWriter(f)
	hangAfter, _ := strconv.Atoi(os.Getenv(envHang))
	for fetches := 1; ; fetches++ {
		ls, err := c.Fetch(ctx, killStream, killGroup, rheo.FetchOptions{
			Limit: 50, LeaseDuration: killLease, ConsumerID: name, Wait: 200 * time.Millisecond,
		})
		require.NoError(t, err)
		if len(ls) == 0 {
			lag, err := c.Lag(ctx, killStream, killGroup)
			require.NoError(t, err)
			if lag.Total == 0 {
				return
			}
			continue
		}
		for _, l := range ls {
			fmt.Fprintf(w, "F %s\n", l.Event.ID)
		}
		require.NoError(t, w.Flush())
		if fetches == hangAfter {
			// Say so, then hold these leases until the parent kills this
			// process: the kill surely lands while they are held.
			fmt.Fprintln(w, "H")
			require.NoError(t, w.Flush())
			select {}
		}
		time.Sleep(3 * time.Millisecond) // the work
		err = c.AckBatch(ctx, ls)
		var be *rheo.BatchError
		if err != nil && !errors.As(err, &be) {
			require.NoError(t, err)
		}
		for i, l := range ls {
			switch {
			case be == nil || be.Errs[i] == nil:
				fmt.Fprintf(w, "A %s\n", l.Event.ID)
			case errors.Is(be.Errs[i], rheo.ErrStaleLease):
				fmt.Fprintf(w, "S %s\n", l.Event.ID)
			default:
				require.NoError(t, be.Errs[i])
			}
		}
		require.NoError(t, w.Flush())
	}
}

// holdsLeases reports whether a worker's log says it stopped dead holding
// the leases of its last fetch. (A log that merely ends with fetches is not
// enough: the worker may be about to ack them, and a kill landing after the
// ack leaves nothing to redeliver.)
func holdsLeases(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.HasSuffix(string(b), "\nH\n")
}
