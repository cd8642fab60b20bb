package lock_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

// heldReplies counts the acquire replies "held" (code 0) so far.
func (h *scriptHook) heldReplies() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.acquire {
		if r[0] == int64(0) {
			n++
		}
	}
	return n
}

// quiet waits until h has seen at least min held replies and then no
// script reply for 100ms: the waiters are asleep.
func quiet(t *testing.T, h *scriptHook, min int) {
	t.Helper()
	waitFor(t, func() bool { return h.heldReplies() >= min })
	last, since := h.replies(), time.Now()
	waitFor(t, func() bool {
		if n := h.replies(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > 100*time.Millisecond
	})
}

// serverScripts returns the EVAL + EVALSHA calls Redis ran since the last
// CONFIG RESETSTAT (INFO commandstats: counted on the server, so a
// pipeline counts each of its commands), less the failed ones.
func serverScripts(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		for _, c := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			v, ok := strings.CutPrefix(line, c)
			if !ok {
				continue
			}
			// A failed EVALSHA (NOSCRIPT, then EVAL) ran nothing.
			for f := range strings.SplitSeq(v, ",") {
				k, x, _ := strings.Cut(f, "=")
				y, _ := strconv.ParseInt(x, 10, 64)
				switch k {
				case "calls":
					n += y
				case "failed_calls":
					n -= y
				}
			}
		}
	}
	return n
}

// TestMutex_ReleaseWakesOneWaiter: six goroutines of one Client wait for a
// lock; its release wakes one of them, not all six, so Redis runs one
// acquire script after the release script, not six (before, every
// release woke every waiter of the process to race for it). Counted on
// the server. On the code before, it failed with "the release was followed
// by 6 acquire scripts, want 1".
func TestMutex_ReleaseWakesOneWaiter(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	wrdb, hook := newRedis(t, srv.Addr()), &scriptHook{}
	wrdb.AddHook(hook)
	c := newLockClient(t, wrdb)
	m := mustMutex(t, c, name)
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan *lock.Hold, waiters)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range waiters {
		wg.Go(func() {
			if h, err := m.Lock(ctx); err == nil {
				got <- h
			}
		})
	}
	quiet(t, hook, waiters)
	if err := rdb.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	var next *lock.Hold
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter took the lock within 10s of the release")
	}
	quiet(t, hook, 0) // let any other waiter woken try (and fail)
	if n := serverScripts(t, rdb) - 1; n != 1 {
		t.Errorf("the release was followed by %d acquire scripts, want 1", n)
	}
	if err := next.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestMutex_RelockDoesNotPassStarvingWaiter: A holds and, five times,
// unlocks and locks again at once while B (same Client) waits. B has
// waited longer than the starvation bound, so A's Lock goes behind it and
// returns only after B held the lock (sync.Mutex's hand-off). On the code
// before, A's immediate re-lock won the race against B's wake-up: "round
// 1: A locked again before B held the lock".
func TestMutex_RelockDoesNotPassStarvingWaiter(t *testing.T) {
	srv, _ := startRedis(t)
	name := lockName(t)
	wrdb, hook := newRedis(t, srv.Addr()), &scriptHook{}
	wrdb.AddHook(hook)
	c := newLockClient(t, wrdb)
	m := mustMutex(t, c, name)
	a, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		var bHeld sync.WaitGroup
		bHeld.Add(1)
		gotB := make(chan error, 1)
		held := hook.heldReplies()
		go func() {
			h, err := m.Lock(t.Context())
			if err == nil {
				bHeld.Done()
				time.Sleep(20 * time.Millisecond)
				err = h.Unlock(t.Context())
			}
			gotB <- err
		}()
		quiet(t, hook, held+1) // B found the lock held and sleeps
		if err := a.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { bHeld.Wait(); close(done) }()
		if a, err = m.Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		default:
			t.Fatalf("round %d: A locked again before B held the lock", round)
		}
		if err := <-gotB; err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestMutex_FairReleaseGrantsHead: a fair release hands the lock to the
// queue's head, W, which holds it without sending another acquire: its
// Lock returns with no script of its own after the release. The hold is
// real (its field is in Redis with the TTL, its term above the last).
// On the code before, W was woken and tried again: "W sent 1 script
// after the release, want 0".
func TestMutex_FairReleaseGrantsHead(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	hc := newLockClient(t, rdb, lock.WithFair())
	h, err := mustMutex(t, hc, name).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wrdb, hook := newRedis(t, srv.Addr()), &scriptHook{}
	wrdb.AddHook(hook)
	wm := mustMutex(t, newLockClient(t, wrdb), name, lock.WithFair())
	gotW := lockAsync(t, t.Context(), wm)
	quiet(t, hook, 1)
	before := hook.replies()
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := awaitHold(t, gotW, "W, after the release,")
	if n := hook.replies() - before; n != 0 {
		t.Errorf("W sent %d script(s) after the release, want 0", n)
	}
	if w.h.Term() <= h.Term() {
		t.Errorf("W's term %d not above the releaser's %d", w.h.Term(), h.Term())
	}
	key := "solo:{" + name + "}:lock"
	if ok, err := rdb.HExists(t.Context(), key, lock.Field(w.h)).Result(); err != nil || !ok {
		t.Errorf("W's field %q not in Redis: %v %v", lock.Field(w.h), ok, err)
	}
	if pttl, err := rdb.PTTL(t.Context(), key).Result(); err != nil || pttl <= 0 {
		t.Errorf("lock PTTL %v %v", pttl, err)
	}
	if err := w.h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(t.Context(), key).Result(); n != 0 {
		t.Error("the lock is still there after W's Unlock")
	}
}

// TestMutex_FairGrantToLeaverUndone: W, the queue's head, gives up (ctx)
// while its abandon is held back; the release then grants the lock to W's
// call, which nobody will hold. The abandon, once through, deletes that
// grant, and X, next in the queue, holds the lock at once, not a TTL
// (5s) later. Mutation: without the grant's owner among the abandoned
// owners it fails with "X waited 5s".
func TestMutex_FairGrantToLeaverUndone(t *testing.T) {
	srv, rdb := startRedis(t)
	name := lockName(t)
	cfg := lock.WithConfig(lock.Config{TTL: 5 * time.Second})
	h, err := mustMutex(t, newLockClient(t, rdb, cfg, lock.WithFair()), name).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wrdb, whook := newRedis(t, srv.Addr()), &scriptHook{}
	wrdb.AddHook(whook)
	wm := mustMutex(t, newLockClient(t, wrdb), name, cfg, lock.WithFair())
	wctx, wcancel := context.WithCancel(t.Context())
	gotW := lockAsync(t, wctx, wm)
	quiet(t, whook, 1)
	xrdb, xhook := newRedis(t, srv.Addr()), &scriptHook{}
	xrdb.AddHook(xhook)
	xm := mustMutex(t, newLockClient(t, xrdb), name, cfg, lock.WithFair())
	gotX := lockAsync(t, t.Context(), xm)
	quiet(t, xhook, 1)

	whook.close() // W's abandon waits
	t.Cleanup(whook.open)
	wcancel()
	if w := <-gotW; w.err == nil {
		t.Fatal("W's Lock returned a hold after its ctx ended")
	}
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The lock is now granted to W's call ("TERM CALL.0").
	key := "solo:{" + name + "}:lock"
	waitFor(t, func() bool {
		f, _ := rdb.HKeys(t.Context(), key).Result()
		return len(f) == 1 && strings.HasSuffix(f[0], ".0")
	})
	opened := time.Now()
	whook.open()
	select {
	case x := <-gotX:
		if x.err != nil {
			t.Fatal(x.err)
		}
		if d := time.Since(opened); d > 2*time.Second {
			t.Fatalf("X waited %s after W's abandon", d.Round(100*time.Millisecond))
		}
		_ = x.h.Unlock(t.Context())
	case <-time.After(10 * time.Second):
		t.Fatal("X still waiting 10s after W's abandon")
	}
}
