package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

// countingTracer counts the statements pgx runs on a pool, the appends
// among them, and the statements it prepares.
type countingTracer struct{ n, appends, prepares atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	if isAppend(d.SQL) {
		c.appends.Add(1)
	}
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *countingTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}
func (c *countingTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// isAppend tells the statements of an append (the fast one and the one
// that reads stored IDs back) by the counter update they share.
func isAppend(sql string) bool { return strings.Contains(sql, "SET hwm = p.hwm") }

// poolKinds are the three ways an append runs: prepared (pgx's default
// mode), unnamed (its other modes) and through pgx (a query tracer).
var poolKinds = map[string]func(*pgxpool.Config){
	"prepared": func(*pgxpool.Config) {},
	"unnamed":  func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec },
	"tracer":   func(c *pgxpool.Config) { c.ConnConfig.Tracer = &countingTracer{} },
}

// twoEvents is a batch of two events with keys of their own.
func twoEvents() []rheo.Message {
	return []rheo.Message{{Key: "a", Payload: json.RawMessage(`{}`)}, {Key: "b", Payload: json.RawMessage(`{}`)}}
}

// storedCount counts the events of stream "s" of two partitions.
func storedCount(t *testing.T, c *rheo.Client) int {
	t.Helper()
	n := 0
	for p := range 2 {
		evs, err := c.Read(context.Background(), "s", rheo.ReadOptions{Partition: p, Limit: 100})
		require.NoError(t, err)
		n += len(evs)
	}
	return n
}

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
			traced := tracer.appends.Load()

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
				require.Greater(t, tracer.appends.Load(), traced, "the tracer saw the appends")
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
	cfg, err := pgxpool.ParseConfig(dsn())
	require.NoError(t, err)
	set(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return clientOnPool(t, pool, parts), pool
}

// clientOnPool returns a client over pool on a fresh migrated schema
// holding stream "s" of parts partitions; the backend and schema go at
// cleanup.
func clientOnPool(t *testing.T, pool *pgxpool.Pool, parts int) *rheo.Client {
	t.Helper()
	ctx := context.Background()
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
	return c
}

// preparedAppends counts the append statements prepared on the one
// connection of pool.
func preparedAppends(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%SET hwm = p.hwm%'",
		pgx.QueryExecModeSimpleProtocol).Scan(&n))
	return n
}

// TestAppendFollowsEachConnectionsOwnConfig sets a query tracer, and
// in another pool the simple protocol (as for a transaction pooler), per
// connection in BeforeConnect rather than in the pool's configuration:
// the tracer sees the appends, and the simple-protocol connection holds no
// prepared append statement.
func TestAppendFollowsEachConnectionsOwnConfig(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	tracer := &countingTracer{}
	c, _ := clientOnOwnPool(t, 2, func(c *pgxpool.Config) {
		c.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error { cc.Tracer = tracer; return nil }
	})
	_, err := c.AppendBatch(ctx, "s", twoEvents())
	require.NoError(t, err)
	require.Positive(t, tracer.appends.Load(), "a tracer set in BeforeConnect sees the append")

	c, pool := clientOnOwnPool(t, 2, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			return nil
		}
	})
	for range 3 {
		_, err := c.AppendBatch(ctx, "s", twoEvents())
		require.NoError(t, err)
	}
	require.Zero(t, preparedAppends(t, pool), "a simple-protocol connection keeps no prepared append")
}

// TestAppendKeepsFewStatementsPerConnection appends through the backends
// of more schemas than a connection keeps append statements for, on one
// pool of one connection: it never holds more than WireMaxPrepared of
// them, and the first schema's appends still work once theirs was
// deallocated.
func TestAppendKeepsFewStatementsPerConnection(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	_, pool := clientOnOwnPool(t, 2, func(c *pgxpool.Config) { c.MaxConns = 1 })
	var clients []*rheo.Client
	for range postgres.WireMaxPrepared + 4 {
		clients = append(clients, clientOnPool(t, pool, 2))
	}
	for round := range 2 {
		for i, c := range clients {
			_, err := c.Append(ctx, "s", rheo.Message{Type: "t", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err, "round %d, schema %d", round, i)
			require.LessOrEqual(t, preparedAppends(t, pool), postgres.WireMaxPrepared)
		}
	}
	require.Equal(t, postgres.WireMaxPrepared, preparedAppends(t, pool))
	for _, c := range clients {
		require.Equal(t, 2, storedCount(t, c), "each schema holds its two appends")
	}
}

// TestAppendAfterAResultTypeChange widens a column the append returns
// (rheo_partitions.part to bigint) between appends on one connection:
// every later append succeeds, once, in each kind of pool. Before the
// statement fixed its result types, the fast path stored the events and
// then reported them as not written.
func TestAppendAfterAResultTypeChange(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	for name, set := range poolKinds {
		t.Run(name, func(t *testing.T) {
			c, _ := clientOnOwnPool(t, 2, func(c *pgxpool.Config) { c.MaxConns = 1; set(c) })
			schema := c.Backend().(*postgres.Backend).Schema()
			_, err := c.Append(ctx, "s", rheo.Message{Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			_, err = testPool(t).Exec(ctx, "ALTER TABLE "+schema+".rheo_partitions ALTER COLUMN part TYPE bigint")
			require.NoError(t, err)
			for i := range 3 {
				id := fmt.Sprint("after-", i)
				_, err := c.Append(ctx, "s", rheo.Message{ID: id, Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
				var n int
				require.NoError(t, testPool(t).QueryRow(ctx, "SELECT count(*) FROM "+schema+".rheo_events WHERE id = $1", id).Scan(&n))
				require.Equal(t, 1, n)
			}
		})
	}
}

// TestAppendUnderAShadowedTextType puts a schema with a domain named text
// before pg_catalog on the search_path: the append's parameters are still
// pg_catalog's text, and it succeeds in each kind of pool.
func TestAppendUnderAShadowedTextType(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	shadow := schemaName()
	_, err := testPool(t).Exec(ctx, "CREATE SCHEMA "+shadow+"; CREATE DOMAIN "+shadow+".text AS pg_catalog.text")
	require.NoError(t, err)
	t.Cleanup(func() { teststore.DropSchema(t, testPool(t), shadow) })
	for name, set := range poolKinds {
		t.Run(name, func(t *testing.T) {
			c, _ := clientOnOwnPool(t, 2, func(c *pgxpool.Config) {
				set(c)
				c.ConnConfig.RuntimeParams["search_path"] = shadow + ", pg_catalog"
			})
			evs, err := c.AppendBatch(ctx, "s", twoEvents())
			require.NoError(t, err)
			require.Len(t, evs, 2)
		})
	}
}

// TestAppendFallsBackToPgxWhenTypesDiffer makes the encoding declare other
// parameter types than the server resolves for the prepared append:
// nothing is sent, and the connection runs the append through pgx, which
// succeeds.
func TestAppendFallsBackToPgxWhenTypesDiffer(t *testing.T) {
	testPool(t)
	ctx := context.Background()
	c, _ := clientOnOwnPool(t, 2, func(c *pgxpool.Config) { c.MaxConns = 1 })
	restore := postgres.SetAppendOIDsForTest(func(oids []uint32) { oids[0] = 23 }) // int4 where the server has int8
	t.Cleanup(restore)
	for range 2 {
		evs, err := c.AppendBatch(ctx, "s", twoEvents())
		require.NoError(t, err)
		require.Len(t, evs, 2)
	}
	restore()
	require.Equal(t, 4, storedCount(t, c))
}
