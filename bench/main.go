// Command peers measures rheo against its peers in one process: River,
// watermill-sql and watermill-redisstream, and bare baselines on each store
// (multi-row INSERT, SKIP LOCKED claim + delete, pipelined XADD, XREADGROUP +
// XACK, a one-row-per-transaction SQLite queue). Every pair runs its two
// sides back to back, alternating which goes first from round to round, so
// that load on a shared machine falls on both alike; it prints each figure,
// the ratio per round and the median ratio, and writes them to a CSV that
// ./cmd/chart renders for docs/performance.md.
//
//	cd bench && go run . -n 20000 -appends 50000 -rounds 3 -csv peers.csv
package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
)

// workload runs one measurement on fresh storage of n events, jobs, rows or
// entries and returns its rate per second; setup and cleanup are not timed.
type workload func(ctx context.Context, e *env, n int) (float64, error)

// side is one half of a pair.
type side struct {
	label string
	run   workload
	size  func(s sizes) int
}

// pair compares rheo (a) with a peer or baseline (b). A pair with no b
// compares a's rate with an absolute target instead.
type pair struct {
	name   string
	a, b   side
	target float64 // the ratio a/b the issue asks for (or events/s without b); 0: none
}

// sizes are the workload sizes, from flags.
type sizes struct {
	consume, appends, memory int
}

func consumeN(s sizes) int { return s.consume }
func appendN(s sizes) int  { return s.appends }
func memoryN(s sizes) int  { return s.memory }

func pairs(workers int) []pair {
	def := fmt.Sprintf("rheo consumer, default settings (Concurrency %d)", workers)
	raw := "rheo Fetch(100)+AckBatch, 2 goroutines"
	prev := fmt.Sprintf("rheo consumer, MaxInflight %d (the previous default)", workers)
	app := func(store string, size int) side {
		return side{fmt.Sprintf("rheo AppendBatch %d", size), rheoAppend(store, size), appendN}
	}
	return []pair{
		{"postgres burn-down: runtime vs River", side{def, rheoConsumer("postgres"), consumeN},
			side{"River burn-down, river bench tuning (MaxWorkers 2000, cooldown 2 ms)", riverBurnDown(riverBench), consumeN}, 2},
		{"postgres burn-down: runtime vs River at its defaults", side{def, rheoConsumer("postgres"), consumeN},
			side{fmt.Sprintf("River burn-down, defaults (MaxWorkers %d)", workers), riverBurnDown(riverTuning{}), consumeN}, 0},
		{"postgres burn-down: raw loop vs bare SKIP LOCKED", side{raw, rheoRaw("postgres"), consumeN},
			side{"bare SKIP LOCKED claim + delete, 2 goroutines", pgBareClaimDelete, consumeN}, 0.7},
		{"postgres consume: runtime vs watermill-sql", side{def, rheoConsumer("postgres"), consumeN},
			side{"watermill-sql subscriber, consumer group", wmConsume(wmSQL), consumeN}, 0},
		{"postgres append 100: vs River InsertMany", app("postgres", 100),
			side{"River InsertMany 100", riverInsertMany(100), appendN}, 2},
		{"postgres append 1000: vs River InsertMany", app("postgres", 1000),
			side{"River InsertMany 1000", riverInsertMany(1000), appendN}, 2},
		{"postgres append 100: vs bare INSERT", app("postgres", 100),
			side{"bare multi-row INSERT 100", pgBareInsert(100), appendN}, 0.5},
		{"postgres append 1000: vs bare INSERT", app("postgres", 1000),
			side{"bare multi-row INSERT 1000", pgBareInsert(1000), appendN}, 0.5},
		{"postgres append 100: vs watermill-sql Publish", app("postgres", 100),
			side{"watermill-sql Publish 100", wmPublish(wmSQL, 100), appendN}, 0},

		{"redis consume: runtime vs watermill-redisstream", side{def, rheoConsumer("redis"), consumeN},
			side{"watermill-redisstream subscriber, consumer group", wmConsume(wmRedis), consumeN}, 8},
		{"redis consume: raw loop vs bare XREADGROUP+XACK", side{raw, rheoRaw("redis"), consumeN},
			side{"bare XREADGROUP 100 + XACK, 2 goroutines", redisBareGroup, consumeN}, 0},
		{"redis append 100: vs pipelined XADD", app("redis", 100),
			side{"bare pipelined XADD 100", redisBareXAdd(100), appendN}, 0.5},
		{"redis append 1000: vs pipelined XADD", app("redis", 1000),
			side{"bare pipelined XADD 1000", redisBareXAdd(1000), appendN}, 0.5},
		{"redis append 100: vs watermill-redisstream Publish", app("redis", 100),
			side{"watermill-redisstream Publish 100", wmPublish(wmRedis, 100), appendN}, 0},

		{"sqlite consume: runtime vs one-row queue", side{def, rheoConsumer("sqlite"), consumeN},
			side{"bare one row per transaction", sqliteBareQueue, consumeN}, 10},
		{"sqlite consume: raw loop vs one-row queue", side{raw, rheoRaw("sqlite"), consumeN},
			side{"bare one row per transaction", sqliteBareQueue, consumeN}, 10},
		{"sqlite synchronous=full consume: runtime vs one-row queue", side{def, rheoConsumer("sqlite-full"), consumeN},
			side{"bare one row per transaction, synchronous=full", sqliteBareQueueFull, consumeN}, 10},
		{"sqlite append 100: vs bare INSERT", app("sqlite", 100),
			side{"bare multi-row INSERT 100", sqliteBareInsert(100), appendN}, 0},
		{"sqlite append 1000: vs bare INSERT", app("sqlite", 1000),
			side{"bare multi-row INSERT 1000", sqliteBareInsert(1000), appendN}, 0},

		{"postgres runtime: default vs MaxInflight = Concurrency", side{def, rheoConsumer("postgres"), consumeN},
			side{prev, rheoConsumerWindow("postgres", workers), consumeN}, 0},
		{"redis runtime: default vs MaxInflight = Concurrency", side{def, rheoConsumer("redis"), consumeN},
			side{prev, rheoConsumerWindow("redis", workers), consumeN}, 0},
		{"sqlite runtime: default vs MaxInflight = Concurrency", side{def, rheoConsumer("sqlite"), consumeN},
			side{prev, rheoConsumerWindow("sqlite", workers), consumeN}, 0},
		{"memory runtime: default vs MaxInflight = Concurrency", side{def, rheoConsumer("memory"), memoryN},
			side{prev, rheoConsumerWindow("memory", workers), memoryN}, 0},

		{"memory append 100: fresh ~100-byte JSON", side{"rheo AppendBatch 100", rheoAppend("memory", 100), memoryN}, side{}, 1e6},
		{"memory append 1000: fresh ~100-byte JSON", side{"rheo AppendBatch 1000", rheoAppend("memory", 1000), memoryN}, side{}, 1e6},
		{"memory burn-down: runtime", side{def, rheoConsumer("memory"), memoryN}, side{}, 0},
		{"memory burn-down: raw loop", side{raw, rheoRaw("memory"), memoryN}, side{}, 0},
	}
}

// result is one round of one pair.
type result struct {
	pair  *pair
	round int
	a, b  float64
	// ca, cb: CPU per event of each side's timed part, with -cpu.
	ca, cb cpuTimes
}

func (r result) ratio() float64 {
	if r.pair.b.run == nil {
		return r.a
	}
	return r.a / r.b
}

type config struct {
	pg, redis string
	sz        sizes
	rounds    int
	parts     int
	workers   int
	only      string
	csv       string
	cpu       bool

	scale        bool   // run the scale cases instead of the pairs
	scaleTouched bool   // with -scale: the cases of touchedCases instead
	scaleCases   string // with -scale: a regular expression the cases' names must match
	scaleTail    bool   // with -scale: scaleCase.tailKeys
	scaleGC      bool   // with -scale: scaleCase.collect
	scaleStores  string // comma-separated
	scaleEvents  int
	scaleCycles  int
	scaleSettled int
	walCost      int  // with -scale-wal: events of the long stream
	scaleBare    bool // the bare key-index baseline instead of the pairs (keyindex.go)
}

func main() {
	var cfg config
	flag.StringVar(&cfg.pg, "pg", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL DSN (a fresh schema per run is created and dropped)")
	flag.StringVar(&cfg.redis, "redis", "127.0.0.1:6379", "Redis address (a fresh key prefix per run is used and deleted)")
	flag.IntVar(&cfg.sz.consume, "n", 5000, "backlog of each burn-down (events, jobs, rows, entries)")
	flag.IntVar(&cfg.sz.appends, "appends", 10000, "events each append workload writes")
	flag.IntVar(&cfg.sz.memory, "memn", 100000, "events of the memory-store workloads")
	flag.IntVar(&cfg.rounds, "rounds", 2, "rounds per pair; the side that goes first alternates")
	flag.IntVar(&cfg.parts, "partitions", 4, "partitions of each rheo stream")
	flag.IntVar(&cfg.workers, "workers", 100, "handler concurrency of rheo's runtime and River's MaxWorkers")
	flag.StringVar(&cfg.only, "only", "", "run only the pairs whose name matches this regular expression")
	flag.StringVar(&cfg.csv, "csv", "peers.csv", "CSV file to write (empty: none)")
	flag.BoolVar(&cfg.cpu, "cpu", false, "also report the CPU time per event of each side: this process's (the client) and that of the local postgres and redis-server processes (Linux)")
	flag.BoolVar(&cfg.scale, "scale", false, "measure operation costs at scale (1,000 groups, 1,024 partitions, -scale-events events) against a small stream, instead of the pairs")
	flag.BoolVar(&cfg.scaleTouched, "scale-touched", false, "with -scale: instead of its cases, compare cycles that touch 4, 16, 32, 64 and 100 partitions of a stream of 1,024 with the same cycles on a stream of that many partitions")
	flag.StringVar(&cfg.scaleCases, "scale-cases", "", "with -scale: run only the cases whose name matches this regular expression")
	flag.BoolVar(&cfg.scaleGC, "scale-gc", false, "with -scale: collect garbage before each timed operation of a cycle, so that none pays for the collector's work on the garbage of the one before it")
	flag.BoolVar(&cfg.scaleTail, "scale-tail-keys", false, "with -scale: give the measured appends keys that sort after those of the events before them, so that they land together at the end of the key indexes")
	flag.StringVar(&cfg.scaleStores, "scale-stores", "memory,sqlite,postgres,redis", "stores of -scale")
	flag.IntVar(&cfg.scaleEvents, "scale-events", 10000000, "events of the long stream of -scale")
	flag.IntVar(&cfg.scaleSettled, "scale-settled", 100000, "events the measured group of -scale leaves reopened (by a Replay) or delayed (nacked for a day) in the two settled cases")
	flag.IntVar(&cfg.scaleCycles, "scale-cycles", 200, "measured cycles per case of -scale")
	flag.BoolVar(&cfg.scaleBare, "scale-bare", false, "instead of the pairs: time a multi-row INSERT of 100 rows into bare SQLite and PostgreSQL tables of 1,000 and of -scale-events rows, with and without an index of the rows' keys, as -scale times appends to a long stream (-scale-cycles cycles; of -scale-stores, sqlite and postgres)")
	flag.IntVar(&cfg.walCost, "scale-wal", 0, "instead of the pairs: load a PostgreSQL stream of this many events and print the WAL bytes per append of 100 to it and to a small stream")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers: -cpuprofile:", err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.walCost > 0 {
		e, err := newEnv(ctx, cfg.pg, cfg.redis, cfg.parts, cfg.workers)
		if err == nil {
			err = walCost(ctx, e, cfg.walCost, os.Stdout)
			e.close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.scaleBare {
		if err := scaleBare(ctx, cfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.scale {
		if err := scale(ctx, cfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "peers:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// scale runs the scale cases and prints their table.
func scale(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.scaleEvents < 1000 || cfg.scaleCycles < 1 {
		return fmt.Errorf("-scale-events must be at least 1000 and -scale-cycles at least 1")
	}
	re, err := regexp.Compile(cfg.scaleCases)
	if err != nil {
		return fmt.Errorf("-scale-cases: %w", err)
	}
	all := scaleCases(cfg.scaleEvents, cfg.scaleSettled)
	if cfg.scaleTouched {
		all = touchedCases()
	}
	var cases []scaleCase
	for _, sc := range all {
		if re.MatchString(sc.name) {
			sc.tailKeys, sc.collect = cfg.scaleTail, cfg.scaleGC
			cases = append(cases, sc)
		}
	}
	if len(cases) == 0 {
		return fmt.Errorf("-scale-cases %q matches no case", cfg.scaleCases)
	}
	e, err := newEnv(ctx, cfg.pg, cfg.redis, cfg.parts, cfg.workers)
	if err != nil {
		return err
	}
	defer e.close()
	res, err := runScale(ctx, e, strings.Split(cfg.scaleStores, ","), cases, cfg.scaleCycles, out)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	printScale(out, res)
	return nil
}

// run measures every selected pair and returns the results.
func run(ctx context.Context, cfg config, out io.Writer) ([]result, error) {
	re, err := regexp.Compile(cfg.only)
	if err != nil {
		return nil, fmt.Errorf("-only: %w", err)
	}
	if cfg.rounds < 1 || cfg.sz.consume < 1 || cfg.sz.appends < 1 || cfg.sz.memory < 1 || cfg.parts < 1 || cfg.workers < 1 {
		return nil, fmt.Errorf("-rounds, -n, -appends, -memn, -partitions and -workers must be at least 1")
	}
	e, err := newEnv(ctx, cfg.pg, cfg.redis, cfg.parts, cfg.workers)
	if err != nil {
		return nil, err
	}
	defer e.close()
	e.cpu = cfg.cpu
	var sel []*pair
	all := pairs(cfg.workers)
	for i := range all {
		if re.MatchString(all[i].name) {
			sel = append(sel, &all[i])
		}
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("-only %q matches no pair", cfg.only)
	}
	host, err := probeHost(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("probing the host: %w", err)
	}
	fmt.Fprintln(out, "host before:", host)
	var results []result
	for round := range cfg.rounds {
		for _, p := range sel {
			r := result{pair: p, round: round + 1}
			first, second := &p.a, &p.b
			ra, rb := &r.a, &r.b
			ca, cb := &r.ca, &r.cb
			if round%2 == 1 && p.b.run != nil {
				first, second, ra, rb, ca, cb = second, first, rb, ra, cb, ca
			}
			if *ra, err = first.run(ctx, e, first.size(cfg.sz)); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", p.name, first.label, err)
			}
			*ca = perEvent(e.spent, first.size(cfg.sz))
			if second.run != nil {
				if *rb, err = second.run(ctx, e, second.size(cfg.sz)); err != nil {
					return nil, fmt.Errorf("%s: %s: %w", p.name, second.label, err)
				}
				*cb = perEvent(e.spent, second.size(cfg.sz))
			}
			results = append(results, r)
			if p.b.run == nil {
				fmt.Fprintf(out, "round %d  %-52s  %10.0f/s\n", r.round, p.name, r.a)
			} else {
				fmt.Fprintf(out, "round %d  %-52s  %10.0f/s vs %10.0f/s  %.2f×\n", r.round, p.name, r.a, r.b, r.ratio())
			}
			if cfg.cpu {
				fmt.Fprintf(out, "         CPU µs/event, client + servers: rheo %s", r.ca)
				if p.b.run != nil {
					fmt.Fprintf(out, ", peer %s", r.cb)
				}
				fmt.Fprintln(out)
			}
		}
	}
	if host, err = probeHost(ctx, e); err != nil {
		return nil, fmt.Errorf("probing the host: %w", err)
	}
	fmt.Fprintln(out, "host after: ", host)
	printTable(out, sel, results)
	if cfg.cpu {
		printCPU(out, sel, results)
	}
	if cfg.csv != "" {
		if err := writeCSV(cfg.csv, results); err != nil {
			return nil, err
		}
		fmt.Fprintln(out, "wrote", cfg.csv)
	}
	return results, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func printTable(out io.Writer, sel []*pair, results []result) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pair\trheo\trheo /s (median)\tpeer\tpeer /s (median)\tratio per round\tmedian ratio\ttarget\t")
	for _, p := range sel {
		var as, bs, rs []float64
		for _, r := range results {
			if r.pair == p {
				as, bs, rs = append(as, r.a), append(bs, r.b), append(rs, r.ratio())
			}
		}
		if p.b.run == nil {
			verdict := "-"
			if p.target > 0 {
				verdict = fmt.Sprintf("≥ %.0f/s: %s", p.target, met(median(as) >= p.target))
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t-\t-\t-\t-\t%s\t\n", p.name, p.a.label, median(as), verdict)
			continue
		}
		var per []string
		for _, x := range rs {
			per = append(per, fmt.Sprintf("%.2f", x))
		}
		verdict := "-"
		if p.target > 0 {
			verdict = fmt.Sprintf("≥ %.1f×: %s", p.target, met(median(rs) >= p.target))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%.0f\t%s\t%.2f×\t%s\t\n", p.name, p.a.label, median(as), p.b.label, median(bs),
			fmtList(per), median(rs), verdict)
	}
	tw.Flush()
}

func fmtList(xs []string) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		s += x
	}
	return s
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// writeCSV writes one line per round: pair, round, both sides' labels and
// rates, the ratio and the target.
func writeCSV(path string, results []result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"pair", "round", "rheo", "rheo_per_s", "peer", "peer_per_s", "ratio", "target"})
	for _, r := range results {
		ratio := ""
		if r.pair.b.run != nil {
			ratio = strconv.FormatFloat(r.ratio(), 'f', 3, 64)
		}
		w.Write([]string{r.pair.name, strconv.Itoa(r.round), r.pair.a.label, strconv.FormatFloat(r.a, 'f', 0, 64),
			r.pair.b.label, strconv.FormatFloat(r.b, 'f', 0, 64), ratio, strconv.FormatFloat(r.pair.target, 'f', -1, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
