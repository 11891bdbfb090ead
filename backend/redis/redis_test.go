package redis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/rheotest"
)

// testURL is the server the tests use: RHEO_TEST_REDIS or the local one.
func testURL() string {
	if u := os.Getenv("RHEO_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

var (
	reachOnce sync.Once
	reachErr  error
)

// testClient connects to the test server, skipping the test loudly when it
// is unreachable (failing under CI=true). The server is checked once per
// package run, so an unreachable one is reported in seconds.
func testClient(t testing.TB) goredis.UniversalClient {
	t.Helper()
	o, err := goredis.ParseURL(testURL())
	require.NoError(t, err)
	reachOnce.Do(func() {
		c := goredis.NewClient(o)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		reachErr = c.Ping(ctx).Err()
	})
	if reachErr != nil {
		msg := fmt.Sprintf("REDIS NOT REACHABLE at %s (set RHEO_TEST_REDIS): %v", testURL(), reachErr)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixSeq atomic.Int64

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix() string {
	return fmt.Sprintf("rheotest:%d:%d:%06x:", os.Getpid(), prefixSeq.Add(1), rand.Uint32()&0xffffff)
}

// dropKeys deletes every key under prefix.
func dropKeys(t testing.TB, c goredis.UniversalClient, prefix string) {
	ctx := context.Background()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			t.Logf("cleanup of %s: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			c.Unlink(ctx, keys...)
		}
		if next == 0 {
			return
		}
		cursor = next
	}
}

// mustNew is redis.New for options the test knows New accepts.
func mustNew(t testing.TB, c goredis.UniversalClient, opts ...redis.Option) *redis.Backend {
	t.Helper()
	b, err := redis.New(c, opts...)
	require.NoError(t, err)
	return b
}

// newBackend returns a migrated backend over a fresh key prefix whose keys
// are deleted when the test ends.
func newBackend(t testing.TB, opts ...redis.Option) (*redis.Backend, goredis.UniversalClient) {
	t.Helper()
	c := testClient(t)
	prefix := uniquePrefix()
	b := mustNew(t, c, append([]redis.Option{redis.WithKeyPrefix(prefix)}, opts...)...)
	require.NoError(t, b.Migrate(context.Background()))
	t.Cleanup(func() {
		_ = b.Close()
		dropKeys(t, c, prefix)
	})
	return b, c
}

func TestConformance(t *testing.T) {
	rheotest.RunBackend(t, func(t testing.TB) rheo.Backend {
		b, _ := newBackend(t)
		return b
	})
}

// Append sends events grouped by partition; the results must still come
// back in input order, with stored IDs answered by their stored events and
// only the new ones taking sequences, contiguous per partition.
func TestAppendMixedPartitionsAndStoredIDs(t *testing.T) {
	b, _ := newBackend(t)
	c := rheo.New(b)
	ctx := context.Background()
	require.NoError(t, c.CreateStream(ctx, "mix", rheo.StreamConfig{Partitions: 3}))
	p := func(i int) *int { return &i }
	msg := func(id string, part int) rheo.Message {
		return rheo.Message{ID: id, Partition: p(part), Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id))}
	}
	first, err := c.AppendBatch(ctx, "mix", []rheo.Message{msg("a", 2), msg("b", 0)})
	require.NoError(t, err)
	got, err := c.AppendBatch(ctx, "mix", []rheo.Message{
		msg("c", 1), msg("a", 0), msg("d", 2), msg("e", 1), msg("b", 1), msg("f", 2), msg("g", 0),
	})
	require.NoError(t, err)
	type ps struct {
		id        string
		partition int
		seq       int64
	}
	var seen []ps
	for _, e := range got {
		seen = append(seen, ps{e.ID, e.Partition, e.Sequence})
		require.JSONEq(t, fmt.Sprintf(`{"id":%q}`, e.ID), string(e.Payload))
	}
	require.Equal(t, []ps{
		{"c", 1, 1}, {"a", 2, 1}, {"d", 2, 2}, {"e", 1, 2}, {"b", 0, 1}, {"f", 2, 3}, {"g", 0, 2},
	}, seen)
	require.Equal(t, first[0].Timestamp, got[1].Timestamp, "a stored event comes back as stored")
	st, err := b.Stream(ctx, "mix")
	require.NoError(t, err)
	require.Equal(t, []int64{2, 2, 3}, st.HighWatermarks)
	evs, err := b.Events(ctx, "mix", []string{"a", "e", "g"})
	require.NoError(t, err)
	require.Len(t, evs, 3)
}

func TestDifferential(t *testing.T) {
	rheotest.RunDifferential(t, func(t testing.TB) rheo.Backend {
		b, _ := newBackend(t)
		return b
	}, rheotest.DifferentialOptions{
		// Round trips make a step slow here: fewer seeds keep the default
		// run short; RHEO_DIFF_SEEDS and RHEO_DIFF_STEPS run long ones.
		Seeds: 4,
	})
}

// TestDifferentialWide runs the differential test on streams of 40
// partitions: fetches from many partitions, few of which have work, take
// paths of their own (cursors with new events only, runs of idle
// partitions read at once).
func TestDifferentialWide(t *testing.T) {
	rheotest.RunDifferential(t, func(t testing.TB) rheo.Backend {
		b, _ := newBackend(t)
		return b
	}, rheotest.DifferentialOptions{
		Seeds: 2, Partitions: 40,
	})
}

func TestShared(t *testing.T) {
	rheotest.RunShared(t, func(t testing.TB) (rheo.Backend, rheo.Backend) {
		a, c := newBackend(t)
		b := mustNew(t, c, redis.WithKeyPrefix(a.KeyPrefix()))
		t.Cleanup(func() { _ = b.Close() })
		return a, b
	})
}
