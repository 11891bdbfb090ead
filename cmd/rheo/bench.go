package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/rheo-go/rheo"
)

// benchSettings are the knobs of `rheo bench`, printed with the results so
// that two runs (or two backends) compare like for like.
type benchSettings struct {
	DSN        string `json:"dsn"`
	Stream     string `json:"stream"`
	Events     int    `json:"events"`
	Batch      int    `json:"batch"`
	Partitions int    `json:"partitions"`
	FetchLimit int    `json:"fetch_limit"`
	Consumers  int    `json:"consumers"`
	Groups     int    `json:"groups"`
	// Keep is set when the bench stream was left in the store (--keep).
	Keep bool `json:"keep,omitempty"`
	// Store is the backend's own description of its settings (SQLite's
	// synchronous mode, say), when it offers one.
	Store string `json:"store,omitempty"`
}

// benchRate is one measured phase.
type benchRate struct {
	Phase        string  `json:"phase"`
	How          string  `json:"how"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
}

func newRate(phase, how string, n int, d time.Duration) benchRate {
	return benchRate{Phase: phase, How: how, Events: n, Seconds: d.Seconds(), EventsPerSec: float64(n) / d.Seconds()}
}

func (a *app) benchCommand() *cobra.Command {
	s := benchSettings{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure append and consume rates of a backend",
		Long: `Measure a backend: append --events events with AppendBatch of --batch (with
--groups idle groups on the stream, default none), then
consume them with --consumers workers, each looping Fetch(Limit --fetch-limit)
+ AckBatch (frontier and compaction included), and check that lag ends at 0.
It writes to a fresh stream named bench-… and deletes it afterwards (--keep
leaves it in the store); without --dsn or RHEO_DSN it uses a SQLite file in a
temporary directory, not ./rheo.db.`,
		Example: "  rheo bench\n  rheo bench --dsn memory: --events 100000\n  rheo bench --dsn postgres://localhost/test --consumers 4 --partitions 4",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if s.Events < 1 || s.Batch < 1 || s.Batch > rheo.MaxLimit || s.FetchLimit < 1 || s.FetchLimit > rheo.MaxLimit ||
				s.Consumers < 1 || s.Groups < 0 || s.Partitions < 1 || s.Partitions > rheo.MaxPartitions {
				return usagef("bench: --events, --consumers and --partitions must be positive, --groups not negative; --batch and --fetch-limit in 1..%d", rheo.MaxLimit)
			}
			if s.Keep && a.storeDSN() == "memory:" {
				return usagef("bench: --keep with memory: keeps nothing (the store is gone when the command exits); use sqlite:PATH or a shared store")
			}
			ctx := cmd.Context()
			s.DSN = a.storeDSN()
			if !a.dsnGiven() {
				tmp, err := os.MkdirTemp("", "rheo-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				s.DSN = "sqlite:" + filepath.Join(tmp, "bench.db")
			}
			c, err := a.openDSN(ctx, s.DSN)
			if err != nil {
				return err
			}
			defer c.Close()
			s.Stream = "bench-" + randomSuffix()
			if st, ok := c.Backend().(interface{ Settings() string }); ok {
				s.Store = st.Settings()
			}
			rates, err := runBench(ctx, c, s)
			if !s.Keep {
				// Delete the stream even when the run failed or was
				// interrupted; a bench stream is of no use afterwards.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				derr := c.DeleteStream(dctx, s.Stream, rheo.DeleteOptions{Confirm: true})
				cancel()
				if derr != nil && !errors.Is(derr, rheo.ErrStreamNotFound) && err == nil {
					err = fmt.Errorf("bench: deleting stream %s afterwards: %w (delete it with: rheo delete-stream %s --confirm)", s.Stream, derr, s.Stream)
				}
			}
			if err != nil {
				return err
			}
			s.DSN = redact(s.DSN)
			if a.jsonOut {
				return writeJSON(a.stdout, map[string]any{"settings": s, "results": rates})
			}
			kept := ""
			if s.Keep {
				kept = " (kept)"
			}
			fmt.Fprintf(a.stdout, "backend %s, stream %s%s: events %d, partitions %d, append batch %d, fetch limit %d, consumers %d, idle groups %d\n",
				s.DSN, s.Stream, kept, s.Events, s.Partitions, s.Batch, s.FetchLimit, s.Consumers, s.Groups)
			if s.Store != "" {
				fmt.Fprintf(a.stdout, "store settings: %s\n", s.Store)
			}
			t := newTable(a.stdout, "PHASE", "HOW", "EVENTS", "SECONDS", "EVENTS/S")
			for _, r := range rates {
				t.row(r.Phase, r.How, r.Events, fmt.Sprintf("%.3f", r.Seconds), fmt.Sprintf("%.0f", r.EventsPerSec))
			}
			return t.flush()
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&s.Events, "events", 20000, "events to append and consume")
	fs.IntVar(&s.Batch, "batch", 100, "events per AppendBatch")
	fs.IntVar(&s.Partitions, "partitions", 1, "partitions of the bench stream")
	fs.IntVar(&s.FetchLimit, "fetch-limit", 100, "Limit of each Fetch")
	fs.IntVar(&s.Consumers, "consumers", 1, "concurrent Fetch+AckBatch loops")
	fs.IntVar(&s.Groups, "groups", 0, "idle groups on the stream while appending")
	fs.BoolVar(&s.Keep, "keep", false, "leave the bench stream in the store instead of deleting it")
	return cmd
}

func runBench(ctx context.Context, c *rheo.Client, s benchSettings) ([]benchRate, error) {
	if err := c.CreateStream(ctx, s.Stream, rheo.StreamConfig{Partitions: s.Partitions}); err != nil {
		return nil, err
	}
	// Idle groups present while appending, to see what a group costs an append.
	for g := range s.Groups {
		if err := c.CreateGroup(ctx, s.Stream, fmt.Sprintf("idle-%d", g+1), rheo.GroupConfig{}); err != nil {
			return nil, err
		}
	}
	msgs := make([]rheo.Message, 0, s.Batch)
	start := time.Now()
	for i := 0; i < s.Events; i += s.Batch {
		msgs = msgs[:0]
		for j := i; j < min(i+s.Batch, s.Events); j++ {
			msgs = append(msgs, rheo.Message{
				Type:    "bench",
				Key:     fmt.Sprintf("k-%d", j%1024),
				Payload: fmt.Appendf(nil, `{"n":%d,"customer":"c-%d","total":12.5}`, j, j%97),
			})
		}
		if _, err := c.AppendBatch(ctx, s.Stream, msgs); err != nil {
			return nil, fmt.Errorf("append: %w", err)
		}
	}
	rates := []benchRate{newRate("append", fmt.Sprintf("AppendBatch of %d", s.Batch), s.Events, time.Since(start))}
	if err := c.CreateGroup(ctx, s.Stream, "bench", rheo.GroupConfig{}); err != nil {
		return nil, err
	}

	start = time.Now()
	n, err := benchConsume(ctx, c, s)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	if n != s.Events {
		return nil, fmt.Errorf("consume: acked %d events, want %d", n, s.Events)
	}
	lag, err := c.Lag(ctx, s.Stream, "bench")
	if err != nil {
		return nil, err
	}
	if lag.Total != 0 {
		return nil, fmt.Errorf("consume: lag is %d after acking every event, want 0", lag.Total)
	}
	rates = append(rates, newRate("consume",
		fmt.Sprintf("Fetch(Limit %d)+AckBatch x%d", s.FetchLimit, s.Consumers), n, elapsed))
	runtimeRate, err := benchRuntime(ctx, c, s)
	if err != nil {
		return nil, err
	}
	if runtimeRate != nil {
		rates = append(rates, *runtimeRate)
	}
	return rates, nil
}

// benchConsume drains the bench group with Fetch + AckBatch loops and
// returns how many events were acked.
func benchConsume(ctx context.Context, c *rheo.Client, s benchSettings) (int, error) {
	var (
		acked    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range s.Consumers {
		wg.Go(func() {
			opts := rheo.FetchOptions{Limit: s.FetchLimit, ConsumerID: fmt.Sprintf("bench-%d", w), LeaseDuration: time.Minute}
			for {
				ls, err := c.Fetch(ctx, s.Stream, "bench", opts)
				if err == nil && len(ls) > 0 {
					err = c.AckBatch(ctx, ls)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				if len(ls) == 0 {
					// Nothing claimable: the rest is leased by the other
					// loops, which will ack it (leases outlive the run).
					return
				}
				acked.Add(int64(len(ls)))
			}
		})
	}
	wg.Wait()
	if firstErr != nil && !errors.Is(firstErr, context.Canceled) {
		return 0, fmt.Errorf("consume: %w", firstErr)
	}
	return int(acked.Load()), ctx.Err()
}
