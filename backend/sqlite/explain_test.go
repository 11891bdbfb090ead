package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/sqlstore"
)

// plan returns SQLite's EXPLAIN QUERY PLAN of q, one line per step.
func plan(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		lines = append(lines, detail)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

// requireNoScan fails when the plan scans events or deliveries in full.
func requireNoScan(t *testing.T, name, p string) {
	t.Helper()
	for _, line := range strings.Split(p, "\n") {
		for _, table := range []string{"rheo_events", "rheo_deliveries"} {
			if strings.HasPrefix(line, "SCAN "+table) || strings.HasPrefix(line, "SCAN e") || strings.HasPrefix(line, "SCAN d") {
				t.Errorf("%s scans %s in full:\n%s", name, table, p)
			}
		}
	}
	require.Contains(t, p, "SEARCH", "%s: %s", name, p)
}

// TestQueryPlansUseIndexes runs EXPLAIN QUERY PLAN on the statements of the
// hot paths (fetch, settle, lag) and of the indexed query filters, on a
// store with data and fresh statistics, and requires that none scans the
// events or deliveries table in full.
func TestQueryPlansUseIndexes(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	ms := make([]rheo.Message, 500)
	for i := range ms {
		ms[i] = rheo.Message{Type: fmt.Sprintf("t%d", i%7), Key: fmt.Sprintf("k%d", i%50),
			Payload: []byte(fmt.Sprintf(`{"n":%d,"c":{"x":"y"}}`, i)), Metadata: map[string]string{"m": fmt.Sprint(i % 3)}}
	}
	_, err := c.AppendBatch(ctx, "s", ms)
	require.NoError(t, err)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 200})
	require.NoError(t, err)
	require.NoError(t, c.AckBatch(ctx, ls[:100]))
	for _, g := range []string{"g2", "g3", "g4"} {
		require.NoError(t, c.CreateGroup(ctx, "s", g, rheo.GroupConfig{}))
		_, err := c.Fetch(ctx, "s", g, rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
	}

	db, err := sql.Open("sqlite", b.Path())
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec("ANALYZE")
	require.NoError(t, err)

	now := time.Now().UnixMicro()
	hot := map[string][]any{
		// Fetch: cursors, high watermarks, poison sweep, claimable rows
		// (one partition, several), claimed events, materialization.
		"fetch cursors": {"SELECT part, offered FROM rheo_group_parts WHERE grp_id = ? AND part IN (?, ?) ORDER BY part", 1, 0, 1},
		"fetch due partitions": {"WITH RECURSIVE t(part) AS (SELECT (SELECT MIN(part) FROM rheo_deliveries WHERE grp_id = ? AND " + sqlstore.TimedSQL +
			") UNION ALL SELECT (SELECT MIN(part) FROM rheo_deliveries WHERE grp_id = ? AND " + sqlstore.TimedSQL + " AND part > t.part) FROM t WHERE t.part IS NOT NULL), " +
			"r(part) AS (SELECT (SELECT MIN(part) FROM rheo_deliveries WHERE grp_id = ? AND status = 0 AND " + sqlstore.ReadySQL +
			") UNION ALL SELECT (SELECT MIN(part) FROM rheo_deliveries WHERE grp_id = ? AND status = 0 AND " + sqlstore.ReadySQL + " AND part > r.part) FROM r WHERE r.part IS NOT NULL) " +
			"SELECT 0, part FROM t WHERE part IS NOT NULL UNION ALL SELECT 1, part FROM r WHERE part IS NOT NULL", 1, 1, 1, 1},
		"fetch poison": {"UPDATE rheo_deliveries SET status = 2 WHERE grp_id = ? AND part IN (?, ?) AND due_at + 0 <= ? AND " + sqlstore.TimedSQL +
			" AND status = 1 AND attempt >= ?", 1, 0, 1, now, 5},
		"fetch claimable, due": {"SELECT * FROM (SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND " + sqlstore.TimedSQL +
			" AND due_at <= ? ORDER BY seq + 0 LIMIT ?) UNION ALL SELECT * FROM (SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND " +
			sqlstore.TimedSQL + " AND due_at <= ? ORDER BY seq + 0 LIMIT ?)", 1, 0, now, 100, 1, 1, now, 100},
		"fetch claimable, due, capped": {"SELECT * FROM (SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND " +
			sqlstore.TimedSQL + " AND due_at <= ? LIMIT ?)", 1, 0, now, 216},
		"fetch claimable, due, in order": {"SELECT * FROM (SELECT part, seq, attempt, event_id FROM (SELECT part, seq, attempt, event_id, due_at FROM rheo_deliveries " +
			"WHERE grp_id = ? AND part = ? AND status < 2 ORDER BY seq LIMIT ?) WHERE " + sqlstore.TimedSQL + " AND due_at <= ? LIMIT ?)", 1, 0, 216, now, 100},
		"fetch claimable, at once": {"SELECT * FROM (SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND status = 0 AND " +
			sqlstore.ReadySQL + " AND due_at <= ? ORDER BY seq LIMIT ?) UNION ALL SELECT * FROM (SELECT part, seq, attempt, event_id FROM rheo_deliveries WHERE grp_id = ? AND part = ? " +
			"AND status = 0 AND " + sqlstore.ReadySQL + " AND due_at <= ? ORDER BY seq LIMIT ?)", 1, 0, now, 100, 1, 1, now, 100},
		"fetch claim":       {"UPDATE rheo_deliveries SET status = 1 WHERE grp_id = ? AND part = ? AND seq = ? AND due_at <= ?", 1, 0, 5, now},
		"fetch new events":  {"SELECT id FROM rheo_events WHERE stream_id = ? AND part = ? AND seq > ? AND seq <= ? ORDER BY seq", 1, 0, 10, 110},
		"fetch cursor move": {"UPDATE rheo_group_parts SET offered = ? WHERE grp_id = ? AND part = ?", 5, 1, 0},
		// A fetch and a settle over many partitions at once.
		"settle spans, ranges":   {sqlstore.SpansOfRangesSQL, 1, `{"0:5":1,"1:3":2}`},
		"settle span deletes":    {sqlstore.DeleteSpansSQL, 1, `[1,2]`},
		"fetch new events, runs": {sqlstore.MaterializeRunsSQL, `{"0":2,"1":1}`, 1, 1},
		// Settle: read the rows, delete acked ones, update nacked ones.
		"settle read":   {"SELECT seq, status, lease_id, event_id, attempt FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND seq IN (?, ?, ?)", 1, 0, 1, 2, 3},
		"settle ack":    {"DELETE FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND seq IN (?, ?, ?)", 1, 0, 1, 2, 3},
		"settle nack":   {"UPDATE rheo_deliveries SET status = 0 WHERE grp_id = ? AND part = ? AND seq = ?", 1, 0, 3},
		"renew":         {"UPDATE rheo_deliveries SET expires_at = ? WHERE grp_id = ? AND part = ? AND seq = ? AND status = 1 AND lease_id = ?", now, 1, 0, 3, "x"},
		"lag":           {sqlstore.LagSQL, 1, 1, 1, 1, 1, 1, 1, 1},
		"append ids":    {"SELECT id FROM rheo_events WHERE stream_id = ? AND id IN (?, ?)", 1, "a", "b"},
		"append hwm":    {sqlstore.AdvanceHeadsSQL, 1, `{"0":2,"1":1}`, "s"},
		"read":          {"SELECT id FROM rheo_events WHERE stream_id = ? AND part = ? AND seq > ? ORDER BY seq LIMIT ?", 1, 0, 5, 10},
		"dead letters":  {"SELECT d.seq FROM rheo_deliveries d JOIN rheo_events e ON e.stream_id = ? AND e.part = d.part AND e.seq = d.seq WHERE d.grp_id = ? AND d.status = 2 AND (d.part > ? OR (d.part = ? AND d.seq > ?)) ORDER BY d.part, d.seq LIMIT ?", 1, 1, 0, 0, 0, 10},
		"group stats":   {"SELECT status, COUNT(*) FROM rheo_deliveries WHERE grp_id = ? GROUP BY status", 1},
		"replay delete": {"DELETE FROM rheo_deliveries WHERE grp_id = ? AND part = ? AND seq > ?", 1, 0, 5},
	}
	// The fetch reads claimable deliveries through the indexes made for
	// them, never walking past leases in flight or delayed retries.
	uses := map[string]string{
		"fetch due partitions":           "rheo_deliveries_ready",
		"fetch poison":                   "rheo_deliveries_attempts",
		"fetch claimable, due":           "rheo_deliveries_timed",
		"fetch claimable, due, capped":   "rheo_deliveries_timed",
		"fetch claimable, due, in order": "rheo_deliveries_pending",
		"fetch claimable, at once":       "rheo_deliveries_ready",
	}
	for name, q := range hot {
		p := plan(t, db, q[0].(string), q[1:]...)
		t.Logf("%s:\n%s", name, p)
		requireNoScan(t, name, p)
		if idx, ok := uses[name]; ok {
			require.Contains(t, p, "INDEX "+idx, "%s should use %s:\n%s", name, idx, p)
		}
	}
	require.Contains(t, plan(t, db, hot["fetch due partitions"][0].(string), 1, 1, 1, 1), "INDEX rheo_deliveries_timed")
	// Lag reads the group's cursors and the stream's high watermarks by
	// their keys, and the pending rows through the walk of their indexes.
	lag := plan(t, db, sqlstore.LagSQL, 1, 1, 1, 1, 1, 1, 1, 1)
	for _, line := range strings.Split(lag, "\n") {
		if strings.HasPrefix(line, "SCAN ") {
			require.Contains(t, []string{"SCAN pd", "SCAN ps", "SCAN CONSTANT ROW"}, line, "lag:\n%s", lag)
		}
	}
	// Lag of given partitions walks their list and reads each by the keys
	// of every table: the list is the only scan, and the outer loop.
	lagOf := plan(t, db, sqlstore.LagPartsSQL, "[0,2]", 1, 1)
	t.Logf("lag of partitions:\n%s", lagOf)
	require.True(t, strings.HasPrefix(lagOf, "SCAN j VIRTUAL TABLE"), "lag of partitions:\n%s", lagOf)
	require.Equal(t, 1, strings.Count(lagOf, "SCAN "), "lag of partitions:\n%s", lagOf)
	for _, table := range []string{"g", "p", "d", "s"} {
		require.Contains(t, lagOf, "SEARCH "+table+" USING", "lag of partitions:\n%s", lagOf)
	}
	// The spans of a settle over many partitions are read and deleted per
	// partition named, never by a walk of the group's spans.
	for _, name := range []string{"settle spans, ranges", "settle span deletes"} {
		p := plan(t, db, hot[name][0].(string), hot[name][1:]...)
		require.NotContains(t, p, "SCAN rheo_spans", name)
		require.NotContains(t, p, "SCAN s\n", name)
		require.Contains(t, p, "SEARCH", name)
	}
	// With many spans outstanding (a group 3,000 fetches behind in 16
	// partitions), a span is deleted by its rowid, not by a walk of its
	// group's or partition's spans.
	_, err = db.Exec("INSERT INTO rheo_spans (grp_id, part, lo, hi, token, attempt, leased_at, expires_at, done, pending, low) " +
		"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 48000) " +
		"SELECT 999, i % 16, i, i, 't', 1, 0, 0, '0', 1, i FROM c")
	require.NoError(t, err)
	_, err = db.Exec("ANALYZE")
	require.NoError(t, err)
	deletes := plan(t, db, sqlstore.DeleteSpansSQL, 999, `[16,17]`)
	t.Logf("settle span deletes, 48,000 spans:\n%s", deletes)
	require.Contains(t, deletes, "USING INTEGER PRIMARY KEY (rowid=?)", "a span deleted by its rowid")
	ranges := plan(t, db, sqlstore.SpansOfRangesSQL, 999, `{"0:16":16,"1:17":17}`)
	t.Logf("settle spans, ranges, 48,000 spans:\n%s", ranges)
	require.Contains(t, ranges, "SEARCH s USING INDEX sqlite_autoindex_rheo_spans_1 (grp_id=? AND part=?", "spans read by their key")
	// The cursors of a fetch from several partitions are written row by
	// row from the runs' JSON (the upsert finds each row by its key), never
	// in a loop over the group's cursors.
	moves := plan(t, db, sqlstore.AdvanceCursorsSQL, `{"0":12,"1":21}`, 1)
	t.Logf("fetch cursor move, runs:\n%s", moves)
	require.Equal(t, "SCAN json_each VIRTUAL TABLE INDEX 1:", moves)

	// An append reserves its sequences partition row by partition row
	// from its JSON (the upsert finds each by its key), and a fetch from
	// every partition of a stream whose group recorded a seen count reads
	// the stream's partitions in key order and each cursor by its key.
	heads := plan(t, db, sqlstore.AdvanceHeadsSQL, 1, `{"0":2,"1":1}`, "s")
	t.Logf("append hwm:\n%s", heads)
	require.True(t, strings.HasPrefix(heads, "SCAN json_each VIRTUAL TABLE INDEX 1:\n"), heads)
	require.NotContains(t, heads, "rheo_partitions", "no walk of the stream's partitions")
	stamped := plan(t, db, sqlstore.StampedCursorsSQL, 1, 1, 5)
	t.Logf("fetch cursors, stamped:\n%s", stamped)
	require.Equal(t, "SEARCH p USING INDEX sqlite_autoindex_rheo_partitions_1 (stream_id=?)\n"+
		"SEARCH g USING INDEX sqlite_autoindex_rheo_group_parts_1 (grp_id=? AND part=?)", stamped)

	// The query filters with an index: type, key, time window, partition.
	d := b.Dialect()
	filters := map[string]rheo.Query{
		"type":      {Type: "t3"},
		"key":       {Key: "k7"},
		"from":      {From: time.Now().Add(-time.Hour)},
		"window":    {From: time.Now().Add(-time.Hour), To: time.Now()},
		"partition": {Partitions: []int{2}},
		"type and metadata and payload": {Type: "t1", Metadata: map[string]string{"m": "1"},
			Payload: map[string]any{"c.x": "y"}},
	}
	for name, q := range filters {
		q.Stream, q.Limit = "s", 100
		q.OrderBy = []rheo.Order{rheo.Asc(rheo.OrderSequence)}
		bq := sqlstore.BuildQuery(d, 1, rheo.QuerySpec{Query: q})
		p := plan(t, db, bq.SQL(), bq.Args()...)
		requireNoScan(t, "query by "+name, p)
		require.Contains(t, p, "INDEX", "query by %s should use an index:\n%s", name, p)
	}
}

// TestAppendStoresAPartitionsEventsSideBySide: an append writes its events
// partition by partition, each in sequence order, so that a fetch of one
// partition's run reads rows whose rowids follow each other (SQLite then
// steps to the next row instead of searching the table for it).
func TestAppendStoresAPartitionsEventsSideBySide(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	ms := make([]rheo.Message, 200)
	for i := range ms {
		ms[i] = rheo.Message{Key: fmt.Sprintf("k%d", i), Payload: []byte(`{}`)}
	}
	evs, err := c.AppendBatch(ctx, "s", ms)
	require.NoError(t, err)
	for i, e := range evs {
		require.Equal(t, fmt.Sprintf("k%d", i), e.Key, "the events come back in the order of the messages")
	}
	db, err := sql.Open("sqlite", b.Path())
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query("SELECT part, seq FROM rheo_events ORDER BY rowid")
	require.NoError(t, err)
	defer rows.Close()
	var runs, last, lastSeq int64 = 0, -1, 0
	n := 0
	for rows.Next() {
		var part, seq int64
		require.NoError(t, rows.Scan(&part, &seq))
		if part != last {
			runs++
			require.Greater(t, part, last, "partitions in ascending order")
			last, lastSeq = part, 0
		}
		require.Equal(t, lastSeq+1, seq, "partition %d in sequence order", part)
		lastSeq = seq
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(ms), n)
	require.Equal(t, int64(4), runs, "one run of rowids per partition")
}

// TestLagPlanUnderStaleStatistics gathers statistics on a store of one
// group and one stream, then creates 300 more of each: Lag still reads the
// group's cursors and the stream's counters by their keys, never by a scan
// of every group's cursors or every stream's counters, which the
// statistics (one group, one stream, so every row is theirs) would make
// look as cheap.
func TestLagPlanUnderStaleStatistics(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 64}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g0", rheo.GroupConfig{}))
	db, err := sql.Open("sqlite", b.Path())
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec("ANALYZE")
	require.NoError(t, err)
	for i := 1; i <= 300; i++ {
		require.NoError(t, c.CreateGroup(ctx, "s", fmt.Sprint("g", i), rheo.GroupConfig{}))
		require.NoError(t, c.CreateStream(ctx, fmt.Sprint("s", i), rheo.StreamConfig{Partitions: 64}))
	}
	stale, err := sql.Open("sqlite", b.Path()) // reads the statistics afresh
	require.NoError(t, err)
	defer stale.Close()
	var sid, gid int64
	require.NoError(t, stale.QueryRow("SELECT stream_id, id FROM rheo_groups WHERE name = 'g150'").Scan(&sid, &gid))
	lag := plan(t, stale, sqlstore.LagSQL, gid, gid, gid, gid, gid, sid, gid, gid)
	t.Logf("lag:\n%s", lag)
	for _, line := range strings.Split(lag, "\n") {
		if strings.HasPrefix(line, "SCAN ") {
			require.Contains(t, []string{"SCAN pd", "SCAN ps", "SCAN CONSTANT ROW"}, line, "lag:\n%s", lag)
		}
	}
	l, err := c.Lag(ctx, "s", "g150")
	require.NoError(t, err)
	require.Len(t, l.Partitions, 64)
}
