package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/internal/faultproxy"
	"github.com/rheo-go/rheo/internal/testserver"
	"github.com/rheo-go/rheo/internal/teststore"
)

// EnvWorker holds a worker process's WorkerConfig (JSON): a test binary
// started with it runs RunWorker instead of the soak.
const EnvWorker = "RHEO_SOAK_WORKER"

// Fault kinds the chaos loop injects.
const (
	FaultKill      = "kill"      // SIGKILL a worker and start it again
	FaultLatency   = "latency"   // delay a proxied worker's traffic for a while
	FaultPartition = "partition" // cut a proxied worker off for longer than its lease
	FaultCut       = "cut"       // reset a proxied worker's connection right after a request reached the server
	FaultRestart   = "restart"   // crash the private server and start it again
	FaultFailover  = "failover"  // fail the stream's Redis Cluster primary over to its replica
)

// Config is one store's soak.
type Config struct {
	Store       string        // sqlite, postgres, redis
	Duration    time.Duration // how long the producer and the chaos run
	Rate        int           // appends per second
	Workers     int           // worker processes
	Partitions  int           //
	MaxAttempts int           //
	Lease       time.Duration // the workers' lease
	// TestRun is the -test.run pattern that makes the test binary a worker
	// when EnvWorker is set.
	TestRun string
}

// Summary is one store's figures.
type Summary struct {
	Store      string
	Appended   int
	Deliveries int
	Duplicates map[string]int
	Retries    int
	Rejected   int
	Exhausted  int
	Faults     map[string]int
	MaxLag     int64
	P50, P99   time.Duration
	Duration   time.Duration // from the first append to lag 0
	Violations []string
}

// Row formats the summary as a row of the docs' table.
func (s Summary) Row() string {
	return fmt.Sprintf("| %s | %s | %d | %d | %s | %d | %d | %s | %d | %s / %s |",
		s.Store, s.Duration.Round(time.Second), s.Appended, s.Deliveries, counts(s.Duplicates), s.Retries,
		s.Rejected+s.Exhausted, counts(s.Faults), s.MaxLag, s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond))
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// slot is one worker position: its incarnations come and go, its fault
// proxy (nil for a direct worker) stays.
type slot struct {
	name  string
	proxy *faultproxy.Proxy
	dsn   string

	mu   sync.Mutex
	inc  int
	cmd  *exec.Cmd
	cur  string        // the running incarnation
	done chan struct{} // closed when cur exited
	kill bool          // cur is being killed on purpose
}

type runner struct {
	t   testing.TB
	cfg Config
	dir string
	c   *rheo.Client
	cut []byte // the CutAfter pattern of the store's protocol
	// restart crashes the store's private server and starts it again (nil
	// for SQLite).
	restart func()
	// failover moves the stream's slot to its primary's replica (Redis
	// Cluster only).
	failover func()
	cluster  []string // Redis Cluster node addresses
	exit     chan string

	mu       sync.Mutex
	slots    []*slot
	killed   map[string]time.Time
	journals []string
	faults   map[string]int
	restarts []Interval // when the private server was down and restarting
	stopping bool
}

const stream, group = "soak", "workers"

// Run soaks one store and returns its summary; the caller fails the test on
// violations.
func Run(t testing.TB, cfg Config) Summary {
	t.Helper()
	dir, err := os.MkdirTemp("", "rheo-soak-"+cfg.Store+"-")
	if err != nil {
		t.Fatalf("soak: %v", err)
	}
	// The journals and worker logs stay for a failed run, to be read.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak %s: journals and worker logs kept in %s", cfg.Store, dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	r := &runner{t: t, cfg: cfg, dir: dir, killed: map[string]time.Time{}, faults: map[string]int{},
		exit: make(chan string, 64)}
	// PostgreSQL and Redis run as private servers of the soak, so that the
	// chaos loop can crash them: PostgreSQL restarted in immediate mode
	// (WAL replay), Redis SIGKILLed with appendonly yes and appendfsync
	// always.
	var dsn string
	ctx := context.Background()
	switch cfg.Store {
	case "sqlite":
		var be rheo.Backend
		be, dsn = teststore.SQLite.Open(t)
		r.c = rheo.New(be)
	case "postgres":
		srv := testserver.StartPostgres(t)
		dsn, r.cut, r.restart = srv.DSN(), []byte("COMMIT"), srv.CrashRestart
		r.c = r.open(dsn)
	case "redis":
		srv := testserver.StartRedis(t)
		dsn, r.cut = "redis://"+srv.Addr()+"/0?key_prefix=soak:", []byte("evalsha")
		r.restart = func() { srv.Kill9(); srv.Start() }
		r.c = r.open(dsn)
	case "redis-cluster":
		cl := testserver.StartCluster(t)
		cc := cl.Client(t)
		r.cluster = cl.Addrs()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		b, err := redis.New(cc, redis.WithKeyPrefix(clusterPrefix))
		if err != nil {
			t.Fatalf("soak: redis-cluster backend: %v", err)
		}
		r.c = rheo.New(b, rheo.WithLogger(quiet))
		t.Cleanup(func() { _ = r.c.Close() })
		if err := r.c.Migrate(ctx); err != nil {
			t.Fatalf("soak: migrate redis-cluster: %v", err)
		}
		r.failover = func() { failover(t, cl, cc) }
	default:
		t.Fatalf("soak: unknown store %q (known: %s)", cfg.Store, strings.Join(Stores(), ", "))
	}
	if err := r.c.CreateStream(ctx, stream, rheo.StreamConfig{Partitions: cfg.Partitions}); err != nil {
		t.Fatalf("soak: create stream: %v", err)
	}
	if err := r.c.CreateGroup(ctx, stream, group, rheo.GroupConfig{MaxAttempts: cfg.MaxAttempts}); err != nil {
		t.Fatalf("soak: create group: %v", err)
	}

	// Workers: on a networked store all but the last go through a fault
	// proxy of their own.
	for i := range cfg.Workers {
		s := &slot{name: fmt.Sprintf("w%d", i+1), dsn: noRetries(dsn)}
		if r.cut != nil && i < cfg.Workers-1 {
			s.proxy, s.dsn = r.proxy(dsn)
		}
		r.slots = append(r.slots, s)
	}
	t.Cleanup(r.killAll)
	for _, s := range r.slots {
		r.start(s)
	}

	runCtx, stopRun := context.WithTimeout(ctx, cfg.Duration)
	defer stopRun()
	var wg sync.WaitGroup
	var appended []Record
	var produceErr error
	began := time.Now()
	wg.Go(func() { appended, produceErr = r.produce(runCtx) })
	wg.Go(func() { r.chaos(runCtx) })
	var (
		samples []Sample
		maxLag  int64
		sampErr error
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		samples, maxLag, sampErr = r.sample(sampleCtx)
	}()
	wg.Wait()
	if produceErr != nil {
		t.Fatalf("soak %s: producer: %v", cfg.Store, produceErr)
	}

	// Heal, and let the workers drain the group.
	for _, s := range r.slots {
		if s.proxy != nil {
			s.proxy.SetLatency(0)
			s.proxy.CutAfter(nil)
			s.proxy.Heal()
		}
	}
	drainDeadline := time.Now().Add(3*time.Minute + cfg.Duration)
	var lag rheo.Lag
	for {
		var err error
		lag, err = r.c.Lag(ctx, stream, group)
		if err == nil && lag.Total == 0 {
			break
		}
		if time.Now().After(drainDeadline) {
			t.Errorf("soak %s: the workers did not drain the group in time: lag %+v, %v", cfg.Store, lag, err)
			break
		}
		select {
		case name := <-r.exit:
			t.Errorf("soak %s: worker %s exited on its own during the drain (its log: %s)", cfg.Store, name, r.logTail(name))
		case <-time.After(100 * time.Millisecond):
		}
	}
	took := time.Since(began)
	stopSampling()
	<-sampled
	if sampErr != nil {
		t.Errorf("soak %s: lag sampler: %v", cfg.Store, sampErr)
	}
	r.stopAll()

	// Collect and check.
	in := Input{MaxAttempts: cfg.MaxAttempts, Rejected: Rejects, Appended: appended, Killed: r.killed,
		Samples: samples, FinalLag: lag.Total, Restarts: r.restarts}
	for _, p := range lag.Partitions {
		in.Stored += p.HighWatermark
	}
	for _, path := range r.journals {
		recs, err := ReadJournal(path)
		if err != nil {
			t.Fatalf("soak %s: %v", cfg.Store, err)
		}
		in.Records = append(in.Records, recs...)
	}
	opts := rheo.DeadLetterOptions{Limit: 1000}
	for {
		dls, err := r.c.DeadLetters(ctx, stream, group, opts)
		if err != nil {
			t.Fatalf("soak %s: dead letters: %v", cfg.Store, err)
		}
		for _, d := range dls {
			in.DeadLetters = append(in.DeadLetters, DeadLetter{Event: d.EventID, Reason: d.Reason, Attempts: d.Attempts, At: d.DeadLetteredAt})
		}
		if len(dls) < opts.Limit {
			break
		}
		opts.After = dls[len(dls)-1].EventID
	}
	res := Check(in)
	return Summary{Store: cfg.Store, Appended: res.Appended, Deliveries: res.Deliveries, Duplicates: res.Duplicates,
		Retries: res.Retries, Rejected: res.Rejected, Exhausted: res.Exhausted, Faults: r.faults, MaxLag: maxLag,
		P50: res.P50, P99: res.P99, Duration: took, Violations: res.Violations}
}

// open opens and migrates the store for the producer and the checker.
func (r *runner) open(dsn string) *rheo.Client {
	r.t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := rheo.Open(ctx, dsn, rheo.WithLogger(quiet))
	if err != nil {
		r.t.Fatalf("soak: open %s: %v", r.cfg.Store, err)
	}
	r.t.Cleanup(func() { _ = c.Close() })
	if err := c.Migrate(ctx); err != nil {
		r.t.Fatalf("soak: migrate %s: %v", r.cfg.Store, err)
	}
	return c
}

// proxy starts a fault proxy in front of dsn's server and returns it with
// the DSN that goes through it.
func (r *runner) proxy(dsn string) (*faultproxy.Proxy, string) {
	u, err := url.Parse(dsn)
	if err != nil {
		r.t.Fatalf("soak: DSN does not parse: %v", err)
	}
	px, err := faultproxy.Start(u.Host)
	if err != nil {
		r.t.Fatalf("soak: fault proxy: %v", err)
	}
	r.t.Cleanup(func() { _ = px.Close() })
	u.Host = px.Addr()
	return px, noRetries(u.String())
}

// noRetries turns go-redis's own retries off in a Redis DSN: a write
// retried after its reply was lost (a reset, a server crash) would report
// the first try's success as ErrStaleLease, hiding the ambiguity the checker
// must see.
func noRetries(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "redis" {
		return dsn
	}
	q := u.Query()
	q.Set("max_retries", "-1")
	u.RawQuery = q.Encode()
	return u.String()
}

// start starts a new incarnation of s.
func (r *runner) start(s *slot) {
	r.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inc++
	name := fmt.Sprintf("%s.%d", s.name, s.inc)
	journal := filepath.Join(r.dir, name+".journal")
	wc, _ := json.Marshal(WorkerConfig{Name: name, DSN: s.dsn, Stream: stream, Group: group, Journal: journal,
		Lease: r.cfg.Lease, MaxAttempts: r.cfg.MaxAttempts, ClusterAddrs: r.cluster, KeyPrefix: clusterPrefix})
	cmd := exec.Command(os.Args[0], "-test.run="+r.cfg.TestRun, "-test.count=1")
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(wc))
	logf, err := os.Create(filepath.Join(r.dir, name+".log"))
	if err != nil {
		r.t.Fatalf("soak: worker log: %v", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("soak: start worker %s: %v", name, err)
	}
	r.mu.Lock()
	r.journals = append(r.journals, journal)
	r.mu.Unlock()
	done := make(chan struct{})
	s.cmd, s.cur, s.done, s.kill = cmd, name, done, false
	go func() {
		_ = cmd.Wait()
		logf.Close()
		// Killed on purpose: flagged, or already replaced by the next
		// incarnation (which clears the flag) once done is closed.
		s.mu.Lock()
		onPurpose := s.kill || s.cur != name
		s.mu.Unlock()
		close(done)
		r.mu.Lock()
		stopping := r.stopping
		r.mu.Unlock()
		if !onPurpose && !stopping {
			r.exit <- name
		}
	}()
}

// killAndRestart SIGKILLs s's running incarnation and starts the next.
func (r *runner) killAndRestart(s *slot) {
	s.mu.Lock()
	cmd, done, name := s.cmd, s.done, s.cur
	s.kill = true
	s.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	// The kill time is when the process is known dead, not when the signal
	// was sent: a delivery it journaled while the signal was on its way
	// was still held when it died.
	at := time.Now()
	r.mu.Lock()
	r.killed[name] = at
	r.faults[FaultKill]++
	r.mu.Unlock()
	r.start(s)
}

// stopAll stops every worker with SIGTERM (the consumer drains and
// returns), then fails the test for any that does not exit cleanly in time.
func (r *runner) stopAll() {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	for _, s := range r.slots {
		s.mu.Lock()
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		s.mu.Unlock()
	}
	for _, s := range r.slots {
		s.mu.Lock()
		cmd, done, name := s.cmd, s.done, s.cur
		s.mu.Unlock()
		select {
		case <-done:
			if !cmd.ProcessState.Success() {
				r.t.Errorf("soak %s: worker %s exited with %v (its log: %s)", r.cfg.Store, name, cmd.ProcessState, r.logTail(name))
			}
		case <-time.After(60 * time.Second):
			r.t.Errorf("soak %s: worker %s did not stop within 60s of SIGTERM", r.cfg.Store, name)
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// killAll kills whatever still runs (a failed test's cleanup).
func (r *runner) killAll() {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	for _, s := range r.slots {
		s.mu.Lock()
		cmd, done := s.cmd, s.done
		s.kill = true
		s.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func (r *runner) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, name+".log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strconv.Quote(string(b))
}

// produce appends Rate events a second until ctx ends. An append that
// fails with ErrAmbiguous or ErrBackendUnavailable is retried with the same
// event ID (idempotent) until it succeeds.
func (r *runner) produce(ctx context.Context) ([]Record, error) {
	var out []Record
	tick := time.NewTicker(time.Second / time.Duration(r.cfg.Rate))
	defer tick.Stop()
	for n := int64(1); ; n++ {
		select {
		case <-ctx.Done():
			return out, nil
		case <-tick.C:
		}
		id := fmt.Sprintf("soak-%07d", n)
		msg := rheo.Message{ID: id, Type: "soak", Key: strconv.FormatInt(n, 10), Payload: fmt.Appendf(nil, `{"n":%d}`, n)}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			e, err := r.c.Append(actx, stream, msg)
			cancel()
			if err == nil {
				out = append(out, Record{Kind: KindAppend, Event: e.ID, N: n, Partition: e.Partition, Seq: e.Sequence, T: time.Now().UnixNano()})
				break
			}
			if !errors.Is(err, rheo.ErrAmbiguous) && !errors.Is(err, rheo.ErrBackendUnavailable) || time.Now().After(deadline) {
				return out, fmt.Errorf("append %s: %w", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// sample reads the group's frontier every 200ms until ctx ends.
func (r *runner) sample(ctx context.Context) ([]Sample, int64, error) {
	var out []Sample
	var maxLag int64
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		lag, err := r.c.Lag(ctx, stream, group)
		end := time.Now()
		switch {
		case err == nil:
			s := Sample{Start: start, End: end, Frontier: map[int]int64{}}
			for _, p := range lag.Partitions {
				s.Frontier[p.Partition] = p.Frontier
			}
			out = append(out, s)
			maxLag = max(maxLag, lag.Total)
		case ctx.Err() == nil:
			// The server may be restarting: give up only after a long
			// run of failures.
			if failures++; failures > 300 {
				return out, maxLag, err
			}
		}
		if err == nil {
			failures = 0
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return out, maxLag, nil
}

// chaos injects a fault every 1.5–4s until ctx ends: SIGKILLs, and on
// networked stores latency, partitions longer than the lease, connection
// resets after a request reached the server and server crashes (one of
// each early in the run).
func (r *runner) chaos(ctx context.Context) {
	var kinds []string // the faults besides kills, in turn
	var proxied []*slot
	for _, s := range r.slots {
		if s.proxy != nil {
			proxied = append(proxied, s)
		}
	}
	if len(proxied) > 0 {
		kinds = append(kinds, FaultLatency, FaultPartition, FaultCut)
	}
	if r.restart != nil {
		kinds = append(kinds, FaultRestart)
	}
	if r.failover != nil {
		kinds = append(kinds, FaultFailover)
	}
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for i := 0; ; i++ {
		if !sleep(1500*time.Millisecond + time.Duration(rand.IntN(2500))*time.Millisecond) {
			return
		}
		select {
		case name := <-r.exit:
			r.t.Errorf("soak %s: worker %s exited on its own (its log: %s)", r.cfg.Store, name, r.logTail(name))
		default:
		}
		// Half the faults are kills (all of them on SQLite), the others
		// take turns; the first round of the others comes right after
		// the first kill, so that a short soak sees every kind.
		kind := FaultKill
		switch {
		case len(kinds) == 0:
		case i >= 1 && i <= len(kinds):
			kind = kinds[i-1]
		case i%2 == 1:
			kind = kinds[(i/2)%len(kinds)]
		}
		switch kind {
		case FaultKill:
			r.killAndRestart(r.slots[rand.IntN(len(r.slots))])
		case FaultLatency:
			px := proxied[rand.IntN(len(proxied))].proxy
			px.SetLatency(time.Duration(5+rand.IntN(40)) * time.Millisecond)
			r.count(kind)
			sleep(3 * time.Second)
			px.SetLatency(0)
		case FaultPartition:
			px := proxied[rand.IntN(len(proxied))].proxy
			px.Partition()
			r.count(kind)
			sleep(r.cfg.Lease*2 + time.Second)
			px.Heal()
		case FaultFailover:
			r.failover()
			r.count(kind)
		case FaultRestart:
			from := time.Now()
			r.restart()
			r.mu.Lock()
			r.restarts = append(r.restarts, Interval{From: from, To: time.Now()})
			r.mu.Unlock()
			r.count(kind)
		case FaultCut:
			px := proxied[rand.IntN(len(proxied))].proxy
			before := px.Cuts()
			px.CutAfter(r.cut)
			for range 30 {
				if px.Cuts() > before || !sleep(100*time.Millisecond) {
					break
				}
			}
			px.CutAfter(nil)
			if px.Cuts() > before {
				r.count(kind)
			}
		}
	}
}

func (r *runner) count(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

// Stores lists the stores Run knows.
func Stores() []string { return []string{"sqlite", "postgres", "redis", "redis-cluster"} }

// clusterPrefix is the key prefix on the private Redis Cluster.
const clusterPrefix = "soak:"

// failover fails the stream's primary over to its replica with CLUSTER
// FAILOVER (coordinated: the replica catches up first, so no acknowledged
// write is lost) and waits until the cluster is whole again.
func failover(t testing.TB, cl *testserver.Cluster, cc *goredis.ClusterClient) {
	ctx := context.Background()
	primary := cl.PrimaryOf(t, cc, clusterPrefix+"{"+stream+"}:meta")
	replica := cl.ReplicaOf(t, primary)
	rc := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
	defer rc.Close()
	if err := rc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Errorf("soak: CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
		return
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		role, err := rc.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("soak: replica %s was not promoted within 60s", replica.Addr())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	for !cl.Healthy(3) {
		if time.Now().After(deadline) {
			t.Errorf("soak: the cluster did not become healthy within 60s of a failover")
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	cc.ReloadState(ctx)
}

// ParseStores checks a comma-separated list of store names.
func ParseStores(s string) ([]string, error) {
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(Stores(), name) {
			return nil, fmt.Errorf("unknown soak store %q (known: %s)", name, strings.Join(Stores(), ", "))
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no soak store named in %q (known: %s)", s, strings.Join(Stores(), ", "))
	}
	return out, nil
}
