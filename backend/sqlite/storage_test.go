package sqlite_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/clock"
)

func count(t *testing.T, db *sql.DB, q string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(q).Scan(&n))
	return n
}

// The deliveries table holds the in-flight window and dead letters only
// (SPEC R9): acked rows leave it at once, whatever the stream's length.
func TestDeliveriesHoldOnlyInflightAndDeadLetters(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	clk := clock.NewFrozen(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	c := rheo.New(b, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	ms := make([]rheo.Message, 1000)
	for i := range ms {
		ms[i] = rheo.Message{Key: string(rune('a' + i%26))}
	}
	_, err := c.AppendBatch(ctx, "s", ms)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", b.Path())
	require.NoError(t, err)
	defer db.Close()
	// Deliveries are rows, or members of a span: the run of fresh events
	// one fetch leased from a partition, one row for all of them.
	rows := func() int {
		return count(t, db, "SELECT (SELECT COUNT(*) FROM rheo_deliveries) + (SELECT COALESCE(SUM(pending), 0) FROM rheo_spans)")
	}

	held, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 10, rows(), "only offered events have rows")
	require.Equal(t, 0, count(t, db, "SELECT COUNT(*) FROM rheo_deliveries"), "fresh events are leased as spans")
	require.Equal(t, 2, count(t, db, "SELECT COUNT(*) FROM rheo_spans"), "one span per partition")
	require.NoError(t, c.Reject(ctx, held[0], "bad"))
	require.Equal(t, 10, rows(), "the rejected lease's span became rows")
	for {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
		require.NoError(t, err)
		if len(ls) == 0 {
			break
		}
		require.LessOrEqual(t, rows(), 10+100, "in flight: the held leases and this batch")
		require.NoError(t, c.AckBatch(ctx, ls))
	}
	require.Equal(t, 10, rows(), "9 held leases and 1 dead letter")
	require.NoError(t, c.AckBatch(ctx, held[1:]))
	require.Equal(t, 1, rows(), "the dead letter stays")
	require.Equal(t, 0, count(t, db, "SELECT COUNT(*) FROM rheo_spans"))
	lag, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Zero(t, lag.Total)
}

// Payloads come back byte for byte as the facade stored them (key order,
// escapes, number spelling), and times to the microsecond in UTC.
func TestEventsRoundTripExactly(t *testing.T) {
	ctx := context.Background()
	c := rheo.New(open(t))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	payload := `{"z":1.50,"a":"\u00e9\n","big":12345678901234567890,"n":null,"o":{"b":[1,2],"a":true}}`
	ts := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.FixedZone("X", 3600))
	in, err := c.Append(ctx, "s", rheo.Message{ID: "e1", Type: "t", Key: "k", Payload: []byte(payload),
		Metadata: map[string]string{"correlation_id": "c-1", "weird key\"": "v"}, Timestamp: ts})
	require.NoError(t, err)
	out, err := c.Read(ctx, "s", rheo.ReadOptions{})
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.Equal(t, payload, string(out[0].Payload))
	require.Equal(t, in, out[0])
	require.Equal(t, ts.UTC(), out[0].Timestamp)
	require.Equal(t, time.UTC, out[0].Timestamp.Location())

	// The metadata key the JSON path syntax cannot spell is still queryable.
	got, err := c.Query(ctx, rheo.Query{Stream: "s", Metadata: map[string]string{"weird key\"": "v"}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	got, err = c.Query(ctx, rheo.Query{Stream: "s", Payload: map[string]any{"z": 1.5, "o.a": true}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	got, err = c.Query(ctx, rheo.Query{Stream: "s", Payload: map[string]any{"z": "1.5"}})
	require.NoError(t, err)
	require.Empty(t, got, "a number never equals a string")
}
