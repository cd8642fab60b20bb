package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSlots is the number of hash slots in a Redis Cluster.
	clusterSlots = 16384
	// clusterTimeout bounds the wait for a new cluster to become healthy.
	// Masters hold cluster_state:fail for about 2s after start on purpose
	// (CLUSTER_WRITABLE_DELAY), so this is well above that.
	clusterTimeout = 30 * time.Second
	// commandTimeout bounds each setup command sent by the helpers.
	commandTimeout = 5 * time.Second
)

// Cluster is a Redis Cluster of masters only, each a Server on loopback.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts n (at least 3) masters with cluster-enabled yes on free
// loopback ports, assigns the 16384 slots to them in even ranges, joins them
// with CLUSTER MEET, and returns once every node reports cluster_state:ok and
// knows all n nodes and all slots (bounded by 30s). The nodes are killed in
// t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("start cluster: need at least 3 masters, got %d", n)
	}
	c := &Cluster{nodes: make([]*Server, n)}
	for i := range c.nodes {
		c.nodes[i] = start(t, modeCluster, nil, nil)
	}

	admins := make([]*redis.Client, n)
	for i, node := range c.nodes {
		admins[i] = redis.NewClient(&redis.Options{Addr: node.Addr(), MaxRetries: -1})
		defer admins[i].Close()
	}
	do := func(i int, args ...any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		if err := admins[i].Do(ctx, args...).Err(); err != nil {
			t.Fatalf("start cluster: %v on %s: %v", args, c.nodes[i].Addr(), err)
		}
	}
	for i := range c.nodes {
		// Distinct epochs up front spare the nodes the collision handling
		// that would otherwise run once they meet (redis-cli does the same).
		do(i, "CLUSTER", "SET-CONFIG-EPOCH", i+1)
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		do(i, "CLUSTER", "ADDSLOTSRANGE", lo, hi)
	}
	for i := 1; i < n; i++ {
		node := c.nodes[i]
		node.mu.Lock()
		port, bus := node.port, node.busPort
		node.mu.Unlock()
		// The bus port must be given: it is not port+10000 here.
		do(0, "CLUSTER", "MEET", "127.0.0.1", port, bus)
	}

	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_known_nodes":    strconv.Itoa(n),
	}
	waitFor(t, clusterTimeout, "cluster healthy on every node", func(ctx context.Context) error {
		for i, a := range admins {
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("cluster info on %s: %w", c.nodes[i].Addr(), err)
			}
			for k, v := range want {
				if got := infoField(info, k); got != v {
					return fmt.Errorf("%s on %s is %q, want %q", k, c.nodes[i].Addr(), got, v)
				}
			}
		}
		return nil
	})
	// cluster_state:ok does not mean the cluster bus links are up, and a
	// PUBLISH reaches other nodes only over them: wait until every node sees
	// every other as connected and a message published on any node reaches
	// subscribers on every node.
	waitFor(t, clusterTimeout, "cluster bus connected and relaying PUBLISH", func(ctx context.Context) error {
		for i, a := range admins {
			nodes, err := a.ClusterNodes(ctx).Result()
			if err != nil {
				return fmt.Errorf("cluster nodes on %s: %w", c.nodes[i].Addr(), err)
			}
			for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
				f := strings.Fields(line)
				if len(f) < 8 || f[7] != "connected" || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "fail") {
					return fmt.Errorf("node %s sees %q", c.nodes[i].Addr(), line)
				}
			}
		}
		return probePublish(ctx, admins)
	})
	return c
}

// probePublish checks that a message published on each node reaches a
// subscriber on every node.
func probePublish(ctx context.Context, admins []*redis.Client) error {
	const channel = "redistest:probe"
	subs := make([]*redis.PubSub, len(admins))
	defer func() {
		for _, ps := range subs {
			if ps != nil {
				_ = ps.Close()
			}
		}
	}()
	for j, a := range admins {
		subs[j] = a.Subscribe(ctx, channel)
		if _, err := subs[j].ReceiveTimeout(ctx, time.Second); err != nil { // the subscribe confirmation
			return fmt.Errorf("probe subscribe: %w", err)
		}
	}
	for i, a := range admins {
		msg := fmt.Sprintf("from-%d", i)
		if err := a.Publish(ctx, channel, msg).Err(); err != nil {
			return fmt.Errorf("probe publish: %w", err)
		}
		for j, ps := range subs {
			m, err := ps.ReceiveTimeout(ctx, 500*time.Millisecond)
			if err != nil {
				return fmt.Errorf("probe from node %d to node %d: %w", i, j, err)
			}
			if pm, ok := m.(*redis.Message); !ok || pm.Payload != msg {
				return fmt.Errorf("probe from node %d to node %d: got %v", i, j, m)
			}
		}
	}
	return nil
}

// Addrs returns the addresses of all nodes, in start order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Nodes returns the servers of all nodes, in start order, for killing or
// freezing one of them.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Client returns a cluster client seeded with all node addresses, closed in
// t.Cleanup. opts adjust the options before the client is built.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, opt := range opts {
		opt(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// waitFor calls check every pollInterval until it returns nil, and fails the
// test with check's last error once timeout has passed. Each call gets a
// context bounded by commandTimeout.
func waitFor(t testing.TB, timeout time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait for %s: not done after %v: %v", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}
