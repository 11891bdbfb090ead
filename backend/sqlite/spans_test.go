package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/sqlstore"
	"github.com/rheo-go/rheo/rheotest"
)

// A fetch that takes new events from several partitions writes their spans
// and cursors in a few statements for all of them (materializeRuns): each
// partition's span must hold what a fetch from it alone would write (its
// range, token, member count and the digest of its members' event IDs,
// which lets a whole ack skip reading the events), and its cursor must
// move past the run, after deliveries claimed again in the same fetch.
func TestFetchFromManyPartitionsWritesEachSpan(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	c := rheo.New(b)
	const parts = 12 // more runs than fewRuns
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	ms := make([]rheo.Message, 96)
	for i := range ms {
		ms[i] = rheo.Message{Type: "t", Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	_, err := c.AppendBatch(ctx, "s", ms)
	require.NoError(t, err)
	// A nack of the last partition's lease puts a delivery claimable again
	// ahead of that partition's new events in the second fetch.
	first, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: parts})
	require.NoError(t, err)
	require.Len(t, first, parts)
	nacked := first[parts-1]
	require.Equal(t, parts-1, nacked.Event.Partition)
	require.NoError(t, c.Nack(ctx, nacked, "again"))
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 3 * parts})
	require.NoError(t, err)
	require.Len(t, ls, 3*parts)

	db, err := sql.Open("sqlite", b.Path())
	require.NoError(t, err)
	defer db.Close()
	type span struct {
		lo, hi, pending, low, attempt int64
		token, done                   string
		digest                        int64
	}
	spans := map[int][]span{}
	rows, err := db.Query("SELECT part, lo, hi, pending, low, attempt, token, done, digest FROM rheo_spans ORDER BY part, lo")
	require.NoError(t, err)
	for rows.Next() {
		var p int
		var s span
		require.NoError(t, rows.Scan(&p, &s.lo, &s.hi, &s.pending, &s.low, &s.attempt, &s.token, &s.done, &s.digest))
		spans[p] = append(spans[p], s)
	}
	require.NoError(t, rows.Err())
	rows.Close()

	// The second fetch's new events, per partition, in the order it
	// returned them: partition after partition, each one's reclaimed
	// delivery before its new events.
	fresh := map[int][]rheo.Lease{}
	last := -1
	for i, l := range ls {
		p := l.Event.Partition
		require.GreaterOrEqual(t, p, last, "lease %d: partitions in order", i)
		last = p
		if l.Attempt == 2 {
			require.Equal(t, nacked.Event.ID, l.Event.ID)
			require.Empty(t, fresh[p], "the reclaimed delivery comes before its partition's new events")
			continue
		}
		fresh[p] = append(fresh[p], l)
	}
	require.Len(t, fresh, parts, "new events from every partition")
	for p := range parts {
		run := fresh[p]
		require.NotEmpty(t, spans[p], "partition %d", p)
		s := spans[p][len(spans[p])-1] // (the first fetch's, but where the nack made it rows, and this one)
		ids := make([]string, len(run))
		for i, l := range run {
			require.Equal(t, s.lo+int64(i), l.Event.Sequence, "partition %d: members in sequence order", p)
			require.True(t, strings.HasPrefix(l.Receipt, s.token[:24]), "partition %d: lease %s of span %s", p, l.ID, s.token)
			ids[i] = l.Event.ID
		}
		n := int64(len(run))
		require.Equal(t, span{lo: s.lo, hi: s.lo + n - 1, pending: n, low: s.lo, attempt: 1, token: s.token,
			done: strings.Repeat("0", int(n)), digest: sqlstore.SpanDigest(ids)}, s, "partition %d", p)
		var offered int64
		require.NoError(t, db.QueryRow("SELECT offered FROM rheo_group_parts WHERE part = ?", p).Scan(&offered))
		require.Equal(t, s.hi, offered, "partition %d: the cursor moved past the run", p)
	}
	// A whole ack of each span settles it: one AckBatch of spans in more
	// partitions than fewRuns (settleAllSpans reads and deletes them all at
	// once), then one of a few.
	require.NoError(t, c.AckBatch(ctx, ls))
	var left int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM rheo_spans WHERE lo > 1").Scan(&left))
	require.Zero(t, left, "the second fetch's spans are gone")
	require.NoError(t, c.AckBatch(ctx, first[:parts-1]))
	require.NoError(t, db.QueryRow("SELECT (SELECT COUNT(*) FROM rheo_spans) + (SELECT COUNT(*) FROM rheo_deliveries)").Scan(&left))
	require.Zero(t, left, "no span or delivery left")
	lag, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Equal(t, int64(len(ms)-len(ls)-len(first)+1), lag.Total)
}

// TestDifferentialRunsAtOnce runs the differential and clock-skew tests
// with every fetch from two or more partitions taking materializeRuns'
// path (a fetch from more than a few takes it), so that path meets the
// mixes of claims, nacks, replays and clocks those tests make.
func TestDifferentialRunsAtOnce(t *testing.T) {
	t.Cleanup(sqlstore.SetFewRuns(1))
	rheotest.RunDifferential(t, func(t testing.TB) rheo.Backend { return open(t) }, rheotest.DifferentialOptions{Seeds: 3})
	rheotest.RunClockSkew(t, func(t testing.TB) rheo.Backend { return open(t) }, rheotest.ClockSkewOptions{Seeds: 3, Steps: 300})
}
