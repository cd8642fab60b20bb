package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/lock"
)

// witness records hold intervals of many owners of one lock from outside
// and reports any overlap, and any term that did not grow.
type witness struct {
	mu       sync.Mutex
	inside   int
	lastTerm uint64
	faults   []string
}

func (w *witness) enter(who string, term uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inside++
	if w.inside > 1 {
		w.faults = append(w.faults, fmt.Sprintf("%s entered with term %d while another held", who, term))
	}
	if term <= w.lastTerm {
		w.faults = append(w.faults, fmt.Sprintf("%s entered with term %d after term %d", who, term, w.lastTerm))
	}
	w.lastTerm = term
}

func (w *witness) leave() {
	w.mu.Lock()
	w.inside--
	w.mu.Unlock()
}

// TestMutex_MutualExclusion: several processes (Clients with their own
// connections), several goroutines each, one lock: no two holds overlap,
// terms strictly grow. Mutation check: acquire.lua taking the lock without
// looking at the holder (if h[1] → if false) fails at once with
// "p1-g1: Unlock: unlock TestMutex_MutualExclusion: lock: lock lost" (and
// overlaps).
func TestMutex_MutualExclusion(t *testing.T) {
	srv, _ := startRedis(t)
	name := lockName(t)
	w := &witness{}
	const procs, goroutines, rounds = 3, 4, 15
	var wg sync.WaitGroup
	var total atomic.Int64
	for p := range procs {
		c := newLockClient(t, newRedis(t, srv.Addr()), lock.WithConfig(lock.Config{TTL: 2 * time.Second}))
		m := mustMutex(t, c, name)
		for g := range goroutines {
			who := fmt.Sprintf("p%d-g%d", p, g)
			wg.Go(func() {
				for range rounds {
					h, err := m.LockTimeout(t.Context(), 30*time.Second)
					if err != nil {
						t.Errorf("%s: Lock: %v", who, err)
						return
					}
					w.enter(who, h.Term())
					time.Sleep(100 * time.Microsecond)
					w.leave()
					total.Add(1)
					if err := h.Unlock(context.Background()); err != nil {
						t.Errorf("%s: Unlock: %v", who, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for _, f := range w.faults {
		t.Error(f)
	}
	if got := total.Load(); got != procs*goroutines*rounds {
		t.Fatalf("%d holds, want %d", got, procs*goroutines*rounds)
	}
}

func TestMutex_TryLock(t *testing.T) {
	_, rdb := startRedis(t)
	c := newLockClient(t, rdb)
	m := mustMutex(t, c, lockName(t))
	ctx := t.Context()
	h, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("second TryLock: %v, want ErrNotObtained", err)
	}
	// A timeout that ends while held.
	start := time.Now()
	if _, err := m.LockTimeout(ctx, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockTimeout while held: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("LockTimeout returned after %s", d)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrUnlocked) {
		t.Fatalf("hold context cause %v, want ErrUnlocked", cause)
	}
	h2, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if h2.Term() <= h.Term() {
		t.Fatalf("term %d after %d", h2.Term(), h.Term())
	}
	if err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMutex_Reentrancy: nested holds in one context, re-entries from
// goroutines sharing it, counts in Redis, nothing released before zero,
// another context never re-enters. Mutation check: release.lua deleting
// on every release (ignoring the count) fails with "inner hold's context
// ended with the outer Unlock".
func TestMutex_Reentrancy(t *testing.T) {
	_, rdb := startRedis(t)
	c := newLockClient(t, rdb)
	name := lockName(t)
	m := mustMutex(t, c, name)
	ctx := t.Context()
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hctx := outer.Context()
	inner, err := m.Lock(hctx)
	if err != nil {
		t.Fatal(err)
	}
	if inner.Term() != outer.Term() {
		t.Fatalf("re-entry term %d, outer %d", inner.Term(), outer.Term())
	}
	if n := holdCount(t, rdb, name, outer); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
	// Goroutines sharing the context re-enter concurrently.
	const g = 8
	holds := make([]*lock.Hold, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() {
			h, err := m.Lock(hctx)
			if err != nil {
				t.Error(err)
				return
			}
			holds[i] = h
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if n := holdCount(t, rdb, name, outer); n != g+2 {
		t.Fatalf("count %d, want %d", n, g+2)
	}
	// Another context never re-enters.
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock from another context: %v, want ErrNotObtained", err)
	}
	// The outer hold goes first: the lock stays while re-entries remain.
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if inner.Context().Err() != nil {
		t.Fatal("inner hold's context ended with the outer Unlock")
	}
	for i := range g {
		wg.Go(func() {
			if err := holds[i].Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := holdCount(t, rdb, name, inner); n != 1 {
		t.Fatalf("lock free while %d holds remain (count %d)", 1, n)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock before the last Unlock: %v, want ErrNotObtained", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, "solo:{"+name+"}:lock").Result(); n != 0 {
		t.Fatal("lock key remains after the last Unlock")
	}
	if !errors.Is(context.Cause(outer.Context()), lock.ErrUnlocked) {
		t.Fatalf("outer context cause %v", context.Cause(outer.Context()))
	}
	// A (live) context carrying a released hold takes the lock anew.
	h, err := m.TryLock(lock.WithHold(ctx, outer))
	if err != nil {
		t.Fatalf("TryLock with a released hold in ctx: %v", err)
	}
	if h.Term() <= outer.Term() {
		t.Fatalf("new term %d not above %d", h.Term(), outer.Term())
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMutex_UnlockLost: a hold whose key was deleted learns it on the next
// renewal, and its Unlock (and re-entry) report ErrLockLost.
func TestMutex_UnlockLost(t *testing.T) {
	_, rdb := startRedis(t)
	c := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: 300 * time.Millisecond}))
	name := lockName(t)
	m := mustMutex(t, c, name)
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(t.Context(), "solo:{"+name+"}:lock").Err(); err != nil {
		t.Fatal(err)
	}
	<-h.Context().Done()
	if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if _, err := m.Lock(h.Context()); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("re-entry of a lost hold: %v, want ErrLockLost", err)
	}
	if err := h.Unlock(t.Context()); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Unlock of a lost hold: %v, want ErrLockLost", err)
	}
}

// TestMutex_Renewal: a hold outlives many TTLs while the watchdog renews.
func TestMutex_Renewal(t *testing.T) {
	_, rdb := startRedis(t)
	c := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: 150 * time.Millisecond}))
	m := mustMutex(t, c, lockName(t))
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // four TTLs
	if err := h.Context().Err(); err != nil {
		t.Fatalf("hold ended while renewed: %v", context.Cause(h.Context()))
	}
	if _, err := m.TryLock(t.Context()); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock: %v, want ErrNotObtained", err)
	}
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestMutex_FixedLease: no renewal; the hold's context ends at send time
// + TTL×(1−drift) with ErrLeaseExpired, before the key expires.
func TestMutex_FixedLease(t *testing.T) {
	_, rdb := startRedis(t)
	c := newLockClient(t, rdb)
	name := lockName(t)
	m := mustMutex(t, c, name, lock.WithFixedLease(200*time.Millisecond))
	sent := time.Now()
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	<-h.Context().Done()
	ended := time.Since(sent)
	pttl, err := rdb.PTTL(context.Background(), "solo:{"+name+"}:lock").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(h.Context()), lock.ErrLeaseExpired) {
		t.Fatalf("cause %v, want ErrLeaseExpired", context.Cause(h.Context()))
	}
	if ended < 198*time.Millisecond {
		t.Fatalf("fixed lease ended after %s, before 200ms×0.99", ended)
	}
	if pttl <= 0 {
		t.Logf("key already expired when the context ended (pttl %s): a slow host", pttl)
	}
	if err := h.Unlock(t.Context()); !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrLeaseExpired) {
		t.Fatalf("Unlock after the fixed lease: %v", err)
	}
}

// TestMutex_ReleaseWakesWaiterByNotice: a waiter that saw a holder with a
// long TTL is woken by the release notice: exactly one acquire attempt
// runs after the release, and long before the holder's TTL. Mutation
// check: with the PUBLISH removed from release.lua it fails with "still
// waiting 1s after the release".
func TestMutex_ReleaseWakesWaiterByNotice(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	holder := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: 30 * time.Second}))
	h, err := mustMutex(t, holder, name).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wrdb := newRedis(t, srv.Addr())
	cnt := newCounter()
	wrdb.AddHook(cnt)
	waiter := newLockClient(t, wrdb, lock.WithConfig(lock.Config{TTL: 30 * time.Second}))
	wm := mustMutex(t, waiter, name)
	got := make(chan *lock.Hold, 1)
	go func() {
		wh, err := wm.Lock(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- wh
	}()
	// Wait until the waiter subscribed and made its second attempt.
	waitFor(t, func() bool {
		n, _ := rdb.PubSubNumSub(t.Context(), "solo:{"+name+"}:lock.events").Result()
		return n["solo:{"+name+"}:lock.events"] == 1 && cnt.get("evalsha", "eval") >= 2
	})
	time.Sleep(20 * time.Millisecond) // let the second attempt's reply arrive
	before := cnt.get("evalsha", "eval")
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case wh := <-got:
		if after := cnt.get("evalsha", "eval") - before; after != 1 {
			t.Fatalf("%d acquire attempts after the release, want 1", after)
		}
		if wh.Term() <= h.Term() {
			t.Fatalf("waiter's term %d not above %d", wh.Term(), h.Term())
		}
		if err := wh.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("still waiting 1s after the release")
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestMutex_CrashedHolderWaiterUsesPTTL: a holder that never releases (its
// client closed, no notice) is followed after its remaining TTL.
func TestMutex_CrashedHolderWaiterUsesPTTL(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	cfg := lock.WithConfig(lock.Config{TTL: 300 * time.Millisecond})
	hc, err := lock.NewClient(newRedis(t, srv.Addr()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := mustMutex(t, hc, name).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = hc.Close() // stops renewing; nothing released
	if !errors.Is(context.Cause(h.Context()), lock.ErrClosed) {
		t.Fatalf("cause %v, want ErrClosed", context.Cause(h.Context()))
	}
	wc := newLockClient(t, rdb, cfg)
	start := time.Now()
	wh, err := mustMutex(t, wc, name).LockTimeout(t.Context(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took over after %s", d)
	}
	if wh.Term() <= h.Term() {
		t.Fatalf("term %d after %d", wh.Term(), h.Term())
	}
	_ = wh.Unlock(t.Context())
}

// TestMutex_DeadlineCancelWhileRenewHangs: the holder's link blackholes
// its requests; the hold's context is cancelled by the local timer at
// (last renewal's send time + RenewDeadline) or later, and before the key
// expires on the server. Mutation check: with the deadline timer's
// function emptied (no cancel) it fails with "hold not cancelled 2s after
// the blackhole". The exact instant is checked under synctest
// (TestTiming_DeadlineCancelWhileRenewHangs).
func TestMutex_DeadlineCancelWhileRenewHangs(t *testing.T) {
	srv, rdb := startRedis(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	name := lockName(t)
	cfg := lock.Config{TTL: 600 * time.Millisecond}
	c := newLockClient(t, newRedis(t, p.Addr()), lock.WithConfig(cfg))
	m := mustMutex(t, c, name)
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Let one renewal succeed, then cut the link.
	time.Sleep(250 * time.Millisecond)
	cutAt := time.Now()
	p.BlackholeRequests(true)
	select {
	case <-h.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("hold not cancelled 2s after the blackhole")
	}
	cancelled := time.Now()
	pttl, err := rdb.PTTL(context.Background(), "solo:{"+name+"}:lock").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(h.Context()), lock.ErrRenewDeadline) {
		t.Fatalf("cause %v, want ErrRenewDeadline", context.Cause(h.Context()))
	}
	// The last renewal was sent at most RenewInterval before the cut, so
	// the cancel comes at least RenewDeadline−RenewInterval after it...
	d := m.Config()
	if got := cancelled.Sub(cutAt); got < d.RenewDeadline-d.RenewInterval {
		t.Fatalf("cancelled %s after the cut, before renew_deadline−renew_interval", got)
	}
	// ...and before the server lets the key go.
	if pttl <= 0 {
		t.Fatalf("key expired (pttl %s) before the hold was cancelled", pttl)
	}
	p.Heal()
	if err := h.Unlock(t.Context()); !errors.Is(err, lock.ErrLockLost) || !errors.Is(err, lock.ErrRenewDeadline) {
		t.Fatalf("Unlock: %v", err)
	}
	// Nothing was released after the missed deadline.
	if n, _ := rdb.Exists(context.Background(), "solo:{"+name+"}:lock").Result(); n != 1 && pttl > 50*time.Millisecond {
		t.Logf("key gone %s early", pttl)
	}
}

// TestMutex_LostAcquireReplyNoTwoHolders: the acquire's reply is
// blackholed: TryLock reports an error (outcome unknown) and cleans up the
// lock its attempt took, so another owner gets it; a blocking Lock retries
// and adopts its own lock. Never two holders.
func TestMutex_LostAcquireReplyNoTwoHolders(t *testing.T) {
	srv, rdb := startRedis(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	name := lockName(t)
	cfg := lock.WithConfig(lock.Config{TTL: 300 * time.Millisecond})
	c := newLockClient(t, newRedis(t, p.Addr()), cfg)
	m := mustMutex(t, c, name)
	// Warm the script cache so the blackholed request is the EVALSHA.
	h, err := m.TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Unlock(t.Context())

	p.BlackholeReplies(true)
	_, err = m.TryLock(t.Context())
	if err == nil {
		t.Fatal("TryLock succeeded without a reply")
	}
	// The attempt took the lock on the server; nobody holds it here.
	other := mustMutex(t, newLockClient(t, rdb, cfg), name)
	oh, err := other.LockTimeout(t.Context(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.Heal()
	// A blocking Lock on the healed link waits for the other owner.
	got := make(chan error, 1)
	go func() {
		h, err := m.LockTimeout(t.Context(), 3*time.Second)
		if err == nil {
			if oh.Context().Err() == nil {
				err = errors.New("two holders")
			}
			_ = h.Unlock(context.Background())
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := oh.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestConfig_Validate: bad timings name the field and the value.
func TestConfig_Validate(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tc := range []struct {
		name string
		opts []lock.Option
		lock string
		want string
	}{
		{"inverted", []lock.Option{lock.WithConfig(lock.Config{TTL: time.Second, RenewInterval: time.Second / 2, RenewDeadline: time.Second / 3})}, "x", "invalid renew_interval 500ms"},
		{"deadline past ttl", []lock.Option{lock.WithConfig(lock.Config{TTL: time.Second, RenewDeadline: time.Second})}, "x", "invalid renew_deadline 1s"},
		{"negative ttl", []lock.Option{lock.WithConfig(lock.Config{TTL: -time.Second})}, "x", "invalid ttl -1s"},
		{"drift", []lock.Option{lock.WithConfig(lock.Config{Drift: 0.7})}, "x", "invalid drift 0.7"},
		{"name", nil, "a{b}", `invalid name "a{b}"`},
		{"empty name", nil, "", `invalid name ""`},
		{"fixed lease", []lock.Option{lock.WithFixedLease(time.Microsecond)}, "x", "invalid fixed_lease 1µs"},
		{"fixed lease name", []lock.Option{lock.WithFixedLease(time.Second)}, "a b", `invalid name "a b"`},
		{"prefix", []lock.Option{lock.WithConfig(lock.Config{KeyPrefix: "p{"})}, "x", `invalid key_prefix "p{"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := lock.NewClient(rdb)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Mutex(tc.lock, tc.opts...)
			var ce *leader.ConfigError
			if !errors.As(err, &ce) || err.Error() != tc.want+": "+ce.Reason {
				t.Fatalf("got %v, want %q…", err, tc.want)
			}
		})
	}
}

// TestHold_ContextCancelIsSynchronous: a hold's context is cancelled in
// the same call that ends the lease (no goroutine hop that a loaded
// scheduler could delay), values of the Lock context are kept, and the
// Lock context's cancellation is not inherited.
func TestHold_ContextCancelIsSynchronous(t *testing.T) {
	_, rdb := startRedis(t)
	c, err := lock.NewClient(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := mustMutex(t, c, lockName(t))
	type key struct{}
	lctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "v"))
	h, err := m.Lock(lctx)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := m.Lock(h.Context())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if h.Context().Err() != nil {
		t.Fatal("hold context inherited the Lock context's cancellation")
	}
	if h.Context().Value(key{}) != "v" || inner.Context().Value(key{}) != "v" {
		t.Fatal("hold context lost the Lock context's values")
	}
	_ = c.Close()
	for _, hh := range []*lock.Hold{h, inner} {
		if !errors.Is(context.Cause(hh.Context()), lock.ErrClosed) {
			t.Fatalf("cause right after Close: %v, want ErrClosed", context.Cause(hh.Context()))
		}
	}
}

// TestMutex_FairOrder: with WithFair, waiters take the lock in the order
// they started waiting, whatever order the release notice wakes them in;
// a TryLock never jumps the queue; a waiter that gives up leaves it.
// Mutation check: with fair_acquire.lua granting a free lock to anyone
// (the head check removed) it fails with "order [w5 w4 w3 w2 w1 w0], want
// [w0 w1 w2 w3 w4 w5]" (the notice wakes waiters in any order).
func TestMutex_FairOrder(t *testing.T) {
	_, rdb := startRedis(t)
	name := lockName(t)
	c := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: 5 * time.Second}), lock.WithFair())
	m := mustMutex(t, c, name)
	ctx := t.Context()
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that gives up while queued must not block the others.
	qctx, qcancel := context.WithCancel(ctx)
	quitter := make(chan error, 1)
	go func() { _, err := m.Lock(qctx); quitter <- err }()
	waitFor(t, func() bool { n, _ := rdb.LLen(ctx, "solo:{"+name+"}:lock.queue").Result(); return n == 1 })
	const n = 6
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	for i := range n {
		who := fmt.Sprintf("w%d", i)
		wg.Go(func() {
			wh, err := m.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			_ = wh.Unlock(context.Background())
		})
		// Queue them one by one, in a known order.
		waitFor(t, func() bool { q, _ := rdb.LLen(ctx, "solo:{"+name+"}:lock.queue").Result(); return q == int64(i+2) })
	}
	qcancel()
	if err := <-quitter; !errors.Is(err, context.Canceled) {
		t.Fatalf("quitter: %v", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock while held with a queue: %v", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := []string{"w0", "w1", "w2", "w3", "w4", "w5"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if q, _ := rdb.Exists(ctx, "solo:{"+name+"}:lock.queue", "solo:{"+name+"}:lock.timeouts").Result(); q != 0 {
		t.Fatalf("%d queue keys left", q)
	}
}

// TestMutex_FairDeadWaiterSlotExpires: a waiter that died in the queue
// (its slot is no longer refreshed) holds the others up only until its
// slot times out on the server clock; then the next waiter takes the lock.
func TestMutex_FairDeadWaiterSlotExpires(t *testing.T) {
	_, rdb := startRedis(t)
	name := lockName(t)
	c := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: 5 * time.Second}), lock.WithFair())
	m := mustMutex(t, c, name)
	ctx := t.Context()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	q, z := "solo:{"+name+"}:lock.queue", "solo:{"+name+"}:lock.timeouts"
	if err := rdb.RPush(ctx, q, "ghost").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, z, redis.Z{Score: float64(now.Add(300 * time.Millisecond).UnixMilli()), Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock behind a queued waiter: %v, want ErrNotObtained", err)
	}
	start := time.Now()
	h, err := m.LockTimeout(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took the lock after %s", d)
	}
	if n, _ := rdb.ZScore(ctx, z, "ghost").Result(); n != 0 {
		t.Fatal("dead waiter still queued")
	}
	_ = h.Unlock(ctx)
}

// TestMutex_RedisRestartEmpty: Redis restarts without its data (no
// persistence). The holder learns it lost the lock (the renewal finds it
// gone, or the deadline passes while Redis is down) and the next holder's
// term is still above the old one: the term key was lost too, and the
// server clock floor keeps terms from going back. Mutation check: minting
// stored+1 without the TIME floor fails with "term 1 after 1".
func TestMutex_RedisRestartEmpty(t *testing.T) {
	srv, rdb := startRedis(t)
	c := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: 600 * time.Millisecond}))
	m := mustMutex(t, c, lockName(t))
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	select {
	case <-h.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("hold not ended 5s after Redis lost it")
	}
	cause := context.Cause(h.Context())
	if !errors.Is(cause, lock.ErrLockLost) && !errors.Is(cause, lock.ErrRenewDeadline) {
		t.Fatalf("cause %v", cause)
	}
	h2, err := m.LockTimeout(t.Context(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Term() <= h.Term() {
		t.Fatalf("term %d after %d", h2.Term(), h.Term())
	}
	_ = h2.Unlock(t.Context())
	if err := h.Unlock(t.Context()); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Unlock of the lost hold: %v", err)
	}
}

// TestMutex_NonLastReleaseRunTwiceKeepsTheLock: go-redis re-sends a command
// whose connection broke after the server ran it (MaxRetries), so a
// release can run twice. A re-entered hold's release (not the term's last)
// ran twice took the count from 2 to 0 and deleted the lock while the outer
// hold's context was live: "second owner holds term …; outer hold's context
// err = lock: unlocked". A non-last release now never
// deletes; only the caller's last hold does.
func TestMutex_NonLastReleaseRunTwiceKeepsTheLock(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	// One connection, so the kill below breaks the one the release used.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := newRedis(t, srv.Addr())
	cfg := lock.WithConfig(lock.Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second})
	name := lockName(t)
	m := mustMutex(t, newLockClient(t, rdb, cfg), name)
	ctx := t.Context()
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := "solo:{" + name + "}:lock"
	field := fmt.Sprintf("%d %s", outer.Term(), outer.Holder())
	// A first re-entry and release load the script into Redis's cache, so
	// the release below is one EVALSHA the server runs (not a NOSCRIPT
	// reply lost in the blackhole).
	warm, err := m.Lock(outer.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	inner, err := m.Lock(outer.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := admin.HGet(ctx, key, field).Val(); n != "2" {
		t.Fatalf("count after the re-entry = %q, want 2", n)
	}
	// The release runs on the server but its reply never comes back; then
	// the connection breaks and go-redis sends it again.
	p.BlackholeReplies(true)
	done := make(chan error, 1)
	go func() { done <- inner.Unlock(ctx) }()
	waitFor(t, func() bool { return admin.HGet(ctx, key, field).Val() == "1" })
	p.BlackholeReplies(false)
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("inner Unlock: %v", <-done)

	if n := admin.HGet(ctx, key, field).Val(); n != "1" {
		t.Fatalf("count after the release ran again = %q, want 1 (the outer hold's)", n)
	}
	if err := context.Cause(outer.Context()); err != nil {
		t.Fatalf("outer hold's context ended: %v", err)
	}
	other := mustMutex(t, newLockClient(t, newRedis(t, srv.Addr()), cfg), name)
	if h, err := other.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		if err == nil {
			_ = h.Unlock(ctx)
		}
		t.Fatalf("another owner's TryLock = %v, want ErrNotObtained while the outer hold lives", err)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatalf("outer Unlock = %v", err)
	}
	if n := admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("lock left after the last Unlock")
	}
}
