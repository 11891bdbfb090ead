package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/internal/testserver"
	"github.com/rheo-go/rheo/rheotest"
)

// dropClusterKeys deletes every key under prefix on every primary.
func dropClusterKeys(t testing.TB, cc *goredis.ClusterClient, prefix string) {
	_ = cc.ForEachMaster(context.Background(), func(ctx context.Context, m *goredis.Client) error {
		dropKeys(t, m, prefix)
		return nil
	})
}

// TestClusterConformance runs the whole conformance suite through the
// cluster client, then checks the suite's streams were spread over all
// three primaries.
func TestClusterConformance(t *testing.T) {
	cl := testserver.StartCluster(t)
	cc := cl.Client(t)
	var mu sync.Mutex
	perPrimary := map[string]int{}
	rheotest.RunBackend(t, func(t testing.TB) rheo.Backend {
		prefix := uniquePrefix()
		b := mustNew(t, cc, redis.WithKeyPrefix(prefix))
		require.NoError(t, b.Migrate(context.Background()))
		t.Cleanup(func() {
			_ = b.Close()
			counts := map[string]int{}
			_ = cc.ForEachMaster(context.Background(), func(ctx context.Context, m *goredis.Client) error {
				keys, _, err := m.Scan(ctx, 0, prefix+"{*}:meta", 100000).Result()
				if err == nil {
					mu.Lock()
					counts[m.Options().Addr] = len(keys)
					mu.Unlock()
				}
				return nil
			})
			mu.Lock()
			for a, n := range counts {
				perPrimary[a] += n
			}
			mu.Unlock()
			dropClusterKeys(t, cc, prefix)
		})
		return b
	})
	require.Len(t, perPrimary, 3, "streams per primary: %v", perPrimary)
	for a, n := range perPrimary {
		require.Positive(t, n, "primary %s held no stream (all: %v)", a, perPrimary)
	}
	t.Logf("streams created per primary: %v", perPrimary)
}

// TestClusterKeysSpread checks, independently of the suite, that streams
// land on every primary and each stream's keys share one slot.
func TestClusterKeysSpread(t *testing.T) {
	cl := testserver.StartCluster(t)
	cc := cl.Client(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	t.Cleanup(func() { dropClusterKeys(t, cc, prefix) })
	c := rheo.New(mustNew(t, cc, redis.WithKeyPrefix(prefix)))
	require.NoError(t, c.Migrate(ctx))
	holders := map[*testserver.ClusterNode]int{}
	for i := range 30 {
		s := fmt.Sprintf("spread-%d", i)
		require.NoError(t, c.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 2}))
		require.NoError(t, c.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))
		_, err := c.Append(ctx, s, rheo.Message{Key: "k"})
		require.NoError(t, err)
		holders[cl.PrimaryOf(t, cc, prefix+"{"+s+"}:meta")]++
	}
	require.Len(t, holders, 3, "30 streams should land on all three primaries")
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		keys, _, err := m.Scan(ctx, 0, prefix+"{*", 100000).Result()
		require.NoError(t, err)
		for _, k := range keys {
			slot, err := m.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			tag := k[strings.Index(k, "{") : strings.Index(k, "}")+1]
			want, err := m.ClusterKeySlot(ctx, prefix+tag+":meta").Result()
			require.NoError(t, err)
			require.Equal(t, want, slot, "key %s", k)
		}
		return nil
	})
}
