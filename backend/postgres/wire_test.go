package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/postgres"
	"github.com/rheo-go/rheo/internal/teststore"
)

// countingTracer counts the statements pgx runs on a pool.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestAppendOnEveryPoolMode appends the same batches through a pool in each
// of pgx's query modes, and through one with a query tracer (which keeps
// pgx's own encoding): every pool stores the same events, byte for byte,
// and hands back the same sequences. The batches mix partitions,
// metadata, empty payloads, multi-byte text and, in a second append, IDs
// the stream already holds (the path that reads them back).
func TestAppendOnEveryPoolMode(t *testing.T) {
	testPool(t)
	tracer := &countingTracer{}
	modes := []struct {
		name string
		set  func(*pgxpool.Config)
	}{
		{"cache statement (default)", func(*pgxpool.Config) {}},
		{"cache describe", func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe }},
		{"describe exec", func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeDescribeExec }},
		{"exec", func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec }},
		{"simple protocol", func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol }},
		{"query tracer", func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer }},
	}
	batch := func(round int) []rheo.Message {
		var ms []rheo.Message
		for i := range 40 {
			m := rheo.Message{
				ID:      fmt.Sprintf("ev-%d-%02d", round, i),
				Type:    "order.créé",
				Key:     fmt.Sprintf("clé-%d", i%7),
				Payload: json.RawMessage(fmt.Sprintf(`{"i": %d, "text": "naïve \u00e9 %d"}`, i, round)),
			}
			if i%3 == 0 {
				m.Metadata = map[string]string{"trace": fmt.Sprint(i), "ünï": "ç"}
			}
			if i%11 == 0 {
				m.Payload = nil
			}
			ms = append(ms, m)
		}
		return ms
	}
	ctx := context.Background()
	var want [][]rheo.Event
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			c, _ := clientOnOwnPool(t, 3, func(c *pgxpool.Config) { c.MaxConns = 2; mode.set(c) })
			traced := tracer.n.Load()

			first, err := c.AppendBatch(ctx, "s", batch(0))
			require.NoError(t, err)
			// Half of them again, with new ones: the stored half comes
			// back as stored, the new half is appended.
			again := append(batch(0)[20:], batch(1)...)
			second, err := c.AppendBatch(ctx, "s", again)
			require.NoError(t, err)
			require.Equal(t, first[20:], second[:20], "stored IDs come back as first appended")

			var stored []rheo.Event
			for p := range 3 {
				evs, err := c.Read(ctx, "s", rheo.ReadOptions{Partition: p, Limit: 1000})
				require.NoError(t, err)
				stored = append(stored, evs...)
			}
			require.Len(t, stored, 80)
			got := []rheo.Event(nil)
			for _, e := range append(first, second[20:]...) {
				e.Timestamp = e.Timestamp.UTC()
				got = append(got, e)
			}
			for i := range stored {
				stored[i].Timestamp = stored[i].Timestamp.UTC()
			}
			require.ElementsMatch(t, got, stored, "what Append returned is what the stream holds")
			if mode.name == "query tracer" {
				require.Greater(t, tracer.n.Load(), traced, "the tracer saw the appends")
			}
			// Every pool stores the same events: IDs, partitions,
			// sequences, types, keys, payload bytes and metadata.
			for i := range stored {
				stored[i].Timestamp = time.Time{}
			}
			if want == nil {
				want = append(want, stored)
				return
			}
			require.Equal(t, want[0], stored)
		})
	}
}

// TestAppendPreparesAgainAStatementThatIsGone drops the connection's
// prepared statements behind pgx's back (as DISCARD ALL or a pooler reset
// does) between two appends: the second prepares its statement again and
// succeeds.
func TestAppendPreparesAgainAStatementThatIsGone(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	c, pool := clientOnOwnPool(t, 1, func(c *pgxpool.Config) { c.MaxConns = 1 })
	first, err := c.Append(ctx, "s", rheo.Message{Type: "t", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "DEALLOCATE ALL", pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	second, err := c.Append(ctx, "s", rheo.Message{Type: "t", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, first.Sequence+1, second.Sequence)
}

// clientOnOwnPool returns a client over a pool of its own, configured by
// set, on a fresh migrated schema holding stream "s" of parts partitions;
// the pool, backend and schema go at cleanup.
func clientOnOwnPool(t *testing.T, parts int, set func(*pgxpool.Config)) (*rheo.Client, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn())
	require.NoError(t, err)
	set(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := schemaName()
	b, err := postgres.New(pool, postgres.WithSchema(schema))
	require.NoError(t, err)
	t.Cleanup(func() {
		b.Close()
		teststore.DropSchema(t, testPool(t), schema)
	})
	c := rheo.New(b)
	require.NoError(t, c.Migrate(ctx))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: parts}))
	return c, pool
}
