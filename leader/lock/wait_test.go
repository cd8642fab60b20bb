package lock_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/leader/lock"
)

// Tests of waiting: a pub/sub connection that
// goes silent, and fair waiters that were told "not your turn".

// scriptHook watches a client's script calls (EVALSHA/EVAL): it counts
// their replies, keeps the acquires' replies, and can hold the calls
// until released (gate).
type scriptHook struct {
	mu      sync.Mutex
	gate    chan struct{} // non-nil: script calls wait until it is closed
	n       int           // script replies received
	acquire [][]any       // the replies that were acquire outcomes
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.wait(ctx, cmd); err != nil {
			return err
		}
		err := next(ctx, cmd)
		h.record(cmd)
		return err
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h.wait(ctx, cmd); err != nil {
				return err
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.record(cmd)
		}
		return err
	}
}

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

func (h *scriptHook) wait(ctx context.Context, cmd redis.Cmder) error {
	if !isScript(cmd) {
		return nil
	}
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}

func (h *scriptHook) record(cmd redis.Cmder) {
	if !isScript(cmd) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if c, ok := cmd.(*redis.Cmd); ok && c.Err() == nil {
		if res, ok := c.Val().([]any); ok && len(res) >= 2 {
			h.acquire = append(h.acquire, res)
		}
	}
}

// replies returns the number of script replies so far.
func (h *scriptHook) replies() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// lastAcquire returns the last acquire reply, nil if none.
func (h *scriptHook) lastAcquire() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.acquire) == 0 {
		return nil
	}
	return h.acquire[len(h.acquire)-1]
}

// close holds every script call from now on; open lets them go.
func (h *scriptHook) close() {
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.mu.Unlock()
}

func (h *scriptHook) open() {
	h.mu.Lock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
	h.mu.Unlock()
}

// waitUntil polls cond every 5ms for up to d and reports whether it held.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

type lockResult struct {
	h   *lock.Hold
	err error
	at  time.Time
}

// lockAsync runs m.Lock(ctx) on a goroutine the test waits for (its
// cleanup cancels ctx first).
func lockAsync(t *testing.T, ctx context.Context, m *lock.Mutex) <-chan lockResult {
	ctx, cancel := context.WithCancel(ctx)
	got := make(chan lockResult, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		h, err := m.Lock(ctx)
		got <- lockResult{h, err, time.Now()}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return got
}

// awaitHold returns the hold got brings, failing the test when it brings
// an error or nothing within 10s (who names the waiter and what it
// waits after).
func awaitHold(t *testing.T, got <-chan lockResult, who string) lockResult {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still waiting 10s", who)
		return lockResult{}
	}
}

// stallablePubSub returns a Redis client for one lock.Client whose
// pub/sub connection goes through a fault proxy, while its other
// connections (and any later pub/sub one) go straight to addr: a
// black-holed proxy then silences that one connection while Redis stays
// healthy. The client's pool is primed with one connection, so the next
// dial, which goes through the proxy, is the pub/sub connection's, made
// by the first Lock that waits (the test checks the proxy saw one). The
// hook counts the client's script replies.
func stallablePubSub(t *testing.T, addr string) (*faultproxy.Proxy, *redis.Client, *scriptHook) {
	t.Helper()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var viaProxy atomic.Bool
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			to := addr
			if viaProxy.CompareAndSwap(true, false) {
				to = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	viaProxy.Store(true)
	hook := &scriptHook{}
	rdb.AddHook(hook)
	return p, rdb, hook
}

func numSub(t *testing.T, rdb *redis.Client, channel string) int64 {
	n, _ := rdb.PubSubNumSub(t.Context(), channel).Result()
	return n[channel]
}

// startStalledWaiter: holder holds name with a 30s TTL; a waiter on a
// Client with waiterCfg (its TTL, at least 1s, is the PING period: a
// silent connection is given up after two) waits for it, subscribed
// through the proxy.
func startStalledWaiter(t *testing.T, srvAddr string, rdb *redis.Client, name string, waiterCfg lock.Config) (
	*lock.Hold, *faultproxy.Proxy, *lock.Mutex, *scriptHook, context.CancelFunc, <-chan lockResult,
) {
	t.Helper()
	holder := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: 30 * time.Second}))
	h, err := mustMutex(t, holder, name).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p, wrdb, hook := stallablePubSub(t, srvAddr)
	wm := mustMutex(t, newLockClient(t, wrdb, lock.WithConfig(waiterCfg)), name)
	ctx, cancel := context.WithCancel(t.Context())
	got := lockAsync(t, ctx, wm)
	channel := "solo:{" + name + "}:lock.events"
	// Subscribed, and its attempt after the subscription was answered.
	waitFor(t, func() bool { return numSub(t, rdb, channel) == 1 && hook.replies() >= 2 })
	if s := p.Stats(); s.Accepted != 1 || s.Active != 1 {
		t.Fatalf("setup: proxy accepted %d connections (%d open), want the pub/sub one only", s.Accepted, s.Active)
	}
	return h, p, wm, hook, cancel, got
}

// TestClient_SilentPubSubRedialled: the waiter's pub/sub connection goes
// silent (black-holed: no error, no reply) while Redis stays healthy. The
// Client closes it after two unanswered PING periods (its TTL, 2s) and
// subscribes on a new connection, waking its waiter once that is
// confirmed; the release that follows reaches the waiter by its notice,
// long before the holder's 30s TTL or the next check of the connection.
// Mutation check: with the old receive loop (no re-dial: go-redis does
// not reconnect on a read timeout; it only woke the waiters every two
// periods) it fails with "waiter still waiting 1.5s after the release:
// the notice was lost" and "pub/sub connection still open through the
// stalled proxy (1 open)".
func TestClient_SilentPubSubRedialled(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	h, p, _, hook, _, got := startStalledWaiter(t, srv.Addr(), rdb, name, lock.Config{TTL: 2 * time.Second})
	before := hook.replies()
	p.Blackhole(true)
	// Woken (and trying again) once the connection was given up.
	waitFor(t, func() bool { return hook.replies() > before })
	released := time.Now()
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("handover %s after the release", r.at.Sub(released))
		_ = r.h.Unlock(t.Context())
	case <-time.After(1500 * time.Millisecond):
		t.Error("waiter still waiting 1.5s after the release: the notice was lost")
	}
	if n := p.Stats().Active; n != 0 {
		t.Errorf("pub/sub connection still open through the stalled proxy (%d open)", n)
	}
}

// TestClient_PubSubStallCountsReset: the pub/sub connection stalls for
// longer than two PING periods, then the link recovers. The next waiter
// of the same name must get a live subscription: its first wait ends on
// the confirmation and the release notice wakes it, long before its
// bound (RetryInterval 20s, the holder's TTL 30s). Mutation check: with
// the old receive loop (counters reset to "one confirmation due" with no
// resubscribe sent: sent 2, acked 1 for the next waiter) it fails with
// "second waiter still waiting 10s after the release: its subscription
// never became live".
func TestClient_PubSubStallCountsReset(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	cfg := lock.Config{TTL: time.Second, RetryInterval: 20 * time.Second}
	h, p, wm, hook, cancel1, got1 := startStalledWaiter(t, srv.Addr(), rdb, name, cfg)
	channel := "solo:{" + name + "}:lock.events"
	before := hook.replies()
	p.Blackhole(true)
	// The Client gives up on the connection after two silent periods and
	// wakes its waiter, which tries once more.
	waitFor(t, func() bool { return hook.replies() > before })
	p.Heal()
	cancel1()
	if r := <-got1; r.err == nil {
		t.Fatal("first waiter took the lock while it was held")
	}
	waitFor(t, func() bool { return numSub(t, rdb, channel) == 0 })
	before = hook.replies()
	got2 := lockAsync(t, t.Context(), wm)
	waitFor(t, func() bool { return hook.replies() > before }) // its first attempt found the lock held
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got2:
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.h.Unlock(t.Context())
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter still waiting 10s after the release: its subscription never became live")
	}
}

// fairHandover sets up a fair waiter told "not your turn": holder H (a
// fixed lease of 1s) holds; waiter A queues first (the head), then W; H
// dies holding the lock (no release: a release would grant the lock to
// A) and its lease expires while A's calls are held back, so W's attempt
// finds the lock free but A's turn; then A's attempt goes and takes the
// lock. It returns A's result and W's pending Lock. aOpts and wOpts configure A's and W's Mutexes (WithFair is
// added).
func fairHandover(t *testing.T, name string, aOpts, wOpts []lock.Option) (lockResult, <-chan lockResult, *redis.Client, *scriptHook) {
	t.Helper()
	srv, rdb := startRedis(t)
	fair := lock.WithFair()
	hc := newLockClient(t, rdb, lock.WithConfig(lock.Config{TTL: time.Second}), fair)
	h, err := mustMutex(t, hc, name, lock.WithFixedLease(time.Second)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	queue := "solo:{" + name + "}:lock.queue"
	qlen := func() int64 { n, _ := rdb.LLen(t.Context(), queue).Result(); return n }

	ardb, ahook := newRedis(t, srv.Addr()), &scriptHook{}
	ardb.AddHook(ahook)
	am := mustMutex(t, newLockClient(t, ardb), name, append(aOpts, fair)...)
	gotA := lockAsync(t, t.Context(), am)
	waitFor(t, func() bool { return qlen() == 1 && ahook.replies() >= 2 })

	wrdb, whook := newRedis(t, srv.Addr()), &scriptHook{}
	wrdb.AddHook(whook)
	wm := mustMutex(t, newLockClient(t, wrdb), name, append(wOpts, fair)...)
	gotW := lockAsync(t, t.Context(), wm)
	waitFor(t, func() bool { return qlen() == 2 && whook.replies() >= 2 })

	ahook.close()
	t.Cleanup(ahook.open) // before A's Lock is cancelled and waited for
	_ = h                 // dies holding: its lease expires, nothing is published
	// W wakes at H's expiry; its attempt finds the lock free but A's turn
	// (A's attempt is held back).
	if !waitUntil(10*time.Second, func() bool {
		rep := whook.lastAcquire()
		return len(rep) >= 2 && rep[0] == int64(0) && rep[1] == ""
	}) {
		t.Fatalf("setup: W's last attempt got %v, want [0 \"\" ms] (free, not its turn)", whook.lastAcquire())
	}
	ahook.open()
	var a lockResult
	select {
	case a = <-gotA:
		if a.err != nil {
			t.Fatal(a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("setup: A did not take the lock")
	}
	return a, gotW, rdb, whook
}

// TestMutex_FairHeadDiesWaiterWakesAtExpiry: W is told "free, but not
// your turn"; the head A then takes the lock and dies holding it (a fixed
// lease of 1s, never released: nothing publishes). W must hold the lock
// about when A's lease expires, not when A's queue slot would have lapsed
// (2×TTL + RetryInterval = 7s after A's last attempt). Mutation check:
// with W sleeping the reply's time (the head's slot) uncapped, it fails
// with "W took the lock 7s after A did (A's lease 1s)".
func TestMutex_FairHeadDiesWaiterWakesAtExpiry(t *testing.T) {
	name := lockName(t)
	a, gotW, _, _ := fairHandover(t, name,
		[]lock.Option{lock.WithFixedLease(time.Second), lock.WithConfig(lock.Config{RetryInterval: 5 * time.Second})},
		[]lock.Option{lock.WithConfig(lock.Config{TTL: time.Second})})
	defer func() { _ = a.h.Unlock(context.Background()) }() // lost by then: releases nothing
	select {
	case w := <-gotW:
		if w.err != nil {
			t.Fatal(w.err)
		}
		defer func() { _ = w.h.Unlock(t.Context()) }()
		if d := w.at.Sub(a.at); d > 2500*time.Millisecond {
			t.Fatalf("W took the lock %s after A did (A's lease 1s)", d.Round(100*time.Millisecond))
		}
		if w.h.Term() <= a.h.Term() {
			t.Fatalf("W's term %d not above A's %d", w.h.Term(), a.h.Term())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("W still waiting 15s after A took the lock (A's lease 1s)")
	}
}

// TestMutex_FairWaiterKeepsItsSlot: W (TTL 500ms: a slot of 2×TTL +
// RetryInterval = 1.1s) is told "free, but not your turn" while the head
// A's slot has seconds left; A then takes the lock and holds it (renewed)
// past W's slot. W must keep its place at the head of the queue: a waiter
// X that comes after W's slot would have lapsed is served after W.
// Mutation check: with W sleeping the head's slot uncapped (past its own),
// X's attempt drops W from the queue and it fails with "order [X W], want
// [W X]".
func TestMutex_FairWaiterKeepsItsSlot(t *testing.T) {
	name := lockName(t)
	wTTL := 500 * time.Millisecond
	a, gotW, rdb, _ := fairHandover(t, name,
		[]lock.Option{lock.WithConfig(lock.Config{TTL: time.Second, RetryInterval: 5 * time.Second})},
		[]lock.Option{lock.WithConfig(lock.Config{TTL: wTTL})})
	// Wait, on the server clock, until W's slot from its "not your turn"
	// attempt would have lapsed (it was refreshed no later than now).
	start, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := 2*wTTL + wTTL/5
	waitFor(t, func() bool {
		now, err := rdb.Time(t.Context()).Result()
		return err == nil && now.Sub(start) > slot+100*time.Millisecond
	})
	xrdb, xhook := newRedis(t, rdb.Options().Addr), &scriptHook{}
	xrdb.AddHook(xhook)
	xm := mustMutex(t, newLockClient(t, xrdb), name, lock.WithFair(), lock.WithConfig(lock.Config{TTL: time.Second}))
	gotX := lockAsync(t, t.Context(), xm)
	waitFor(t, func() bool { return xhook.replies() >= 2 }) // X queued and subscribed
	if err := a.h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 2 {
		var r lockResult
		who := "W"
		select {
		case r = <-gotW:
		case r = <-gotX:
			who = "X"
		case <-time.After(15 * time.Second):
			t.Fatalf("order %v, then nobody took the lock for 15s", order)
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		order = append(order, who)
		if err := r.h.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(order) != "[W X]" {
		t.Fatalf("order %v, want [W X]", order)
	}
}
