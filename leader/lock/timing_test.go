package lock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/hooks"
)

// fakeStore is an in-memory hooks.Store for timing tests under synctest:
// time is the bubble's fake clock, so deadlines are checked to the
// nanosecond.
type fakeStore struct {
	ttl time.Duration
	// deadlineClient: the Mutex's Redis client honours context deadlines
	// (ContextTimeoutEnabled), so calls go inline by default.
	deadlineClient bool

	mu       sync.Mutex
	field    string
	count    int64
	expires  time.Time
	term     uint64
	releases []string
	gone     map[string]bool // abandoned owners (tombstones)

	replyDelay   time.Duration // the acquire's reply comes this late (ignoring ctx)
	requestDelay time.Duration // the acquire runs this late (ignoring ctx)
	renewHang    chan struct{} // non-nil: renewals block until closed, ignoring ctx
	renewSent    []time.Time
	renewReply   time.Duration // a successful renewal's reply comes this late
	onRelease    func()        // called as a release arrives
	// acquireBounds records, per acquire, its context's deadline minus
	// the call time (-1: none).
	acquireBounds []time.Duration
}

func (f *fakeStore) liveLocked() bool {
	return f.field != "" && time.Now().Before(f.expires)
}

func (f *fakeStore) Acquire(ctx context.Context, owner string, adopt []string, reenter string, _ bool) (hooks.AcquireReply, error) {
	f.mu.Lock()
	bound := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		bound = time.Until(d)
	}
	f.acquireBounds = append(f.acquireBounds, bound)
	delay := f.replyDelay
	if d := f.requestDelay; d > 0 {
		f.mu.Unlock()
		time.Sleep(d)
		f.mu.Lock()
	}
	r, err := f.acquireLocked(owner, adopt, reenter)
	f.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	return r, err
}

func (f *fakeStore) acquireLocked(owner string, adopt []string, reenter string) (hooks.AcquireReply, error) {
	if reenter != "" {
		if f.liveLocked() && f.field == reenter {
			f.count++
			return hooks.AcquireReply{Code: hooks.CodeReentered, Count: f.count}, nil
		}
		return hooks.AcquireReply{Code: hooks.CodeGone}, nil
	}
	if f.gone[owner] {
		return hooks.AcquireReply{Code: hooks.CodeAbandoned}, nil
	}
	if f.liveLocked() {
		if slices.Contains(adopt, ownerOf(f.field)) {
			f.expires = time.Now().Add(f.ttl)
			return hooks.AcquireReply{Code: hooks.CodeAdopted, Term: f.term, Field: f.field}, nil
		}
		return hooks.AcquireReply{Code: hooks.CodeHeld, Holder: f.field, PTTL: time.Until(f.expires)}, nil
	}
	f.term++
	f.field = strconv.FormatUint(f.term, 10) + " " + owner
	f.count = 1
	f.expires = time.Now().Add(f.ttl)
	return hooks.AcquireReply{Code: hooks.CodeAcquired, Term: f.term}, nil
}

func (f *fakeStore) Renew(ctx context.Context, field string) (bool, error) {
	f.mu.Lock()
	f.renewSent = append(f.renewSent, time.Now())
	hang := f.renewHang
	f.mu.Unlock()
	if hang != nil {
		<-hang
		return false, errors.New("link down")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.liveLocked() || f.field != field {
		return false, nil
	}
	f.expires = time.Now().Add(f.ttl)
	if d := f.renewReply; d > 0 {
		f.mu.Unlock()
		time.Sleep(d)
		f.mu.Lock()
	}
	return true, nil
}

func (f *fakeStore) Release(ctx context.Context, field string, last bool) (int64, error) {
	if f.onRelease != nil {
		f.onRelease()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, field)
	if !f.liveLocked() || f.field != field {
		return -1, nil
	}
	if !last {
		f.count--
		if f.count > 0 {
			return f.count, nil
		}
	}
	f.field = ""
	return 0, nil
}

func (f *fakeStore) Abandon(ctx context.Context, _ string, owners []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	for _, o := range owners {
		f.gone[o] = true
	}
	if f.liveLocked() && slices.Contains(owners, ownerOf(f.field)) {
		f.field = ""
	}
	return nil
}

// newFakeMutex returns a Mutex on f, in the calling synctest bubble.
func newFakeMutex(t *testing.T, f *fakeStore, opts ...Option) (*Mutex, *Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: f.deadlineClient}) // never used: the hooks.Store is fake
	t.Cleanup(func() { _ = rdb.Close() })
	opts = append(opts, optionFunc(func(o *options) { o.newStore = func(*Mutex) hooks.Store { return f } }))
	c, err := NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Mutex("x")
	if err != nil {
		t.Fatal(err)
	}
	f.ttl = m.cfg.TTL
	return m, c
}

// forModes runs f, in a synctest bubble, in both ways Lock, TryLock and
// Unlock can send their calls: on a goroutine bounded by a local timer
// (a client that ignores context deadlines) and inline with a
// RenewDeadline deadline (the default with a client that honours them).
// Renewals and the deadline timer are the same in both.
func forModes(t *testing.T, f func(t *testing.T, deadlineClient bool)) {
	for _, md := range []struct {
		name           string
		deadlineClient bool
	}{{"goroutine", false}, {"inline", true}} {
		t.Run(md.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { f(t, md.deadlineClient) })
		})
	}
}

// TestTiming_DeadlineCancelWhileRenewHangs: renewals hang (the client
// ignores its context); the hold's context is cancelled exactly at the
// last successful renewal's send time + RenewDeadline, while the lease on
// the hooks.Store lasts until that send time + TTL: the stop budget.
// Mutation check: arming the deadline from the renewal's reply time, with
// the fake answering renewals 100ms late, fails with "cancelled at
// 3.1s, want 3s".
func TestTiming_DeadlineCancelWhileRenewHangs(t *testing.T) {
	forModes(t, func(t *testing.T, dl bool) {
		f := &fakeStore{deadlineClient: dl, renewReply: 100 * time.Millisecond}
		m, c := newFakeMutex(t, f, WithConfig(Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second}))
		defer c.Close()
		t0 := time.Now()
		h, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the first renewal, at t0+1s, succeeds
		synctest.Wait()
		hang := make(chan struct{})
		f.mu.Lock()
		f.renewHang = hang
		f.mu.Unlock()
		<-h.Context().Done()
		if got := time.Since(t0); got != 3*time.Second {
			t.Fatalf("cancelled at %s, want 3s (last renewal sent at 1s + renew deadline 2s)", got)
		}
		if !errors.Is(context.Cause(h.Context()), ErrRenewDeadline) {
			t.Fatalf("cause %v", context.Cause(h.Context()))
		}
		f.mu.Lock()
		left := time.Until(f.expires)
		f.mu.Unlock()
		if left != time.Second {
			t.Fatalf("lease left on the hooks.Store at the cancel: %s, want the stop budget 1s", left)
		}
		if err := h.Unlock(t.Context()); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Unlock: %v", err)
		}
		if len(f.releases) != 0 {
			t.Fatalf("released %v after a missed deadline", f.releases)
		}
		close(hang)
	})
}

// TestTiming_RenewAnsweredAfterDeadline: a renewal that succeeds on the
// hooks.Store but is answered after the deadline does not revive the hold.
func TestTiming_RenewAnsweredAfterDeadline(t *testing.T) {
	forModes(t, func(t *testing.T, dl bool) {
		f := &fakeStore{deadlineClient: dl}
		m, c := newFakeMutex(t, f, WithConfig(Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second}))
		defer c.Close()
		hang := make(chan struct{})
		f.renewHang = hang
		h, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		<-h.Context().Done()
		f.mu.Lock()
		f.renewHang = nil
		f.mu.Unlock()
		close(hang) // the hung renewal now answers (with an error here)
		time.Sleep(5 * time.Second)
		if !errors.Is(context.Cause(h.Context()), ErrRenewDeadline) {
			t.Fatalf("cause %v", context.Cause(h.Context()))
		}
		_ = h.Unlock(t.Context())
	})
}

// TestTiming_FixedLease: the context ends at send time + TTL×(1−Drift).
func TestTiming_FixedLease(t *testing.T) {
	forModes(t, func(t *testing.T, dl bool) {
		f := &fakeStore{deadlineClient: dl}
		m, c := newFakeMutex(t, f, WithFixedLease(10*time.Second))
		defer c.Close()
		t0 := time.Now()
		h, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		<-h.Context().Done()
		if got := time.Since(t0); got != 9900*time.Millisecond {
			t.Fatalf("fixed lease ended at %s, want 9.9s", got)
		}
		if len(f.renewSent) != 0 {
			t.Fatalf("fixed lease renewed %d times", len(f.renewSent))
		}
	})
}

// TestTiming_AcquireReplyLost: an acquire that takes effect but whose reply
// comes only after its bound gives no hold to TryLock, which returns at
// the bound and abandons the attempt at once: the abandon leaves a
// tombstone, so it is right in either order with the request, which may
// still be on its way. A request that ran before the abandon is undone by
// it; one that runs after it is refused (before, the abandon waited for
// the call to return from the client, which a request delayed in the
// network outlives). Lock retries and adopts its own lock, with the
// deadline counted from the adopting attempt's send time. Mutation
// checks: without the abandon in giveUp it fails with "lock left held by
// the failed TryLock"; without the tombstone check in the fake's acquire,
// "a request that landed after its abandon took the lock". The goroutine
// mode only: inline, the late reply is the call's return
// (TestTiming_LateAcquireReplyReleased).
func TestTiming_AcquireReplyLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeStore{replyDelay: 2500 * time.Millisecond}
		m, c := newFakeMutex(t, f, WithConfig(Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second}))
		defer c.Close()
		if _, err := m.TryLock(t.Context()); !errors.Is(err, errCallBound) {
			t.Fatalf("TryLock: %v, want errCallBound", err)
		}
		synctest.Wait()
		f.mu.Lock() // at 2s: the lock (taken at 0s) would last until 3s unless abandoned
		held := f.liveLocked()
		f.mu.Unlock()
		if held {
			t.Fatal("lock left held by the failed TryLock")
		}
		time.Sleep(time.Second)

		// The request itself lands after the bound, after the abandon.
		f.replyDelay, f.requestDelay = 0, 2500*time.Millisecond
		if _, err := m.TryLock(t.Context()); !errors.Is(err, errCallBound) {
			t.Fatalf("TryLock: %v, want errCallBound", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		f.mu.Lock() // at 3s of the call: the request ran at 2.5s
		held = f.liveLocked()
		f.requestDelay = 0
		f.mu.Unlock()
		if held {
			t.Fatal("a request that landed after its abandon took the lock")
		}

		// Lock: the first attempt lands after its bound; the retry adopts.
		f.replyDelay = 2500 * time.Millisecond
		t0 := time.Now()
		done := make(chan *Hold, 1)
		go func() {
			h, err := m.Lock(t.Context())
			if err != nil {
				t.Error(err)
			}
			done <- h
		}()
		time.Sleep(2 * time.Second) // the first attempt's bound
		f.mu.Lock()
		f.replyDelay = 0
		f.mu.Unlock()
		h := <-done
		if h == nil {
			return
		}
		retrySent := time.Since(t0)
		if h.Term() != f.term {
			t.Fatalf("hold term %d, hooks.Store term %d", h.Term(), f.term)
		}
		f.mu.Lock()
		f.renewHang = make(chan struct{})
		f.mu.Unlock()
		<-h.Context().Done()
		if got := time.Since(t0); got > retrySent+2*time.Second || got < 2*time.Second {
			t.Fatalf("adopted hold cancelled at %s, retry sent at ~%s", got, retrySent)
		}
		close(f.renewHang)
	})
}

// TestTiming_ContextEndsBeforeRelease: a hold's context (and, for the
// last hold, every hold of the term) is cancelled before the release is
// sent, so the work under it is told to stop before another owner can
// get the lock. Mutation check: cancelling after the release (a deferred
// cancel, as first written) fails with "release sent while the hold's
// context was live" (and made TestMutex_LostAcquireReplyNoTwoHolders
// flaky with "two holders").
func TestTiming_ContextEndsBeforeRelease(t *testing.T) {
	forModes(t, func(t *testing.T, dl bool) {
		f := &fakeStore{deadlineClient: dl}
		m, c := newFakeMutex(t, f)
		defer c.Close()
		outer, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		inner, err := m.Lock(outer.Context())
		if err != nil {
			t.Fatal(err)
		}
		f.onRelease = func() {
			if inner.Context().Err() == nil {
				t.Error("release sent while the hold's context was live")
			}
		}
		if err := inner.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		f.onRelease = func() {
			if outer.Context().Err() == nil {
				t.Error("last release sent while the hold's context was live")
			}
		}
		if err := outer.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTiming_LateAcquireReplyReleased: inline, nothing but the reply
// bounds the call (WithInlineCalls with a client that ignores deadlines;
// by default, a client that honours them is given RenewDeadline, but a
// reply may still come late: here the fake ignores it), so a reply can
// come after the attempt's send time + RenewDeadline: it must never make
// a hold (the lock may already have passed on); the lock is released
// instead. In the default inline mode the call's context carries the
// RenewDeadline deadline. Mutation checks: without the late check in held
// it fails with "TryLock held on a reply 2.5s after its send time" (both
// modes); without inlineCtx's deadline, with "inline/acquire bounds
// [-1ns], want [2s]".
func TestTiming_LateAcquireReplyReleased(t *testing.T) {
	forModes(t, func(t *testing.T, dl bool) {
		f := &fakeStore{deadlineClient: dl, replyDelay: 2500 * time.Millisecond}
		opts := []Option{WithConfig(Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second})}
		if !dl {
			opts = append(opts, WithInlineCalls())
		}
		m, c := newFakeMutex(t, f, opts...)
		defer c.Close()
		if !m.inline {
			t.Fatal("calls not inline")
		}
		h, err := m.TryLock(t.Context())
		if err == nil {
			_ = h.Unlock(t.Context())
			t.Fatal("TryLock held on a reply 2.5s after its send time")
		}
		if !errors.Is(err, errLate) {
			t.Fatalf("TryLock: %v, want errLate", err)
		}
		f.mu.Lock()
		held, releases := f.liveLocked(), len(f.releases)
		f.mu.Unlock()
		if held || releases != 1 {
			t.Fatalf("after a late reply: held %v, %d releases; want the lock released", held, releases)
		}
		want := time.Duration(-1) // WithInlineCalls: the client's own timeouts only
		if dl {
			want = 2 * time.Second
		}
		if len(f.acquireBounds) != 1 || f.acquireBounds[0] != want {
			t.Fatalf("acquire bounds %v, want [%s]", f.acquireBounds, want)
		}
	})
}

// TestCallMode: calls go inline by default exactly when the client
// honours context deadlines (single node, Sentinel failover, Cluster), or
// with WithInlineCalls; a client that does not (or that cannot be
// inspected) keeps the goroutine bound. Mutation check: honoursDeadlines
// returning true for every client fails with "plain client: inline true,
// bounded true; want false, false".
func TestCallMode(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	ctxOn := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	clusterOff := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	for _, tc := range []struct {
		name            string
		rdb             redis.UniversalClient
		opts            []Option
		inline, bounded bool
	}{
		{"plain client", plain, nil, false, false},
		{"plain client, WithInlineCalls", plain, []Option{WithInlineCalls()}, true, false},
		{"ContextTimeoutEnabled", ctxOn, nil, true, true},
		{"failover client", failover, nil, true, true},
		{"cluster client", cluster, nil, true, true},
		{"cluster client without", clusterOff, nil, false, false},
		{"ring (not inspected)", ring, nil, false, false},
	} {
		t.Cleanup(func() { _ = tc.rdb.Close() })
		c, err := NewClient(tc.rdb, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Mutex("x")
		if err != nil {
			t.Fatal(err)
		}
		if m.inline != tc.inline || m.ctxBound != tc.bounded {
			t.Errorf("%s: inline %v, bounded %v; want %v, %v", tc.name, m.inline, m.ctxBound, tc.inline, tc.bounded)
		}
		_ = c.Close()
	}
}

// TestTiming_DeadlineEndsEveryHold: the lease ends its holds itself (their
// contexts are not children of the lease's): at the deadline the first
// hold, every re-entry not yet unlocked and their own children end at
// once with ErrRenewDeadline; an unlocked re-entry is not kept by the
// lease; a re-entry after the loss fails with ErrLockLost (and its
// cause). Mutation checks: end cancelling only the first hold fails with
// "re-entry: cause <nil> at the deadline"; Unlock not dropping the
// re-entry, with "lease keeps 2 re-entries, want 1"; the re-entry error
// wrapping only the cause (as it did), with "re-entry after the loss:
// lock x: hold in context: lock: renew deadline passed, want
// ErrLockLost".
func TestTiming_DeadlineEndsEveryHold(t *testing.T) {
	forModes(t, func(t *testing.T, dl bool) {
		f := &fakeStore{deadlineClient: dl, renewHang: make(chan struct{})}
		m, c := newFakeMutex(t, f, WithConfig(Config{TTL: 3 * time.Second, RenewInterval: time.Second, RenewDeadline: 2 * time.Second}))
		defer c.Close()
		t0 := time.Now()
		outer, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		inner, err := m.Lock(outer.Context())
		if err != nil {
			t.Fatal(err)
		}
		gone, err := m.Lock(outer.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := gone.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		outer.l.mu.Lock()
		kept := len(outer.l.more)
		outer.l.mu.Unlock()
		if kept != 1 {
			t.Fatalf("lease keeps %d re-entries, want 1 (the unlocked one dropped)", kept)
		}
		child, cancel := context.WithCancel(inner.Context())
		defer cancel()
		<-outer.Context().Done()
		if got := time.Since(t0); got != 2*time.Second {
			t.Fatalf("first hold ended at %s, want 2s", got)
		}
		for name, ctx := range map[string]context.Context{"re-entry": inner.Context(), "re-entry's child": child} {
			if cause := context.Cause(ctx); !errors.Is(cause, ErrRenewDeadline) {
				t.Fatalf("%s: cause %v at the deadline", name, cause)
			}
		}
		if _, err := m.Lock(outer.Context()); !errors.Is(err, ErrLockLost) {
			t.Fatalf("re-entry after the loss: %v, want ErrLockLost", err)
		}
		close(f.renewHang)
	})
}
