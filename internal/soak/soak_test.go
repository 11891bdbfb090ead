package soak_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rheo-go/rheo/internal/soak"
)

var (
	soakFor    = flag.Duration("soak", 0, "run TestSoak for this long per store (e.g. 60s); also RHEO_SOAK")
	soakStores = flag.String("soak.stores", "", "comma-separated stores to soak (default sqlite,postgres,redis,redis-cluster; also RHEO_SOAK_STORES)")
	soakRate   = flag.Int("soak.rate", 100, "appends per second")
)

// TestSoak runs the soak on each store: a producer, worker processes under a
// chaos loop, and the checker over their journals and the store. It runs
// only when asked (-soak DURATION or RHEO_SOAK=DURATION).
func TestSoak(t *testing.T) {
	if v := os.Getenv(soak.EnvWorker); v != "" {
		worker(t, v)
		return
	}
	d := *soakFor
	if d == 0 {
		if v := os.Getenv("RHEO_SOAK"); v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil || d <= 0 {
				t.Fatalf("RHEO_SOAK=%q is not a positive duration such as 60s", v)
			}
		}
	}
	if d <= 0 {
		t.Skip("soak not requested: run with -soak DURATION (go test ./internal/soak -run TestSoak -soak 60s) or RHEO_SOAK=60s")
	}
	names := *soakStores
	if names == "" {
		names = os.Getenv("RHEO_SOAK_STORES")
	}
	if names == "" {
		names = strings.Join(soak.Stores(), ",")
	}
	stores, err := soak.ParseStores(names)
	if err != nil {
		t.Fatal(err)
	}
	if *soakRate <= 0 {
		t.Fatalf("-soak.rate %d is not positive", *soakRate)
	}
	var rows []string
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			s := soak.Run(t, soak.Config{
				Store: store, Duration: d, Rate: *soakRate, Workers: 3, Partitions: 4, MaxAttempts: 5,
				Lease: 2 * time.Second, TestRun: "^TestSoak$",
			})
			t.Logf("soak %s: %d events appended, %d deliveries, duplicates by cause: %v, %d retries, %d rejected, %d out of attempts, faults: %v, max lag %d, append-to-ack p50 %s p99 %s, %s",
				s.Store, s.Appended, s.Deliveries, s.Duplicates, s.Retries, s.Rejected, s.Exhausted, s.Faults, s.MaxLag, s.P50, s.P99, s.Duration.Round(time.Millisecond))
			rows = append(rows, s.Row())
			for _, v := range s.Violations {
				t.Errorf("soak %s: VIOLATION: %s", store, v)
			}
			if s.Appended == 0 {
				t.Errorf("soak %s: nothing was appended", store)
			}
		})
	}
	t.Log("summary (store | duration | appended | deliveries | duplicates | retries | dead letters | faults | max lag | p50 / p99):")
	for _, r := range rows {
		t.Log(r)
	}
}

// worker is the body of a worker process.
func worker(t *testing.T, spec string) {
	var cfg soak.WorkerConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatalf("%s: %v", soak.EnvWorker, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := soak.RunWorker(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}
