package lock_test

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/lock"
)

// waitGranted starts a fair Lock of name on a Client of its own with cfg,
// waits until it is queued and quiet, and returns its result channel and
// its script hook.
func waitGranted(t *testing.T, addr, name string, cfg lock.Config, opts ...lock.Option) (<-chan lockResult, *scriptHook) {
	t.Helper()
	rdb, hook := newRedis(t, addr), &scriptHook{}
	rdb.AddHook(hook)
	m := mustMutex(t, newLockClient(t, rdb, opts...), name, append([]lock.Option{lock.WithConfig(cfg), lock.WithFair()}, opts...)...)
	got := lockAsync(t, t.Context(), m)
	quiet(t, hook, 1)
	return got, hook
}

// TestFairGrant_KeyLivesForTheWaitersTTL: Mutexes of one name with
// different timings. The releaser's TTL is 300ms, the waiter's 6s; the
// release grants the lock to the waiter, whose hold is timed by its own
// TTL. The key must live as long: a third owner (TTL 300ms) gets nothing
// while the waiter's hold is live.
func TestFairGrant_KeyLivesForTheWaitersTTL(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	short := lock.Config{TTL: 300 * time.Millisecond}
	a := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(short), lock.WithFair())
	ha, err := a.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gotB, hook := waitGranted(t, srv.Addr(), name, lock.Config{TTL: 6 * time.Second})
	before := hook.replies()
	if err := ha.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := <-gotB
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer func() { _ = b.h.Unlock(context.Background()) }()
	if n := hook.replies(); n != before {
		t.Fatalf("setup: the waiter sent %d scripts after the release, want the grant taken without a round trip", n-before)
	}
	pttl := rdb.PTTL(t.Context(), "solo:{"+name+"}:lock").Val()
	time.Sleep(2 * short.TTL)
	c := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(short), lock.WithFair())
	if hc, err := c.TryLock(t.Context()); err == nil {
		live := b.h.Context().Err() == nil
		_ = hc.Unlock(t.Context())
		t.Fatalf("a third owner took term %d %s after the grant while the waiter's hold (term %d, live %v) is live; the grant's key had %s left",
			hc.Term(), 2*short.TTL, b.h.Term(), live, pttl)
	} else if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatal(err)
	}
	if err := b.h.Context().Err(); err != nil {
		t.Fatalf("the waiter's hold ended: %v", context.Cause(b.h.Context()))
	}
}

//go:embed testdata/fair_release_v1.lua
var fairReleaseV1 string

// TestFairGrant_RollingUpgrade: queue entries of both forms. A releaser
// of this version grants only an entry that names its TTL ("CALL!TTL"):
// an older waiter's "CALL!" (TTL unknown) or "CALL" is woken by
// "released" and left at the head. An older releaser (the previous
// fair_release.lua, which granted "CALL!") does not grant "CALL!TTL"
// either: it wakes it.
func TestFairGrant_RollingUpgrade(t *testing.T) {
	_, rdb := startRedis(t)
	name := lockName(t)
	base := "solo:{" + name + "}:lock"
	keys := []string{base, base + ".term", base + ".queue", base + ".timeouts"}
	m := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(lock.Config{TTL: 5 * time.Second}), lock.WithFair())
	ctx := t.Context()
	queue := func(entry string) {
		t.Helper()
		rdb.Del(ctx, keys[2], keys[3])
		rdb.RPush(ctx, keys[2], entry)
		rdb.ZAdd(ctx, keys[3], redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: entry})
	}
	for _, entry := range []string{"old-1!", "old-2"} {
		rdb.Del(ctx, keys[2], keys[3])
		h, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		queue(entry)
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := rdb.Exists(ctx, base).Val(); n != 0 {
			t.Errorf("entry %q: the release granted the lock (%v), want it woken", entry, rdb.HKeys(ctx, base).Val())
		}
		if head := rdb.LIndex(ctx, keys[2], 0).Val(); head != entry {
			t.Errorf("entry %q: the queue's head is %q after the release", entry, head)
		}
	}
	// The older releaser meets this version's entry.
	rdb.Del(ctx, keys[2], keys[3])
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queue("new-1!6000")
	res, err := rdb.Eval(ctx, fairReleaseV1, keys, lock.Field(h), "1", base+".events", "300").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || rdb.Exists(ctx, base).Val() != 0 {
		t.Errorf("the older release of a \"CALL!TTL\" head: %v, lock %v; want released, not granted", res, rdb.HKeys(ctx, base).Val())
	}
	if f := rdb.HKeys(ctx, base).Val(); len(f) > 0 && strings.HasSuffix(f[0], ".0") {
		t.Errorf("granted %q", f[0])
	}
	_ = h.Unlock(ctx)
	rdb.Del(ctx, keys[2], keys[3])
}

// faultHook runs a client's script commands and then, for the first
// `lose` of them, fails them as if the reply were lost (the server ran
// them): go-redis retries below its hooks, so nothing re-sends them.
type faultHook struct {
	mu   sync.Mutex
	lose int
}

var errReplyLost = errors.New("test: reply lost")

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) take(cmd redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !isScript(cmd) || h.lose == 0 {
		return false
	}
	h.lose--
	return true
}

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.take(cmd) {
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if h.take(cmd) {
				cmd.SetErr(errReplyLost)
				err = errReplyLost
			}
		}
		return err
	}
}

// TestFairGrant_LostQueuingReplyGrantUndone: W's first attempt queues its
// call but its reply is lost, so W does not know it is queued. The
// holder's release grants the lock to W's call; W then gives up (ctx)
// before its retry. W's cleanup must delete the grant (the call may have
// been queued), so X, next in the queue, holds the lock at once, not a
// TTL (5s) later.
func TestFairGrant_LostQueuingReplyGrantUndone(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	cfg := lock.Config{TTL: 5 * time.Second}
	h, err := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(cfg), lock.WithFair()).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	key := "solo:{" + name + "}:lock"
	wrdb := newRedis(t, srv.Addr())
	wrdb.AddHook(&faultHook{lose: 1})
	wcfg := cfg
	wcfg.RetryInterval = 5 * time.Second // W gives up before its retry
	wm := mustMutex(t, newLockClient(t, wrdb), name, lock.WithConfig(wcfg), lock.WithFair())
	wctx, wcancel := context.WithCancel(t.Context())
	gotW := lockAsync(t, wctx, wm)
	waitFor(t, func() bool { return rdb.LLen(t.Context(), key+".queue").Val() == 1 })
	gotX, _ := waitGranted(t, srv.Addr(), name, cfg)
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The lock is now granted to W's call ("TERM CALL.0").
	waitFor(t, func() bool {
		f, _ := rdb.HKeys(t.Context(), key).Result()
		return len(f) == 1 && strings.HasSuffix(f[0], ".0")
	})
	wcancel()
	if w := <-gotW; w.err == nil {
		t.Fatal("W's Lock returned a hold after its ctx ended")
	}
	gaveUp := time.Now()
	select {
	case x := <-gotX:
		if x.err != nil {
			t.Fatal(x.err)
		}
		if d := x.at.Sub(gaveUp); d > 2*time.Second {
			t.Fatalf("X waited %s after W gave up: W's grant outlived its call", d.Round(100*time.Millisecond))
		}
		_ = x.h.Unlock(t.Context())
	case <-time.After(10 * time.Second):
		t.Fatal("X still waiting 10s after W gave up")
	}
}

// TestFairRelease_StaleReleaseGrantsNothing: A's hold (a fixed 300ms
// lease) expired without a release; B holds the lock now and W waits,
// queued, for a grant. A's last release lands late (a request delayed on
// the network): it must be refused as not A's, and hand nothing to W
// while B holds the lock. The test for fair_release.lua's owner check.
func TestFairRelease_StaleReleaseGrantsNothing(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	base := "solo:{" + name + "}:lock"
	ha, err := mustMutex(t, newLockClient(t, rdb), name, lock.WithFixedLease(300*time.Millisecond), lock.WithFair()).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stale := lock.Field(ha)
	<-ha.Context().Done()
	cfg := lock.Config{TTL: 5 * time.Second}
	hb, err := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(cfg), lock.WithFair()).LockTimeout(t.Context(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hb.Unlock(context.Background()) }()
	gotW, _ := waitGranted(t, srv.Addr(), name, cfg)

	keys := []string{base, base + ".term", base + ".queue", base + ".timeouts", base + ".gone"}
	res, err := rdb.Eval(t.Context(), lock.FairReleaseLua, keys, stale, "1", base+".events", "300").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0] != int64(-1) {
		t.Errorf("A's stale release: %v, want {-1} (not ours); the lock is %v", res, rdb.HKeys(t.Context(), base).Val())
	}
	select {
	case w := <-gotW:
		if w.err == nil {
			t.Fatalf("W holds term %d while B's hold (term %d, live %v) is live: A's stale release granted it the lock",
				w.h.Term(), hb.Term(), hb.Context().Err() == nil)
		}
		t.Fatal(w.err)
	case <-time.After(300 * time.Millisecond):
	}
	if f := rdb.HKeys(t.Context(), base).Val(); len(f) != 1 || f[0] != lock.Field(hb) {
		t.Fatalf("the lock is %v after A's stale release, want B's %q alone", f, lock.Field(hb))
	}
}

// TestFairGrant_EvictionPolicyRefused: a fair release grants the lock to
// a waiter whose Client last read that the server may evict (the policy
// changed live while it waited). The grant must not become a hold without
// the check every acquire makes: the waiter's Lock is refused with the
// configuration error, as its next acquire would be.
func TestFairGrant_EvictionPolicyRefused(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	a := mustMutex(t, newLockClient(t, rdb), name, lock.WithFair())
	ha, err := a.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wrdb, hook := newRedis(t, srv.Addr()), &scriptHook{}
	wrdb.AddHook(hook)
	wc := newLockClient(t, wrdb)
	cfg := lock.Config{TTL: 20 * time.Second, RenewInterval: 5 * time.Second, RenewDeadline: 15 * time.Second}
	got := lockAsync(t, t.Context(), mustMutex(t, wc, name, lock.WithConfig(cfg), lock.WithFair()))
	quiet(t, hook, 1)
	for _, kv := range [][2]string{{"maxmemory", "100mb"}, {"maxmemory-policy", "volatile-lru"}} {
		if err := rdb.ConfigSet(t.Context(), kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g := lock.EvictionGuardOf(wc)
	g.SetPeriod(time.Millisecond)
	waitFor(t, func() bool { return errors.Is(g.Check(t.Context()), leader.ErrEvictionPolicy) })
	if err := ha.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b.err == nil {
		_ = b.h.Unlock(context.Background())
		t.Fatalf("a fair grant became hold term %d on a Redis that may evict it (guard state %v); want ErrEvictionPolicy",
			b.h.Term(), g.State())
	}
	if !errors.Is(b.err, leader.ErrEvictionPolicy) {
		t.Fatalf("waiter: %v, want ErrEvictionPolicy", b.err)
	}
}
