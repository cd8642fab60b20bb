package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/leader/lock"
)

// TestUnlock_StalledRedisKeepsDeadline: the last Unlock's release is
// sent even when ctx is cancelled, but ctx's deadline still bounds it:
// with Redis stalled (requests black-holed) and a 100ms deadline, Unlock
// returns near the deadline, not after RenewDeadline (2s here), both
// with calls on the caller's goroutine (a client that honours deadlines)
// and on a goroutine of their own.
func TestUnlock_StalledRedisKeepsDeadline(t *testing.T) {
	const bound = 100 * time.Millisecond
	for _, tc := range []struct {
		name  string
		ctxTO bool // the client honours context deadlines: inline calls
	}{{"inline", true}, {"goroutine", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := startRedis(t)
			p, err := faultproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: tc.ctxTO,
				ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			cfg := lock.Config{TTL: 3 * time.Second}
			m := mustMutex(t, newLockClient(t, rdb, lock.WithConfig(cfg)), lockName(t))
			h, err := m.Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			p.BlackholeRequests(true)
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			defer cancel()
			start := time.Now()
			err = h.Unlock(ctx)
			took := time.Since(start)
			p.Heal()
			if took >= time.Second { // generous: the bound is 100ms, RenewDeadline 2s
				t.Fatalf("Unlock with a %s deadline on a stalled Redis returned after %s (err %v); RenewDeadline is %s",
					bound, took, err, m.Config().RenewDeadline)
			}
			if err == nil {
				t.Fatalf("Unlock on a stalled Redis: nil error after %s, want the deadline's", took)
			}
		})
	}
}

// TestUnlock_PastDeadlineStillReleases: Unlock with a context whose
// deadline has already passed (work under the hold outran the request's
// timeout) still deletes the lock, at once, not a TTL later; both with
// calls on the caller's goroutine and on a goroutine of their own.
func TestUnlock_PastDeadlineStillReleases(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ctxTO bool
	}{{"inline", true}, {"goroutine", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, check := startRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: tc.ctxTO})
			t.Cleanup(func() { _ = rdb.Close() })
			name := lockName(t)
			m := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(lock.Config{TTL: time.Minute}))
			h, err := m.Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Millisecond))
			defer cancel()
			err = h.Unlock(ctx)
			key := "solo:{" + name + "}:lock"
			deadline := time.Now().Add(5 * time.Second) // TTL is a minute
			for check.Exists(t.Context(), key).Val() == 1 {
				if time.Now().After(deadline) {
					t.Fatalf("Unlock with a past deadline (err %v): the lock is still held %s later (TTL %s); no release was sent",
						err, 5*time.Second, time.Minute)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
