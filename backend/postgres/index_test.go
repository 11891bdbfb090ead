package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
)

// TestQueryFiltersUseIndexes checks the index table of docs/postgres.md:
// every query filter compiles to a predicate an index serves. Sequential
// scans are disabled, so a filter no index can serve shows up as a scan of
// the primary key or of the table instead of its index.
func TestQueryFiltersUseIndexes(t *testing.T) {
	be, c := stream4(t)
	ctx := context.Background()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	msgs := make([]rheo.Message, 0, 500)
	for i := range 2000 {
		msgs = append(msgs, rheo.Message{
			Type: fmt.Sprint("type-", i%50), Key: fmt.Sprint("key-", i), Timestamp: base.Add(time.Duration(i) * time.Second),
			Metadata: map[string]string{"tenant": fmt.Sprint("t", i%100)},
			Payload:  []byte(fmt.Sprintf(`{"n":%d,"customer":{"country":"c%d"}}`, i, i%200)),
		})
		if len(msgs) == cap(msgs) {
			_, err := c.AppendBatch(ctx, "s", msgs)
			require.NoError(t, err)
			msgs = msgs[:0]
		}
	}
	// The payload and metadata filters use the optional GIN index.
	require.NoError(t, be.CreatePayloadIndex(ctx))
	_, err := be.Pool().Exec(ctx, "ANALYZE "+be.Schema()+".rheo_events")
	require.NoError(t, err)
	var sid int64
	require.NoError(t, be.Pool().QueryRow(ctx, "SELECT id FROM "+be.Schema()+".rheo_streams WHERE name = 's'").Scan(&sid))

	for _, tc := range []struct {
		name  string
		q     rheo.Query
		index string
	}{
		{"type", rheo.Query{Type: "type-7"}, "rheo_events_type"},
		{"key", rheo.Query{Key: "key-77"}, "rheo_events_key"},
		{"time", rheo.Query{From: base.Add(100 * time.Second), To: base.Add(110 * time.Second)}, "rheo_events_ts"},
		{"metadata", rheo.Query{Metadata: map[string]string{"tenant": "t42"}}, "rheo_events_json"},
		{"payload", rheo.Query{Payload: map[string]any{"customer.country": "c17"}}, "rheo_events_json"},
		{"payload number", rheo.Query{Payload: map[string]any{"n": 1234}}, "rheo_events_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Stream, q.Limit = "s", 100
			sql, args := be.QuerySQLForTest(sid, rheo.QuerySpec{Query: q})
			tx, err := be.Pool().Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
			require.NoError(t, err)
			rows, err := tx.Query(ctx, "EXPLAIN "+sql, args...)
			require.NoError(t, err)
			var plan []string
			for rows.Next() {
				var line string
				require.NoError(t, rows.Scan(&line))
				plan = append(plan, line)
			}
			require.NoError(t, rows.Err())
			uses := regexp.MustCompile(`(using|on) ` + tc.index + `\b`)
			require.Regexp(t, uses, strings.Join(plan, "\n"))
			// And the query answers.
			evs, err := c.Query(ctx, q)
			require.NoError(t, err)
			require.NotEmpty(t, evs)
		})
	}
}

// TestMigrateUpgradesIndexes runs migrations 2 on over a schema left as
// migration 1 made it, with events in it: the two JSON indexes go (the GIN
// index is optional from version 5), the text columns compare bytewise, and
// the events are still found.
func TestMigrateUpgradesIndexes(t *testing.T) {
	be := newBackend(t)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	_, err := c.AppendBatch(ctx, "s", []rheo.Message{
		{Type: "a", Key: "k1", Metadata: map[string]string{"m": "1"}, Payload: []byte(`{"x":1}`)},
		{Type: "b", Key: "k2", Payload: []byte(`{"x":2}`)},
	})
	require.NoError(t, err)
	s := be.Schema()
	// Back to version 1.
	for _, q := range []string{
		`DROP INDEX IF EXISTS ` + s + `.rheo_events_json`,
		`ALTER TABLE ` + s + `.rheo_events ALTER COLUMN payload TYPE jsonb USING payload::jsonb`,
		`ALTER TABLE ` + s + `.rheo_events ALTER COLUMN id TYPE text COLLATE "default", ALTER COLUMN etype TYPE text COLLATE "default", ALTER COLUMN ekey TYPE text COLLATE "default"`,
		`CREATE INDEX rheo_events_metadata ON ` + s + `.rheo_events USING gin (metadata jsonb_path_ops)`,
		`CREATE INDEX rheo_events_payload ON ` + s + `.rheo_events USING gin (payload jsonb_path_ops)`,
		`DELETE FROM ` + s + `.rheo_schema_postgres WHERE version IN (2, 3, 5)`,
	} {
		_, err := be.Pool().Exec(ctx, q)
		require.NoError(t, err, q)
	}
	require.NoError(t, c.Migrate(ctx))
	require.NoError(t, c.Migrate(ctx)) // idempotent

	// Version 5 drops the GIN index again (CreatePayloadIndex makes it).
	require.Equal(t, []string{"rheo_events_id", "rheo_events_key", "rheo_events_pkey", "rheo_events_ts", "rheo_events_type"}, eventIndexes(t, be))
	var colls []string
	rows, err := be.Pool().Query(ctx, `SELECT column_name || ':' || coalesce(collation_name, '') FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'rheo_events' AND column_name IN ('id', 'etype', 'ekey') ORDER BY 1`, s)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		colls = append(colls, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"ekey:C", "etype:C", "id:C"}, colls)
	var payloadType string
	require.NoError(t, be.Pool().QueryRow(ctx, `SELECT data_type FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'rheo_events' AND column_name = 'payload'`, s).Scan(&payloadType))
	require.Equal(t, "text", payloadType, "payloads keep the appended bytes from version 3 on")

	evs, err := c.Query(ctx, rheo.Query{Stream: "s", Metadata: map[string]string{"m": "1"}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	evs, err = c.Query(ctx, rheo.Query{Stream: "s", Payload: map[string]any{"x": 2}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "b", evs[0].Type)
}

// eventIndexes lists the indexes of the backend's events table, sorted.
func eventIndexes(t *testing.T, be interface {
	Pool() *pgxpool.Pool
	Schema() string
}) []string {
	t.Helper()
	rows, err := be.Pool().Query(context.Background(),
		`SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'rheo_events' ORDER BY 1`, be.Schema())
	require.NoError(t, err)
	idx, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return idx
}

// TestPayloadIndexIsOptIn: a migrated schema has no GIN index; payload and
// metadata filters answer the same without it as with it;
// CreatePayloadIndex makes it once, and a later Migrate keeps it.
func TestPayloadIndexIsOptIn(t *testing.T) {
	be := newBackend(t)
	c := rheo.New(be)
	ctx := context.Background()
	require.NotContains(t, eventIndexes(t, be), "rheo_events_json")

	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 3}))
	var msgs []rheo.Message
	for i := range 300 {
		msgs = append(msgs, rheo.Message{
			Metadata: map[string]string{"tenant": fmt.Sprint("t", i%7)},
			Payload:  []byte(fmt.Sprintf(`{"n":%d,"c":{"k":"v%d"},"a":[%d]}`, i, i%5, i%3)),
		})
	}
	_, err := c.AppendBatch(ctx, "s", msgs)
	require.NoError(t, err)
	queries := []rheo.Query{
		{Stream: "s", Metadata: map[string]string{"tenant": "t3"}},
		{Stream: "s", Payload: map[string]any{"c.k": "v2"}},
		{Stream: "s", Payload: map[string]any{"n": 17}},
		{Stream: "s", Payload: map[string]any{"a": 1}}, // an array holding 1 is not 1
		{Stream: "s", Payload: map[string]any{"c.k": "v4"}, Metadata: map[string]string{"tenant": "t1"}, Limit: 5},
	}
	answer := func() [][]int64 {
		var out [][]int64
		for _, q := range queries {
			evs, err := c.Query(ctx, q)
			require.NoError(t, err)
			seqs := make([]int64, len(evs))
			for i, e := range evs {
				seqs[i] = int64(e.Partition)<<32 | e.Sequence
			}
			out = append(out, seqs)
		}
		return out
	}
	without := answer()
	require.NotEmpty(t, without[0])
	require.NotEmpty(t, without[1])
	require.Len(t, without[2], 1)
	require.Empty(t, without[3])

	require.NoError(t, be.CreatePayloadIndex(ctx))
	require.NoError(t, be.CreatePayloadIndex(ctx)) // exists: nothing to do
	require.Contains(t, eventIndexes(t, be), "rheo_events_json")
	require.Equal(t, without, answer())

	require.NoError(t, c.Migrate(ctx))
	require.Contains(t, eventIndexes(t, be), "rheo_events_json", "a later Migrate keeps the index")

	q, err := postgres.PayloadIndexSQL("")
	require.NoError(t, err)
	require.Contains(t, q, `"rheo".rheo_events`)
	_, err = postgres.PayloadIndexSQL("no-such schema")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
}

// TestCreatePayloadIndexRepairsAndTakesTurns: an index left invalid (as a
// cancelled or failed build leaves it; here marked so in the catalog) is
// dropped and built again, and calls from several clients at once, beside
// appends, all succeed (two concurrent builds on one table would deadlock).
func TestCreatePayloadIndexRepairsAndTakesTurns(t *testing.T) {
	be := newBackend(t)
	c := rheo.New(be)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	var msgs []rheo.Message
	for i := range 2000 {
		msgs = append(msgs, rheo.Message{Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	_, err := c.AppendBatch(ctx, "s", msgs)
	require.NoError(t, err)
	valid := func() bool {
		var v bool
		require.NoError(t, be.Pool().QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`,
			be.Schema()+".rheo_events_json").Scan(&v))
		return v
	}

	require.NoError(t, be.CreatePayloadIndex(ctx))
	require.True(t, valid())
	_, err = be.Pool().Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass($1)`, be.Schema()+".rheo_events_json")
	require.NoError(t, err)
	require.False(t, valid())
	require.NoError(t, be.CreatePayloadIndex(ctx))
	require.True(t, valid(), "an invalid index is built again")

	_, err = be.Pool().Exec(ctx, "DROP INDEX "+be.Schema()+".rheo_events_json")
	require.NoError(t, err)
	stop := make(chan struct{})
	appended := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				appended <- nil
				return
			default:
			}
			if _, err := c.Append(ctx, "s", rheo.Message{Payload: []byte(`{"n":-1}`)}); err != nil {
				appended <- err
				return
			}
		}
	}()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			other, err := postgres.New(be.Pool(), postgres.WithSchema(be.Schema()))
			if err != nil {
				errs <- err
				return
			}
			errs <- other.CreatePayloadIndex(ctx)
		}()
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
	close(stop)
	require.NoError(t, <-appended)
	require.True(t, valid())
	evs, err := c.Query(ctx, rheo.Query{Stream: "s", Payload: map[string]any{"n": 1999}})
	require.NoError(t, err)
	require.Len(t, evs, 1)
}
