package memory_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/internal/sample"
	"github.com/rheo-go/rheo/rheotest"
)

func factory(t testing.TB) rheo.Backend {
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	rheotest.RunBackend(t, factory)
}

func TestOpenRegistersMemoryScheme(t *testing.T) {
	ctx := context.Background()
	c, err := rheo.Open(ctx, "memory:")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Ping(ctx))
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	other, err := rheo.Open(ctx, "memory:")
	require.NoError(t, err)
	defer other.Close()
	streams, err := other.ListStreams(ctx)
	require.NoError(t, err)
	require.Empty(t, streams, "each Open is a new, empty store")
}

// The memory DSN takes no path and no parameters: anything after "memory:"
// is refused, not ignored.
func TestOpenRefusesAMemoryDSNWithMore(t *testing.T) {
	for _, dsn := range []string{"memory:foo", "memory:?x=1", "memory://", "memory:?"} {
		_, err := rheo.Open(context.Background(), dsn)
		require.ErrorIs(t, err, rheo.ErrInvalidArgument, dsn)
		require.ErrorContains(t, err, fmt.Sprintf(`DSN %q: the memory store takes no path or parameters; use "memory:"`, dsn))
	}
}

func TestClosedBackendIsUnavailable(t *testing.T) {
	b := memory.New()
	require.NoError(t, b.Close())
	err := b.Ping(context.Background())
	require.ErrorIs(t, err, rheo.ErrBackendUnavailable)
	_, err = b.ListStreams(context.Background())
	require.ErrorIs(t, err, rheo.ErrBackendUnavailable)
}

// TestCompactionBoundsDeliveries checks R9 inside the store: after 10,000
// acks a group keeps only its in-flight window and dead letters.
func TestCompactionBoundsDeliveries(t *testing.T) {
	ctx := context.Background()
	b := memory.New()
	c, clk := rheotest.NewClient(t, func(testing.TB) rheo.Backend { return b })
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 2}))
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	const n = 10000
	batch := make([]rheo.Message, 1000)
	for i := 0; i < n; i += len(batch) {
		_, err := c.AppendBatch(ctx, "s", batch)
		require.NoError(t, err)
	}
	for {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 500})
		require.NoError(t, err)
		if len(ls) == 0 {
			break
		}
		require.NoError(t, c.AckBatch(ctx, ls))
		require.LessOrEqual(t, b.DeliveryCount("s", "g"), 500, "acked deliveries below the frontier are compacted")
	}
	require.Equal(t, 0, b.DeliveryCount("s", "g"))

	// A hole keeps acked records above it until it settles; then they go.
	_, err := c.AppendBatch(ctx, "s", make([]rheo.Message, 100))
	require.NoError(t, err)
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
	require.NoError(t, err)
	require.Len(t, ls, 100)
	require.NoError(t, c.AckBatch(ctx, ls[1:]))
	require.Equal(t, 100, b.DeliveryCount("s", "g"), "records above the hole are kept")
	require.NoError(t, c.Reject(ctx, ls[0], "poison"))
	require.Equal(t, 1, b.DeliveryCount("s", "g"), "only the dead letter remains")

	// Replaying everything and draining again compacts again.
	_, err = c.Replay(ctx, "s", "g", rheo.FromSequence(0))
	require.NoError(t, err)
	clk.Advance(time.Second)
	for {
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1000})
		require.NoError(t, err)
		if len(ls) == 0 {
			break
		}
		require.NoError(t, c.AckBatch(ctx, ls))
	}
	require.Equal(t, 0, b.DeliveryCount("s", "g"))
	lag, err := c.Lag(ctx, "s", "g")
	require.NoError(t, err)
	require.Equal(t, int64(0), lag.Total)
	require.Equal(t, int64(n+100), lag.Partitions[0].HighWatermark)
}

func BenchmarkAppendBatch100(b *testing.B) {
	ctx := context.Background()
	c := rheo.New(memory.New())
	require.NoError(b, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
	ms := make([]rheo.Message, 100)
	for i := range ms {
		ms[i] = rheo.Message{Type: "bench", Key: fmt.Sprintf("k%d", i), Payload: []byte(`{"n":1}`)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.AppendBatch(ctx, "s", ms); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ms))/b.Elapsed().Seconds(), "events/s")
}

// fill appends n events to partition 0 of s in large batches.
func fill(b *testing.B, c *rheo.Client, s string, n int) {
	ctx := context.Background()
	batch := make([]rheo.Message, 10000)
	for i := range batch {
		batch[i] = rheo.Message{Type: "bench", Payload: []byte(`{"n":1}`)}
	}
	for n > 0 {
		k := min(n, len(batch))
		if _, err := c.AppendBatch(ctx, s, batch[:k]); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

func BenchmarkFetch100AckBatch(b *testing.B) {
	ctx := context.Background()
	c := rheo.New(memory.New())
	require.NoError(b, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	require.NoError(b, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	fetchAckLoop(b, c)
}

// BenchmarkFetchOnLongStream measures fetch+ack of 100 events on a group
// whose stream already holds 1k or 1M acked events: R9 says the cost must
// not grow with the stream.
func BenchmarkFetchOnLongStream(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1k", 1000}, {"1M", 1000000}} {
		b.Run(size.name, func(b *testing.B) {
			ctx := context.Background()
			c := rheo.New(memory.New())
			require.NoError(b, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
			require.NoError(b, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
			fill(b, c, "s", size.n)
			for {
				ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: rheo.MaxLimit})
				require.NoError(b, err)
				if len(ls) == 0 {
					break
				}
				require.NoError(b, c.AckBatch(ctx, ls))
			}
			fetchAckLoop(b, c)
		})
	}
}

// fetchAckLoop times Fetch(Limit 100) + AckBatch of 100 fresh events on
// group g of stream s, appending them outside the timer.
func fetchAckLoop(b *testing.B, c *rheo.Client) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		fill(b, c, "s", 100)
		b.StartTimer()
		ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 100})
		if err != nil || len(ls) != 100 {
			b.Fatalf("fetch: %d leases, %v", len(ls), err)
		}
		if err := c.AckBatch(ctx, ls); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}

// The differential test against memory itself checks the driver: two
// identical stores must agree on every step.
func TestDifferential(t *testing.T) {
	rheotest.RunDifferential(t, factory, rheotest.DifferentialOptions{})
}

// BenchmarkAppendFresh is the peers benchmark's memory append: one producer,
// a freshly built ~100-byte JSON payload and a key per message, into a new
// store every 200,000 events.
func BenchmarkAppendFresh(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			ctx := context.Background()
			const perStore = 200000
			var c *rheo.Client
			n := perStore
			ms := make([]rheo.Message, size)
			b.ReportAllocs()
			for b.Loop() {
				if n >= perStore {
					b.StopTimer()
					c = rheo.New(memory.New())
					require.NoError(b, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 4}))
					n = 0
					b.StartTimer()
				}
				for j := range ms {
					ms[j] = rheo.Message{Type: "order.created", Key: strconv.Itoa(n + j), Payload: freshPayload(n + j)}
				}
				if _, err := c.AppendBatch(ctx, "s", ms); err != nil {
					b.Fatal(err)
				}
				n += size
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// freshPayload is the peers benchmark's payload: about 100 bytes, new each time.
func freshPayload(i int) []byte { return sample.Order(make([]byte, 0, 128), i) }

func TestShared(t *testing.T) {
	rheotest.RunShared(t, func(testing.TB) (rheo.Backend, rheo.Backend) {
		b := memory.New()
		return b, b
	})
}
