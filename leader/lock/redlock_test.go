package lock_test

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

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/lock"
)

// startMasters starts n independent redis-servers.
func startMasters(t testing.TB, n int) []*redistest.Server {
	t.Helper()
	srvs := make([]*redistest.Server, n)
	for i := range srvs {
		srvs[i] = redistest.Start(t)
	}
	return srvs
}

// newRedlock returns a Redlock Client with connections of its own (a
// process) to every master.
func newRedlock(t testing.TB, srvs []*redistest.Server, opts ...lock.Option) *lock.Client {
	t.Helper()
	masters := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		masters[i] = newRedis(t, s.Addr())
	}
	c, err := lock.NewRedlockClient(masters, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockKeyOn reports whether the lock's hash exists on a master.
func lockKeyOn(t testing.TB, srv *redistest.Server, name string) bool {
	t.Helper()
	n, err := newRedis(t, srv.Addr()).Exists(context.Background(), "solo:{"+name+"}:lock").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func termKeyOn(t testing.TB, srv *redistest.Server, name string) uint64 {
	t.Helper()
	s, err := newRedis(t, srv.Addr()).Get(context.Background(), "solo:{"+name+"}:lock.term").Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNewRedlockClient_Errors(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:2"})
	t.Cleanup(func() { _, _ = a.Close(), b.Close() })
	tests := []struct {
		name    string
		masters []redis.UniversalClient
		want    string
	}{
		{name: "none", masters: nil, want: "invalid masters 0: must list at least one Redis master"},
		{name: "nil", masters: []redis.UniversalClient{a, nil}, want: "invalid masters[1] <nil>: must be a Redis client"},
		{name: "repeated", masters: []redis.UniversalClient{a, b, a}, want: "lock: invalid masters[2]: the same client as masters[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lock.NewRedlockClient(tt.masters)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err %v, want one starting %q", err, tt.want)
			}
			var ce *leader.ConfigError
			if tt.name != "repeated" && !errors.As(err, &ce) {
				t.Fatalf("err %T, want a *leader.ConfigError", err)
			}
		})
	}
	c, err := lock.NewRedlockClient([]redis.UniversalClient{a, b}, lock.WithConfig(lock.Config{TTL: -1}))
	if err == nil {
		_ = c.Close()
		t.Fatal("a bad TTL was accepted")
	}
	c, err = lock.NewRedlockClient([]redis.UniversalClient{a, b})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Mutex("x", lock.WithFair()); err == nil || !strings.Contains(err.Error(), "fair mode is not available with Redlock") {
		t.Fatalf("fair Redlock Mutex: %v, want refused", err)
	}
}

// redlockExclusion runs procs Clients × goroutines holders of one lock
// over srvs, fault running beside them until they finish, and checks from
// outside that no two holds overlap and that terms strictly grow. A holder
// works until its hold's context ends or 2ms pass, so a lost hold counts
// only until its context says so.
func redlockExclusion(t *testing.T, srvs []*redistest.Server, fault func(stop <-chan struct{}), opts ...lock.Option) *witness {
	name := lockName(t)
	w := &witness{}
	const procs, goroutines, rounds = 3, 3, 12
	opts = append([]lock.Option{lock.WithConfig(lock.Config{TTL: 2 * time.Second})}, opts...)
	var wg sync.WaitGroup
	var total, lost atomic.Int64
	for p := range procs {
		m := mustMutex(t, newRedlock(t, srvs, opts...), name)
		for g := range goroutines {
			who := fmt.Sprintf("p%d-g%d", p, g)
			wg.Go(func() {
				for range rounds {
					h, err := m.LockTimeout(t.Context(), 60*time.Second)
					if err != nil {
						t.Errorf("%s: Lock: %v", who, err)
						return
					}
					w.enter(who, h.Term())
					select {
					case <-h.Context().Done():
						lost.Add(1)
					case <-time.After(2 * time.Millisecond):
					}
					w.leave()
					total.Add(1)
					if err := h.Unlock(context.Background()); err != nil && !errors.Is(err, lock.ErrLockLost) {
						t.Errorf("%s: Unlock: %v", who, err)
					}
				}
			})
		}
	}
	stop := make(chan struct{})
	var fw sync.WaitGroup
	if fault != nil {
		fw.Go(func() { fault(stop) })
	}
	wg.Wait()
	close(stop)
	fw.Wait()
	for _, f := range w.faults {
		t.Error(f)
	}
	if got := total.Load(); got != procs*goroutines*rounds {
		t.Errorf("%d holds, want %d", got, procs*goroutines*rounds)
	}
	t.Logf("%d holds, %d lost while held, last term %d", total.Load(), lost.Load(), w.lastTerm)
	return w
}

// TestRedlock_MutualExclusion: 3 Clients × 3 goroutines on one Redlock
// lock over three masters, with the masters healthy, one killed, one
// frozen (SIGSTOP), and one restarted empty (no persistence) again and
// again while holds run; an outside witness checks that no two holds
// overlap and that terms strictly grow.
//
// Mutation check: quorum 1 instead of len/2+1 fails every case at once
// with "p2-g0 entered with term 1795387938831373 while another held".
func TestRedlock_MutualExclusion(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		srvs := startMasters(t, 3)
		redlockExclusion(t, srvs, nil)
	})
	t.Run("one down", func(t *testing.T) {
		// masters[0]: the Client's first connection (notices from the
		// others must wake the waiters).
		srvs := startMasters(t, 3)
		srvs[0].Kill(t)
		redlockExclusion(t, srvs, nil)
	})
	t.Run("one frozen", func(t *testing.T) {
		srvs := startMasters(t, 3)
		srvs[0].Stop(t)
		t.Cleanup(func() { srvs[0].Cont(t) })
		redlockExclusion(t, srvs, nil)
	})
	t.Run("one restarted empty", func(t *testing.T) {
		srvs := startMasters(t, 3)
		name := lockName(t)
		restarts := 0
		w := redlockExclusion(t, srvs, func(stop <-chan struct{}) {
			for restarts < 4 {
				select {
				case <-stop:
					return
				case <-time.After(150 * time.Millisecond):
				}
				srvs[1].Restart(t)
				restarts++
			}
		})
		t.Logf("%d restarts", restarts)
		if restarts == 0 {
			t.Fatal("no restart happened while holds ran")
		}
		// One more hold once the restarts are over: its term is above the
		// run's last (a restarted master mints from its clock), and its
		// release raised the term counter of every master of its quorum to
		// the hold's term, the restarted one included: a quorum of masters
		// must carry it. (The run's own last hold cannot be judged this
		// way: a restart during it may have taken one of its two masters,
		// the window docs/design.md names.)
		m := mustMutex(t, newRedlock(t, srvs, lock.WithConfig(lock.Config{TTL: 2 * time.Second})), name)
		h, err := m.LockTimeout(t.Context(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if h.Term() <= w.lastTerm {
			t.Errorf("term after the restarts %d, want above the run's last %d", h.Term(), w.lastTerm)
		}
		if err := h.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		carry := 0
		for _, s := range srvs {
			if termKeyOn(t, s, name) == h.Term() {
				carry++
			}
		}
		if carry < 2 {
			t.Fatalf("%d masters carry the last term %d as their floor, want a quorum (2)", carry, h.Term())
		}
	})
}

// TestRedlock_TermsGrowAcrossQuorums: the masters' terms differ (here
// masters[1]'s counter is an hour ahead, as a master whose clock is ahead
// would mint). With masters[2] down the quorum is {0, 1} and the hold
// takes the higher term; then masters[2] comes back empty and masters[1]
// dies, and the next quorum, {0, 2}, still mints a higher term: the
// release raised masters[0]'s counter to the hold's term, and any two
// quorums share a master. Mutation check: without the raise in
// redlock_release.lua it fails with "second term 17… not above the first
// 17…" (an hour's microseconds lower).
func TestRedlock_TermsGrowAcrossQuorums(t *testing.T) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	ctx := t.Context()
	ahead := uint64(time.Now().Add(time.Hour).UnixMicro())
	if err := newRedis(t, srvs[1].Addr()).Set(ctx, "solo:{"+name+"}:lock.term", ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	srvs[2].Kill(t)
	m := mustMutex(t, newRedlock(t, srvs), name)
	h1, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t1 := h1.Term()
	if t1 <= ahead {
		t.Fatalf("first term %d, want above masters[1]'s counter %d: the highest of the quorum's", t1, ahead)
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	srvs[2].Restart(t)
	srvs[1].Kill(t)
	h2, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h2.Unlock(context.Background()) }()
	if h2.Term() <= t1 {
		t.Fatalf("second term %d not above the first %d", h2.Term(), t1)
	}
}

// TestRedlock_QuorumLost: two of three masters die under a hold: renewals
// find no quorum, the hold's context ends by its deadline (before the
// lock's TTL), Unlock reports the loss, and TryLock fails cleanly with
// ErrNoQuorum (another lock name) or ErrNotObtained (the lost hold's key
// is still on the live master) and leaves nothing behind.
func TestRedlock_QuorumLost(t *testing.T) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	c := newRedlock(t, srvs, lock.WithConfig(lock.Config{TTL: time.Second}))
	m := mustMutex(t, c, name)
	ctx := t.Context()
	h, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srvs[1].Kill(t)
	srvs[2].Kill(t)
	select {
	case <-h.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("hold still live 10s after its quorum died")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrRenewDeadline) {
		t.Fatalf("cause %v, want ErrRenewDeadline", cause)
	}
	if err := h.Unlock(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Unlock: %v, want ErrLockLost", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) && !errors.Is(err, lock.ErrNoQuorum) {
		t.Fatalf("TryLock on the lost name: %v", err)
	}
	// Default TTL: the dead masters' refusals come back well within the
	// bound (RenewDeadline), so the verdict is the quorum's, not a timer's.
	other := mustMutex(t, newRedlock(t, srvs), name+"-other")
	_, err = other.TryLock(ctx)
	if !errors.Is(err, lock.ErrNoQuorum) {
		t.Fatalf("TryLock without a quorum: %v, want ErrNoQuorum", err)
	}
	t.Logf("TryLock: %v", err)
	if lockKeyOn(t, srvs[0], name+"-other") {
		t.Fatal("the failed TryLock left its partial acquisition on the live master")
	}
}

// TestRedlock_PartialAcquireUndone: other owners hold the lock on two
// masters (as after a split between contenders); TryLock takes the third,
// finds no quorum, reports ErrNotObtained and removes its partial
// acquisition. Mutation check: without the undo (both the one before
// returning and the late one) it fails with "condition not met within
// 10s".
func TestRedlock_PartialAcquireUndone(t *testing.T) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	ctx := t.Context()
	for i, s := range srvs[1:] {
		key := "solo:{" + name + "}:lock"
		r := newRedis(t, s.Addr())
		if err := r.HSet(ctx, key, fmt.Sprintf("%d intruder-%d", 5+i, i), 1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.PExpire(ctx, key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// TTL 30s: a partial acquisition left behind would outlast waitFor.
	m := mustMutex(t, newRedlock(t, srvs, lock.WithConfig(lock.Config{TTL: 30 * time.Second})), name)
	_, err := m.TryLock(ctx)
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock: %v, want ErrNotObtained", err)
	}
	// Undone before TryLock returns when masters[0] answered in time,
	// right after its reply when it answered after the other two.
	waitFor(t, func() bool { return !lockKeyOn(t, srvs[0], name) })

	// The same with one of the holders' masters down instead.
	srvs[2].Kill(t)
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock with a master down: %v, want ErrNotObtained", err)
	}
	waitFor(t, func() bool { return !lockKeyOn(t, srvs[0], name) })
}

// TestRedlock_Reentrancy: a hold re-entered through its context counts on
// every master; the lock goes only with the last Unlock.
func TestRedlock_Reentrancy(t *testing.T) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	m := mustMutex(t, newRedlock(t, srvs), name)
	ctx := t.Context()
	h1, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := m.Lock(h1.Context())
	if err != nil {
		t.Fatal(err)
	}
	if h2.Term() != h1.Term() {
		t.Fatalf("re-entry term %d, want %d", h2.Term(), h1.Term())
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock from another context: %v, want ErrNotObtained", err)
	}
	if err := h1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h2.Context().Err(); err != nil {
		t.Fatalf("inner hold ended with the outer Unlock: %v", err)
	}
	held := 0
	for _, s := range srvs {
		if lockKeyOn(t, s, name) {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("lock on %d masters after one of two Unlocks, want a quorum", held)
	}
	if err := h2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Unlock returns once a quorum released; the third master's release
	// follows.
	waitFor(t, func() bool {
		return !lockKeyOn(t, srvs[0], name) && !lockKeyOn(t, srvs[1], name) && !lockKeyOn(t, srvs[2], name)
	})
}

// TestRedlock_NoticeFromAnyMaster: with masters[0] (the Client's first
// connection) frozen, a waiter still wakes on the release notice of the
// other masters, long before the holder's TTL (30s) would have let it
// in. Mutation check: subscribing on masters[0] only fails with
// "condition not met within 10s" (nobody listens on masters[1]).
func TestRedlock_NoticeFromAnyMaster(t *testing.T) {
	// RetryInterval 200ms: the waiter's first wait for masters[0]'s
	// subscription (never live: frozen) ends soon, and it then sleeps
	// for the holder's TTL or a notice; the release comes after that.
	releaseWithMaster0Frozen(t, 200*time.Millisecond, time.Second)
}

// TestRedlock_FirstWaitReadyOnAnyMaster: with masters[0] frozen, a
// waiter's first wait for a live subscription ends when another master's
// is live, not after its bound (RetryInterval 20s here, and the holder's
// TTL 30s), so a release right after it subscribed still wakes it.
// Mutation check: waiting for masters[0]'s subscription only fails with
// "waiter still waiting 10s after the release".
func TestRedlock_FirstWaitReadyOnAnyMaster(t *testing.T) {
	releaseWithMaster0Frozen(t, 20*time.Second, 0)
}

// releaseWithMaster0Frozen freezes masters[0], has one Redlock Client hold
// the lock (TTL 30s) and another wait for it with RetryInterval retry,
// releases it pause after the waiter listens on masters[1] and [2], and
// fails unless the waiter gets the lock within 10s of the release.
func releaseWithMaster0Frozen(t *testing.T, retry, pause time.Duration) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	cfg := lock.WithConfig(lock.Config{TTL: 30 * time.Second, RetryInterval: retry})
	holder := mustMutex(t, newRedlock(t, srvs, cfg), name)
	waiter := mustMutex(t, newRedlock(t, srvs, cfg), name)
	ctx := t.Context()
	srvs[0].Stop(t)
	t.Cleanup(func() { srvs[0].Cont(t) })
	h, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Hold, 1)
	go func() {
		h2, err := waiter.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- h2
	}()
	channel := "solo:{" + name + "}:lock.events"
	for _, s := range srvs[1:] {
		r := newRedis(t, s.Addr())
		waitFor(t, func() bool { return r.PubSubNumSub(ctx, channel).Val()[channel] > 0 })
	}
	time.Sleep(pause)
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case h2 := <-got:
		if h2 != nil {
			_ = h2.Unlock(ctx)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter still waiting 10s after the release")
	}
}

// TestRedlock_HoldSurvivesFrozenMaster: the hold took all three masters
// (Lock returned on the first two replies); one that answered first
// freezes. Renewals go on with the other two, by owner on the master
// whose reply came after the quorum's, so the hold outlives several TTLs
// and Unlock works. Mutation check: renewing only the masters that
// confirmed (the first version) fails with "hold lost after the freeze:
// lock: renew deadline passed" whenever the frozen master was one of them.
func TestRedlock_HoldSurvivesFrozenMaster(t *testing.T) {
	srvs := startMasters(t, 3)
	name := lockName(t)
	m := mustMutex(t, newRedlock(t, srvs, lock.WithConfig(lock.Config{TTL: time.Second})), name)
	ctx := t.Context()
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return lockKeyOn(t, srvs[0], name) && lockKeyOn(t, srvs[1], name) && lockKeyOn(t, srvs[2], name)
	})
	srvs[0].Stop(t)
	t.Cleanup(func() { srvs[0].Cont(t) })
	select {
	case <-h.Context().Done():
		t.Fatalf("hold lost after the freeze: %v", context.Cause(h.Context()))
	case <-time.After(3 * time.Second): // three TTLs
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if lockKeyOn(t, srvs[1], name) && lockKeyOn(t, srvs[2], name) {
		t.Fatal("Unlock left the lock on both live masters")
	}
}
