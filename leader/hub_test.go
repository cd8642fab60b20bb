package leader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/solo-run/solo/internal/redistest"
)

// These tests run inside package leader to see how many renewals a Hub has
// queued; they use real redis-server processes like redis_test.go.

func hubClient(t testing.TB, addr string, poolSize int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: poolSize, ContextTimeoutEnabled: true,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func hubWait(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hubRun runs e.Run in a goroutine; the returned stop cancels and waits.
func hubRun(e *Elector, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx, fn)
	}()
	return func() { cancel(); <-done }
}

// clientConns lists the server's client connections other than probe's:
// how many in all and how many in pub/sub mode, with their subscriptions.
func clientConns(t testing.TB, probe *redis.Client) (all int, pubsub []int) {
	t.Helper()
	ctx := context.Background()
	self, err := probe.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	list, err := probe.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(list) {
		fields := map[string]string{}
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if fields["id"] == strconv.FormatInt(self, 10) {
			continue
		}
		all++
		if sub, _ := strconv.Atoi(fields["sub"]); sub > 0 || strings.Contains(fields["flags"], "P") {
			pubsub = append(pubsub, sub)
		}
	}
	return all, pubsub
}

// confirmed returns how many channels the hub has confirmed subscriptions on.
func (h *Hub) confirmedChannels() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for name := range h.chans {
		if h.mux.Confirmed(name) {
			n++
		}
	}
	return n
}

func TestHub_ManyElectorsShareOneSubscriptionAndHandOverByNotice(t *testing.T) {
	const elections, poolSize = 100, 8 // two candidates each: 200 electors
	srv := redistest.Start(t)
	client := hubClient(t, srv.Addr(), poolSize)
	probe := hubClient(t, srv.Addr(), 1)
	hub := NewHub(client)
	defer hub.Close()

	type candidate struct {
		e       *Elector
		stop    func()
		started chan time.Time
	}
	var (
		mu      sync.Mutex
		leading = map[int]int{} // election -> candidates leading now
		overlap atomic.Bool
	)
	cands := make([][2]*candidate, elections)
	defer func() {
		for _, pair := range cands {
			for _, c := range pair {
				if c != nil {
					c.stop()
				}
			}
		}
	}()
	for i := range elections {
		for j := range 2 {
			// Long TTL and retry: a follower that polled would need 10s.
			cfg := Config{Name: fmt.Sprintf("hub-%d", i), ID: fmt.Sprintf("c%d-%d", i, j), TTL: 20 * time.Second, RetryInterval: 10 * time.Second}
			e, err := New(client, cfg, WithHub(hub))
			if err != nil {
				t.Fatal(err)
			}
			c := &candidate{e: e, started: make(chan time.Time, 4)}
			c.stop = hubRun(e, func(ctx context.Context) error {
				mu.Lock()
				leading[i]++
				if leading[i] > 1 {
					overlap.Store(true)
				}
				mu.Unlock()
				c.started <- time.Now()
				<-ctx.Done()
				mu.Lock()
				leading[i]--
				mu.Unlock()
				return nil
			})
			cands[i][j] = c
		}
	}
	leaderOf := func(i int) (l, f *candidate) {
		a, b := cands[i][0], cands[i][1]
		if b.e.IsLeader() {
			return b, a
		}
		return a, b
	}
	hubWait(t, 10*time.Second, "one leader per election", func() bool {
		for i := range elections {
			if cands[i][0].e.IsLeader() == cands[i][1].e.IsLeader() {
				return false
			}
		}
		return true
	})
	hubWait(t, 10*time.Second, "every channel subscribed", func() bool { return hub.confirmedChannels() == elections })
	for i := range elections {
		l, f := leaderOf(i)
		got, err := l.e.lock.Inspect(context.Background())
		if err != nil || got.ID != l.e.ID() {
			t.Fatalf("election %d: lease %v %v, want held by %s", i, got, err, l.e.ID())
		}
		hubWait(t, 5*time.Second, "follower observes the leader", func() bool { return f.e.Status().Holder.ID == l.e.ID() })
	}

	all, pubsub := clientConns(t, probe)
	t.Logf("%d electors: %d connections, pub/sub %v", 2*elections, all, pubsub)
	if len(pubsub) != 1 || pubsub[0] != elections {
		t.Fatalf("pub/sub connections %v, want one subscribed to %d channels", pubsub, elections)
	}
	if all > poolSize+1 {
		t.Fatalf("%d connections, want at most pool size %d + 1 pub/sub", all, poolSize)
	}

	// Ten leaders resign at once; each follower is woken by the notice on
	// the shared connection, long before its 10s poll or 20s expiry.
	const handoffs = 10
	var wg sync.WaitGroup
	followers := make([]*candidate, handoffs)
	resigned := time.Now()
	for i := range handoffs {
		l, f := leaderOf(i)
		followers[i] = f
		wg.Go(func() {
			if err := l.e.Resign(context.Background()); err != nil {
				t.Errorf("resign %s: %v", l.e.ID(), err)
			}
		})
	}
	wg.Wait()
	for i, f := range followers {
		select {
		case at := <-f.started:
			t.Logf("election %d: follower took over %s after the resign began", i, at.Sub(resigned).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatalf("election %d: follower %s did not take over within 5s (a poll would take 10s)", i, f.e.ID())
		}
	}
	if overlap.Load() {
		t.Fatal("two candidates of one election led at once")
	}
	mu.Lock()
	for i := range elections {
		if leading[i] != 1 {
			t.Errorf("election %d: %d leaders, want 1", i, leading[i])
		}
	}
	mu.Unlock()
}

// pipeCounter counts pipelines and can hold the first one at a gate.
type pipeCounter struct {
	mu      sync.Mutex
	sizes   []int
	gate    chan struct{}
	after   func() // runs once the gated pipeline was sent
	entered chan struct{}
}

func (c *pipeCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (c *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		scripts := 0
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				scripts++
			}
		}
		if scripts == 0 { // a new connection's HELLO and CLIENT SETINFO
			return next(ctx, cmds)
		}
		c.mu.Lock()
		c.sizes = append(c.sizes, scripts)
		gate, after := c.gate, c.after
		c.gate, c.after = nil, nil
		c.mu.Unlock()
		if gate == nil {
			return next(ctx, cmds)
		}
		c.entered <- struct{}{}
		<-gate
		err := next(ctx, cmds)
		if after != nil {
			after()
		}
		return err
	}
}

func (c *pipeCounter) take() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sizes
	c.sizes = nil
	return s
}

func TestHub_RenewalsSharePipelines(t *testing.T) {
	const n, batch = 100, 16
	srv := redistest.Start(t)
	client := hubClient(t, srv.Addr(), 4)
	pc := &pipeCounter{entered: make(chan struct{})}
	client.AddHook(pc)
	hub := NewHub(client, WithHubBatch(batch))
	defer hub.Close()
	ctx := context.Background()

	locks := make([]*RedisStore, n)
	leases := make([]Lease, n)
	for i := range n {
		l, err := hub.NewRedisStore(Config{Name: fmt.Sprintf("batch-%d", i), TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		out, rec, err := l.Acquire(ctx, "me", time.Minute)
		if err != nil || out != Acquired {
			t.Fatalf("acquire %d: %v %v", i, out, err)
		}
		locks[i], leases[i] = l, rec.Lease
	}
	const lost = 7
	if err := client.Set(ctx, locks[lost].leaseKey, "1 thief", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	// renewAll renews all n at once while the batcher is held in a first
	// pipeline, so that all n are queued when it comes back.
	renewAll := func(t *testing.T, after func()) []int {
		t.Helper()
		pc.mu.Lock()
		gate := make(chan struct{})
		pc.gate, pc.after = gate, after
		pc.mu.Unlock()
		blocker := make(chan error, 1)
		go func() { blocker <- locks[0].Renew(ctx, leases[0], 2*time.Minute) }()
		<-pc.entered
		pc.take()

		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs[i] = locks[i].Renew(ctx, leases[i], 2*time.Minute) })
		}
		hubWait(t, 10*time.Second, "all renewals queued", func() bool { return hub.queued() == n })
		// A caller whose context ends first gets its context's error.
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := locks[1].Renew(short, leases[1], 2*time.Minute)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("renew with an expired context: %v, want DeadlineExceeded", err)
		}
		close(gate)
		wg.Wait()
		if err := <-blocker; err != nil {
			t.Fatalf("blocker: %v", err)
		}
		for i, err := range errs {
			switch {
			case i == lost && !errors.Is(err, ErrLeaseLost):
				t.Errorf("renew of the stolen lease: %v, want ErrLeaseLost", err)
			case i != lost && err != nil:
				t.Errorf("renew %d: %v", i, err)
			}
		}
		for i, l := range locks {
			pttl := client.PTTL(ctx, l.leaseKey).Val()
			if i != lost && pttl <= time.Minute {
				t.Errorf("lease %d: PTTL %s after renewing to 2m", i, pttl)
			}
		}
		return pc.take()
	}

	t.Run("evalsha", func(t *testing.T) {
		// Load the script and open the pool's connections first.
		if err := locks[0].Renew(ctx, leases[0], time.Minute); err != nil {
			t.Fatal(err)
		}
		sizes := renewAll(t, nil)
		t.Logf("%d renewals in pipelines of %v", n, sizes)
		if want := (n + batch - 1) / batch; len(sizes) != want {
			t.Fatalf("%d pipelines %v, want %d", len(sizes), sizes, want)
		}
		for _, s := range sizes {
			if s > batch {
				t.Fatalf("pipeline of %d, want at most %d", s, batch)
			}
		}
	})
	t.Run("noscript falls back to eval", func(t *testing.T) {
		// The script cache is flushed right after the blocker's pipeline:
		// the first batch finds NOSCRIPT for all and is sent again with
		// EVAL, which loads the script for the batches after it.
		sizes := renewAll(t, func() {
			if err := client.ScriptFlush(ctx).Err(); err != nil {
				t.Error(err)
			}
		})
		t.Logf("%d renewals after SCRIPT FLUSH in pipelines of %v", n, sizes)
		if want := (n+batch-1)/batch + 1; len(sizes) != want || sizes[0] != batch || sizes[1] != batch {
			t.Fatalf("%d pipelines %v, want %d: the first batch twice", len(sizes), sizes, want)
		}
	})
	t.Run("same answer as unbatched", func(t *testing.T) {
		plain := func(i int) *RedisStore {
			return newRedisStore(client, Config{Name: fmt.Sprintf("batch-%d", i), TTL: time.Minute}.withDefaults())
		}
		if err := plain(lost).Renew(ctx, leases[lost], time.Minute); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("unbatched renew of the stolen lease: %v", err)
		}
		if err := plain(3).Renew(ctx, leases[3], 2*time.Minute); err != nil {
			t.Fatalf("unbatched renew: %v", err)
		}
	})
}

func TestHub_WatchReferenceCountsAndClose(t *testing.T) {
	srv := redistest.Start(t)
	client := hubClient(t, srv.Addr(), 4)
	probe := hubClient(t, srv.Addr(), 1)
	ctx := context.Background()
	// The clients exist; whatever the hub starts must be gone after Close.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	hub := NewHub(client)
	defer hub.Close()

	cfg := Config{Name: "refcount", TTL: 2 * time.Second}
	numsub := func() int64 {
		m, err := probe.PubSubNumSub(ctx, cfg.EventsChannel()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m[cfg.EventsChannel()]
	}
	newWatch := func() Watch {
		l, err := hub.NewRedisStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w, err := l.Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	recv := func(w Watch, term uint64) {
		t.Helper()
		select {
		case ev, ok := <-w.Events():
			if !ok || ev.Kind != EventResign || ev.Lease.Term != term {
				t.Fatalf("got %v %v, want resign %d", ev, ok, term)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no resign %d notice within 5s", term)
		}
	}
	publisher, err := NewRedisStore(probe, cfg)
	if err != nil {
		t.Fatal(err)
	}

	w1, w2 := newWatch(), newWatch()
	hubWait(t, 5*time.Second, "both watches live", func() bool { return w1.Live() && w2.Live() })
	if got := numsub(); got != 1 {
		t.Fatalf("%d subscribers of the channel, want the hub's one", got)
	}
	if n, err := publisher.RequestResign(ctx, 1); err != nil || n != 1 {
		t.Fatalf("publish: %d %v", n, err)
	}
	recv(w1, 1)
	recv(w2, 1)

	// Closing one of two keeps the subscription.
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w1.Events(); ok {
		t.Fatal("Events still open after Close")
	}
	if _, err := publisher.RequestResign(ctx, 2); err != nil {
		t.Fatal(err)
	}
	recv(w2, 2)
	if got := numsub(); got != 1 {
		t.Fatalf("%d subscribers after closing one of two watches, want 1", got)
	}

	// Closing the last unsubscribes; a new watch subscribes again.
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	hubWait(t, 5*time.Second, "unsubscribed", func() bool { return numsub() == 0 })
	w3 := newWatch()
	hubWait(t, 5*time.Second, "subscribed again", func() bool { return numsub() == 1 && w3.Live() })

	// A reader that does not read yet does not hold up the hub: notices
	// queue for it and arrive in order.
	other := Config{Name: "refcount-other", TTL: 2 * time.Second}
	lo, err := hub.NewRedisStore(other)
	if err != nil {
		t.Fatal(err)
	}
	wo, err := lo.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hubWait(t, 5*time.Second, "other watch live", wo.Live)
	otherPub, _ := NewRedisStore(probe, other)
	for term := uint64(10); term < 13; term++ {
		if _, err := publisher.RequestResign(ctx, term); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := otherPub.RequestResign(ctx, 99); err != nil {
		t.Fatal(err)
	}
	recv(wo, 99) // delivered although w3 has not read its three
	for term := uint64(10); term < 13; term++ {
		recv(w3, term)
	}
	if _, pubsub := clientConns(t, probe); len(pubsub) != 1 {
		t.Fatalf("pub/sub connections %v, want one", pubsub)
	}

	// Close stops the hub's goroutines (goleak above); watches still open
	// go not live and close as usual; the hub refuses new work.
	if err := hub.Close(); err != nil {
		t.Fatal(err)
	}
	if w3.Live() {
		t.Fatal("watch live after the hub closed")
	}
	for _, w := range []Watch{w3, wo} {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := hub.NewRedisStore(cfg)
	if _, err := l.Watch(ctx); !errors.Is(err, errHubClosed) {
		t.Fatalf("watch after Close: %v", err)
	}
	if err := l.Renew(ctx, Lease{Term: 1, ID: "x"}, time.Second); !errors.Is(err, errHubClosed) {
		t.Fatalf("renew after Close: %v", err)
	}
}

func TestHub_NoticesSurviveAKilledAndAFrozenConnection(t *testing.T) {
	srv := redistest.Start(t)
	client := hubClient(t, srv.Addr(), 4)
	probe := hubClient(t, srv.Addr(), 1)
	ctx := context.Background()
	hub := NewHub(client)
	defer hub.Close()

	cfg := Config{Name: "reconnect", TTL: time.Second} // health check every 1s
	l, err := hub.NewRedisStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := l.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	hubWait(t, 5*time.Second, "watch live", w.Live)
	pub, _ := NewRedisStore(probe, cfg)
	expect := func(term uint64) {
		t.Helper()
		// Publish until the subscription is back (a notice sent while it
		// is down is lost, as with any pub/sub).
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := pub.RequestResign(ctx, term); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-w.Events():
				if ev.Lease.Term == term {
					return
				}
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no notice %d within 10s", term)
			}
		}
	}
	expect(1)

	// Killed: go-redis reconnects and subscribes every channel again.
	if err := probe.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	hubWait(t, 5*time.Second, "watch not live", func() bool { return !w.Live() })
	hubWait(t, 5*time.Second, "watch live again", w.Live)
	expect(2)

	// Frozen: the PING goes unanswered, the hub replaces the connection.
	srv.Stop(t)
	hubWait(t, 5*time.Second, "watch not live while Redis is frozen", func() bool { return !w.Live() })
	srv.Cont(t)
	hubWait(t, 10*time.Second, "watch live again", w.Live)
	expect(3)
	if _, pubsub := clientConns(t, probe); len(pubsub) != 1 {
		t.Fatalf("pub/sub connections %v, want one", pubsub)
	}
}

// On a Cluster the hub's one pub/sub connection lives on the node of the
// first channel; PUBLISH reaches every node, so notices of elections on the
// other masters arrive too.
func TestHub_ClusterOneSubscriptionForAllSlots(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	hub := NewHub(c)
	defer hub.Close()
	ctx := context.Background()

	nodes := map[string]bool{}
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	type pair struct{ a, b *Elector }
	var pairs []pair
	for i := 0; len(nodes) < 3 || len(pairs) < 6; i++ {
		cfg := Config{Name: fmt.Sprintf("cl-%d", i), TTL: 20 * time.Second, RetryInterval: 10 * time.Second}
		node, err := c.MasterForKey(ctx, cfg.LeaseKey())
		if err != nil {
			t.Fatal(err)
		}
		nodes[node.Options().Addr] = true
		cfgB := cfg
		cfg.ID, cfgB.ID = "a", "b"
		a, err := New(c, cfg, WithHub(hub))
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(c, cfgB, WithHub(hub))
		if err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, pair{a, b})
	}
	started := make(chan string, 2*len(pairs))
	fn := func(id string) func(context.Context) error {
		return func(ctx context.Context) error { started <- id; <-ctx.Done(); return nil }
	}
	for i, p := range pairs {
		stops = append(stops, hubRun(p.a, fn(fmt.Sprintf("%d-a", i))))
		hubWait(t, 5*time.Second, "a leads", p.a.IsLeader)
		stops = append(stops, hubRun(p.b, fn(fmt.Sprintf("%d-b", i))))
	}
	hubWait(t, 10*time.Second, "every channel subscribed", func() bool { return hub.confirmedChannels() == len(pairs) })
	for _, p := range pairs {
		hubWait(t, 5*time.Second, "b observes a", func() bool { return p.b.Status().Holder.ID == p.a.ID() })
	}
	subs := 0
	for _, n := range cl.Nodes() {
		_, ps := clientConns(t, n.Client(t))
		subs += len(ps)
	}
	if subs != 1 {
		t.Fatalf("%d pub/sub connections across the cluster, want 1", subs)
	}
	for range pairs {
		<-started
	}
	for i, p := range pairs {
		if err := p.a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-started:
			if id != fmt.Sprintf("%d-b", i) {
				t.Fatalf("%s started, want %d-b", id, i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("election %d: no handoff by notice within 5s (a poll would take 10s)", i)
		}
	}
}

func TestHub_WithHubNeedsItsClient(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer a.Close()
	defer b.Close()
	hub := NewHub(a)
	defer hub.Close()
	if _, err := New(b, Config{Name: "x"}, WithHub(hub)); err == nil {
		t.Fatal("New with a hub of another client succeeded")
	}
	e, err := New(a, Config{Name: "x"}, WithHub(hub))
	if err != nil {
		t.Fatal(err)
	}
	if l := e.lock.(*RedisStore); l.hub != hub {
		t.Fatal("the elector's lock does not use the hub")
	}
}
