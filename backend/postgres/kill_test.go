package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

// childEnv marks a re-executed test binary as a competing consumer process.
const childEnv = "RHEO_PG_KILL_CHILD"

const (
	killEvents     = 20000
	killPartitions = 4
	killLease      = 3 * time.Second
)

// TestCompetingProcessesKill runs three OS processes (this test binary,
// re-executed) consuming one group of 20,000 events on four partitions,
// SIGKILLs one of them mid-run and starts a replacement. Every event ends
// acked, the frontier reaches the high watermark on every partition, no
// stale settle ever succeeds, and events acked twice are only those the
// killed process held when it died.
func TestCompetingProcessesKill(t *testing.T) {
	if spec := os.Getenv(childEnv); spec != "" {
		runChild(t, spec)
		return
	}
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	pool := testPool(t)
	ctx := context.Background()
	b := newBackend(t)
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "jobs", rheo.StreamConfig{Partitions: killPartitions}))
	msgs := make([]rheo.Message, 0, 1000)
	for i := 0; i < killEvents; i += 1000 {
		msgs = msgs[:0]
		for j := range 1000 {
			msgs = append(msgs, rheo.Message{Key: fmt.Sprint(i + j), Type: "job"})
		}
		_, err := c.AppendBatch(ctx, "jobs", msgs)
		require.NoError(t, err)
	}
	require.NoError(t, c.CreateGroup(ctx, "jobs", "workers", rheo.GroupConfig{MaxAttempts: 100}))
	_ = pool

	type proc struct {
		name   string
		cmd    *exec.Cmd
		done   chan struct{}
		leased map[string]bool
		acked  map[string]int
		bad    []string
	}
	var mu sync.Mutex
	start := func(name string) *proc {
		p := &proc{name: name, done: make(chan struct{}), leased: map[string]bool{}, acked: map[string]int{}}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCompetingProcessesKill$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+b.Schema()+","+name)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		p.cmd = cmd
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				kind, id, _ := strings.Cut(sc.Text(), " ")
				mu.Lock()
				switch kind {
				case "L":
					p.leased[id] = true
				case "A":
					p.acked[id]++
				case "BAD":
					p.bad = append(p.bad, id)
				}
				mu.Unlock()
			}
		}()
		return p
	}
	procs := []*proc{start("w1"), start("w2"), start("w3")}
	victim := procs[0]

	// Kill w1 once it has acked a share of the work, while it is busy.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		n := len(victim.acked)
		mu.Unlock()
		if n >= 1500 {
			break
		}
		select {
		case <-victim.done:
			t.Fatal("victim exited before it could be killed")
		default:
		}
		require.True(t, time.Now().Before(deadline), "victim made no progress")
		time.Sleep(5 * time.Millisecond)
	}
	// A random moment, so that the kill lands mid-batch as often as not.
	time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	<-victim.done
	_ = victim.cmd.Wait()
	procs = append(procs, start("w4"))

	for _, p := range procs[1:] {
		select {
		case <-p.done:
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s did not finish", p.name)
		}
		require.NoError(t, p.cmd.Wait(), "%s exit", p.name)
	}

	lag, err := c.Lag(ctx, "jobs", "workers")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
	for _, pl := range lag.Partitions {
		require.Equal(t, pl.HighWatermark, pl.Frontier, "partition %d frontier", pl.Partition)
	}
	info, err := c.GroupInfo(ctx, "jobs", "workers")
	require.NoError(t, err)
	require.Zero(t, info.Inflight)
	require.Zero(t, info.Available)
	require.Zero(t, info.DeadLetters)

	ackCount := map[string]int{}
	for _, p := range procs {
		require.Empty(t, p.bad, "%s: a stale settle succeeded", p.name)
		for id, n := range p.acked {
			ackCount[id] += n
		}
	}
	inflightAtKill := map[string]bool{}
	for id := range victim.leased {
		if victim.acked[id] == 0 {
			inflightAtKill[id] = true
		}
	}
	dups := 0
	for id, n := range ackCount {
		if n > 1 {
			dups++
			require.True(t, inflightAtKill[id], "event %s acked %d times but was not in flight in the killed process", id, n)
		}
	}
	reported := len(ackCount)
	for id := range inflightAtKill {
		if ackCount[id] == 0 {
			reported++ // acked by the victim in the database before it printed so
		}
	}
	require.Equal(t, killEvents, reported, "every event acked")
	t.Logf("acked %d events, %d in flight at the kill, %d acked twice", len(ackCount), len(inflightAtKill), dups)
}

// runChild consumes until the group has no lag, printing "L id" for every
// lease before handling it, "A id" after its ack was confirmed, and "BAD id"
// if settling an already acked lease again did not fail as stale.
func runChild(t *testing.T, spec string) {
	schema, name, _ := strings.Cut(spec, ",")
	ctx := context.Background()
	sep := "?"
	if strings.Contains(dsn(), "?") {
		sep = "&"
	}
	c, err := rheo.Open(ctx, dsn()+sep+"rheo_schema="+schema)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.Backend().(*postgres.Backend)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for {
		ls, err := c.Fetch(ctx, "jobs", "workers", rheo.FetchOptions{
			Limit: 100, ConsumerID: name, LeaseDuration: killLease, Wait: 500 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			lag, err := c.Lag(ctx, "jobs", "workers")
			if err != nil {
				t.Fatal(err)
			}
			if lag.Total == 0 {
				return
			}
			continue
		}
		for _, l := range ls {
			fmt.Fprintf(w, "L %s\n", l.Event.ID)
		}
		w.Flush()
		// Handling takes a moment: leases are in flight here.
		time.Sleep(2 * time.Millisecond)
		err = c.AckBatch(ctx, ls)
		var be *rheo.BatchError
		if err != nil && !errors.As(err, &be) {
			t.Fatal(err)
		}
		for i, l := range ls {
			if be == nil || be.Errs[i] == nil {
				fmt.Fprintf(w, "A %s\n", l.Event.ID)
			}
		}
		// A second settle of a settled lease must be stale.
		if err := c.Ack(ctx, ls[0]); !errors.Is(err, rheo.ErrStaleLease) {
			fmt.Fprintf(w, "BAD %s\n", ls[0].Event.ID)
		}
		w.Flush()
	}
}
