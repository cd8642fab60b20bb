package lock_test

import (
	"context"
	_ "embed"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
