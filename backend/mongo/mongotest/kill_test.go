package mongotest

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
	rmongo "github.com/rheo-go/rheo/backend/mongo"
)

// The multi-process test re-executes this test binary as workers; these
// environment variables tell a process it is one.
const (
	envWorkerDSN  = "RHEO_MONGO_WORKER_DSN"
	envWorkerDir  = "RHEO_MONGO_WORKER_DIR"
	envWorkerName = "RHEO_MONGO_WORKER_NAME"
	envWorkerHang = "RHEO_MONGO_WORKER_HANG" // settle this many events, then fetch and hang
)

const (
	mpStream = "orders"
	mpGroup  = "fulfillment"
	// Through the embedded FerretDB, 2,000 events took two minutes; 600
	// show the same competition, kill and expiry in about ten seconds.
	mpEvents = 600
)

// skewClock is the wall clock plus an offset the parent test writes to a
// file: moving it forward expires every lease at once, in every worker,
// without anyone sleeping for a lease to run out.
type skewClock struct{ path string }

func (c skewClock) Now() time.Time {
	now := time.Now()
	if b, err := os.ReadFile(c.path); err == nil {
		if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
			now = now.Add(d)
		}
	}
	return now
}

// TestWorkerProcess is the worker side of TestMultiProcessKill; run
// directly it does nothing.
func TestWorkerProcess(t *testing.T) {
	dsn := os.Getenv(envWorkerDSN)
	if dsn == "" {
		t.Skip("runs only as a worker of TestMultiProcessKill")
	}
	if err := runWorker(dsn, os.Getenv(envWorkerDir), os.Getenv(envWorkerName), os.Getenv(envWorkerHang)); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func runWorker(dsn, db, name, hang string) error {
	ctx := context.Background()
	b, err := rmongo.Open(ctx, dsn)
	if err != nil {
		return err
	}
	c := rheo.New(b, rheo.WithClock(skewClock{db + ".clock"}))
	defer c.Close()
	log, err := os.OpenFile(db+"."+name+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	hangAfter := -1
	if hang != "" {
		hangAfter, _ = strconv.Atoi(hang)
	}
	settled := 0
	// Moving the shared clock an hour forward must expire the killed
	// worker's leases only: the survivors' leases (claimed before or after
	// the jump) outlast it, or a survivor's lease expiring under its own
	// ack would look like a duplicate the kill did not cause.
	lease := 2 * time.Hour
	if hang != "" {
		lease = 30 * time.Second
	}
	for {
		ls, err := c.Fetch(ctx, mpStream, mpGroup, rheo.FetchOptions{Limit: 7, ConsumerID: name, LeaseDuration: lease})
		if err != nil {
			return err
		}
		for _, l := range ls {
			fmt.Fprintf(log, "lease %s %s %d %d %d\n", l.ID, l.Event.ID, l.Event.Partition, l.Event.Sequence, l.Attempt)
		}
		if hangAfter >= 0 && settled >= hangAfter && len(ls) > 0 {
			fmt.Fprintln(log, "holding")
			select {} // hold the leases until SIGKILL
		}
		if len(ls) == 0 {
			lag, err := c.Lag(ctx, mpStream, mpGroup)
			if err != nil {
				return err
			}
			if lag.Total == 0 {
				return nil
			}
			time.Sleep(5 * time.Millisecond) // poll; the dead worker's leases come back when they expire
			continue
		}
		for _, l := range ls {
			switch err := c.Ack(ctx, l); {
			case err == nil:
				fmt.Fprintf(log, "ack %s %s\n", l.Event.ID, l.ID)
				settled++
			case errors.Is(err, rheo.ErrStaleLease):
				fmt.Fprintf(log, "stale %s %s\n", l.Event.ID, l.ID)
			default:
				return err
			}
		}
	}
}

type leaseRec struct {
	id, eventID string
	part        int
	seq         int64
}

// readLog returns a worker's leases, acks (event ID -> count) and whether
// it reported holding its last leases.
func readLog(t *testing.T, path string) (leases []leaseRec, acks map[string]int, holding bool) {
	t.Helper()
	acks = map[string]int{}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) == 6 && fs[0] == "lease":
			p, _ := strconv.Atoi(fs[3])
			s, _ := strconv.ParseInt(fs[4], 10, 64)
			leases = append(leases, leaseRec{id: fs[1], eventID: fs[2], part: p, seq: s})
		case len(fs) == 3 && fs[0] == "ack":
			acks[fs[1]]++
		case len(fs) == 1 && fs[0] == "holding":
			holding = true
		}
	}
	require.NoError(t, sc.Err())
	return leases, acks, holding
}

// TestMultiProcessKill runs three worker processes on one MongoDB database
// and one group. Workers A and B compete; A settles some events, fetches more
// and is SIGKILLed while holding them; C joins, the clock moves past every
// lease's expiry and B and C finish the job. Every event must end acked exactly once
// (leases stayed exclusive across processes), lag 0, and none of A's
// abandoned leases may settle afterwards.
func TestMultiProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "mp")
	dsn := dsnFor(srv.URI, srv.Database(t, client))
	b, err := rmongo.Open(ctx, dsn)
	require.NoError(t, err)
	c := rheo.New(b, rheo.WithClock(skewClock{db + ".clock"}))
	defer c.Close()
	require.NoError(t, c.CreateStream(ctx, mpStream, rheo.StreamConfig{Partitions: 3}))
	require.NoError(t, c.CreateGroup(ctx, mpStream, mpGroup, rheo.GroupConfig{}))
	ms := make([]rheo.Message, mpEvents)
	for i := range ms {
		ms[i] = rheo.Message{Key: fmt.Sprint(i), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	evs, err := c.AppendBatch(ctx, mpStream, ms)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	start := func(name, hang string) *exec.Cmd {
		cmd := exec.CommandContext(wctx, os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envWorkerDSN+"="+dsn, envWorkerDir+"="+db, envWorkerName+"="+name, envWorkerHang+"="+hang)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	// A starts first; B joins once A has leases, and they compete until A
	// freezes; then C joins.
	a := start("A", "5")
	aExited := make(chan error, 1)
	go func() { aExited <- a.Wait() }()
	var aLeases []leaseRec
	var bw *exec.Cmd
	for {
		if _, err := os.Stat(db + ".A.log"); err == nil {
			var holding bool
			aLeases, _, holding = readLog(t, db+".A.log")
			if len(aLeases) > 0 && bw == nil {
				bw = start("B", "")
			}
			if holding {
				break
			}
		}
		select {
		case <-wctx.Done():
			t.Fatal("worker A never held leases")
		case err := <-aExited:
			t.Fatalf("worker A exited (%v) before holding leases", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if bw == nil {
		bw = start("B", "")
	}
	cw := start("C", "")
	require.NoError(t, a.Process.Signal(syscall.SIGKILL))
	<-aExited
	// Lag still counts A's unsettled events.
	lag, err := c.Lag(ctx, mpStream, mpGroup)
	require.NoError(t, err)
	require.Positive(t, lag.Total)
	// Every lease expires now, in every process.
	require.NoError(t, os.WriteFile(db+".clock", []byte("1h"), 0o600))

	require.NoError(t, bw.Wait(), "worker B")
	require.NoError(t, cw.Wait(), "worker C")

	acked := map[string]int{}
	perWorker := map[string]int{}
	leasedBy := map[string]map[string]int{} // event ID -> worker -> leases
	for _, w := range []string{"A", "B", "C"} {
		ls, acks, _ := readLog(t, db+"."+w+".log")
		for id, n := range acks {
			acked[id] += n
			perWorker[w] += n
		}
		for _, l := range ls {
			if leasedBy[l.eventID] == nil {
				leasedBy[l.eventID] = map[string]int{}
			}
			leasedBy[l.eventID][w]++
		}
	}
	// Duplicates only from the killed worker: an event delivered more
	// than once was first leased by A and abandoned at the kill.
	dups := 0
	for id, by := range leasedBy {
		total := by["A"] + by["B"] + by["C"]
		if total > 1 {
			dups++
			require.Equal(t, 1, by["A"], "event %s delivered %d times (%v) but not abandoned by the killed worker", id, total, by)
			require.Equal(t, 2, total, "event %s delivered %d times (%v)", id, total, by)
		}
	}
	for _, e := range evs {
		require.Equal(t, 1, acked[e.ID], "event %s (%d/%d) acked %d times", e.ID, e.Partition, e.Sequence, acked[e.ID])
	}
	require.Len(t, acked, mpEvents)

	lag, err = c.Lag(ctx, mpStream, mpGroup)
	require.NoError(t, err)
	require.Zero(t, lag.Total)
	info, err := c.GroupInfo(ctx, mpStream, mpGroup)
	require.NoError(t, err)
	require.Zero(t, info.Inflight)
	require.Zero(t, info.Available)
	require.Zero(t, info.DeadLetters)

	// A's leases, abandoned at the kill, are all stale now.
	_, aAcks, _ := readLog(t, db+".A.log")
	stale := 0
	for _, l := range aLeases {
		if aAcks[l.eventID] > 0 {
			continue
		}
		err := c.Ack(ctx, rheo.Lease{ID: l.id, Receipt: l.id, Stream: mpStream, Group: mpGroup,
			Event: rheo.Event{ID: l.eventID, Stream: mpStream, Partition: l.part, Sequence: l.seq}})
		require.ErrorIs(t, err, rheo.ErrStaleLease, "lease %s of the killed worker", l.id)
		stale++
	}
	require.Positive(t, stale, "the killed worker held no unsettled lease")
	require.Equal(t, stale, dups, "every abandoned lease is redelivered exactly once")
	t.Logf("%d events acked once each (A %d, B %d, C %d); A killed holding %d leases, all stale afterwards and redelivered once each",
		mpEvents, perWorker["A"], perWorker["B"], perWorker["C"], stale)
}

// dsnFor adds a database to a server URI.
func dsnFor(uri, database string) string {
	u, err := url.Parse(uri)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + database
	return u.String()
}
