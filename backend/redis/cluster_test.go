package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/redis"
	"github.com/rheo-go/rheo/rheotest"
)

// cluster is a Redis Cluster of the test's own: 3 primaries and 3
// replicas on free loopback ports, each node in a temp dir, stopped when
// the test ends.
type cluster struct {
	t     testing.TB
	bin   string
	nodes []*clusterNode
}

type clusterNode struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func (n *clusterNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// clusterPort returns a port p such that p and its cluster bus port
// p+10000 are both free now. Both lie below the kernel's ephemeral range
// (32768 and up here), so no outgoing connection of a busy machine can take
// them before the server binds them.
func clusterPort(t testing.TB, taken map[int]bool) int {
	for range 1000 {
		p := 10000 + rand.IntN(12700)
		if taken[p] || taken[p+10000] {
			continue
		}
		ok := true
		for _, q := range []int{p, p + 10000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			taken[p], taken[p+10000] = true, true
			return p
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

func needBinary(t testing.TB, name string) string {
	bin, err := exec.LookPath(name)
	if err != nil {
		msg := strings.ToUpper(name) + " BINARY NOT FOUND: the cluster tests need it on PATH"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	return bin
}

// startCluster starts 6 nodes and joins them as 3 primaries with one
// replica each. extra arguments go to every redis-server.
func startCluster(t testing.TB, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: needBinary(t, "redis-server")}
	cli := needBinary(t, "redis-cli")
	taken := map[int]bool{}
	root := t.TempDir()
	for i := range 6 {
		n := &clusterNode{port: clusterPort(t, taken), dir: filepath.Join(root, strconv.Itoa(i))}
		require.NoError(t, os.MkdirAll(n.dir, 0o755))
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(c.stop)
	for _, n := range c.nodes {
		c.start(n, extra...)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	c.waitHealthy(3)
	return c
}

func (c *cluster) start(n *clusterNode, extra ...string) {
	c.t.Helper()
	args := append([]string{"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1500", "--save", "", "--appendonly", "no",
		"--dir", n.dir, "--logfile", "redis.log"}, extra...)
	n.cmd = exec.Command(c.bin, args...)
	require.NoError(c.t, n.cmd.Start())
	rc := goredis.NewClient(&goredis.Options{Addr: n.addr(), MaxRetries: -1})
	defer rc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for rc.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			require.FailNow(c.t, "redis-server did not start", "port %d; its log:\n%s", n.port, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		if n.cmd != nil {
			_ = n.cmd.Process.Kill()
			_ = n.cmd.Wait()
			n.cmd = nil
		}
	}
}

// kill9 kills one node without letting it shut down.
func (c *cluster) kill9(n *clusterNode) {
	require.NoError(c.t, n.cmd.Process.Signal(syscall.SIGKILL))
	_ = n.cmd.Wait()
	n.cmd = nil
}

// waitHealthy waits until every live node reports cluster_state:ok, the
// slots are all served, and there are want primaries with their slots.
func (c *cluster) waitHealthy(want int) {
	c.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := true
		for _, n := range c.nodes {
			if n.cmd == nil {
				continue
			}
			rc := goredis.NewClient(&goredis.Options{Addr: n.addr(), MaxRetries: -1})
			info, err := rc.ClusterInfo(ctx).Result()
			if repl, rerr := rc.Info(ctx, "replication").Result(); rerr != nil ||
				strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				ok = false // a replica still syncing
			}
			masters := 0
			if err == nil {
				if shards, err := rc.ClusterSlots(ctx).Result(); err == nil {
					seen := map[string]bool{}
					for _, s := range shards {
						seen[s.Nodes[0].Addr] = true
					}
					masters = len(seen)
				}
			}
			rc.Close()
			if !ok || err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") || masters != want {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		require.True(c.t, time.Now().Before(deadline), "the cluster did not become healthy")
		time.Sleep(100 * time.Millisecond)
	}
}

// client returns a cluster client, closed when the test ends.
func (c *cluster) client(t testing.TB) *goredis.ClusterClient {
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.addr())
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRedirects: 16,
		ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	require.NoError(t, cc.ForEachShard(context.Background(), func(ctx context.Context, s *goredis.Client) error {
		return s.Ping(ctx).Err()
	}))
	return cc
}

// primaryOf returns the node serving key's slot.
func (c *cluster) primaryOf(t testing.TB, cc *goredis.ClusterClient, key string) *clusterNode {
	m, err := cc.MasterForKey(context.Background(), key)
	require.NoError(t, err)
	for _, n := range c.nodes {
		if n.addr() == m.Options().Addr {
			return n
		}
	}
	t.Fatalf("no node at %s", m.Options().Addr)
	return nil
}

// replicaOf returns the live replica of primary p.
func (c *cluster) replicaOf(t testing.TB, p *clusterNode) *clusterNode {
	ctx := context.Background()
	rc := goredis.NewClient(&goredis.Options{Addr: p.addr()})
	defer rc.Close()
	id, err := rc.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	for _, n := range c.nodes {
		if n == p || n.cmd == nil {
			continue
		}
		nc := goredis.NewClient(&goredis.Options{Addr: n.addr()})
		info, err := nc.Do(ctx, "CLUSTER", "NODES").Text()
		nc.Close()
		require.NoError(t, err)
		for line := range strings.SplitSeq(info, "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && strings.Contains(f[2], "myself") && strings.Contains(f[2], "slave") && f[3] == id {
				return n
			}
		}
	}
	t.Fatalf("primary %s has no live replica", p.addr())
	return nil
}

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
	cl := startCluster(t)
	cc := cl.client(t)
	var mu sync.Mutex
	perPrimary := map[string]int{}
	rheotest.RunBackend(t, func(t testing.TB) rheo.Backend {
		prefix := uniquePrefix()
		b := redis.New(cc, redis.WithKeyPrefix(prefix))
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
	cl := startCluster(t)
	cc := cl.client(t)
	ctx := context.Background()
	prefix := uniquePrefix()
	t.Cleanup(func() { dropClusterKeys(t, cc, prefix) })
	c := rheo.New(redis.New(cc, redis.WithKeyPrefix(prefix)))
	require.NoError(t, c.Migrate(ctx))
	holders := map[*clusterNode]int{}
	for i := range 30 {
		s := fmt.Sprintf("spread-%d", i)
		require.NoError(t, c.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 2}))
		require.NoError(t, c.CreateGroup(ctx, s, "g", rheo.GroupConfig{}))
		_, err := c.Append(ctx, s, rheo.Message{Key: "k"})
		require.NoError(t, err)
		holders[cl.primaryOf(t, cc, prefix+"{"+s+"}:meta")]++
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
