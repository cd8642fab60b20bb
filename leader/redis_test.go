package leader_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// These tests run against real redis-server processes on loopback, started
// by internal/redistest (a missing server fails the test when CI=true or
// SOLO_REQUIRE_REDIS=1). Timings are small but every assertion is either
// exact (ordering, values in Redis) or a loose bound far from the expected
// figure; speed is measured by the benchmarks, not asserted here.

// redisConfig: TTL 1.5s, renew every 400ms, deadline 1s, stop budget 500ms.
func redisConfig(t testing.TB, id string) leader.Config {
	return leader.Config{
		Name:          electionName(t),
		ID:            id,
		TTL:           1500 * time.Millisecond,
		RenewInterval: 400 * time.Millisecond,
		RenewDeadline: time.Second,
		RetryInterval: 300 * time.Millisecond,
	}
}

func electionName(t testing.TB) string {
	return strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
}

func newClient(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustNew(t testing.TB, c redis.UniversalClient, cfg leader.Config, opts ...leader.Option) *leader.Elector {
	t.Helper()
	e, err := leader.New(c, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runRedis runs e.Run in a goroutine; the returned stop cancels and waits.
func runRedis(t testing.TB, e *leader.Elector, fn func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, fn) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// cmdCounter is a go-redis hook counting commands sent and in flight.
type cmdCounter struct {
	mu       sync.Mutex
	cmds     map[string]int
	inflight atomic.Int64
}

func newCmdCounter() *cmdCounter { return &cmdCounter{cmds: map[string]int{}} }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd.Name())
		c.inflight.Add(1)
		defer c.inflight.Add(-1)
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd.Name())
		}
		c.inflight.Add(1)
		defer c.inflight.Add(-1)
		return next(ctx, cmds)
	}
}

func (c *cmdCounter) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cmds[name]++
}

func (c *cmdCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.cmds {
		n += v
	}
	return n
}

func (c *cmdCounter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmds[name]
}

// witness counts leader functions running at once, across candidates, and
// checks that every term starts above the last.
type witness struct {
	mu       sync.Mutex
	running  int
	overlaps int
	lastTerm uint64
	backward []string
	terms    int
}

func (w *witness) enter(term uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running++
	if w.running > 1 {
		w.overlaps++
	}
	if term <= w.lastTerm {
		w.backward = append(w.backward, fmt.Sprintf("%d after %d", term, w.lastTerm))
	}
	w.lastTerm = term
	w.terms++
}

func (w *witness) leave() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running--
}

func TestRedis_TwentyCandidatesOneLeaderAtATime(t *testing.T) {
	srv := redistest.Start(t)
	const candidates, wantTerms = 20, 60
	w := &witness{}
	enough := make(chan struct{})
	var enoughOnce sync.Once
	var stops []func() error
	electors := make([]*leader.Elector, candidates)
	for i := range candidates {
		cfg := redisConfig(t, fmt.Sprintf("c%02d", i))
		cfg.RetryInterval = 50 * time.Millisecond
		cfg.ResignCooldown = 50 * time.Millisecond
		e := mustNew(t, newClient(t, srv.Addr()), cfg)
		electors[i] = e
		stops = append(stops, runRedis(t, e, func(ctx context.Context) error {
			term, _ := leader.TermFrom(ctx)
			w.enter(term)
			defer w.leave()
			w.mu.Lock()
			n := w.terms
			w.mu.Unlock()
			if n >= wantTerms {
				enoughOnce.Do(func() { close(enough) })
			}
			// End the term in one of three ways: return, resign, or be
			// cancelled by the elector's own shutdown below.
			hold := time.NewTimer(time.Duration(5+rand.IntN(30)) * time.Millisecond)
			defer hold.Stop()
			select {
			case <-ctx.Done():
				return nil
			case <-hold.C:
			}
			if rand.IntN(2) == 0 {
				return nil
			}
			go func() { _ = electors[i].Resign(context.Background()) }()
			<-ctx.Done()
			return nil
		}))
	}
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
		t.Fatalf("only %d terms in 60s", w.terms)
	}
	for _, stop := range stops {
		if err := stop(); err != nil {
			t.Errorf("Run() = %v", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overlaps != 0 {
		t.Fatalf("%d overlapping leader functions", w.overlaps)
	}
	if len(w.backward) != 0 {
		t.Fatalf("terms went backwards: %v", w.backward)
	}
	t.Logf("%d terms, no overlap, strictly increasing", w.terms)
}

func TestRedis_GracefulHandoffWakesFollowerByNotice(t *testing.T) {
	for _, how := range []string{"cancel", "resign"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			// Long TTL and retry: a follower that polled would need seconds.
			cfgA := leader.Config{Name: electionName(t), ID: "a", TTL: 20 * time.Second, RetryInterval: 10 * time.Second}
			cfgB := cfgA
			cfgB.ID = "b"
			a := mustNew(t, newClient(t, srv.Addr()), cfgA)
			cb := newCmdCounter()
			clientB := newClient(t, srv.Addr())
			clientB.AddHook(cb)
			b := mustNew(t, clientB, cfgB)

			aStarted, bStarted := make(chan time.Time, 1), make(chan time.Time, 1)
			aReturned := make(chan time.Time, 1)
			stopA := runRedis(t, a, func(ctx context.Context) error {
				aStarted <- time.Now()
				<-ctx.Done()
				aReturned <- time.Now()
				return nil
			})
			<-aStarted
			runRedis(t, b, func(ctx context.Context) error {
				bStarted <- time.Now()
				<-ctx.Done()
				return nil
			})
			waitFor(t, 5*time.Second, "b observes a", func() bool { return b.Status().Holder.ID == a.ID() })
			waitSubscribed(t, clientB, cfgB.EventsChannel(), 2)
			evalsBefore := cb.get("evalsha") + cb.get("eval")

			switch how {
			case "cancel":
				go func() { _ = stopA() }()
			case "resign":
				go func() { _ = a.Resign(context.Background()) }()
			}
			var startB time.Time
			select {
			case startB = <-bStarted:
			case <-time.After(5 * time.Second):
				t.Fatal("b did not take over within 5s (a poll would take 10s)")
			}
			handoff := startB.Sub(<-aReturned)
			if handoff < 0 {
				t.Fatalf("b started %s before a's function returned", -handoff)
			}
			// Woken by the notice: exactly one acquire, long before any
			// poll or expiry could have woken it.
			if n := cb.get("evalsha") + cb.get("eval") - evalsBefore; n != 1 {
				t.Fatalf("b sent %d scripts to take over, want 1 acquire", n)
			}
			t.Logf("handoff %s (release + notice + acquire on loopback)", handoff)
		})
	}
}

func TestRedis_CrashedLeaderIsReplacedAfterExpiry(t *testing.T) {
	srv := redistest.Start(t)
	cfg := redisConfig(t, "follower")
	child := startChild(t, srv.Addr(), cfg.Name)
	term := child.waitLeading(t)

	direct := newClient(t, srv.Addr())
	started := make(chan uint64, 1)
	var startedAt time.Time
	f := mustNew(t, newClient(t, srv.Addr()), cfg)
	runRedis(t, f, func(ctx context.Context) error {
		startedAt = time.Now()
		tt, _ := leader.TermFrom(ctx)
		started <- tt
		<-ctx.Done()
		return nil
	})
	waitFor(t, 5*time.Second, "follower observes the child", func() bool { return f.Status().Holder.Term == term })

	child.kill(t)
	// The server-side expiry of the dead leader's lease, bracketed by the
	// send and reply of the PTTL read.
	sent := time.Now()
	pttl, err := direct.PTTL(context.Background(), cfg.LeaseKey()).Result()
	if err != nil || pttl <= 0 {
		t.Fatalf("PTTL after kill = %v, %v", pttl, err)
	}
	expiresNoEarlierThan := sent.Add(pttl - 2*time.Millisecond) // PTTL has ms resolution

	newTerm := <-started
	if newTerm <= term {
		t.Fatalf("new term %d not above the dead leader's %d", newTerm, term)
	}
	if startedAt.Before(expiresNoEarlierThan) {
		t.Fatalf("took over %s before the lease expired on the server", expiresNoEarlierThan.Sub(startedAt))
	}
	// Last renewal happened at most RenewInterval before the kill; the key
	// expires TTL after it; the follower must follow within RetryInterval.
	if late := startedAt.Sub(sent.Add(pttl)); late > cfg.RetryInterval {
		t.Fatalf("took over %s after expiry, later than retry_interval %s", late, cfg.RetryInterval)
	}
	t.Logf("took over %s after the server-side expiry", startedAt.Sub(sent.Add(pttl)))
}

func TestRedis_StalledRedisCancelsAtDeadlineWhileCallHangs(t *testing.T) {
	for _, stall := range []string{"proxy-blackhole", "client-pause"} {
		t.Run(stall, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy, err := faultproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			cfg := redisConfig(t, "a")
			// A client that ignores contexts and waits long: the renew call
			// hangs far past the deadline.
			hooks := newCmdCounter()
			c := newClient(t, proxy.Addr(), func(o *redis.Options) {
				o.ContextTimeoutEnabled = false
				o.ReadTimeout = 10 * time.Second
				o.MaxRetries = -1
			})
			c.AddHook(hooks)
			direct := newClient(t, srv.Addr())
			e := mustNew(t, c, cfg)

			type cancelled struct {
				at       time.Time
				cause    error
				inflight int64
				value    string
				pttl     time.Duration
			}
			done := make(chan cancelled, 1)
			started := make(chan uint64, 1)
			runRedis(t, e, func(ctx context.Context) error {
				term, _ := leader.TermFrom(ctx)
				started <- term
				<-ctx.Done()
				x := cancelled{at: time.Now(), cause: context.Cause(ctx), inflight: hooks.inflight.Load()}
				if stall == "proxy-blackhole" {
					x.value, _ = direct.Get(context.Background(), cfg.LeaseKey()).Result()
					x.pttl, _ = direct.PTTL(context.Background(), cfg.LeaseKey()).Result()
				}
				done <- x
				return nil
			})
			term := <-started
			// Wait for one renewal so the deadline runs from a renew.
			waitFor(t, 5*time.Second, "a renewal", func() bool { return e.Status().LastRenew.After(e.Status().Since) })
			switch stall {
			case "proxy-blackhole":
				proxy.Blackhole(true)
			case "client-pause":
				if err := direct.Do(context.Background(), "CLIENT", "PAUSE", 3000, "WRITE").Err(); err != nil {
					t.Fatal(err)
				}
			}
			x := <-done
			last := e.Status().LastRenew
			if !errors.Is(x.cause, leader.ErrRenewDeadline) {
				t.Fatalf("cause = %v, want ErrRenewDeadline", x.cause)
			}
			if got := x.at.Sub(last); got < cfg.RenewDeadline || got > cfg.RenewDeadline+300*time.Millisecond {
				t.Fatalf("cancelled %s after the last renewal's send time, want %s (+ scheduling)", got, cfg.RenewDeadline)
			}
			if x.inflight == 0 {
				t.Fatal("no Redis call was hanging at the cancel: the test did not stall the renew")
			}
			if stall == "proxy-blackhole" {
				want := leader.Lease{Term: term, ID: e.ID()}.String()
				if x.value != want || x.pttl <= 0 {
					t.Fatalf("at cancel the server had %q with %s left, want our lease still alive (cancel before expiry)", x.value, x.pttl)
				}
				t.Logf("cancelled with %s left on the server (stop budget %s)", x.pttl, cfg.StopBudget())
				proxy.Heal()
			} else {
				_ = direct.Do(context.Background(), "CLIENT", "UNPAUSE").Err()
			}
		})
	}
}

func TestRedis_LeaseLostBehindItsBack(t *testing.T) {
	for _, chaos := range []string{"del", "overwrite", "flushall"} {
		t.Run(chaos, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := redisConfig(t, "a")
			cfg.RetryInterval = 2 * time.Second // keep the re-campaign out of the check
			direct := newClient(t, srv.Addr())
			e := mustNew(t, newClient(t, srv.Addr()), cfg)
			type seen struct {
				cause  error
				exists int64
				value  string
			}
			done := make(chan seen, 1)
			started := make(chan struct{}, 1)
			runRedis(t, e, func(ctx context.Context) error {
				started <- struct{}{}
				<-ctx.Done()
				s := seen{cause: context.Cause(ctx)}
				s.exists, _ = direct.Exists(context.Background(), cfg.LeaseKey()).Result()
				s.value, _ = direct.Get(context.Background(), cfg.LeaseKey()).Result()
				done <- s
				return nil
			})
			<-started
			ctx := context.Background()
			switch chaos {
			case "del":
				direct.Del(ctx, cfg.LeaseKey())
			case "overwrite":
				direct.Set(ctx, cfg.LeaseKey(), "1 intruder", time.Minute)
			case "flushall":
				direct.FlushAll(ctx)
			}
			s := <-done
			if !errors.Is(s.cause, leader.ErrLeaseLost) {
				t.Fatalf("cause = %v, want ErrLeaseLost", s.cause)
			}
			switch chaos {
			case "overwrite":
				if s.value != "1 intruder" {
					t.Fatalf("lease = %q after renew, want the intruder's value untouched", s.value)
				}
			default:
				if s.exists != 0 {
					t.Fatalf("lease re-created (%q) by the old leader", s.value)
				}
			}
		})
	}
}

func TestRedis_TermsNeverGoBackwards(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last uint64
	acquire := func(step string) {
		t.Helper()
		var out leader.Outcome
		var rec leader.Record
		// After a restart the first calls may meet a closed connection.
		waitFor(t, 5*time.Second, "acquire after "+step, func() bool {
			out, rec, err = lock.Acquire(ctx, "a", time.Minute)
			return err == nil
		})
		if out != leader.Acquired {
			t.Fatalf("%s: outcome %v", step, out)
		}
		if rec.Term <= last {
			t.Fatalf("%s: term %d not above %d", step, rec.Term, last)
		}
		last = rec.Term
		if err := lock.Release(ctx, rec.Lease); err != nil {
			t.Fatal(err)
		}
	}
	acquire("start")
	// Many acquisitions within one microsecond must still increase.
	for i := range 200 {
		acquire(fmt.Sprintf("burst %d", i))
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	acquire("FLUSHALL")
	srv.Restart(t)
	acquire("restart without persistence")
	// The term is the server's clock in µs (when it beats stored+1).
	if since := time.UnixMicro(int64(last)); time.Since(since) > time.Minute || time.Until(since) > time.Minute {
		t.Fatalf("term %d is not near the server clock (%v)", last, since)
	}
}

func TestRedis_LostAcquireReplyNeverMakesTwoLeaders(t *testing.T) {
	srv := redistest.Start(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg := redisConfig(t, "a")
	direct := newClient(t, srv.Addr())
	// Warm the server's script cache (steady state): otherwise the dropped
	// reply is EVALSHA's NOSCRIPT and the script never runs at all.
	warm, _ := leader.NewRedisStore(direct, leader.Config{Name: cfg.Name + "-warm"})
	if _, rec, err := warm.Acquire(context.Background(), "w", time.Second); err != nil {
		t.Fatal(err)
	} else if err := warm.Release(context.Background(), rec.Lease); err != nil {
		t.Fatal(err)
	}
	// One pooled connection, opened (HELLO done) before the replies are cut:
	// a fresh connection could not even complete its handshake.
	ca := newClient(t, proxy.Addr(), func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond; o.PoolSize = 1 })
	if err := ca.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	a := mustNew(t, ca, cfg)
	// Read the eviction policy now, as a running elector has: the acquire
	// below, not the check before it, is the call whose reply is lost.
	if err := leader.EvictionGuardOf(a).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.BlackholeReplies(true)
	cfgB := cfg
	cfgB.ID = "b"
	b := mustNew(t, newClient(t, srv.Addr()), cfgB)
	w := &witness{}
	aStarted := make(chan uint64, 1)
	fn := func(ch chan uint64) func(context.Context) error {
		return func(ctx context.Context) error {
			term, _ := leader.TermFrom(ctx)
			w.enter(term)
			defer w.leave()
			if ch != nil {
				ch <- term
			}
			<-ctx.Done()
			return nil
		}
	}
	runRedis(t, a, fn(aStarted))
	// a's acquire reaches Redis; its reply is dropped.
	waitFor(t, 5*time.Second, "a's unconfirmed lease in Redis", func() bool {
		v, _ := direct.Get(context.Background(), cfg.LeaseKey()).Result()
		return strings.HasSuffix(v, " "+a.ID())
	})
	v, _ := direct.Get(context.Background(), cfg.LeaseKey()).Result()
	runRedis(t, b, fn(nil))
	time.Sleep(cfg.RetryInterval * 2) // several unconfirmed retries
	if a.IsLeader() || len(aStarted) != 0 {
		t.Fatal("a started on an acquire whose reply it never saw")
	}
	if b.IsLeader() {
		t.Fatal("b leads while a's lease exists")
	}
	proxy.Heal()
	term := <-aStarted
	// a either adopted its unconfirmed lease or, if that expired meanwhile,
	// won a fresh one; either way it must never run beside b (checked below).
	t.Logf("a leads with %q; its unconfirmed lease was %q", leader.Lease{Term: term, ID: a.ID()}.String(), v)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overlaps != 0 {
		t.Fatalf("%d overlaps", w.overlaps)
	}
}

func TestRedis_RenewAndReleaseCompareTheExactValue(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	direct := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, old, err := lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Force expiry, and let b win in between.
	direct.PExpire(ctx, cfg.LeaseKey(), time.Millisecond)
	waitFor(t, time.Second, "expiry", func() bool { return direct.Exists(ctx, cfg.LeaseKey()).Val() == 0 })
	out, bRec, err := lock.Acquire(ctx, "b", 5*time.Second)
	if err != nil || out != leader.Acquired {
		t.Fatalf("b acquire = %v %v", out, err)
	}
	if err := lock.Renew(ctx, old.Lease, time.Minute); !errors.Is(err, leader.ErrLeaseLost) {
		t.Fatalf("stale Renew() = %v, want ErrLeaseLost", err)
	}
	if err := lock.Release(ctx, old.Lease); !errors.Is(err, leader.ErrLeaseLost) {
		t.Fatalf("stale Release() = %v, want ErrLeaseLost", err)
	}
	// Same ID, other term: still not ours.
	if err := lock.Renew(ctx, leader.Lease{Term: bRec.Term - 1, ID: "b"}, time.Minute); !errors.Is(err, leader.ErrLeaseLost) {
		t.Fatalf("Renew() with the wrong term = %v", err)
	}
	got, _ := direct.Get(ctx, cfg.LeaseKey()).Result()
	pttl, _ := direct.PTTL(ctx, cfg.LeaseKey()).Result()
	if got != bRec.Lease.String() || pttl > 5*time.Second {
		t.Fatalf("b's lease became %q with %s left: touched by a stale renew or release", got, pttl)
	}
	h, err := leader.Lookup(ctx, c, cfg)
	if err != nil || h.ID != "b" || h.Term != bRec.Term || h.TTLLeft <= 0 {
		t.Fatalf("Lookup() = %+v, %v", h, err)
	}
	if err := lock.Release(ctx, bRec.Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Lookup(ctx, c, cfg); !errors.Is(err, leader.ErrNoLeader) {
		t.Fatalf("Lookup() after release = %v, want ErrNoLeader", err)
	}
}

func TestRedis_MinReplicasRefusesUnreplicatedAcquire(t *testing.T) {
	srv := redistest.Start(t) // no replica at all
	c := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	cfg.MinReplicas = 1
	cfg.ReplicaTimeout = 50 * time.Millisecond
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, rec, err := lock.Acquire(context.Background(), "a", time.Minute)
	if !errors.Is(err, leader.ErrNotReplicated) || rec.ID != "a" {
		t.Fatalf("Acquire() = %v %v, want ErrNotReplicated with the lease", rec, err)
	}
	// The store leaves the lease to its caller; an Elector never leads on
	// such a lease and hands it back.
	if err := lock.Release(context.Background(), rec.Lease); err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, c, cfg)
	led := make(chan struct{}, 1)
	stop := runRedis(t, e, func(ctx context.Context) error { led <- struct{}{}; <-ctx.Done(); return nil })
	time.Sleep(3 * cfg.RetryInterval)
	_ = stop()
	if len(led) != 0 {
		t.Fatal("led on a lease no replica acknowledged")
	}
	if n := c.Exists(context.Background(), cfg.LeaseKey()).Val(); n != 0 {
		t.Fatal("refused lease left behind after Run returned")
	}
}

func TestRedis_SentinelWithReplicaAcknowledgement(t *testing.T) {
	s := redistest.StartSentinel(t, "solo-"+strconv.Itoa(os.Getpid()))
	c := s.FailoverClient(t)
	cfg := redisConfig(t, "a")
	cfg.MinReplicas = 1
	cfg.ReplicaTimeout = 200 * time.Millisecond
	started := make(chan uint64, 1)
	e := mustNew(t, c, cfg)
	runRedis(t, e, func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		started <- term
		<-ctx.Done()
		return nil
	})
	term := <-started
	// The lease reached the replica before the leader started.
	rc := newClient(t, s.Replica().Addr())
	held := leader.Lease{Term: term, ID: e.ID()}
	if v, _ := rc.Get(context.Background(), cfg.LeaseKey()).Result(); v != held.String() {
		t.Fatalf("replica has %q", v)
	}
	// A checkpoint beside the lease is acknowledged like the lease itself.
	cps, _ := leader.NewRedisStore(c, cfg)
	if err := cps.Checkpoint(context.Background(), held, "cron:x", 1); err != nil {
		t.Fatalf("Checkpoint() with the replica up = %v", err)
	}
	// With the replica frozen, a fresh acquire is refused, and a checkpoint
	// counts as not recorded: a failover now could lose it, and the next
	// leader would fire the tick again.
	lock, _ := leader.NewRedisStore(c, leader.Config{Name: cfg.Name + "-2", MinReplicas: 1, ReplicaTimeout: 100 * time.Millisecond})
	s.Replica().Stop(t)
	defer s.Replica().Cont(t)
	if _, _, err := lock.Acquire(context.Background(), "b", time.Minute); !errors.Is(err, leader.ErrNotReplicated) {
		t.Fatalf("Acquire() with a frozen replica = %v, want ErrNotReplicated", err)
	}
	if err := cps.Checkpoint(context.Background(), held, "cron:x", 2); !errors.Is(err, leader.ErrNotReplicated) {
		t.Fatalf("Checkpoint() with a frozen replica = %v, want ErrNotReplicated", err)
	}
	// Asked again (a caller's retry), the primary's unreplicated value
	// answers "not advanced": still not recorded for the caller.
	if err := cps.Checkpoint(context.Background(), held, "cron:x", 2); !errors.Is(err, leader.ErrNotReplicated) {
		t.Fatalf("Checkpoint() again with a frozen replica = %v, want ErrNotReplicated", err)
	}
	// So on a connection that wrote nothing before (a new client, or
	// go-redis's retry on a new connection). Redis 7.0 makes such a
	// connection's WAIT wait for the server's whole offset; where a WAIT
	// counts only its connection's own writes, checkpoint.lua's second
	// write of the value is what it waits for.
	fresh, _ := leader.NewRedisStore(s.FailoverClient(t), cfg)
	if err := fresh.Checkpoint(context.Background(), held, "cron:x", 2); !errors.Is(err, leader.ErrNotReplicated) {
		t.Fatalf("Checkpoint() on a new connection with a frozen replica = %v, want ErrNotReplicated", err)
	}
}

func TestRedis_ClusterManyElectionsNoCrossSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	ctx := context.Background()
	nodes := map[string]bool{}
	for i := range 200 {
		cfg := leader.Config{Name: fmt.Sprintf("election-%d", i)}
		lock, err := leader.NewRedisStore(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, rec, err := lock.Acquire(ctx, "a", time.Minute)
		if err != nil || out != leader.Acquired {
			t.Fatalf("%s: acquire %v %v", cfg.Name, out, err)
		}
		if err := lock.Renew(ctx, rec.Lease, time.Minute); err != nil {
			t.Fatalf("%s: renew %v", cfg.Name, err)
		}
		if got, err := lock.Inspect(ctx); err != nil || got.Lease != rec.Lease {
			t.Fatalf("%s: inspect %v %v", cfg.Name, got, err)
		}
		if err := lock.Release(ctx, rec.Lease); err != nil {
			t.Fatalf("%s: release %v", cfg.Name, err)
		}
		node, err := c.MasterForKey(ctx, cfg.LeaseKey())
		if err != nil {
			t.Fatal(err)
		}
		nodes[node.Options().Addr] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("elections landed on %d masters, want all 3", len(nodes))
	}
	// Electors on the cluster client hand over by notice too.
	cfg := leader.Config{Name: "cluster-handoff", TTL: 20 * time.Second, RetryInterval: 10 * time.Second}
	cfgB := cfg
	cfg.ID, cfgB.ID = "a", "b"
	a := mustNew(t, c, cfg)
	b := mustNew(t, cl.Client(t), cfgB)
	aStarted, bStarted := make(chan struct{}, 1), make(chan struct{}, 1)
	stopA := runRedis(t, a, func(ctx context.Context) error { aStarted <- struct{}{}; <-ctx.Done(); return nil })
	<-aStarted
	runRedis(t, b, func(ctx context.Context) error { bStarted <- struct{}{}; <-ctx.Done(); return nil })
	waitFor(t, 5*time.Second, "b observes a", func() bool { return b.Status().Holder.ID == a.ID() })
	waitSubscribed(t, c, cfgB.EventsChannel(), 2)
	_ = stopA()
	select {
	case <-bStarted:
	case <-time.After(5 * time.Second):
		t.Fatal("no handoff by notice on the cluster within 5s")
	}
}

// waitSubscribed waits until at least n clients subscribe to channel. A
// candidate subscribes beside its first acquire, not before it, so a test
// that relies on a release notice waits for this first.
func waitSubscribed(t testing.TB, c redis.UniversalClient, channel string, n int64) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d subscribers on %s", n, channel), func() bool {
		var total int64
		count := func(ctx context.Context, c *redis.Client) error {
			m, err := c.PubSubNumSub(ctx, channel).Result()
			total += m[channel]
			return err
		}
		ctx := context.Background()
		if cc, ok := c.(*redis.ClusterClient); ok {
			var mu sync.Mutex
			_ = cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
				mu.Lock()
				defer mu.Unlock()
				return count(ctx, node)
			})
		} else if rc, ok := c.(*redis.Client); ok {
			_ = count(ctx, rc)
		}
		return total >= n
	})
}

// waitFor polls cond every 5ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A child candidate: the test binary re-executed with SOLO_LEADER_CHILD set
// (see TestMain). It prints "leading TERM" when its function starts.
type child struct {
	cmd   *exec.Cmd
	lines chan string
}

func startChild(t *testing.T, addr, name string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOLO_LEADER_CHILD=1", "SOLO_REDIS_ADDR="+addr, "SOLO_ELECTION="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	waited := make(chan struct{})
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		for range c.lines {
		}
	})
	return c
}

func (c *child) waitLeading(t *testing.T) uint64 {
	t.Helper()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatal("child exited before leading")
			}
			if s, found := strings.CutPrefix(line, "leading "); found {
				term, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return term
			}
		case <-time.After(10 * time.Second):
			t.Fatal("child did not lead within 10s")
		}
	}
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// runChild is the child candidate's main.
func runChild() int {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("SOLO_REDIS_ADDR")})
	defer c.Close()
	cfg := redisConfig(fakeTB{name: os.Getenv("SOLO_ELECTION")}, "child")
	e, err := leader.New(c, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = e.Run(context.Background(), func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx)
		fmt.Printf("leading %d\n", term)
		<-ctx.Done()
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// fakeTB lets the child reuse redisConfig with the parent's election name.
type fakeTB struct {
	testing.TB
	name string
}

func (f fakeTB) Name() string { return f.name }

// TestRedis_AcquireRefusedWhileSpreadGroupLive: a free lease is not taken
// while a spread group of the same name has a live member (its entry in
// PREFIX:{NAME}:spread, scored with server ms): the modes of one name
// exclude each other. Once the entry expired, the
// lease is taken.
func TestRedis_AcquireRefusedWhileSpreadGroupLive(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	until := now.Add(300 * time.Millisecond).UnixMilli()
	if err := c.ZAdd(ctx, cfg.Key("spread"), redis.Z{Score: float64(until), Member: "m-1"}).Err(); err != nil {
		t.Fatal(err)
	}
	o, rec, err := lock.Acquire(ctx, "a", time.Minute)
	if !errors.Is(err, leader.ErrSpreadGroupLive) || o != leader.Held || rec.ID != "m-1" || rec.TTLLeft <= 0 {
		t.Fatalf("Acquire beside a live spread member = %v %+v %v, want Held by m-1 and ErrSpreadGroupLive", o, rec, err)
	}
	if n := c.Exists(ctx, cfg.LeaseKey(), cfg.TermKey()).Val(); n != 0 {
		t.Fatalf("%d of the lease and term keys written by a refused acquire", n)
	}
	time.Sleep(400 * time.Millisecond) // the entry expires on the server's clock
	if o, _, err := lock.Acquire(ctx, "a", time.Minute); err != nil || o != leader.Acquired {
		t.Fatalf("Acquire after the entry expired = %v %v, want Acquired", o, err)
	}
}
