// Package rheotest is the conformance suite every rheo backend must pass,
// and a few helpers for tests of code built on rheo.
//
// A backend author runs the whole suite from a test of their own:
//
//	func TestConformance(t *testing.T) {
//		rheotest.RunBackend(t, func(t testing.TB) rheo.Backend {
//			b := mybackend.New(...)
//			t.Cleanup(func() { b.Close() })
//			return b
//		})
//	}
//
// RunDifferential holds a backend to the memory backend's answers on seeded
// random operation sequences; run it beside RunBackend. RunShared runs two
// backends on one store, as two processes: what one deletes and creates
// again, the other must see as it is now. BenchFetchAckFresh measures a
// caught-up consumer's fetch, ack and lag read on narrow and wide streams.
//
// Every case drives lease expiry with a clock.Frozen, never with sleeps, so
// the suite is deterministic apart from the cases that exercise real
// concurrency (competing fetchers, Fetch with Wait).
//
// Receipts: a backend without a native claim identity sets Lease.Receipt to
// Lease.ID. Whatever the receipts, a settle or renewal whose lease ID is not
// the current lease of its event must fail with ErrStaleLease, and one whose
// ID is the current lease's but whose receipt is not the one issued with it
// with ErrReceiptMismatch; both name the lease in the same words on every
// store (see requireStale and requireReceiptRefused), and the genuine lease
// must still settle afterwards.
package rheotest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

// Factory returns a fresh, empty, migrated backend for one test and
// registers its cleanup with t.Cleanup. RunBackend calls it once per case,
// possibly from parallel tests.
type Factory func(t testing.TB) rheo.Backend

// section is one topic of the suite, run as a subtest of RunBackend.
type section struct {
	name string
	run  func(*testing.T, Factory)
}

// sections lists every topic RunBackend runs. Files of this package add
// their topics here.
var sections = []section{
	{name: "streams", run: runStreams},
	{name: "append", run: runAppend},
	{name: "fetch", run: runFetch},
	{name: "settle", run: runSettle},
	{name: "retry", run: runRetry},
	{name: "frontier", run: runFrontier},
	{name: "groups", run: runGroups},
	{name: "inspect", run: runInspect},
	{name: "replay", run: runReplay},
	{name: "reset", run: runReset},
	{name: "redrive", run: runRedrive},
	{name: "listleases", run: runListLeases},
	{name: "query", run: runQuery},
	{name: "notfound", run: runNotFound},
	{name: "badinput", run: runBadInput},
	{name: "concurrency", run: runConcurrency},
	{name: "edges", run: runEdges},
	{name: "payloads", run: runPayloads},
}

// RunBackend runs the conformance suite against backends made by f. Every
// case is a subtest (grouped by topic) with its own backend, client, frozen
// clock and stream names, and most cases run in parallel.
func RunBackend(t *testing.T, f Factory) {
	for _, s := range sections {
		t.Run(s.name, func(t *testing.T) { s.run(t, f) })
	}
}

// Epoch is the time at which NewClient's frozen clock starts.
var Epoch = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// NewClient returns a client over a fresh backend from f, reading a frozen
// clock that starts at Epoch. Extra options are applied after the clock.
func NewClient(t testing.TB, f Factory, opts ...rheo.Option) (*rheo.Client, *clock.Frozen) {
	t.Helper()
	clk := clock.NewFrozen(Epoch)
	c := rheo.New(f(t), append([]rheo.Option{rheo.WithClock(clk)}, opts...)...)
	return c, clk
}

var nameSeq atomic.Int64

// Name returns a unique stream or group name starting with prefix, so that
// tests sharing a store never see each other's data.
func Name(prefix string) string {
	return fmt.Sprintf("%s-%d-%06x", prefix, nameSeq.Add(1), rand.Uint32()&0xffffff)
}

// testCase is one behaviour of the suite.
type testCase struct {
	name string
	run  func(t *testing.T, f Factory)
}

// runCases runs each case as a parallel subtest: every case owns its
// backend, so cases never share state.
func runCases(t *testing.T, f Factory, cases []testCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, f)
		})
	}
}

// env bundles what a case needs: a client over a fresh backend and its clock.
type env struct {
	t   *testing.T
	ctx context.Context
	c   *rheo.Client
	clk *clock.Frozen
}

func newEnv(t *testing.T, f Factory, opts ...rheo.Option) *env {
	t.Helper()
	c, clk := NewClient(t, f, opts...)
	return &env{t: t, ctx: context.Background(), c: c, clk: clk}
}

// stream creates a stream with n partitions.
func (e *env) stream(n int) string {
	e.t.Helper()
	s := Name("s")
	require.NoError(e.t, e.c.CreateStream(e.ctx, s, rheo.StreamConfig{Partitions: n}))
	return s
}

// group creates a group on s.
func (e *env) group(s string, cfg rheo.GroupConfig) string {
	e.t.Helper()
	g := Name("g")
	require.NoError(e.t, e.c.CreateGroup(e.ctx, s, g, cfg))
	return g
}

// msg is a message for partition p with payload {"n": n}.
func msg(p, n int) rheo.Message {
	return rheo.Message{Type: "test", Partition: &p, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

// appendN appends n events to partition p, one batch.
func (e *env) appendN(s string, p, n int) []rheo.Event {
	e.t.Helper()
	ms := make([]rheo.Message, n)
	for i := range ms {
		ms[i] = msg(p, i+1)
	}
	evs, err := e.c.AppendBatch(e.ctx, s, ms)
	require.NoError(e.t, err)
	require.Len(e.t, evs, n)
	return evs
}

func (e *env) fetch(s, g string, opts rheo.FetchOptions) []rheo.Lease {
	e.t.Helper()
	ls, err := e.c.Fetch(e.ctx, s, g, opts)
	require.NoError(e.t, err)
	return ls
}

// fetchN fetches with limit n and requires exactly n leases.
func (e *env) fetchN(s, g string, n int) []rheo.Lease {
	e.t.Helper()
	ls := e.fetch(s, g, rheo.FetchOptions{Limit: n})
	require.Len(e.t, ls, n)
	return ls
}

func (e *env) requireNone(s, g string) {
	e.t.Helper()
	ls := e.fetch(s, g, rheo.FetchOptions{Limit: 100})
	require.Empty(e.t, ls, "expected nothing claimable, got %s", leaseList(ls))
}

func (e *env) ack(ls ...rheo.Lease) {
	e.t.Helper()
	for _, l := range ls {
		require.NoError(e.t, e.c.Ack(e.ctx, l), "ack %s", leaseName(l))
	}
}

// settle sends reqs to the backend in one call and requires that each
// of them settled.
func (e *env) settle(s, g string, reqs []rheo.SettleRequest) {
	e.t.Helper()
	errs, err := e.c.Backend().Settle(e.ctx, s, g, reqs, e.clk.Now())
	require.NoError(e.t, err)
	require.Len(e.t, errs, len(reqs))
	for i, err := range errs {
		require.NoError(e.t, err, "request %d (kind %d, %s)", i, reqs[i].Kind, leaseName(reqs[i].Lease))
	}
}

func (e *env) lag(s, g string) rheo.Lag {
	e.t.Helper()
	lag, err := e.c.Lag(e.ctx, s, g)
	require.NoError(e.t, err)
	var total int64
	for _, pl := range lag.Partitions {
		require.GreaterOrEqual(e.t, pl.Lag, int64(0), "lag of partition %d is negative", pl.Partition)
		require.Equal(e.t, max(pl.HighWatermark-pl.Frontier, 0), pl.Lag, "lag of partition %d", pl.Partition)
		require.LessOrEqual(e.t, pl.Frontier, pl.HighWatermark, "frontier of partition %d beyond high watermark", pl.Partition)
		total += pl.Lag
	}
	require.Equal(e.t, total, lag.Total)
	return lag
}

// requireLag checks partition p's frontier and high watermark, read with
// the group's whole lag, and that reads of given partitions agree: of p
// alone, and of every partition named (in reverse order, one twice). The
// group must be still meanwhile.
func (e *env) requireLag(s, g string, p int, frontier, hw int64) {
	e.t.Helper()
	lag := e.lag(s, g)
	all := make([]int, len(lag.Partitions))
	for i := range all {
		all[i] = len(all) - 1 - i
	}
	named, err := e.c.Lag(e.ctx, s, g, append(all, p)...)
	require.NoError(e.t, err)
	require.Equal(e.t, lag, named, "lag of every partition, named")
	require.Greater(e.t, len(lag.Partitions), p)
	pl := lag.Partitions[p]
	require.Equal(e.t, p, pl.Partition)
	require.Equal(e.t, frontier, pl.Frontier, "frontier of partition %d", p)
	require.Equal(e.t, hw, pl.HighWatermark, "high watermark of partition %d", p)
	require.Equal(e.t, hw-frontier, pl.Lag)
	one, err := e.c.Lag(e.ctx, s, g, p)
	require.NoError(e.t, err)
	require.Equal(e.t, rheo.Lag{Stream: s, Group: g, Partitions: []rheo.PartitionLag{pl}, Total: pl.Lag}, one, "lag of partition %d alone", p)
}

func (e *env) info(s, g string) rheo.GroupInfo {
	e.t.Helper()
	gi, err := e.c.GroupInfo(e.ctx, s, g)
	require.NoError(e.t, err)
	return gi
}

func (e *env) deadLetters(s, g string) []rheo.DeadLetter {
	e.t.Helper()
	dls, err := e.c.DeadLetters(e.ctx, s, g, rheo.DeadLetterOptions{Limit: rheo.MaxLimit})
	require.NoError(e.t, err)
	return dls
}

// drain fetches and acks until nothing is claimable, returning the events
// acked in order of claim.
func (e *env) drain(s, g string) []rheo.Event {
	e.t.Helper()
	var out []rheo.Event
	for {
		ls := e.fetch(s, g, rheo.FetchOptions{Limit: 100})
		if len(ls) == 0 {
			return out
		}
		for _, l := range ls {
			out = append(out, l.Event)
		}
		require.NoError(e.t, e.c.AckBatch(e.ctx, ls))
	}
}

// readAll reads every event of partition p.
func (e *env) readAll(s string, p int) []rheo.Event {
	e.t.Helper()
	var out []rheo.Event
	var after int64
	for {
		evs, err := e.c.Read(e.ctx, s, rheo.ReadOptions{Partition: p, After: after, Limit: rheo.MaxLimit})
		require.NoError(e.t, err)
		out = append(out, evs...)
		if len(evs) < rheo.MaxLimit {
			return out
		}
		after = evs[len(evs)-1].Sequence
	}
}

func leaseName(l rheo.Lease) string {
	return fmt.Sprintf("p%d/%d(attempt %d)", l.Event.Partition, l.Event.Sequence, l.Attempt)
}

func leaseList(ls []rheo.Lease) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = leaseName(l)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

type pos struct {
	p int
	s int64
}

func positions(ls []rheo.Lease) []pos {
	out := make([]pos, len(ls))
	for i, l := range ls {
		out[i] = pos{l.Event.Partition, l.Event.Sequence}
	}
	return out
}

// sequences are the leases' event sequences, in order.
func sequences(ls []rheo.Lease) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.Event.Sequence
	}
	return out
}

func eventPositions(evs []rheo.Event) []pos {
	out := make([]pos, len(evs))
	for i, ev := range evs {
		out[i] = pos{ev.Partition, ev.Sequence}
	}
	return out
}

func seqs(evs []rheo.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Sequence
	}
	return out
}

func ids(evs []rheo.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func leaseEvents(ls []rheo.Lease) []rheo.Event {
	out := make([]rheo.Event, len(ls))
	for i, l := range ls {
		out[i] = l.Event
	}
	return out
}

// requireSorted checks leases are sorted by (partition, sequence).
func requireSorted(t *testing.T, ls []rheo.Lease) {
	t.Helper()
	ok := sort.SliceIsSorted(ls, func(i, j int) bool {
		a, b := ls[i].Event, ls[j].Event
		return a.Partition < b.Partition || a.Partition == b.Partition && a.Sequence < b.Sequence
	})
	require.True(t, ok, "leases not sorted by (partition, sequence): %s", leaseList(ls))
}

// requireSameEvent checks two events are the same stored event.
func requireSameEvent(t *testing.T, want, got rheo.Event) {
	t.Helper()
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Stream, got.Stream)
	require.Equal(t, want.Partition, got.Partition, "partition of %s", want.ID)
	require.Equal(t, want.Sequence, got.Sequence, "sequence of %s", want.ID)
	require.Equal(t, want.Type, got.Type)
	require.Equal(t, want.Key, got.Key)
	require.True(t, want.Timestamp.Equal(got.Timestamp), "timestamp of %s: want %v, got %v", want.ID, want.Timestamp, got.Timestamp)
	require.Equal(t, string(want.Payload), string(got.Payload), "payload of %s", want.ID)
	require.Equal(t, want.Metadata, got.Metadata, "metadata of %s (nil only as nil)", want.ID)
}

func requireSameEvents(t *testing.T, want, got []rheo.Event) {
	t.Helper()
	require.Equal(t, ids(want), ids(got))
	for i := range want {
		requireSameEvent(t, want[i], got[i])
	}
}

// snapshot renders everything a client can observe about the store (streams,
// events, groups, lag, counts, dead letters) so that a case can prove a
// rejected call wrote nothing.
func (e *env) snapshot() string {
	e.t.Helper()
	var b strings.Builder
	streams, err := e.c.ListStreams(e.ctx)
	require.NoError(e.t, err)
	for _, si := range streams {
		fmt.Fprintf(&b, "stream %s partitions=%d created=%s\n", si.Name, si.Partitions, si.CreatedAt.UTC().Format(time.RFC3339Nano))
		for p := range si.Partitions {
			for _, ev := range e.readAll(si.Name, p) {
				fmt.Fprintf(&b, "  event p%d/%d id=%s type=%q key=%q ts=%s payload=%s meta=%v\n",
					ev.Partition, ev.Sequence, ev.ID, ev.Type, ev.Key, ev.Timestamp.UTC().Format(time.RFC3339Nano),
					ev.Payload, ev.Metadata)
			}
		}
		groups, err := e.c.ListGroups(e.ctx, si.Name)
		require.NoError(e.t, err)
		for _, g := range groups {
			gi := e.info(si.Name, g)
			fmt.Fprintf(&b, "  group %s inflight=%d available=%d dead=%d oldest=%s total=%d\n",
				g, gi.Inflight, gi.Available, gi.DeadLetters, gi.OldestPending.UTC().Format(time.RFC3339Nano), gi.Lag.Total)
			for _, pl := range gi.Lag.Partitions {
				fmt.Fprintf(&b, "    lag p%d frontier=%d hw=%d\n", pl.Partition, pl.Frontier, pl.HighWatermark)
			}
			for _, dl := range e.deadLetters(si.Name, g) {
				fmt.Fprintf(&b, "    dead p%d/%d id=%s attempts=%d reason=%q\n", dl.Partition, dl.Sequence, dl.EventID, dl.Attempts, dl.Reason)
			}
		}
	}
	return b.String()
}

func ptr[T any](v T) *T { return &v }

// errOf drops the count of a call that also returns one.
func errOf(_ int, err error) error { return err }
