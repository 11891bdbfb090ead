package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
	// The stores a worker opens by DSN.
	_ "github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/backend/redis"
	_ "github.com/rheo-go/rheo/backend/sqlite"
)

// WorkerConfig is what a worker process is told (as JSON in its
// environment).
type WorkerConfig struct {
	Name        string        // the incarnation, e.g. "w1.3"
	DSN         string        // the store, possibly through a fault proxy
	Stream      string        //
	Group       string        //
	Journal     string        // the worker's own journal file
	Lease       time.Duration // the lease the consumer asks for
	MaxAttempts int           // the group's limit
	// ClusterAddrs, when set, are the nodes of a Redis Cluster the worker
	// opens (DSN is then unused) with KeyPrefix.
	ClusterAddrs []string
	KeyPrefix    string
}

// Payload is an event's payload.
type Payload struct {
	N int64 `json:"n"`
}

// Decide is the handler's deterministic decision for the event with payload
// number n on its attempt: events with n%97 == 0 are rejected on every
// delivery, events with n%10 == 3 are retried once (their first delivery is
// nacked), every other delivery is acked.
func Decide(n int64, attempt int) string {
	switch {
	case Rejects(n):
		return OutcomeReject
	case n%10 == 3 && attempt == 1:
		return OutcomeRetry
	}
	return OutcomeAck
}

// Rejects reports whether the handler rejects the event with payload number n.
func Rejects(n int64) bool { return n%97 == 0 }

// RunWorker runs a rheo.Consumer on the group until ctx ends, journaling
// every delivery before its handler returns and every settle result the
// runtime reports.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	j, err := OpenJournal(cfg.Journal)
	if err != nil {
		return err
	}
	defer j.Close()
	write := func(r Record) {
		if err := j.Write(r); err != nil {
			// A record missing from the journal would make the checker's
			// verdict worthless: stop dead, which the runner reports.
			fmt.Fprintf(os.Stderr, "soak worker %s: journal: %v\n", cfg.Name, err)
			os.Exit(3)
		}
	}
	obs := observer{write: write, worker: cfg.Name}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var c *rheo.Client
	if len(cfg.ClusterAddrs) > 0 {
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cfg.ClusterAddrs, MaxRedirects: 16,
			ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
		defer cc.Close()
		b, err := redis.New(cc, redis.WithKeyPrefix(cfg.KeyPrefix))
		if err != nil {
			return fmt.Errorf("soak worker %s: %w", cfg.Name, err)
		}
		c = rheo.New(b, rheo.WithObserver(obs), rheo.WithLogger(quiet))
	} else {
		var err error
		if c, err = rheo.Open(ctx, cfg.DSN, rheo.WithObserver(obs), rheo.WithLogger(quiet)); err != nil {
			return fmt.Errorf("soak worker %s: open: %w", cfg.Name, err)
		}
	}
	defer c.Close()
	k, err := c.NewConsumer(rheo.ConsumerConfig{
		Stream: cfg.Stream, Group: cfg.Group, ConsumerID: cfg.Name,
		Concurrency: 4, MaxInflight: 32,
		LeaseDuration: cfg.Lease, PollInterval: 100 * time.Millisecond,
		Backoff:         func(int) time.Duration { return 50 * time.Millisecond },
		ShutdownTimeout: 5 * time.Second,
		Handler: func(ctx context.Context, e rheo.Event) error {
			l, ok := rheo.LeaseFromContext(ctx)
			if !ok {
				return errors.New("soak: no lease in the handler's context")
			}
			var p Payload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				return rheo.Reject(fmt.Errorf("soak: payload of %s: %w", e.ID, err))
			}
			outcome := Decide(p.N, l.Attempt)
			write(Record{Kind: KindDeliver, Event: e.ID, N: p.N, Partition: e.Partition, Seq: e.Sequence,
				Lease: l.ID, Attempt: l.Attempt, Worker: cfg.Name, Outcome: outcome})
			// The work: a moment, so leases are in flight when a kill lands.
			time.Sleep(time.Duration(5000+rand.IntN(20000)) * time.Microsecond)
			switch outcome {
			case OutcomeReject:
				return rheo.Reject(errors.New(RejectReason(p.N)))
			case OutcomeRetry:
				return rheo.RetryAfter(20*time.Millisecond, errors.New("soak: retry once"))
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	return k.Run(ctx)
}

type observer struct {
	write  func(Record)
	worker string
}

func (o observer) ObserveConsumer(ev rheo.ConsumerEvent) {
	r := Record{Event: ev.Lease.Event.ID, Lease: ev.Lease.ID, Attempt: ev.Lease.Attempt, Worker: o.worker}
	switch ev.Kind {
	case rheo.ConsumerAcked:
		r.Kind, r.Outcome = KindSettle, OutcomeAck
	case rheo.ConsumerRetried:
		r.Kind, r.Outcome = KindSettle, OutcomeRetry
	case rheo.ConsumerRejected:
		r.Kind, r.Outcome = KindSettle, OutcomeReject
	case rheo.ConsumerLost:
		r.Kind = KindLost
	default:
		return
	}
	if r.Kind == KindSettle {
		r.Result = resultOf(ev.Err)
	}
	if ev.Err != nil {
		r.Err = ev.Err.Error()
	}
	o.write(r)
}

func resultOf(err error) string {
	switch rheo.Classify(err) {
	case rheo.Settled:
		return ResultOK
	case rheo.Lost:
		return ResultLost
	case rheo.Unknown:
		return ResultUnknown
	}
	return ResultFailed
}
