package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestPeersSmoke runs every pair once with tiny sizes: each workload of
// each peer must complete, produce a positive rate, leave no schema or key
// behind, and land in the CSV. PostgreSQL and Redis must be running (the
// test fails without them, it never skips).
func TestPeersSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	csvPath := filepath.Join(t.TempDir(), "peers.csv")
	cfg := config{
		pg: envOr("RHEO_BENCH_PG", "postgres://postgres@127.0.0.1:5432/test"), redis: envOr("RHEO_BENCH_REDIS", "127.0.0.1:6379"),
		sz:     sizes{consume: 200, appends: 200, memory: 1000},
		rounds: 2, parts: 2, workers: 10, csv: csvPath,
	}
	var out bytes.Buffer
	results, err := run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("peers: %v\n%s", err, out.String())
	}
	all := pairs(cfg.workers)
	if len(results) != 2*len(all) {
		t.Fatalf("%d results, want %d (every pair, two rounds)", len(results), 2*len(all))
	}
	for _, r := range results {
		if r.a <= 0 || (r.pair.b.run != nil && r.b <= 0) {
			t.Errorf("%s round %d: rates %v and %v, want positive", r.pair.name, r.round, r.a, r.b)
		}
	}
	for _, line := range []string{"host before: SHA-256 ", "host after:  SHA-256 "} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks the line %q", line)
		}
	}
	for _, p := range all {
		if !strings.Contains(out.String(), p.name) {
			t.Errorf("output lacks pair %q", p.name)
		}
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+len(results) {
		t.Fatalf("CSV has %d records, want header + %d", len(recs), len(results))
	}

	checkNothingLeft(ctx, t, cfg)
}

// TestScaleSmoke runs every scale case, and those of -scale-touched, on
// every store with tiny sizes: each must produce a time for every
// operation, small and scaled.
func TestScaleSmoke(t *testing.T) {
	ctx, cfg, e := smokeEnv(t)
	var out bytes.Buffer
	stores := []string{"memory", "sqlite", "postgres", "redis"}
	cases := append(scaleCases(2000, 2000), touchedCases()...)
	for i := range cases {
		cases[i].collect = i%2 == 0 // -scale-gc on every other case
	}
	res, err := runScale(ctx, e, stores, cases, 2, &out)
	if err != nil {
		t.Fatalf("scale: %v\n%s", err, out.String())
	}
	if len(res) != len(stores)*len(cases) {
		t.Fatalf("%d results, want one per store and case", len(res))
	}
	for _, r := range res {
		for k := range scaleOps {
			if r.small[k] <= 0 || r.big[k] <= 0 {
				t.Errorf("%s, %s: %s took %v / %v, want positive", r.store, r.name, scaleOps[k], r.small[k], r.big[k])
			}
		}
	}
	checkNothingLeft(ctx, t, cfg)
}

// checkNothingLeft fails when a schema or a key of the benchmark remains.
func checkNothingLeft(ctx context.Context, t *testing.T, cfg config) {
	t.Helper()
	e, err := newEnv(ctx, cfg.pg, cfg.redis, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	var schemas int
	if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'peers\\_%'").Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	// Other runs of the benchmark may be going on; none of this run's
	// schemas may remain, which the workloads' own cleanup ensures, so a
	// count is a fair check on a machine that runs this alone.
	if schemas != 0 {
		t.Errorf("%d peers_ schemas left behind", schemas)
	}
	keys, err := e.rdb.Keys(ctx, "peers:*").Result()
	if err != nil && err != goredis.Nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("Redis keys left behind: %v", keys)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// TestCPUPerEvent runs two append pairs with -cpu: each side of each round
// reports the CPU its client spent and, the servers being local here, the
// CPU of the PostgreSQL or Redis processes, and the table lists them.
func TestCPUPerEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := config{
		pg: envOr("RHEO_BENCH_PG", "postgres://postgres@127.0.0.1:5432/test"), redis: envOr("RHEO_BENCH_REDIS", "127.0.0.1:6379"),
		sz:     sizes{consume: 200, appends: 20000, memory: 1000},
		rounds: 2, parts: 2, workers: 10, cpu: true,
		only: `^(postgres append 1000: vs bare INSERT|redis append 1000: vs pipelined XADD)$`,
	}
	var out bytes.Buffer
	results, err := run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("peers: %v\n%s", err, out.String())
	}
	if len(results) != 4 {
		t.Fatalf("%d results, want 4\n%s", len(results), out.String())
	}
	for _, r := range results {
		for side, c := range map[string]cpuTimes{"rheo": r.ca, "peer": r.cb} {
			if c.client <= 0 || c.server <= 0 {
				t.Errorf("%s round %d, %s: CPU per event %v (client + servers), want both positive", r.pair.name, r.round, side, c)
			}
		}
	}
	if !strings.Contains(out.String(), "rheo servers µs/event") {
		t.Errorf("no CPU table in the output:\n%s", out.String())
	}
	checkNothingLeft(ctx, t, cfg)
}

// TestWALCostSmoke runs -scale-wal on a short stream: three passes over
// both streams, each with a positive WAL volume, and nothing left behind.
func TestWALCostSmoke(t *testing.T) {
	ctx, cfg, e := smokeEnv(t)
	var out bytes.Buffer
	if err := walCost(ctx, e, 2000, &out); err != nil {
		t.Fatalf("walCost: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6 (3 passes, 2 streams):\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 5 || f[4] == "0" || strings.HasPrefix(f[4], "-") {
			t.Errorf("line %q: want a positive WAL volume", l)
		}
	}
	checkNothingLeft(ctx, t, cfg)
}

// smokeEnv returns a context that ends in 5 minutes, the configuration of
// the local servers (or RHEO_BENCH_PG, RHEO_BENCH_REDIS) and an env over
// them, closed at cleanup.
func smokeEnv(t *testing.T) (context.Context, config, *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	cfg := config{pg: envOr("RHEO_BENCH_PG", "postgres://postgres@127.0.0.1:5432/test"), redis: envOr("RHEO_BENCH_REDIS", "127.0.0.1:6379")}
	e, err := newEnv(ctx, cfg.pg, cfg.redis, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return ctx, cfg, e
}

// TestProbeHost measures the host: every figure is positive, the SQLite
// file it commits to is gone afterwards, and its line names each figure.
func TestProbeHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := newEnv(ctx, envOr("RHEO_BENCH_PG", "postgres://postgres@127.0.0.1:5432/test"), envOr("RHEO_BENCH_REDIS", "127.0.0.1:6379"), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	h, err := probeHost(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if h.sha256MBps <= 0 || h.redisRTT <= 0 || h.pgRTT <= 0 || h.sqliteCommit <= 0 {
		t.Fatalf("probe %+v: want every figure positive", h)
	}
	left, err := filepath.Glob(filepath.Join(e.tmp, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the probe left %v behind", left)
	}
	s := h.String()
	for _, w := range []string{"SHA-256 ", "MB/s", "Redis ", "PostgreSQL ", "SQLite commit "} {
		if !strings.Contains(s, w) {
			t.Errorf("%q lacks %q", s, w)
		}
	}
}
