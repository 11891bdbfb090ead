package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// A scale case is a stream whose per-operation cost is compared with that
// of a small stream in the same store: 4 partitions, one group, 1,000
// events.
type scaleCase struct {
	name   string
	parts  int // partitions of the stream
	groups int // groups on the stream; the first one is measured
	events int // events appended before the measured cycles
	// settled, when set, is what the measured group did with those
	// events before the cycles: "reopened" (acked them all, then a
	// Replay reopened them: a backlog of available deliveries),
	// "delayed" (nacked them all with a day's delay: a backlog of
	// retries not due yet, as a consumer leaves behind while a
	// dependency is down) or "expired" (leased them an hour ago and
	// never settled them: leases that all expired, as a fleet of
	// consumers that crashed leaves behind).
	settled string
	// active, when set, is how many partitions the measured cycles
	// append to (the first ones, in turn): the stream's other
	// partitions stay idle. Otherwise keys route the events, and a
	// cycle's 100 events spread over up to 100 partitions.
	active int
	// smallParts, when set, is the small stream's partitions (4
	// otherwise); its cycles append to as many partitions as the scaled
	// stream's (active), so the two differ only in the partitions they
	// hold (see touchedCases).
	smallParts int
	// tailKeys (-scale-tail-keys) gives the measured cycles' events keys
	// that sort after every key of the events appended before them, so
	// that an append's keys land together at the end of the stores' key
	// indexes instead of all over them.
	tailKeys bool
	// collect (-scale-gc) runs the garbage collector before each timed
	// operation of a cycle, outside its time: an operation then pays for
	// the collection of its own garbage only when that garbage sets one
	// off, not for the work the operation before it left to the collector.
	collect bool
}

func scaleCases(events, settled int) []scaleCase {
	return []scaleCase{
		{name: "1,000 groups", parts: 4, groups: 1000, events: 1000},
		{name: "1,024 partitions", parts: 1024, groups: 1, events: 1000},
		{name: "1,024 partitions, 4 active", parts: 1024, groups: 1, events: 1000, active: 4},
		{name: fmt.Sprintf("%s events", thousands(events)), parts: 4, groups: 1, events: events},
		{name: fmt.Sprintf("%s reopened", thousands(settled)), parts: 4, groups: 1, events: settled, settled: "reopened"},
		{name: fmt.Sprintf("%s delayed", thousands(settled)), parts: 4, groups: 1, events: settled, settled: "delayed"},
		{name: fmt.Sprintf("%s expired", thousands(settled)), parts: 4, groups: 1, events: settled, settled: "expired"},
	}
}

// touchedCases (-scale-touched) set apart the two things a spread cycle on
// 1,024 partitions differs from the small case in: the partitions the
// stream holds, and the partitions a cycle touches. Each case appends
// every cycle's 100 events to its first k partitions in turn, on a stream
// of 1,024 partitions and on a stream of k, so the pair touches as many
// partitions and differs only in those it holds.
func touchedCases() []scaleCase {
	var out []scaleCase
	for _, k := range []int{4, 16, 32, 64, 100} {
		out = append(out, scaleCase{name: fmt.Sprintf("%d touched, of %d / of 1,024", k, k), parts: 1024, groups: 1, events: 1000, active: k, smallParts: k})
	}
	return out
}

// scaleOps are a cycle's operations: the last reads the lag of partitions
// 0 to 3 only, all of the small stream's and 4 of the scaled one's.
var scaleOps = [...]string{"append 100", "fetch 100", "ack 100", "lag", "lag of 4"}

const nOps = len(scaleOps)

// scaleResult is the mean cost of each operation of a cycle, small and
// scaled, over the same cycles.
type scaleResult struct {
	store, name string
	small, big  [nOps]time.Duration
}

// runScale measures, for every store and case, the mean time of one cycle's
// operations (AppendBatch of 100, Fetch with Limit 100, AckBatch of what it
// got, Lag) on the scaled stream and on the small one, alternating cycle by
// cycle so that load elsewhere falls on both alike. Every group starts at
// the end of its stream (rheo.Latest), so a cycle works at the tail of the
// stream as a caught-up consumer does.
func runScale(ctx context.Context, e *env, stores []string, cases []scaleCase, cycles int, out io.Writer) ([]scaleResult, error) {
	var res []scaleResult
	for _, store := range stores {
		for _, sc := range cases {
			r, err := scaleOne(ctx, e, store, sc, cycles)
			if err != nil {
				return res, fmt.Errorf("%s, %s: %w", store, sc.name, err)
			}
			res = append(res, r)
			fmt.Fprintf(out, "%-9s %-18s", store, sc.name)
			for i, op := range scaleOps {
				fmt.Fprintf(out, "  %s %s/%s (%.2f×)", op, us(r.small[i]), us(r.big[i]), ratio(r.big[i], r.small[i]))
			}
			fmt.Fprintln(out)
		}
	}
	return res, nil
}

func scaleOne(ctx context.Context, e *env, store string, sc scaleCase, cycles int) (scaleResult, error) {
	r := scaleResult{store: store, name: sc.name}
	c, cleanup, err := e.rheoClient(ctx, store)
	if err != nil {
		return r, err
	}
	defer cleanup()
	setup := func(stream string, parts, groups, events int, settled string) error {
		if err := c.CreateStream(ctx, stream, rheo.StreamConfig{Partitions: parts}); err != nil {
			return err
		}
		if err := fillStream(ctx, c, stream, events); err != nil {
			return err
		}
		for g := range groups {
			start := rheo.Latest()
			if settled != "" {
				start = rheo.Beginning()
			}
			if err := c.CreateGroup(ctx, stream, groupName(g), rheo.GroupConfig{Start: start}); err != nil {
				return err
			}
		}
		if settled != "" {
			return settle(ctx, c, stream, events, settled)
		}
		return nil
	}
	if err := setup("small", max(4, sc.smallParts), 1, 1000, ""); err != nil {
		return r, err
	}
	if err := setup("big", sc.parts, sc.groups, sc.events, sc.settled); err != nil {
		return r, err
	}
	if store == "postgres" {
		if _, err := e.pool.Exec(ctx, "ANALYZE"); err != nil {
			return r, err
		}
	}
	for i := range cycles + 5 {
		var s, b [nOps]time.Duration
		if err := cycle(ctx, c, "small", i, sc, &s); err != nil {
			return r, err
		}
		if err := cycle(ctx, c, "big", i, sc, &b); err != nil {
			return r, err
		}
		if i < 5 {
			continue // warm-up
		}
		for k := range nOps {
			r.small[k] += s[k] / time.Duration(cycles)
			r.big[k] += b[k] / time.Duration(cycles)
		}
	}
	return r, nil
}

func groupName(g int) string { return "g" + strconv.Itoa(g) }

// cycle appends 100 events (to the first sc.active partitions in turn,
// or routed by key when that is 0), fetches up to 100 for group g0, acks
// them and reads the lag, of every partition and of the first 4, adding
// each operation's time to d.
func cycle(ctx context.Context, c *rheo.Client, stream string, i int, sc scaleCase, d *[nOps]time.Duration) error {
	msgs := make([]rheo.Message, 100)
	for j := range msgs {
		n := i*100 + j
		msgs[j] = rheo.Message{Type: "order.created", Key: cycleKey(n, sc.tailKeys), Payload: payload(nil, n)}
		if sc.active > 0 {
			p := n % sc.active
			msgs[j].Partition = &p
		}
	}
	var ls []rheo.Lease
	ops := [nOps]func() error{
		func() error { _, err := c.AppendBatch(ctx, stream, msgs); return err },
		func() (err error) {
			ls, err = c.Fetch(ctx, stream, groupName(0), rheo.FetchOptions{Limit: 100})
			if err == nil && len(ls) == 0 {
				err = fmt.Errorf("fetch from %s returned nothing after an append", stream)
			}
			return err
		},
		func() error { return c.AckBatch(ctx, ls) },
		func() error { _, err := c.Lag(ctx, stream, groupName(0)); return err },
		func() error {
			lag, err := c.Lag(ctx, stream, groupName(0), 0, 1, 2, 3)
			if err == nil && len(lag.Partitions) != 4 {
				err = fmt.Errorf("lag of 4 partitions of %s returned %d", stream, len(lag.Partitions))
			}
			return err
		},
	}
	for k, op := range ops {
		if sc.collect {
			runtime.GC()
		}
		t := time.Now()
		if err := op(); err != nil {
			return err
		}
		d[k] = time.Since(t)
	}
	return nil
}

// cycleKey is the key of a cycle's event n: its decimal number, as the
// events of fillStream have, which lands all over a long stream's key
// index; or with tail, one that sorts after every such key, in order.
func cycleKey(n int, tail bool) string {
	if tail {
		return fmt.Sprintf("t%09d", n)
	}
	return strconv.Itoa(n)
}

// settle leaves the n events of stream reopened or delayed for group g0
// (see scaleCase.settled).
func settle(ctx context.Context, c *rheo.Client, stream string, n int, how string) error {
	g := groupName(0)
	if how == "expired" {
		// Leases taken on a clock an hour behind, with the default
		// duration: long expired to the measured client.
		c = rheo.New(c.Backend(), rheo.WithClock(clock.NewFrozen(time.Now().Add(-time.Hour))))
	}
	for done := 0; done < n; {
		ls, err := c.Fetch(ctx, stream, g, rheo.FetchOptions{Limit: 1000})
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			return fmt.Errorf("settling %s: fetch returned nothing after %d of %d", stream, done, n)
		}
		switch how {
		case "expired":
		case "reopened":
			err = c.AckBatch(ctx, ls)
		default:
			reqs := make([]rheo.SettleRequest, len(ls))
			later := time.Now().Add(24 * time.Hour)
			for i, l := range ls {
				reqs[i] = rheo.SettleRequest{Kind: rheo.SettleNack, Lease: l, Reason: "down", AvailableAt: later}
			}
			var errs []error
			errs, err = c.Backend().Settle(ctx, stream, g, reqs, time.Now())
			for _, e := range errs {
				if err == nil {
					err = e
				}
			}
		}
		if err != nil {
			return err
		}
		done += len(ls)
	}
	if how != "reopened" {
		return nil
	}
	k, err := c.Replay(ctx, stream, g, rheo.Matching(rheo.Query{Type: "order.created"}))
	if err != nil {
		return err
	}
	if k != n {
		return fmt.Errorf("replay of %s reopened %d of %d", stream, k, n)
	}
	return nil
}

// fillStream appends n events to stream in batches of 1,000.
func fillStream(ctx context.Context, c *rheo.Client, stream string, n int) error {
	msgs := make([]rheo.Message, 0, 1000)
	for i := 0; i < n; i += 1000 {
		msgs = msgs[:0]
		for j := i; j < min(i+1000, n); j++ {
			msgs = append(msgs, rheo.Message{Type: "order.created", Key: strconv.Itoa(j), Payload: payload(nil, j)})
		}
		if _, err := c.AppendBatch(ctx, stream, msgs); err != nil {
			return err
		}
	}
	return nil
}

// printScale writes the results as a table, one row per store and case.
func printScale(out io.Writer, res []scaleResult) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "store\tcase\tappend 100 (small / scaled)\tfetch 100\tack 100\tlag\tlag of 4\t")
	for _, r := range res {
		fmt.Fprintf(w, "%s\t%s\t", r.store, r.name)
		for k := range nOps {
			fmt.Fprintf(w, "%s / %s = %.2f×\t", us(r.small[k]), us(r.big[k]), ratio(r.big[k], r.small[k]))
		}
		fmt.Fprintln(w)
	}
	w.Flush()
}

func us(d time.Duration) string {
	if d < 10*time.Microsecond {
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// walCost appends batches of 100 freshly keyed events, as the scale
// cycles do, to a small PostgreSQL stream (1,000 events) and to a long one
// (events), alternately, after a CHECKPOINT, and prints the WAL bytes per
// append of each: the server's write volume, which full-page images of
// index pages first touched since the checkpoint swell on the long
// stream, whose key index is too large for consecutive keys to share
// pages.
func walCost(ctx context.Context, e *env, events int, out io.Writer) error {
	c, cleanup, err := e.rheoClient(ctx, "postgres")
	if err != nil {
		return err
	}
	defer cleanup()
	for _, s := range []string{"long", "small"} {
		if err := c.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 4}); err != nil {
			return err
		}
	}
	if err := fillStream(ctx, c, "long", events); err != nil {
		return err
	}
	if err := fillStream(ctx, c, "small", 1000); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("CHECKPOINT (needs a superuser or pg_checkpoint): %w", err)
	}
	lsn := func() (int64, error) {
		var n int64
		err := e.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn() - '0/0'").Scan(&n)
		return n, err
	}
	const appends = 50
	for pass := range 3 {
		for _, s := range []string{"small", "long"} {
			before, err := lsn()
			if err != nil {
				return err
			}
			for i := range appends {
				msgs := make([]rheo.Message, 100)
				for j := range msgs {
					n := (pass*appends+i)*100 + j
					msgs[j] = rheo.Message{Type: "order.created", Key: strconv.Itoa(n), Payload: payload(nil, n)}
				}
				if _, err := c.AppendBatch(ctx, s, msgs); err != nil {
					return err
				}
			}
			after, err := lsn()
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "pass %d  %-5s stream  %7.0f WAL bytes per append of 100\n", pass+1, s, float64(after-before)/appends)
		}
	}
	return nil
}
