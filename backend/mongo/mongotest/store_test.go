package mongotest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/rheo-go/rheo"
	rmongo "github.com/rheo-go/rheo/backend/mongo"
	"github.com/rheo-go/rheo/clock"
)

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	ctx := context.Background()
	db := srv.Database(t, client)
	b, err := rmongo.New(client, db)
	require.NoError(t, err)
	_, err = b.SchemaVersion(ctx)
	require.ErrorIs(t, err, rheo.ErrUnsupported, "no version before Migrate")

	// Eight migrations race on an empty database.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			b, err := rmongo.New(client, db)
			if err == nil {
				err = b.Migrate(ctx)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	v, err := b.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, rmongo.SchemaVersion, v)

	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	_, err = c.Append(ctx, "s", rheo.Message{ID: "e1", Payload: []byte(`{"a":1}`)})
	require.NoError(t, err)
	// Migrating again keeps the data.
	require.NoError(t, b.Migrate(ctx))
	evs, err := b.Read(ctx, "s", 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, `{"a":1}`, string(evs[0].Payload))
	idx, err := b.Database().Collection("rheo_groups").Indexes().List(ctx)
	require.NoError(t, err)
	var specs []bson.M
	require.NoError(t, idx.All(ctx, &specs))
	require.Len(t, specs, 2, "the _id index and the one on the stream name, once: %v", specs)
}

func TestOpenDSN(t *testing.T) {
	ctx := context.Background()
	dsn := dsnFor(srv.URI, srv.Database(t, client))
	c, err := rheo.Open(ctx, dsn)
	require.NoError(t, err)
	require.NoError(t, c.Ping(ctx))
	require.NoError(t, c.Close())

	for _, bad := range []string{
		dsnFor(srv.URI, ""),                              // no database
		"mongodb://127.0.0.1:1/a.b",                      // bad database name
		"mongodb://127.0.0.1:1/db?connectTimeoutMS=soon", // the driver rejects the option
	} {
		_, err := rheo.Open(ctx, bad)
		require.ErrorIs(t, err, rheo.ErrInvalidArgument, bad)
	}
	// A DSN that does not parse is refused without its password in the error.
	for _, bad := range []string{
		"mongodb://u:Pw0rd Mark@127.0.0.1:x/db",                   // the port does not parse
		"mongodb://u:Pw0rdMark@127.0.0.1:1/db?connectTimeoutMS=x", // the driver rejects the option
		"mongodb://u:Pw0rd@Mark@127.0.0.1:1",                      // an unencoded '@', no database
		"mongodb://u:Pw0rd%zzMark@127.0.0.1:1/db",                 // a bad escape in the password
	} {
		_, err := rheo.Open(ctx, bad)
		require.ErrorIs(t, err, rheo.ErrInvalidArgument, bad)
		require.NotContains(t, err.Error(), "Pw0rd", bad)
		require.NotContains(t, err.Error(), "Mark", bad)
	}
	_, err = rmongo.New(nil, "db")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
	_, err = rmongo.New(client, "")
	require.ErrorIs(t, err, rheo.ErrInvalidArgument)
}

// TestNewBorrowsTheClient: Close of a backend made by New leaves the
// caller's client connected.
func TestNewBorrowsTheClient(t *testing.T) {
	ctx := context.Background()
	b, err := rmongo.New(client, srv.Database(t, client))
	require.NoError(t, err)
	require.NoError(t, b.Migrate(ctx))
	require.NoError(t, b.Close())
	require.NoError(t, client.Ping(ctx, nil))
}

// TestAppendRaceIsAllOrNothing: appenders racing on one stream, with
// batches spread over every partition, leave contiguous sequences, every
// batch's events in one run per partition, and commit order equal to
// sequence order (each batch's sequences above every earlier batch's).
func TestAppendRaceIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	b := open(t)
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 3}))
	const writers, batches, size = 6, 8, 5
	var wg sync.WaitGroup
	results := make(chan []rheo.Event, writers*batches)
	for w := range writers {
		wg.Go(func() {
			for i := range batches {
				ms := make([]rheo.Message, size)
				for j := range ms {
					ms[j] = rheo.Message{ID: fmt.Sprintf("w%d-b%d-%d", w, i, j), Partition: new(j % 3), Payload: []byte(`{}`)}
				}
				evs, err := c.AppendBatch(ctx, "s", ms)
				if err != nil {
					t.Error(err)
					return
				}
				results <- evs
			}
		})
	}
	wg.Wait()
	close(results)
	seen := map[int]map[int64]string{}
	for evs := range results {
		for _, e := range evs {
			if seen[e.Partition] == nil {
				seen[e.Partition] = map[int64]string{}
			}
			require.Empty(t, seen[e.Partition][e.Sequence], "sequence %d/%d assigned twice", e.Partition, e.Sequence)
			seen[e.Partition][e.Sequence] = e.ID
		}
	}
	st, err := b.Stream(ctx, "s")
	require.NoError(t, err)
	total := 0
	for p, hw := range st.HighWatermarks {
		require.Len(t, seen[p], int(hw), "partition %d: contiguous 1..hw", p)
		evs, err := c.Read(ctx, "s", rheo.ReadOptions{Partition: p, Limit: 10000})
		require.NoError(t, err)
		for i, e := range evs {
			require.Equal(t, int64(i+1), e.Sequence)
			require.Equal(t, seen[p][e.Sequence], e.ID)
		}
		total += len(evs)
	}
	require.Equal(t, writers*batches*size, total)
}

// hotPathFilters records the filter of every find the backend sends.
type hotPathFilters struct {
	mu      sync.Mutex
	filters []bson.Raw
	other   []string
}

func (h *hotPathFilters) started(_ context.Context, e *event.CommandStartedEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.CommandName {
	case "find":
		h.filters = append(h.filters, e.Command.Lookup("filter").Document())
	case "update":
		vals, _ := e.Command.Lookup("updates").Array().Values()
		for _, u := range vals {
			h.filters = append(h.filters, u.Document().Lookup("q").Document())
		}
	case "insert", "ping", "endSessions":
	default:
		h.other = append(h.other, e.CommandName)
	}
}

func (h *hotPathFilters) take() ([]bson.Raw, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, o := h.filters, h.other
	h.filters, h.other = nil, nil
	return f, o
}

// TestHotPathsUseOnlyIDLookups: Fetch, Settle (ack, nack, release), Renew
// and Lag send no query but point lookups {_id: <string>} (and inserts), so
// none can scan a collection; and the server answers that shape from its
// _id index (FerretDB: filter pushed down; under its PostgreSQL handler, an
// index scan; MongoDB: no COLLSCAN).
func TestHotPathsUseOnlyIDLookups(t *testing.T) {
	ctx := context.Background()
	rec := &hotPathFilters{}
	mc, err := mongo.Connect(options.Client().ApplyURI(srv.URI).SetMonitor(&event.CommandMonitor{Started: rec.started}))
	require.NoError(t, err)
	defer mc.Disconnect(ctx)
	db := srv.Database(t, client)
	b, err := rmongo.New(mc, db)
	require.NoError(t, err)
	require.NoError(t, b.Migrate(ctx))
	require.NoError(t, srv.IndexIDs(ctx, db))
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := rheo.New(b, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	ms := make([]rheo.Message, 40)
	for i := range ms {
		ms[i] = rheo.Message{Key: fmt.Sprint(i), Payload: []byte(`{}`)}
	}
	_, err = c.AppendBatch(ctx, "s", ms)
	require.NoError(t, err)
	rec.take()

	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, ls, 10)
	_, err = c.Renew(ctx, ls[0], time.Minute)
	require.NoError(t, err)
	require.NoError(t, c.Ack(ctx, ls[0]))
	require.NoError(t, c.Nack(ctx, ls[1], "retry"))
	require.NoError(t, c.Release(ctx, ls[2]))
	_, err = c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	filters, other := rec.take()
	require.Empty(t, other, "commands besides find, update and insert")
	require.NotEmpty(t, filters)
	for _, f := range filters {
		elems, err := f.Elements()
		require.NoError(t, err)
		require.Len(t, elems, 1, "filter %s", f)
		require.Equal(t, "_id", elems[0].Key(), "filter %s", f)
		require.Equal(t, bson.TypeString, elems[0].Value().Type, "filter %s", f)
	}

	// The server answers such a filter from its _id index.
	var res bson.M
	require.NoError(t, b.Database().RunCommand(ctx, bson.D{
		{Key: "explain", Value: bson.D{{Key: "find", Value: "rheo_states"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: "x"}}}}},
	}).Decode(&res))
	plan := fmt.Sprint(res["queryPlanner"])
	if pd, ok := res["filterPushdown"]; ok { // FerretDB
		require.Equal(t, true, pd, "FerretDB pushes an _id filter down: %v", res)
		if srv.pg != nil { // its PostgreSQL handler, with the index IndexIDs adds
			require.NotContains(t, plan, "Seq Scan", plan)
			require.Contains(t, plan, "Index Scan", plan)
		}
	} else { // MongoDB
		require.NotContains(t, plan, "COLLSCAN", plan)
	}
}

// TestSettleRefusesUnknownKind: a settle request of a kind the backend does
// not know is refused with ErrInvalidArgument before anything is written,
// and leaves its lease as it was; the other requests of its batch apply.
func TestSettleRefusesUnknownKind(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var writes []string
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "insert" || e.CommandName == "update" || e.CommandName == "delete" {
			mu.Lock()
			writes = append(writes, e.CommandName)
			mu.Unlock()
		}
	}}
	mc, err := mongo.Connect(options.Client().ApplyURI(srv.URI).SetMonitor(mon))
	require.NoError(t, err)
	defer mc.Disconnect(ctx)
	b, err := rmongo.New(mc, srv.Database(t, client))
	require.NoError(t, err)
	require.NoError(t, b.Migrate(ctx))
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := rheo.New(b, rheo.WithClock(clk))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	_, err = c.AppendBatch(ctx, "s", []rheo.Message{{Payload: []byte(`{}`)}, {Payload: []byte(`{}`)}})
	require.NoError(t, err)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 2})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	takeWrites := func() []string {
		mu.Lock()
		defer mu.Unlock()
		w := writes
		writes = nil
		return w
	}
	takeWrites()

	for _, k := range []rheo.SettleKind{0, rheo.SettleRelease + 1, -1} {
		errs, err := b.Settle(ctx, "s", "g", []rheo.SettleRequest{{Kind: k, Lease: ls[0]}}, clk.Now())
		require.NoError(t, err)
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], rheo.ErrInvalidArgument, "kind %d", k)
		require.Empty(t, takeWrites(), "kind %d: nothing written", k)
	}
	errs, err := b.Settle(ctx, "s", "g", []rheo.SettleRequest{
		{Kind: rheo.SettleKind(99), Lease: ls[0]}, {Kind: rheo.SettleAck, Lease: ls[1]},
	}, clk.Now())
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], rheo.ErrInvalidArgument)
	require.NoError(t, errs[1], "the known request of the batch applies")
	gi, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.Equal(t, int64(1), gi.Inflight, "the refused request left its lease")
	require.NoError(t, c.Ack(ctx, ls[0]))
}
