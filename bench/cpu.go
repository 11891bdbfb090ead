package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// With -cpu, every workload's timed part also records the CPU time this
// process spent (the client side: rheo or the peer's library, with the
// Go runtime's collector) and the CPU time of the local database servers
// (every process named postgres or redis-server, read from /proc: a
// server on another host shows as zero). Dividing by the events gives
// where each side's time goes. Linux only; elsewhere both read zero.

// serverNames are the process names whose CPU counts as the servers'.
var serverNames = map[string]bool{"postgres": true, "redis-server": true}

// cpuTimes is a sample of both clocks.
type cpuTimes struct{ client, server time.Duration }

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{a.client - b.client, a.server - b.server}
}

func sampleCPU() cpuTimes {
	var s cpuTimes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		// pid (comm) state ppid … utime stime cutime cstime: fields
		// 14 to 17. A server's exited processes (PostgreSQL's backends of
		// closed connections) count in their parent's cutime and cstime
		// once reaped, so the sum does not drop when one exits.
		line := string(b)
		lp, rp := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
		if lp < 0 || rp < lp || !serverNames[line[lp+1:rp]] {
			continue
		}
		f := strings.Fields(line[rp+1:])
		if len(f) < 15 {
			continue
		}
		for _, k := range f[11:15] {
			v, _ := strconv.ParseInt(k, 10, 64)
			s.server += time.Duration(v) * time.Second / clockTicks
		}
	}
	return s
}

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTicks = 100

// mark is the start of a workload's timed part.
type mark struct {
	t   time.Time
	cpu cpuTimes
}

// start marks the beginning of a workload's timed part. It first collects
// the garbage the workload's setup left (a rheo backlog appended from this
// process leaves megabytes; a peer's filled by the server, none), so that
// the timed part pays only for its own.
//
// Before that it has PostgreSQL write a checkpoint: every side starts with
// the server's dirty pages written and its WAL at a checkpoint, so that
// neither side pays for the pages the one before it dirtied, nor meets a
// timed checkpoint the other did not (a role without CHECKPOINT rights
// skips it, with a note).
func (e *env) start() mark {
	if e.pool != nil && !e.noCheckpoint {
		if _, err := e.pool.Exec(context.Background(), "CHECKPOINT"); err != nil {
			e.noCheckpoint = true
			fmt.Fprintf(os.Stderr, "peers: no CHECKPOINT before each timed part (%v); PostgreSQL's own checkpoints may fall in either side\n", err)
		}
	}
	runtime.GC()
	var m mark
	if e.cpu {
		m.cpu = sampleCPU() // before the clock starts: reading /proc takes a while
	}
	m.t = time.Now()
	return m
}

// stop ends the timed part begun at m: it returns the elapsed time and,
// with -cpu, records the CPU both sides spent in e.spent.
func (e *env) stop(m mark) time.Duration {
	d := time.Since(m.t)
	if e.cpu {
		e.spent = sampleCPU().sub(m.cpu)
	}
	return d
}

// perEvent divides a timed part's CPU by its events.
func perEvent(c cpuTimes, n int) cpuTimes {
	return cpuTimes{c.client / time.Duration(n), c.server / time.Duration(n)}
}

func (c cpuTimes) String() string {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return fmt.Sprintf("%.2f + %.2f", us(c.client), us(c.server))
}

// printCPU writes, per pair, the median CPU per event of each side.
func printCPU(out io.Writer, sel []*pair, results []result) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pair\trheo client µs/event\trheo servers µs/event\tpeer client µs/event\tpeer servers µs/event\t")
	us := func(xs []float64) string { return fmt.Sprintf("%.2f", median(xs)/1e3) }
	for _, p := range sel {
		var ac, as, bc, bs []float64
		for _, r := range results {
			if r.pair == p {
				ac, as = append(ac, float64(r.ca.client)), append(as, float64(r.ca.server))
				bc, bs = append(bc, float64(r.cb.client)), append(bs, float64(r.cb.server))
			}
		}
		if p.b.run == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t\n", p.name, us(ac), us(as))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", p.name, us(ac), us(as), us(bc), us(bs))
	}
	tw.Flush()
}
