package rheotest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// DifferentialOptions tunes RunDifferential.
type DifferentialOptions struct {
	// Seeds and Steps size the run: Seeds random sequences of Steps
	// operations each. Defaults 10 and 150, a few seconds on a quiet
	// machine. The environment variables
	// RHEO_DIFF_SEEDS and RHEO_DIFF_STEPS override them (for long runs), and
	// RHEO_DIFF_SEED sets the first seed (default 1), so that
	// RHEO_DIFF_SEED=17 RHEO_DIFF_SEEDS=1 replays seed 17 alone.
	Seeds, Steps int
	// Reference makes the backend every answer is compared with; default
	// the memory backend.
	Reference Factory
	// Partitions, when set, is every stream's partition count instead of a
	// random 1 to 3: many partitions (say 40) take the paths a store may
	// have for fetches from many partitions, few of which have work.
	Partitions int
}

// RunDifferential runs seeded random sequences of operations (appends,
// fetches, settles of current and stale leases, batch acks with duplicates,
// renewals, replays of every form, redrives, resets, groups with every
// start, clock advances) on a backend made by f and on a reference backend
// (memory) side by side, each through its own client and frozen clock moved
// identically. After every step it compares each result and error, every
// lease (event, payload bytes, attempt, times), frontier and lag, group
// counts and dead letters. Lease IDs, receipts and generated event IDs differ
// between stores, so leases are paired by position and generated IDs are
// mapped. A disagreement fails with the seed, the step and the operations
// that led to it.
func RunDifferential(t *testing.T, f Factory, opts DifferentialOptions) {
	seeds, steps, first := opts.Seeds, opts.Steps, uint64(1)
	if seeds <= 0 {
		seeds = 10
	}
	if steps <= 0 {
		steps = 150
	}
	if v, ok := envInt(t, "RHEO_DIFF_SEEDS"); ok {
		seeds = v
	}
	if v, ok := envInt(t, "RHEO_DIFF_STEPS"); ok {
		steps = v
	}
	if v, ok := envInt(t, "RHEO_DIFF_SEED"); ok {
		first = uint64(v)
		if os.Getenv("RHEO_DIFF_SEEDS") == "" {
			seeds = 1
		}
	}
	ref := opts.Reference
	if ref == nil {
		ref = func(t testing.TB) rheo.Backend {
			b := memory.New()
			t.Cleanup(func() { _ = b.Close() })
			return b
		}
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			// Seeds are independent: running them side by side keeps a
			// store's round trips from adding up.
			t.Parallel()
			d := newDiff(t, seed, steps, f, ref)
			d.fixedParts = opts.Partitions
			d.run()
		})
	}
}

func envInt(t *testing.T, name string) (int, bool) {
	v := os.Getenv(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n, true
}

// side is one store under comparison: its client and its clock.
type side struct {
	c   *rheo.Client
	clk *clock.Frozen
}

// leasePair is one claim as the reference and the store under test made it.
type leasePair struct{ ref, sut rheo.Lease }

type diffGroup struct {
	name        string
	maxAttempts int
}

// diff is one seeded run.
type diff struct {
	t     *testing.T
	ctx   context.Context
	seed  uint64
	steps int
	step  int
	rng   *rand.Rand
	// lagRng picks compareLagOf's partitions, apart from rng so that a
	// seed's operations stay what they were before it existed.
	lagRng   *rand.Rand
	ref, sut side

	stream     string
	partitions int
	fixedParts int // DifferentialOptions.Partitions
	groups     []diffGroup
	// events are the reference's stored events, in append order.
	events []rheo.Event
	// refToSut and sutToRef map event IDs (identical unless generated).
	refToSut, sutToRef map[string]string
	pool               []leasePair
	nextID             int
	history            []string
	historySteps       []int // the step of each history entry (-1: setup)
}

const diffPoolSize = 48

func newDiff(t *testing.T, seed uint64, steps int, f, ref Factory) *diff {
	mk := func(f Factory) side {
		clk := clock.NewFrozen(Epoch)
		return side{c: rheo.New(f(t), rheo.WithClock(clk)), clk: clk}
	}
	return &diff{
		t: t, ctx: context.Background(), seed: seed, steps: steps,
		rng: rand.New(rand.NewPCG(seed, 0x5eed)), lagRng: rand.New(rand.NewPCG(seed, 0x1a9)),
		ref: mk(ref), sut: mk(f),
		refToSut: map[string]string{}, sutToRef: map[string]string{},
	}
}

// failf stops the run with everything needed to replay it.
func (d *diff) failf(format string, args ...any) {
	d.t.Helper()
	from := max(0, len(d.history)-20)
	var b strings.Builder
	fmt.Fprintf(&b, "DISAGREEMENT at seed %d, step %d: %s\n", d.seed, d.step, fmt.Sprintf(format, args...))
	fmt.Fprintf(&b, "replay with RHEO_DIFF_SEED=%d RHEO_DIFF_SEEDS=1 RHEO_DIFF_STEPS=%d\n", d.seed, d.steps)
	fmt.Fprintf(&b, "stream %s with %d partitions; last operations:\n", d.stream, d.partitions)
	for i := from; i < len(d.history); i++ {
		fmt.Fprintf(&b, "  step %4d: %s\n", d.historySteps[i], d.history[i])
	}
	d.t.Fatal(b.String())
}

func (d *diff) logf(format string, args ...any) {
	d.history = append(d.history, fmt.Sprintf(format, args...))
	d.historySteps = append(d.historySteps, d.step)
}

// both runs op on the reference and on the store under test.
func both[T any](d *diff, op func(s side, sut bool) (T, error)) (ref, sut T, refErr, sutErr error) {
	ref, refErr = op(d.ref, false)
	sut, sutErr = op(d.sut, true)
	return
}

func (d *diff) run() {
	d.step = -1
	d.stream = Name("diff")
	d.partitions = 1 + d.rng.IntN(3)
	if d.fixedParts > 0 {
		d.partitions = d.fixedParts
	}
	d.logf("create stream with %d partitions", d.partitions)
	_, _, re, se := both(d, func(s side, _ bool) (struct{}, error) {
		return struct{}{}, s.c.CreateStream(d.ctx, d.stream, rheo.StreamConfig{Partitions: d.partitions})
	})
	d.sameErr("create stream", re, se)
	if re != nil {
		d.failf("create stream: %v", re)
	}
	d.createGroup(true)
	for d.step = 0; d.step < d.steps; d.step++ {
		if d.randomOp() {
			d.compareState()
		}
	}
	d.compareEvents()
	d.t.Logf("seed %d: %d steps; outcomes: %s", d.seed, d.steps, d.outcomes())
}

// outcomes counts operations by kind and result, to show what a run covered.
func (d *diff) outcomes() string {
	counts := map[string]int{}
	for _, h := range d.history {
		kind, _, _ := strings.Cut(h, " ")
		res := "ok"
		if _, after, found := strings.Cut(h, " -> "); found {
			res = after
			if strings.HasPrefix(res, "[") {
				res = map[bool]string{true: "none", false: "some"}[res == "[]"]
			}
			if f := strings.Fields(res); len(f) > 0 && kind == "redrive" {
				res = f[len(f)-1]
			}
		}
		counts[kind+":"+res]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, counts[k])
	}
	return strings.Join(parts, " ")
}

// randomOp runs one random operation on both stores. It reports whether the
// operation may have changed what the stores hold (a clock advance or a call
// on a missing group cannot).
func (d *diff) randomOp() (changed bool) {
	switch n := d.rng.IntN(100); {
	case n < 18:
		d.appendOp()
	case n < 38:
		d.fetchOp()
	case n < 47:
		d.settleOp(rheo.SettleAck)
	case n < 50:
		d.settleOp(rheo.SettleRelease)
	case n < 57:
		d.settleOp(rheo.SettleNack)
	case n < 60:
		d.settleOp(rheo.SettleReject)
	case n < 64:
		d.renewOp()
	case n < 69:
		d.ackBatchOp()
	case n < 75:
		d.replayOp()
	case n < 78:
		d.redriveOp()
	case n < 80:
		d.resetOp()
	case n < 82:
		d.createGroup(false)
	case n < 84:
		d.notFoundOp()
		return false
	case n < 93:
		d.advance(time.Duration(1+d.rng.IntN(5)) * time.Second)
		return false
	default:
		d.advance(time.Duration(31+d.rng.IntN(150)) * time.Second)
		return false
	}
	return true
}

func (d *diff) advance(by time.Duration) {
	d.logf("advance clock %v", by)
	d.ref.clk.Advance(by)
	d.sut.clk.Advance(by)
}

// sentinels are the errors a result is classified by.
var sentinels = []error{
	rheo.ErrStreamNotFound, rheo.ErrGroupNotFound, rheo.ErrAlreadyExists,
	rheo.ErrInvalidPartition, rheo.ErrInvalidArgument, rheo.ErrStaleLease,
	rheo.ErrReceiptMismatch, rheo.ErrCursorNotFound, rheo.ErrConfirmRequired,
	rheo.ErrNoEventsInRange, rheo.ErrUnsupported, rheo.ErrBackendUnavailable,
	rheo.ErrAmbiguous, rheo.ErrClosed,
}

// errKind names an error by its sentinel; a BatchError by each lease's.
func errKind(err error) string {
	if err == nil {
		return "ok"
	}
	var be *rheo.BatchError
	if errors.As(err, &be) {
		kinds := make([]string, len(be.Errs))
		for i, e := range be.Errs {
			kinds[i] = errKind(e)
		}
		return "batch[" + strings.Join(kinds, " ") + "]"
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "unclassified"
}

func (d *diff) sameErr(what string, ref, sut error) {
	d.t.Helper()
	if rk, sk := errKind(ref), errKind(sut); rk != sk {
		d.failf("%s: reference says %s (%v), store says %s (%v)", what, rk, ref, sk, sut)
	}
}

// ---- operations ----

func (d *diff) pick(n int) int { return d.rng.IntN(n) }

func (d *diff) group() diffGroup { return d.groups[d.pick(len(d.groups))] }

// partsSubset returns nil (every partition) or a random non-empty subset,
// ascending; rarely one out of range.
func (d *diff) partsSubset() []int {
	if d.rng.IntN(100) < 55 {
		return nil
	}
	if d.rng.IntN(40) == 0 {
		return []int{d.partitions}
	}
	var ps []int
	for len(ps) == 0 {
		for p := range d.partitions {
			if d.rng.IntN(2) == 0 {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

func (d *diff) freshID() string {
	d.nextID++
	return fmt.Sprintf("ev-%d", d.nextID)
}

// knownRefID returns a random stored event's reference ID.
func (d *diff) knownRefID() (string, bool) {
	if len(d.events) == 0 {
		return "", false
	}
	return d.events[d.pick(len(d.events))].ID, true
}

func (d *diff) toSut(refID string) string {
	if id, ok := d.refToSut[refID]; ok {
		return id
	}
	return refID
}

var diffTypes = []string{"order", "refund", "ping"}

func (d *diff) message() rheo.Message {
	m := rheo.Message{Type: diffTypes[d.pick(len(diffTypes))]}
	switch n := d.rng.IntN(10); {
	case n < 4:
	case n < 8:
		m.ID = d.freshID()
	default:
		if id, ok := d.knownRefID(); ok {
			m.ID = id
		}
	}
	if d.rng.IntN(2) == 0 {
		m.Key = fmt.Sprintf("k%d", d.rng.IntN(6))
	}
	if d.rng.IntN(10) < 4 {
		p := d.rng.IntN(d.partitions)
		if d.rng.IntN(40) == 0 {
			p = d.partitions
		}
		m.Partition = &p
	}
	n := d.rng.IntN(5)
	switch d.rng.IntN(5) {
	case 0:
		// empty: {}
	case 1:
		m.Payload = json.RawMessage(fmt.Sprintf(` { "n" : %d , "tag" : "t%d" } `, n, n))
	case 2:
		m.Payload = json.RawMessage(fmt.Sprintf(`{"z":%d,"a":{"y":[1,2,{"b":true,"a":null}],"x":"s"},"n":%d}`, d.rng.IntN(100), n))
	default:
		m.Payload = json.RawMessage(fmt.Sprintf(`{"n":%d,"amount":%d.5,"note":"caf\u00e9 %d"}`, n, d.rng.IntN(1000), n))
	}
	if d.rng.IntN(10) < 3 {
		m.Metadata = map[string]string{rheo.MetaProducer: fmt.Sprintf("p%d", d.rng.IntN(3))}
	}
	if d.rng.IntN(5) == 0 {
		m.Timestamp = d.ref.clk.Now().Add(-time.Duration(d.rng.IntN(300)) * time.Second)
	}
	return m
}

func (d *diff) appendOp() {
	count := 1
	if d.rng.IntN(2) == 0 {
		count = 2 + d.rng.IntN(4)
	}
	ms := make([]rheo.Message, count)
	for i := range ms {
		ms[i] = d.message()
	}
	if count > 1 && d.rng.IntN(15) == 0 {
		ms[1].ID = "dup-in-batch"
		ms[0].ID = "dup-in-batch"
	}
	desc := make([]string, len(ms))
	for i, m := range ms {
		p := "-"
		if m.Partition != nil {
			p = strconv.Itoa(*m.Partition)
		}
		desc[i] = fmt.Sprintf("{id=%q key=%q p=%s type=%s}", m.ID, m.Key, p, m.Type)
	}
	single := count == 1 && d.rng.IntN(2) == 0
	d.logf("append single=%v %s", single, strings.Join(desc, " "))
	ref, sut, re, se := both(d, func(s side, isSut bool) ([]rheo.Event, error) {
		batch := slices.Clone(ms)
		if isSut {
			for i := range batch {
				batch[i].ID = d.toSut(batch[i].ID)
			}
		}
		if single {
			ev, err := s.c.Append(d.ctx, d.stream, batch[0])
			if err != nil {
				return nil, err
			}
			return []rheo.Event{ev}, nil
		}
		return s.c.AppendBatch(d.ctx, d.stream, batch)
	})
	d.sameErr("append", re, se)
	d.history[len(d.history)-1] += " -> " + errKind(re)
	if re != nil {
		return
	}
	if len(ref) != len(sut) {
		d.failf("append returned %d events on the reference, %d on the store", len(ref), len(sut))
	}
	for i := range ref {
		if _, known := d.refToSut[ref[i].ID]; !known {
			d.refToSut[ref[i].ID] = sut[i].ID
			d.sutToRef[sut[i].ID] = ref[i].ID
			d.events = append(d.events, ref[i])
		}
		d.sameEvent(fmt.Sprintf("appended event %d", i), ref[i], sut[i])
	}
}

func (d *diff) fetchOp() {
	g := d.group()
	limit := 1 + d.rng.IntN(6)
	if d.rng.IntN(8) == 0 {
		limit = 20
	}
	parts := d.partsSubset()
	durations := []time.Duration{0, 10 * time.Second, time.Minute}
	dur := durations[d.pick(len(durations))]
	consumer := fmt.Sprintf("c%d", 1+d.rng.IntN(2))
	d.logf("fetch %s limit=%d partitions=%v lease=%v consumer=%s", g.name, limit, parts, dur, consumer)
	ref, sut, re, se := both(d, func(s side, _ bool) ([]rheo.Lease, error) {
		return s.c.Fetch(d.ctx, d.stream, g.name, rheo.FetchOptions{
			Limit: limit, Partitions: parts, LeaseDuration: dur, ConsumerID: consumer,
		})
	})
	d.sameErr("fetch", re, se)
	if len(ref) != len(sut) {
		d.failf("fetch: reference claimed %s, store claimed %s", leaseList(ref), leaseList(sut))
	}
	for i := range ref {
		d.sameLease(fmt.Sprintf("fetched lease %d", i), ref[i], sut[i])
		d.pool = append(d.pool, leasePair{ref[i], sut[i]})
	}
	if over := len(d.pool) - diffPoolSize; over > 0 {
		d.pool = d.pool[over:]
	}
	d.history[len(d.history)-1] += " -> " + leaseList(ref)
}

// pickLease returns a lease pair, recent ones more often; false when none.
func (d *diff) pickLease() (int, bool) {
	if len(d.pool) == 0 {
		return 0, false
	}
	if d.rng.IntN(3) > 0 {
		return len(d.pool) - 1 - d.pick(min(len(d.pool), 6)), true
	}
	return d.pick(len(d.pool)), true
}

func (d *diff) settleOp(kind rheo.SettleKind) {
	i, ok := d.pickLease()
	if !ok {
		d.fetchOp()
		return
	}
	lp := d.pool[i]
	var delay time.Duration
	if kind == rheo.SettleNack && d.rng.IntN(2) == 0 {
		delay = time.Duration(1+d.rng.IntN(90)) * time.Second
	}
	name := map[rheo.SettleKind]string{rheo.SettleAck: "ack", rheo.SettleNack: "nack", rheo.SettleReject: "reject",
		rheo.SettleRelease: "release"}[kind]
	d.logf("%s %s of %s delay=%v", name, lp.ref.Group, leaseName(lp.ref), delay)
	_, _, re, se := both(d, func(s side, isSut bool) (struct{}, error) {
		l := lp.ref
		if isSut {
			l = lp.sut
		}
		switch kind {
		case rheo.SettleAck:
			return struct{}{}, s.c.Ack(d.ctx, l)
		case rheo.SettleNack:
			return struct{}{}, s.c.Nack(d.ctx, l, "nacked", rheo.Delay(delay))
		case rheo.SettleRelease:
			return struct{}{}, s.c.Release(d.ctx, l)
		default:
			return struct{}{}, s.c.Reject(d.ctx, l, "rejected")
		}
	})
	d.sameErr(name, re, se)
	d.history[len(d.history)-1] += " -> " + errKind(re)
}

func (d *diff) renewOp() {
	i, ok := d.pickLease()
	if !ok {
		return
	}
	lp := d.pool[i]
	durations := []time.Duration{0, 5 * time.Second, 45 * time.Second}
	dur := durations[d.pick(len(durations))]
	d.logf("renew %s of %s by %v", lp.ref.Group, leaseName(lp.ref), dur)
	ref, sut, re, se := both(d, func(s side, isSut bool) (rheo.Lease, error) {
		l := lp.ref
		if isSut {
			l = lp.sut
		}
		return s.c.Renew(d.ctx, l, dur)
	})
	d.sameErr("renew", re, se)
	d.history[len(d.history)-1] += " -> " + errKind(re)
	if re == nil {
		d.sameLease("renewed lease", ref, sut)
		d.pool[i] = leasePair{ref, sut}
	}
}

func (d *diff) ackBatchOp() {
	if len(d.pool) == 0 {
		return
	}
	n := 1 + d.rng.IntN(4)
	var picks []int
	var desc []string
	for range n {
		i, _ := d.pickLease()
		picks = append(picks, i)
		desc = append(desc, leaseName(d.pool[i].ref))
	}
	if n > 1 && d.rng.IntN(2) == 0 {
		picks[n-1] = picks[0] // the same lease twice in one batch
		desc[n-1] = desc[0]
	}
	d.logf("ack batch [%s]", strings.Join(desc, " "))
	_, _, re, se := both(d, func(s side, isSut bool) (struct{}, error) {
		ls := make([]rheo.Lease, len(picks))
		for j, i := range picks {
			ls[j] = d.pool[i].ref
			if isSut {
				ls[j] = d.pool[i].sut
			}
		}
		return struct{}{}, s.c.AckBatch(d.ctx, ls)
	})
	d.sameErr("ack batch", re, se)
	d.history[len(d.history)-1] += " -> " + errKind(re)
}

func (d *diff) replayOp() {
	g := d.group()
	parts := d.partsSubset()
	var desc string
	var mk func(isSut bool) rheo.Replay
	switch d.rng.IntN(5) {
	case 0, 1:
		from := int64(d.rng.IntN(8))
		desc = fmt.Sprintf("from sequence %d", from)
		mk = func(bool) rheo.Replay { return rheo.FromSequence(from) }
	case 2:
		at := d.ref.clk.Now().Add(-time.Duration(d.rng.IntN(400)) * time.Second)
		if len(d.events) > 0 && d.rng.IntN(2) == 0 {
			at = d.events[d.pick(len(d.events))].Timestamp
		}
		desc = "from time " + at.Format(time.RFC3339Nano)
		mk = func(bool) rheo.Replay { return rheo.FromTime(at) }
	case 3:
		var q rheo.Query
		switch d.rng.IntN(4) {
		case 0:
			q.Type = diffTypes[d.pick(len(diffTypes))]
		case 1:
			q.Key = fmt.Sprintf("k%d", d.rng.IntN(6))
		case 2:
			q.Payload = map[string]any{"n": d.rng.IntN(5)}
		default:
			q.Metadata = map[string]string{rheo.MetaProducer: fmt.Sprintf("p%d", d.rng.IntN(3))}
		}
		desc = fmt.Sprintf("matching type=%q key=%q payload=%v metadata=%v", q.Type, q.Key, q.Payload, q.Metadata)
		mk = func(bool) rheo.Replay { return rheo.Matching(q) }
	default:
		var refIDs []string
		for range 1 + d.rng.IntN(3) {
			if id, ok := d.knownRefID(); ok {
				refIDs = append(refIDs, id)
			}
		}
		if len(refIDs) == 0 || d.rng.IntN(10) == 0 {
			refIDs = append(refIDs, "no-such-event")
		}
		desc = fmt.Sprintf("events %q", refIDs)
		mk = func(isSut bool) rheo.Replay {
			ids := slices.Clone(refIDs)
			if isSut {
				for i := range ids {
					ids[i] = d.toSut(ids[i])
				}
			}
			return rheo.Events(ids...)
		}
	}
	d.logf("replay %s %s partitions=%v", g.name, desc, parts)
	ref, sut, re, se := both(d, func(s side, isSut bool) (int, error) {
		return s.c.Replay(d.ctx, d.stream, g.name, mk(isSut), parts...)
	})
	d.sameErr("replay", re, se)
	if ref != sut {
		d.failf("replay: reference reopened %d, store %d", ref, sut)
	}
	d.history[len(d.history)-1] += fmt.Sprintf(" -> %d %s", ref, errKind(re))
}

func (d *diff) redriveOp() {
	g := d.group()
	var refIDs []string
	if d.rng.IntN(2) == 0 {
		dls, err := d.ref.c.DeadLetters(d.ctx, d.stream, g.name, rheo.DeadLetterOptions{Limit: rheo.MaxLimit})
		if err != nil {
			d.failf("reference dead letters: %v", err)
		}
		for _, dl := range dls {
			if d.rng.IntN(2) == 0 {
				refIDs = append(refIDs, dl.EventID)
			}
		}
		if id, ok := d.knownRefID(); ok {
			refIDs = append(refIDs, id) // maybe not a dead letter: ignored
		}
	}
	d.logf("redrive %s ids=%q", g.name, refIDs)
	ref, sut, re, se := both(d, func(s side, isSut bool) (int, error) {
		ids := slices.Clone(refIDs)
		if isSut {
			for i := range ids {
				ids[i] = d.toSut(ids[i])
			}
		}
		return s.c.Redrive(d.ctx, d.stream, g.name, ids...)
	})
	d.sameErr("redrive", re, se)
	if ref != sut {
		d.failf("redrive: reference reopened %d, store %d", ref, sut)
	}
	d.history[len(d.history)-1] += fmt.Sprintf(" -> %d %s", ref, errKind(re))
}

// position returns a random start position and its description.
func (d *diff) position() (rheo.Position, string) {
	switch d.rng.IntN(6) {
	case 0:
		return rheo.Beginning(), "beginning"
	case 1:
		return rheo.Latest(), "latest"
	case 2, 3:
		s := int64(d.rng.IntN(6))
		return rheo.AfterSequence(s), fmt.Sprintf("after sequence %d", s)
	case 4:
		m := map[int]int64{}
		for p := range d.partitions {
			if d.rng.IntN(2) == 0 {
				m[p] = int64(d.rng.IntN(4))
			}
		}
		return rheo.AfterSequences(m), fmt.Sprintf("after sequences %v", m)
	default:
		at := d.ref.clk.Now().Add(-time.Duration(d.rng.IntN(400)) * time.Second)
		return rheo.AtTime(at), "at time " + at.Format(time.RFC3339Nano)
	}
}

func (d *diff) createGroup(first bool) {
	if len(d.groups) >= 3 {
		d.resetOp()
		return
	}
	g := diffGroup{name: fmt.Sprintf("g%d", len(d.groups))}
	attempts := []int{1, 2, 3, 50}
	g.maxAttempts = attempts[d.pick(len(attempts))]
	cfg := rheo.GroupConfig{MaxAttempts: g.maxAttempts}
	desc := "beginning"
	if !first {
		cfg.Start, desc = d.position()
		cfg.Partitions = d.partsSubset()
	}
	d.logf("create group %s max attempts %d start %s partitions=%v", g.name, g.maxAttempts, desc, cfg.Partitions)
	_, _, re, se := both(d, func(s side, _ bool) (struct{}, error) {
		return struct{}{}, s.c.CreateGroup(d.ctx, d.stream, g.name, cfg)
	})
	d.sameErr("create group", re, se)
	d.history[len(d.history)-1] += " -> " + errKind(re)
	if re == nil {
		d.groups = append(d.groups, g)
	} else if first {
		d.failf("create first group: %v", re)
	}
}

func (d *diff) resetOp() {
	g := d.group()
	start, desc := d.position()
	opts := rheo.ResetOptions{Confirm: d.rng.IntN(12) != 0, Start: start, Partitions: d.partsSubset()}
	d.logf("reset %s start %s partitions=%v confirm=%v", g.name, desc, opts.Partitions, opts.Confirm)
	ref, sut, re, se := both(d, func(s side, _ bool) (int, error) {
		return s.c.ResetGroup(d.ctx, d.stream, g.name, opts)
	})
	d.sameErr("reset", re, se)
	if ref != sut {
		d.failf("reset: reference reopened %d, store %d", ref, sut)
	}
	d.history[len(d.history)-1] += fmt.Sprintf(" -> %d %s", ref, errKind(re))
}

// notFoundOp addresses a group or stream that does not exist.
func (d *diff) notFoundOp() {
	stream, group := d.stream, "no-such-group"
	if d.rng.IntN(2) == 0 {
		stream = "no-such-stream"
	}
	d.logf("missing-group fetch and lag of %s/%s", stream, group)
	_, _, re, se := both(d, func(s side, _ bool) ([]rheo.Lease, error) {
		return s.c.Fetch(d.ctx, stream, group, rheo.FetchOptions{Limit: 1})
	})
	d.sameErr("fetch of a missing group", re, se)
	_, _, re, se = both(d, func(s side, _ bool) (rheo.Lag, error) {
		return s.c.Lag(d.ctx, stream, group)
	})
	d.sameErr("lag of a missing group", re, se)
}

// ---- comparisons ----

func (d *diff) samePayload(what string, ref, sut json.RawMessage) {
	d.t.Helper()
	if bytes.Equal(ref, sut) {
		return
	}
	d.failf("%s: payload %s on the reference, %s on the store", what, ref, sut)
}

func (d *diff) sameEvent(what string, ref, sut rheo.Event) {
	d.t.Helper()
	sutID := sut.ID
	if id, ok := d.sutToRef[sut.ID]; ok {
		sutID = id
	}
	if ref.ID != sutID || ref.Stream != sut.Stream || ref.Partition != sut.Partition || ref.Sequence != sut.Sequence ||
		ref.Type != sut.Type || ref.Key != sut.Key || !ref.Timestamp.Equal(sut.Timestamp) {
		d.failf("%s: reference %s, store %s", what, eventString(ref), eventString(sut))
	}
	if (ref.Metadata == nil) != (sut.Metadata == nil) || !maps.Equal(ref.Metadata, sut.Metadata) {
		d.failf("%s: metadata %v on the reference, %v on the store", what, ref.Metadata, sut.Metadata)
	}
	d.samePayload(what, ref.Payload, sut.Payload)
}

func eventString(e rheo.Event) string {
	return fmt.Sprintf("{id=%s p%d/%d type=%q key=%q ts=%s}", e.ID, e.Partition, e.Sequence, e.Type, e.Key,
		e.Timestamp.UTC().Format(time.RFC3339Nano))
}

func leaseString(l rheo.Lease) string {
	return fmt.Sprintf("{%s group=%s consumer=%s attempt=%d leased=%s expires=%s}", leaseName(l), l.Group, l.ConsumerID,
		l.Attempt, l.LeasedAt.UTC().Format(time.RFC3339Nano), l.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

func (d *diff) sameLease(what string, ref, sut rheo.Lease) {
	d.t.Helper()
	if ref.Stream != sut.Stream || ref.Group != sut.Group || ref.ConsumerID != sut.ConsumerID || ref.Attempt != sut.Attempt ||
		!ref.LeasedAt.Equal(sut.LeasedAt) || !ref.ExpiresAt.Equal(sut.ExpiresAt) {
		d.failf("%s: reference %s, store %s", what, leaseString(ref), leaseString(sut))
	}
	if sut.ID == "" || sut.Receipt == "" {
		d.failf("%s: store lease %s has no ID or receipt", what, leaseString(sut))
	}
	d.sameEvent(what, ref.Event, sut.Event)
}

// compareState compares every group's lag, counts and dead letters.
func (d *diff) compareState() {
	d.t.Helper()
	for _, g := range d.groups {
		ref, sut, re, se := both(d, func(s side, _ bool) (rheo.GroupInfo, error) {
			return s.c.GroupInfo(d.ctx, d.stream, g.name)
		})
		d.sameErr("group info of "+g.name, re, se)
		if re != nil {
			d.failf("group info of %s: %v", g.name, re)
		}
		if ref.Inflight != sut.Inflight || ref.Available != sut.Available || ref.DeadLetters != sut.DeadLetters ||
			!ref.OldestPending.Equal(sut.OldestPending) || ref.Lag.Total != sut.Lag.Total ||
			!slices.Equal(ref.Lag.Partitions, sut.Lag.Partitions) {
			d.failf("group %s: reference %s, store %s", g.name, infoString(ref), infoString(sut))
		}
		d.compareLagOf(g.name, sut.Lag)
		rdl, sdl, re, se := both(d, func(s side, _ bool) ([]rheo.DeadLetter, error) {
			return s.c.DeadLetters(d.ctx, d.stream, g.name, rheo.DeadLetterOptions{Limit: rheo.MaxLimit})
		})
		d.sameErr("dead letters of "+g.name, re, se)
		if len(rdl) != len(sdl) {
			d.failf("dead letters of %s: reference %s, store %s", g.name, deadString(rdl), deadString(sdl))
		}
		for i := range rdl {
			r, s := rdl[i], sdl[i]
			sid := s.EventID
			if id, ok := d.sutToRef[sid]; ok {
				sid = id
			}
			if r.EventID != sid || r.Partition != s.Partition || r.Sequence != s.Sequence || r.Attempts != s.Attempts ||
				r.Reason != s.Reason || !r.DeadLetteredAt.Equal(s.DeadLetteredAt) {
				d.failf("dead letters of %s: reference %s, store %s", g.name, deadString(rdl), deadString(sdl))
			}
			d.sameEvent("dead letter event", r.Event, s.Event)
		}
	}
}

// compareLagOf reads the lag of a random subset of the partitions (given
// out of order, one twice) on both sides: the store's must equal the
// reference's, and the rows of those partitions in the store's full lag.
func (d *diff) compareLagOf(group string, full rheo.Lag) {
	d.t.Helper()
	var ps []int
	for len(ps) == 0 {
		for p := range d.partitions {
			if d.lagRng.IntN(2) == 0 {
				ps = append(ps, p)
			}
		}
	}
	slices.Reverse(ps)
	ps = append(ps, ps[0])
	ref, sut, re, se := both(d, func(s side, _ bool) (rheo.Lag, error) {
		return s.c.Lag(d.ctx, d.stream, group, ps...)
	})
	d.sameErr("lag of partitions", re, se)
	var want []rheo.PartitionLag
	var total int64
	for _, pl := range full.Partitions {
		if slices.Contains(ps, pl.Partition) {
			want = append(want, pl)
			total += pl.Lag
		}
	}
	if !slices.Equal(ref.Partitions, sut.Partitions) || ref.Total != sut.Total ||
		!slices.Equal(sut.Partitions, want) || sut.Total != total {
		d.failf("lag of %s, partitions %v: reference %v, store %v; store's full lag %v", group, ps, ref, sut, full.Partitions)
	}
}

// compareEvents compares every stored event of every partition.
func (d *diff) compareEvents() {
	for p := range d.partitions {
		ref, sut, re, se := both(d, func(s side, _ bool) ([]rheo.Event, error) {
			return s.c.Read(d.ctx, d.stream, rheo.ReadOptions{Partition: p, Limit: rheo.MaxLimit})
		})
		d.sameErr("read", re, se)
		if len(ref) != len(sut) {
			d.failf("partition %d holds %d events on the reference, %d on the store", p, len(ref), len(sut))
		}
		for i := range ref {
			d.sameEvent("stored event", ref[i], sut[i])
		}
	}
}

func infoString(gi rheo.GroupInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{inflight=%d available=%d dead=%d oldest=%s total=%d", gi.Inflight, gi.Available, gi.DeadLetters,
		gi.OldestPending.UTC().Format(time.RFC3339Nano), gi.Lag.Total)
	for _, pl := range gi.Lag.Partitions {
		fmt.Fprintf(&b, " p%d:frontier=%d,hw=%d,lag=%d", pl.Partition, pl.Frontier, pl.HighWatermark, pl.Lag)
	}
	return b.String() + "}"
}

func deadString(dls []rheo.DeadLetter) string {
	parts := make([]string, len(dls))
	for i, dl := range dls {
		parts[i] = fmt.Sprintf("p%d/%d(id=%s attempts=%d reason=%q at=%s)", dl.Partition, dl.Sequence, dl.EventID, dl.Attempts,
			dl.Reason, dl.DeadLetteredAt.UTC().Format(time.RFC3339Nano))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
