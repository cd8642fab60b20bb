package leader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
)

// Hub tests on a real Redis Cluster (three masters, no replicas).

// hubClusterClient is a cluster client configured as redisurl.NewClient would
// build it: context deadlines honoured, one-second read and write timeouts.
func hubClusterClient(t testing.TB, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	return cl.Client(t, func(o *redis.ClusterOptions) {
		o.ContextTimeoutEnabled = true
		o.ReadTimeout, o.WriteTimeout = time.Second, time.Second
	})
}

// renewQueues returns the node addresses of the hub's renewal queues.
func (h *Hub) renewQueues() []string {
	h.qmu.Lock()
	defer h.qmu.Unlock()
	var addrs []string
	for addr := range h.queues {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	return addrs
}

// hubMasterOf returns the index in cl.Nodes() of the master serving key's slot.
func hubMasterOf(t testing.TB, cl *redistest.Cluster, c *redis.ClusterClient, key string) int {
	t.Helper()
	node, err := c.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for i, addr := range cl.Addrs() {
		if addr == node.Options().Addr {
			return i
		}
	}
	t.Fatalf("master %s of %s is not a node of the cluster %v", node.Options().Addr, key, cl.Addrs())
	return -1
}

// hubClusterElection is one election with a single candidate on a hub.
type hubClusterElection struct {
	cfg   Config
	node  int // index of its master in Cluster.Nodes
	e     *Elector
	stop  func()
	ended atomic.Int32 // terms whose context was cancelled
	cause chan error   // why each term ended
}

// hubClusterElections builds perNode elections on every master of cl, all
// on hub, and runs them; they are stopped in the returned function.
func hubClusterElections(t *testing.T, cl *redistest.Cluster, c *redis.ClusterClient, hub *Hub, prefix string, perNode int, ttl time.Duration) ([]*hubClusterElection, func()) {
	t.Helper()
	count := make([]int, len(cl.Nodes()))
	var els []*hubClusterElection
	for i := 0; len(els) < perNode*len(count); i++ {
		cfg := Config{Name: fmt.Sprintf("%s-%d", prefix, i), ID: "only", TTL: ttl}
		node := hubMasterOf(t, cl, c, cfg.LeaseKey())
		if n := hubMasterOf(t, cl, c, cfg.EventsChannel()); n != node {
			t.Fatalf("%s: channel on node %d, lease on node %d", cfg.Name, n, node)
		}
		if count[node] == perNode {
			continue
		}
		count[node]++
		e, err := New(c, cfg, WithHub(hub))
		if err != nil {
			t.Fatal(err)
		}
		els = append(els, &hubClusterElection{cfg: cfg, node: node, e: e, cause: make(chan error, 16)})
	}
	for _, el := range els {
		el.stop = hubRun(el.e, func(ctx context.Context) error {
			<-ctx.Done()
			el.ended.Add(1)
			select {
			case el.cause <- context.Cause(ctx):
			default:
			}
			return nil
		})
	}
	return els, func() {
		var wg sync.WaitGroup
		for _, el := range els {
			wg.Go(el.stop)
		}
		wg.Wait()
	}
}

// A master frozen for longer than RenewDeadline costs the leadership of the
// elections in its slots only: the hub's renewals to the other masters do
// not wait for its pipeline.
func TestHub_ClusterFrozenMasterCostsOnlyItsOwnElections(t *testing.T) {
	const perNode, ttl, frozen = 6, 2 * time.Second, 0
	cl := redistest.StartCluster(t, 3)
	c := hubClusterClient(t, cl)
	hub := NewHub(c)
	defer hub.Close()
	els, stopAll := hubClusterElections(t, cl, c, hub, "frozen", perNode, ttl)
	defer stopAll()
	hubWait(t, 15*time.Second, "every election led", func() bool {
		for _, el := range els {
			if !el.e.IsLeader() {
				return false
			}
		}
		return true
	})
	// One queue per master, each named by the master's address.
	hubWait(t, 5*time.Second, "a renewal queue per master", func() bool { return len(hub.renewQueues()) == 3 })
	if got, want := hub.renewQueues(), slices.Sorted(slices.Values(cl.Addrs())); !slices.Equal(got, want) {
		t.Fatalf("renewal queues %v, want one per master %v", got, want)
	}
	terms := make([]uint64, len(els))
	for i, el := range els {
		terms[i] = el.e.Term()
	}
	deadline := els[0].e.Config().RenewDeadline

	node := cl.Nodes()[frozen]
	frozenAt := time.Now()
	node.Stop(t)
	var contOnce sync.Once
	cont := func() { contOnce.Do(func() { node.Cont(t) }) }
	defer cont() // before stopAll: the frozen node's elections release too

	// The freeze outlasts RenewDeadline: every election of the frozen master
	// has lost its term, and every other one has either renewed with a send
	// time past frozenAt+RenewDeadline in the same term, or lost its term.
	hubWait(t, 10*time.Second, "the freeze outlasting the renew deadline", func() bool {
		for i, el := range els {
			st := el.e.Status()
			if el.node == frozen {
				if st.Leading && st.Term == terms[i] {
					return false
				}
				continue
			}
			if st.Leading && st.Term == terms[i] && !st.LastRenew.After(frozenAt.Add(deadline)) {
				return false
			}
		}
		return true
	})
	froze := time.Since(frozenAt)
	cont()

	lostHealthy, lostFrozen, healthy := 0, 0, 0
	for i, el := range els {
		st := el.e.Status()
		kept := st.Leading && st.Term == terms[i] && el.ended.Load() == 0
		if el.node == frozen {
			if !kept {
				lostFrozen++
			}
			continue
		}
		healthy++
		if !kept {
			lostHealthy++
			t.Errorf("%s on healthy master %d lost its term %d: now leading %v term %d, %d terms ended",
				el.cfg.Name, el.node, terms[i], st.Leading, st.Term, el.ended.Load())
		}
	}
	t.Logf("master %d frozen for %s (renew deadline %s): elections that lost their term: %d/%d on healthy masters, %d/%d on the frozen one",
		frozen, froze.Round(time.Millisecond), deadline, lostHealthy, healthy, lostFrozen, len(els)-healthy)
}

// RequestResign counts the subscribers on every node: the hub's one pub/sub
// connection lives on one master, and PUBLISH on another master reports
// only that master's subscribers, although the notice reaches the hub.
func TestHub_ClusterRequestResignCountsEveryNode(t *testing.T) {
	const perNode = 2
	cl := redistest.StartCluster(t, 3)
	c := hubClusterClient(t, cl)
	hub := NewHub(c)
	defer hub.Close()
	els, stopAll := hubClusterElections(t, cl, c, hub, "resign", perNode, 5*time.Second)
	defer stopAll()
	hubWait(t, 15*time.Second, "every election led", func() bool {
		for _, el := range els {
			if !el.e.IsLeader() {
				return false
			}
		}
		return true
	})
	hubWait(t, 10*time.Second, "every channel subscribed", func() bool { return hub.confirmedChannels() == len(els) })

	ctx := context.Background()
	failed := 0
	for i, el := range els {
		term := el.e.Term()
		var n int64
		var err error
		if i%2 == 0 {
			// The Store's count.
			n, err = newRedisStore(c, el.cfg.withDefaults()).RequestResign(ctx, term)
		} else {
			// The package function, which fails when nobody heard it.
			var h Holder
			h, err = RequestResign(ctx, c, el.cfg)
			n = 1
			if err == nil && h.Term != term {
				err = fmt.Errorf("asked holder of term %d, want %d", h.Term, term)
			}
		}
		if err == nil && n < 1 {
			err = fmt.Errorf("%d subscribers reported", n)
		}
		if err != nil {
			failed++
			t.Errorf("%s (master %d): RequestResign: %v", el.cfg.Name, el.node, err)
		}
		select {
		case cause := <-el.cause:
			if !errors.Is(cause, ErrResigned) {
				t.Errorf("%s: term ended by %v, want a resign", el.cfg.Name, cause)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s (master %d): leader did not resign within 5s", el.cfg.Name, el.node)
		}
	}
	t.Logf("%d of %d RequestResign calls reported failure", failed, len(els))
}

// A renewal queue whose batcher had no work for the idle time is removed
// with its goroutine; the next renewal starts a new one. On a single-node
// client there is one queue.
func TestHub_IdleRenewalQueueEnds(t *testing.T) {
	srv := redistest.Start(t)
	client := hubClient(t, srv.Addr(), 2)
	pc := &pipeCounter{entered: make(chan struct{})}
	client.AddHook(pc)
	hub := NewHub(client)
	hub.idle = 50 * time.Millisecond // before the first renewal starts a batcher
	defer hub.Close()
	ctx := context.Background()
	l, err := hub.NewRedisStore(Config{Name: "idle", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, rec, err := l.Acquire(ctx, "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		// Hold the renewal's pipeline to look at the queues meanwhile.
		gate := make(chan struct{})
		pc.mu.Lock()
		pc.gate = gate
		pc.mu.Unlock()
		renewed := make(chan error, 1)
		go func() { renewed <- l.Renew(ctx, rec.Lease, time.Minute) }()
		<-pc.entered
		got := hub.renewQueues()
		close(gate)
		if err := <-renewed; err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{""}) {
			t.Fatalf("renewal queues %q, want the one of a single-node client", got)
		}
		hubWait(t, 5*time.Second, "the idle queue removed", func() bool { return len(hub.renewQueues()) == 0 })
	}
}
