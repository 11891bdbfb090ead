package postgres_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/clock"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

// TestHotPathPlans checks that append, fetch and settle reach events and
// deliveries only through index probes (never a scan of a stream), which is
// what keeps their cost flat as the stream grows. RHEO_EXPLAIN=1 logs the
// plans.
func TestHotPathPlans(t *testing.T) {
	be, c := stream4(t)
	ctx := context.Background()
	msgs := make([]rheo.Message, 100)
	for i := range msgs {
		msgs[i] = rheo.Message{Type: "bench", Key: strconv.Itoa(i), Payload: []byte(`{"n":1,"name":"x"}`)}
	}
	for range 20 {
		_, err := c.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
	}
	st := time.Now()
	for range 100 {
		_, err := c.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
	}
	t.Logf("append 100x100: %v", time.Since(st))
	explain(t, be, "", be.AppendSQLForTest(), int64(1), []string{"x1", "x2"}, []int32{0, 1}, []string{"t", "t"}, []string{"", ""},
		[]int64{1, 2}, []string{"{}", "{}"}, []*string{nil, nil}, "chan", "s")
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	st = time.Now()
	n := 0
	var tf, ta time.Duration
	for n < 10000 {
		t0 := time.Now()
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		t1 := time.Now()
		n += len(ls)
		require.NoError(t, c.AckBatch(ctx, ls))
		tf += t1.Sub(t0)
		ta += time.Since(t1)
	}
	t.Logf("fetch %v ack %v", tf, ta)
	t.Logf("consume 10000: %v", time.Since(st))
	// The statistics a queue table usually has: gathered when it was
	// (nearly) empty.
	_, err := be.Pool().Exec(ctx, "ANALYZE "+be.Schema()+".rheo_deliveries")
	require.NoError(t, err)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	now := time.Now().UnixMicro()
	explainFetch(t, be, now)
	require.Equal(t, claim{leases: 100}, freshFetch(t, be, now))
	// An hour on, the leases just taken have expired: the fetch takes them
	// again (the redelivery path) and dead-letters none (limit 5); the
	// statement of a group with nothing due claims nothing and says so.
	later := now + 3600*1000000
	explainFetch(t, be, later)
	require.Equal(t, claim{due: true}, freshFetch(t, be, later))
	parts2 := make([]int32, len(ls))
	seqs := make([]int64, len(ls))
	l2 := make([]string, len(ls))
	e2 := make([]string, len(ls))
	kinds := make([]int32, len(ls))
	reasons := make([]string, len(ls))
	avail := make([]int64, len(ls))
	toks := make([]string, len(ls))
	for i, l := range ls {
		parts2[i], seqs[i], l2[i], e2[i], kinds[i] = int32(l.Event.Partition), l.Event.Sequence, l.ID, l.Event.ID, 1
		toks[i] = sqlstore.SpanToken(l.ID, l.Event.Sequence)
	}
	var gid int64
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT id FROM "+be.Schema()+".rheo_groups").Scan(&gid))
	explain(t, be, postgres.SettleGUCsForTest, be.SettleSQLForTest(), gid, now, parts2, seqs, l2, e2, kinds, reasons, avail, 5, "chan", "s", toks)
}

// explain runs q under EXPLAIN ANALYZE in a transaction (rolled back)
// that first runs setup, as the backend does, and fails on a scan of a
// whole table or a join that compares every request with every row.
func explain(t *testing.T, be *postgres.Backend, setup, q string, args ...any) []string {
	return explainAll(t, be, setup, stmt{q, args})
}

type stmt struct {
	q    string
	args []any
}

// explainAll is explain of several statements in turn, in one
// transaction: each sees what the ones before it wrote.
func explainAll(t *testing.T, be *postgres.Backend, setup string, stmts ...stmt) []string {
	ctx := context.Background()
	tx, err := be.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if setup != "" {
		_, err := tx.Exec(ctx, setup)
		require.NoError(t, err)
	}
	var lines []string
	for _, st := range stmts {
		lines = append(lines, explainIn(t, tx, st.q, st.args...)...)
	}
	return lines
}

func explainIn(t *testing.T, tx pgx.Tx, q string, args ...any) []string {
	// Prepared, then executed with the arguments: under the backend's
	// settings (plan_cache_mode = force_generic_plan), the plan is the
	// generic one the backend runs, which cannot use what the arguments'
	// values would prove (a partial index's predicate, say).
	ctx := context.Background()
	_, err := tx.Exec(ctx, "PREPARE rheo_explained AS "+q)
	require.NoError(t, err)
	defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE rheo_explained") }()
	return explainExecute(t, tx, "rheo_explained", true, args...)
}

// explainExecute explains (with analyze, EXPLAIN ANALYZE) the prepared
// statement name executed with args, and fails on a scan of a whole table
// or a join that compares every request with every row.
func explainExecute(t *testing.T, tx pgx.Tx, name string, analyze bool, args ...any) []string {
	ps := make([]string, len(args))
	for i := range args {
		ps[i] = "$" + strconv.Itoa(i+1)
	}
	opts := ""
	if analyze {
		opts = "(ANALYZE, BUFFERS) "
	}
	rows, err := tx.Query(context.Background(), "EXPLAIN "+opts+"EXECUTE "+name+"("+strings.Join(ps, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, line := range lines {
		if os.Getenv("RHEO_EXPLAIN") != "" {
			t.Log(line)
		}
		for _, bad := range []string{"Seq Scan on rheo_events", "Bitmap Heap Scan on rheo_events", "Seq Scan on rheo_deliveries"} {
			require.NotContains(t, line, bad, "hot path scans a table")
		}
		if _, n, ok := strings.Cut(line, "Rows Removed by Join Filter: "); ok {
			removed, err := strconv.Atoi(strings.TrimSpace(n))
			require.NoError(t, err)
			require.Less(t, removed, 1000, "hot path joins every request with every row: %s", line)
		}
	}
	return lines
}

// explainFetch explains a fetch of 100 from partitions 0-3 of stream 1 by
// the backend's one group, at now (microseconds).
func explainFetch(t *testing.T, be *postgres.Backend, now int64) []string {
	args := fetchArgs(t, be, now)
	return explainAll(t, be, postgres.FetchGUCsForTest,
		stmt{be.ExplodeSQLForTest(), groupArgs(args, now)},
		stmt{be.FetchSQLForTest(), args})
}

// fetchArgs are the arguments of a fetch of 100 from partitions 0-3 of
// stream 1 by the backend's one group, at now (microseconds), in the
// order of FetchSQLForTest; FreshFetchSQLForTest takes the first ten.
func fetchArgs(t *testing.T, be *postgres.Backend, now int64) []any {
	var gid int64
	require.NoError(t, be.Pool().QueryRow(context.Background(), "SELECT id FROM "+be.Schema()+".rheo_groups").Scan(&gid))
	lids := make([]string, 100)
	for i := range lids {
		lids[i] = "00000000-0000-0000-0000-000000000000"
	}
	return []any{gid, int64(1), []int32{0, 1, 2, 3}, 100, now, now + 30000000, "c", lids, int32(0), 25, 5, "r", 216}
}

// groupArgs are the arguments of ExplodeSQLForTest and
// LockCursorsSQLForTest: the group, stream and partitions of fetchArgs'
// args, and now.
func groupArgs(args []any, now int64) []any { return append(args[:3:3], now) }

// filled returns a backend whose stream "s" of 4 partitions holds n
// events, with group "g" at its beginning.
func filled(t *testing.T, n int) (*postgres.Backend, *rheo.Client) {
	be, c := stream4(t)
	ctx := context.Background()
	fill(t, c, "s", n)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	return be, c
}

// claim is what a run of FreshFetchSQLForTest returned: how many leases,
// and whether it found something due instead.
type claim struct {
	leases int
	due    bool
}

// freshFetch explains FreshFetchSQLForTest at now after the statements a
// fetch runs before it (see explainAll), then runs them in a transaction
// it rolls back and reports what the claim returned.
func freshFetch(t *testing.T, be *postgres.Backend, now int64) claim {
	ctx := context.Background()
	args := fetchArgs(t, be, now)[:10]
	explode := stmt{be.ExplodeSQLForTest(), groupArgs(args, now)}
	lock := stmt{be.LockCursorsSQLForTest(), groupArgs(args, now)}
	explainAll(t, be, postgres.FetchGUCsForTest, explode, lock, stmt{be.FreshFetchSQLForTest(), args})
	tx, err := be.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, st := range []stmt{{postgres.FetchGUCsForTest, nil}, explode, lock} {
		_, err = tx.Exec(ctx, st.q, st.args...)
		require.NoError(t, err)
	}
	rows, err := tx.Query(ctx, be.FreshFetchSQLForTest(), args...)
	require.NoError(t, err)
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int32, error) {
		var part int32
		return part, r.Scan(&part, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil)
	})
	require.NoError(t, err)
	var c claim
	for _, p := range parts {
		if p < 0 {
			c.due = true
		} else {
			c.leases++
		}
	}
	require.False(t, c.due && c.leases > 0, "claimed and found something due")
	return c
}

// TestFetchReadsOnlyClaimable checks that a fetch reads past none of the
// deliveries it cannot claim, however many there are: with 2,000 retries
// delayed for a day in front of 2,000 reopened deliveries (acked, then
// replayed), EXPLAIN ANALYZE of the fetch finds no node that filtered out
// rows by the hundred (reading them to throw them away: before the
// indexes of due times and of deliveries available at once, the poison
// sweep read every reopened delivery and the claim read every delayed one,
// on every fetch).
func TestFetchReadsOnlyClaimable(t *testing.T) {
	be, c := filled(t, 4000)
	ctx := context.Background()
	// The generic plan the backend makes on a connection's first fetch,
	// made while the deliveries table is empty (see planner).
	early := planner(t, be)("rheo_fetch", postgres.FetchGUCsForTest, be.FetchSQLForTest(), fetchArgs(t, be, time.Now().UnixMicro())...)
	var reopen []string
	later := time.Now().Add(24 * time.Hour)
	for n := 0; n < 4000; {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1000})
		require.NoError(t, err)
		require.NotEmpty(t, ls)
		var reqs []rheo.SettleRequest
		for _, l := range ls {
			if l.Event.Sequence <= 500 { // the first half of each partition
				reqs = append(reqs, rheo.SettleRequest{Kind: rheo.SettleNack, Lease: l, Reason: "down", AvailableAt: later})
			} else {
				reqs = append(reqs, rheo.SettleRequest{Kind: rheo.SettleAck, Lease: l})
				reopen = append(reopen, l.Event.ID)
			}
		}
		errs, err := be.Settle(ctx, "s", "g", reqs, time.Now())
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		n += len(ls)
	}
	k, err := c.Replay(ctx, "s", "g", rheo.Events(reopen...))
	require.NoError(t, err)
	require.Equal(t, 2000, k)
	_, err = be.Pool().Exec(ctx, "ANALYZE "+be.Schema()+".rheo_deliveries")
	require.NoError(t, err)

	now := time.Now().UnixMicro()
	checkReads(t, early(fetchArgs(t, be, now)...), "rheo_deliveries", 100)
	lines := explainFetch(t, be, now)
	checkThrownAway(t, lines, "rheo_", 99) // the fetch read no rows of the store it could not claim
	leased := 0
	for _, line := range lines {
		if strings.Contains(line, "Update on rheo_deliveries") || strings.Contains(line, "Update on "+be.Schema()+".rheo_deliveries") {
			_, actual, _ := strings.Cut(line, "actual time=")
			if _, n, ok := strings.Cut(actual, " rows="); ok {
				if v, err := strconv.Atoi(strings.Fields(n)[0]); err == nil {
					leased = max(leased, v)
				}
			}
		}
	}
	require.Equal(t, 100, leased, "the fetch leases a limit of reopened deliveries:\n%s", strings.Join(lines, "\n"))
	// And for real: the reopened ones, in sequence order, never a delayed one.
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 100)
	for _, l := range ls {
		require.Greater(t, l.Event.Sequence, int64(500), "a delayed retry came back a day early")
	}
}

// TestFreshFetchPassesDelayedRetries: with 2,000 retries delayed for a
// day, the statements of a group with nothing due (their generic plans
// made while the deliveries table was empty) read none of them, find
// nothing due and claim events past the cursors; and a fetch takes that
// path.
func TestFreshFetchPassesDelayedRetries(t *testing.T) {
	be, c := filled(t, 4000)
	ctx := context.Background()
	plan := planner(t, be)
	early := time.Now().UnixMicro()
	fresh := plan("rheo_fresh", postgres.FetchGUCsForTest, be.FreshFetchSQLForTest(), fetchArgs(t, be, early)[:10]...)
	lockArgs := func(now int64) []any { return groupArgs(fetchArgs(t, be, now), now) }
	lock := plan("rheo_lock", postgres.FetchGUCsForTest, be.LockCursorsSQLForTest(), lockArgs(early)...)
	for n := 0; n < 2000; {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1000})
		require.NoError(t, err)
		reqs := make([]rheo.SettleRequest, len(ls))
		for i, l := range ls {
			reqs[i] = rheo.SettleRequest{Kind: rheo.SettleNack, Lease: l, Reason: "down", AvailableAt: time.Now().Add(24 * time.Hour)}
		}
		errs, err := be.Settle(ctx, "s", "g", reqs, time.Now())
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		n += len(ls)
	}
	_, err := be.Pool().Exec(ctx, "ANALYZE "+be.Schema()+".rheo_deliveries")
	require.NoError(t, err)

	now := time.Now().UnixMicro()
	checkThrownAway(t, lock(lockArgs(now)...), "rheo_", 99)
	checkThrownAway(t, fresh(fetchArgs(t, be, now)[:10]...), "rheo_", 99)
	require.Equal(t, claim{leases: 100}, freshFetch(t, be, now))
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 100)
	for _, l := range ls {
		require.Greater(t, l.Event.Sequence, int64(500), "a delayed retry came back a day early")
	}
	due, err := be.DueForTest(ctx, "s", "g")
	require.NoError(t, err)
	require.False(t, due)
}

// TestFetchAfterSomethingDue: a fetch that finds something due claims it
// first (through the statement that claims deliveries) and sends the
// group's next fetch straight there; one that then leases no delivery row
// sends the next back to the statement of a group with nothing due.
func TestFetchAfterSomethingDue(t *testing.T) {
	be := newBackend(t)
	ctx := context.Background()
	clk := clock.NewFrozen(time.Now())
	c := rheo.New(be, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	fill(t, c, "s", 400)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	due := func() bool {
		d, err := be.DueForTest(ctx, "s", "g")
		require.NoError(t, err)
		return d
	}
	fetch := func(opts rheo.FetchOptions) []rheo.Lease {
		ls, err := c.Fetch(ctx, "s", "g", opts)
		require.NoError(t, err)
		require.NotEmpty(t, ls)
		return ls
	}
	ids := func(ls []rheo.Lease) []string {
		out := make([]string, len(ls))
		for i, l := range ls {
			out[i] = l.Event.ID
		}
		return out
	}
	first := fetch(rheo.FetchOptions{Limit: 8})
	require.False(t, due())
	require.NoError(t, c.Release(ctx, first[3]))
	again := fetch(rheo.FetchOptions{Limit: 8})
	require.Contains(t, ids(again), first[3].Event.ID, "the released delivery comes again")
	require.True(t, due())
	fetch(rheo.FetchOptions{Limit: 8})
	require.False(t, due())
	// Expired leases: due at a time that has come.
	held := fetch(rheo.FetchOptions{Limit: 8, LeaseDuration: time.Minute})
	clk.Advance(2 * time.Minute)
	back := fetch(rheo.FetchOptions{Limit: 100})
	require.Subset(t, ids(back), ids(held), "the expired leases come again")
	require.True(t, due())
}

// TestPartialSpanSettleReadsOnlyItsSpan: a settle of some members of a span
// reads that span, not every span the group holds (the settle transaction
// plans without nested loops, so a join with the spans table would be a
// scan of the group's spans).
func TestPartialSpanSettleReadsOnlyItsSpan(t *testing.T) {
	be := newBackend(t)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 500}))
	msgs := make([]rheo.Message, 1000)
	for i := range msgs {
		msgs[i] = rheo.Message{Type: "t", Key: strconv.Itoa(i), Payload: []byte(`{}`)}
	}
	for range 2 {
		_, err := c.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
	}
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	var held []rheo.Lease
	for {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 500, LeaseDuration: time.Hour})
		require.NoError(t, err)
		if len(ls) == 0 {
			break
		}
		held = append(held, ls...)
	}
	var spans int
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT count(*) FROM "+be.Schema()+".rheo_spans").Scan(&spans))
	require.Greater(t, spans, 500, "the group holds many spans")
	var gid int64
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT id FROM "+be.Schema()+".rheo_groups").Scan(&gid))
	l := held[0]
	lines := explain(t, be, postgres.SettleGUCsForTest, be.SettleSQLForTest(), gid, time.Now().UnixMicro(),
		[]int32{int32(l.Event.Partition)}, []int64{l.Event.Sequence}, []string{l.ID}, []string{l.Event.ID}, []int32{1},
		[]string{""}, []int64{0}, 5, "chan", "s", []string{sqlstore.SpanToken(l.ID, l.Event.Sequence)})
	reads := 0
	for _, line := range lines {
		if !strings.Contains(line, "on rheo_spans") {
			continue
		}
		reads++
		i := strings.Index(line, "actual time=")
		require.Positive(t, i, line)
		f := strings.Fields(line[i:])
		require.True(t, strings.HasPrefix(f[2], "rows="), line)
		rows, err := strconv.Atoi(strings.TrimPrefix(f[2], "rows="))
		require.NoError(t, err)
		require.LessOrEqual(t, rows, 1, "a read of more spans than the settle names: %s", line)
	}
	require.Positive(t, reads)
}

// TestFetchAfterManyExpiredLeasesReadsAFew: after a fleet of consumers
// crashed holding 10,000 leases (2,500 per partition, all expired, a few
// of them retried), a fetch reads a bounded number of deliveries of each
// partition (the sweep for leases at the attempt limit reads the index of
// retried leases, the claim a capped range of the index of due times and
// then the first pending deliveries in sequence order), not every expired
// lease; and a settle of what it claimed reads only those rows. Before
// schema version 7, every fetch read all 10,000 twice.
//
// The plans are the ones the backend runs: generic (its statements are
// prepared once per connection), made when the deliveries table was empty
// (a connection's first fetch), so that no estimate of its size helps.
func TestFetchAfterManyExpiredLeasesReadsAFew(t *testing.T) {
	be := newBackend(t)
	ctx := context.Background()
	crashed := clock.NewFrozen(time.Now().Add(-time.Hour))
	c := rheo.New(be, rheo.WithClock(crashed))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	fill(t, c, "s", 10000)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{MaxAttempts: 5}))
	var gid int64
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT id FROM "+be.Schema()+".rheo_groups").Scan(&gid))

	plan := planner(t, be)
	now := time.Now().UnixMicro()
	args := fetchArgs(t, be, now)
	fetch := plan("rheo_fetch", postgres.FetchGUCsForTest, be.FetchSQLForTest(), args...)
	one := func(v any) any { // a one-element array of v
		switch v := v.(type) {
		case int32:
			return []int32{v}
		case int64:
			return []int64{v}
		}
		return []string{v.(string)}
	}
	settle := plan("rheo_settle", postgres.SettleGUCsForTest, be.SettleSQLForTest(), gid, now, one(int32(0)), one(int64(1)),
		one("l"), one("e"), one(int32(1)), one(""), one(int64(0)), 5, "chan", "s", one(""))

	for n := 0; n < 10000; {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1000, LeaseDuration: time.Minute})
		require.NoError(t, err)
		require.NotEmpty(t, ls)
		n += len(ls)
	}
	// A few claimed again before the crash (which turns every span into
	// delivery rows), and expired again.
	crashed.Advance(2 * time.Minute)
	_, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 20, LeaseDuration: time.Minute})
	require.NoError(t, err)

	checkReads(t, fetch(args...), "rheo_deliveries", 400)
	ls, err := rheo.New(be).Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 100)
	for _, l := range ls {
		require.LessOrEqual(t, l.Event.Sequence, int64(25+5), "claimed in sequence order")
	}
	n := len(ls)
	ps, seqs, lids2, eids, kinds := make([]int32, n), make([]int64, n), make([]string, n), make([]string, n), make([]int32, n)
	for i, l := range ls {
		ps[i], seqs[i], lids2[i], eids[i], kinds[i] = int32(l.Event.Partition), l.Event.Sequence, l.ID, l.Event.ID, 1
	}
	checkReads(t, settle(gid, now, ps, seqs, lids2, eids, kinds, make([]string, n), make([]int64, n), 5, "chan", "s", make([]string, n)),
		"rheo_deliveries", n)
}

// planner returns plan, which prepares q on a connection of its own and
// makes its generic plan at once, under gucs (the backend's settings,
// which force generic plans), from the arguments given; the function plan
// returns runs EXPLAIN ANALYZE of that plan, as it was made, with other
// arguments. A backend's connection makes its generic plans on its first
// fetch and settle, often while the deliveries table is empty: so does a
// test that plans before it fills the table.
func planner(t *testing.T, be *postgres.Backend) func(name, gucs, q string, args ...any) func(args ...any) []string {
	ctx := context.Background()
	conn, err := be.Pool().Acquire(ctx)
	require.NoError(t, err)
	var names []string
	t.Cleanup(func() {
		for _, name := range names {
			_, _ = conn.Exec(ctx, "DEALLOCATE "+name)
		}
		conn.Release()
	})
	return func(name, gucs, q string, args ...any) func(args ...any) []string {
		_, err := conn.Exec(ctx, "PREPARE "+name+" AS "+q)
		require.NoError(t, err)
		names = append(names, name)
		run := func(analyze bool, args ...any) []string {
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, gucs)
			require.NoError(t, err)
			return explainExecute(t, tx, name, analyze, args...)
		}
		run(false, args...) // makes and caches the generic plan, now
		return func(args ...any) []string { return run(true, args...) }
	}
}

// checkThrownAway fails when a plan node reading a table whose name starts
// with table read more than max rows to throw them away.
func checkThrownAway(t *testing.T, lines []string, table string, max int) {
	t.Helper()
	node := "" // the plan node the lines that follow describe
	for _, line := range lines {
		if strings.Contains(line, "->") || !strings.HasPrefix(line, " ") {
			node = line
		}
		for _, counter := range []string{"Rows Removed by Filter: ", "Rows Removed by Index Recheck: "} {
			if _, n, ok := strings.Cut(line, counter); ok && strings.Contains(node, " on "+table) {
				removed, err := strconv.Atoi(strings.TrimSpace(n))
				require.NoError(t, err)
				require.LessOrEqual(t, removed, max, "a read of rows it threw away:\n%s\n%s\n%s", node, line, strings.Join(lines, "\n"))
			}
		}
	}
}

// checkReads fails when a plan node reading table returned more than max
// rows in one of its loops, or read more than max to throw them away.
func checkReads(t *testing.T, lines []string, table string, max int) {
	t.Helper()
	checkThrownAway(t, lines, table, max)
	reads := 0
	for _, line := range lines {
		if !strings.Contains(line, " on "+table+" ") {
			continue
		}
		i := strings.Index(line, "actual time=")
		if i < 0 {
			continue // never executed
		}
		f := strings.Fields(line[i:])
		require.True(t, strings.HasPrefix(f[2], "rows="), line)
		rows, err := strconv.Atoi(strings.TrimPrefix(f[2], "rows="))
		require.NoError(t, err)
		require.LessOrEqual(t, rows, max, "a read of more rows than it needs:\n%s\n%s", line, strings.Join(lines, "\n"))
		reads++
	}
	require.Positive(t, reads, "no read of %s:\n%s", table, strings.Join(lines, "\n"))
}
