package testserver

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of one test: 3 primaries and 3 replicas on
// free low loopback ports, each node in a temp dir, stopped when the test
// ends.
type Cluster struct {
	t     testing.TB
	bin   string
	Nodes []*ClusterNode
}

// ClusterNode is one redis-server of a Cluster.
type ClusterNode struct {
	Port int
	dir  string
	cmd  *exec.Cmd
}

// Addr is the node's host:port.
func (n *ClusterNode) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// Running reports whether the node's process runs (it was not killed).
func (n *ClusterNode) Running() bool { return n.cmd != nil }

// PortPair returns a port p such that p and its cluster bus port p+10000
// are both free now, below the ephemeral range, and not in taken (which it
// extends).
func PortPair(t testing.TB, taken map[int]bool) int {
	t.Helper()
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

// NeedBinary returns the path of a binary on PATH, or skips loudly (fails
// under CI=true).
func NeedBinary(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		SkipOrFail(t, "%s BINARY NOT FOUND: a private Redis Cluster needs it on PATH", strings.ToUpper(name))
	}
	return bin
}

// StartCluster starts 6 nodes and joins them as 3 primaries with one
// replica each. extra arguments go to every redis-server.
func StartCluster(t testing.TB, extra ...string) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: NeedBinary(t, "redis-server")}
	cli := NeedBinary(t, "redis-cli")
	taken := map[int]bool{}
	root := t.TempDir()
	for i := range 6 {
		n := &ClusterNode{Port: PortPair(t, taken), dir: filepath.Join(root, strconv.Itoa(i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	t.Cleanup(c.stop)
	for _, n := range c.Nodes {
		c.start(n, extra...)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	c.WaitHealthy(3)
	return c
}

func (c *Cluster) start(n *ClusterNode, extra ...string) {
	c.t.Helper()
	// Node timeout 3 s: at 1.5 s a node starved of CPU on a loaded 2-core
	// machine could be taken for dead, and the cluster failed a primary
	// over by itself in the middle of a test.
	args := append([]string{"--port", strconv.Itoa(n.Port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000", "--save", "", "--appendonly", "no",
		"--dir", n.dir, "--logfile", "redis.log"}, extra...)
	n.cmd = exec.Command(c.bin, args...)
	if err := n.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: n.Addr(), MaxRetries: -1})
	defer rc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for rc.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			c.t.Fatalf("redis-server did not start on port %d; its log:\n%s", n.Port, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) stop() {
	for _, n := range c.Nodes {
		if n.cmd != nil {
			_ = n.cmd.Process.Kill()
			_ = n.cmd.Wait()
			n.cmd = nil
		}
	}
}

// Kill9 kills one node without letting it shut down.
func (c *Cluster) Kill9(n *ClusterNode) {
	c.t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	_ = n.cmd.Wait()
	n.cmd = nil
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// Healthy reports whether every live node reports cluster_state:ok, the
// slots are all served, no replica is still syncing, and there are want
// primaries with their slots.
func (c *Cluster) Healthy(want int) bool {
	ctx := context.Background()
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		rc := goredis.NewClient(&goredis.Options{Addr: n.Addr(), MaxRetries: -1})
		info, err := rc.ClusterInfo(ctx).Result()
		ok := true
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
			return false
		}
	}
	return true
}

// WaitHealthy waits up to a minute until Healthy(want).
func (c *Cluster) WaitHealthy(want int) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !c.Healthy(want) {
		if time.Now().After(deadline) {
			c.t.Fatal("the cluster did not become healthy")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), MaxRedirects: 16,
		ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	if err := cc.ForEachShard(context.Background(), func(ctx context.Context, s *goredis.Client) error {
		return s.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	return cc
}

// PrimaryOf returns the node serving key's slot.
func (c *Cluster) PrimaryOf(t testing.TB, cc *goredis.ClusterClient, key string) *ClusterNode {
	t.Helper()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n.Addr() == m.Options().Addr {
			return n
		}
	}
	t.Fatalf("no node at %s", m.Options().Addr)
	return nil
}

// ReplicaOf returns the live replica of primary p.
func (c *Cluster) ReplicaOf(t testing.TB, p *ClusterNode) *ClusterNode {
	t.Helper()
	ctx := context.Background()
	rc := goredis.NewClient(&goredis.Options{Addr: p.Addr()})
	defer rc.Close()
	id, err := rc.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n == p || n.cmd == nil {
			continue
		}
		nc := goredis.NewClient(&goredis.Options{Addr: n.Addr()})
		info, err := nc.Do(ctx, "CLUSTER", "NODES").Text()
		nc.Close()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && strings.Contains(f[2], "myself") && strings.Contains(f[2], "slave") && f[3] == id {
				return n
			}
		}
	}
	t.Fatalf("primary %s has no live replica", p.Addr())
	return nil
}
