package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/lock"
)

// A Client on a Redis that may evict its lock keys (maxmemory with a
// volatile-* policy: the lock key has a TTL, so it goes first) refuses
// Lock and TryLock with a configuration error naming the policy and the
// fix, writes nothing, and locks once the policy is fixed live. Old code:
// it locked, and a second owner could take an evicted lock.
func TestLock_EvictionPolicyRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []lock.Option
	}{{"plain", nil}, {"fair", []lock.Option{lock.WithFair()}}} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
			rdb := srv.Client(t)
			c := newLockClient(t, rdb, tt.opts...)
			m := mustMutex(t, c, lockName(t))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, try := range []bool{false, true} {
				var err error
				if try {
					_, err = m.TryLock(ctx)
				} else {
					_, err = m.Lock(ctx)
				}
				if !errors.Is(err, leader.ErrEvictionPolicy) || !errors.Is(err, leader.ErrRedisConfig) || ctx.Err() != nil ||
					!strings.Contains(err.Error(), "volatile-lru") || !strings.Contains(err.Error(), "CONFIG SET maxmemory-policy noeviction") {
					t.Fatalf("try %v: %v (ctx %v), want a configuration error naming the policy and the fix", try, err, ctx.Err())
				}
			}
			if keys, err := rdb.Keys(ctx, "*").Result(); err != nil || len(keys) != 0 {
				t.Fatalf("keys %v (%v): a refused call wrote", keys, err)
			}
			if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			h, err := m.Lock(ctx)
			if err != nil {
				t.Fatalf("Lock after the fix: %v", err)
			}
			_ = h.Unlock(ctx)
		})
	}
	t.Run("Redlock", func(t *testing.T) {
		var masters []redis.UniversalClient
		for i := range 3 {
			args := []string{"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}
			if i == 0 {
				args[3] = "allkeys-lru"
			}
			masters = append(masters, redistest.Start(t, args...).Client(t))
		}
		c, err := lock.NewRedlockClient(masters)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// One master of three may evict: a quorum still forms, and that
		// master is named.
		h, err := mustMutex(t, c, lockName(t)).Lock(ctx)
		if err != nil {
			t.Fatalf("Lock with one evicting master of three: %v", err)
		}
		_ = h.Unlock(ctx)
		if n, _ := masters[0].Exists(ctx, "solo:{"+lockName(t)+"}:lock").Result(); n != 0 {
			t.Fatal("the evicting master holds the lock")
		}
	})
}

// A hold whose Redis starts evicting (set live) ends at a renewal once the
// policy is re-read, with the error as its context's cause.
func TestLock_EvictionPolicyChangedLiveEndsHold(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cfg := lock.Config{TTL: 20 * time.Second, RenewInterval: 100 * time.Millisecond, RenewDeadline: 15 * time.Second}
	c := newLockClient(t, rdb, lock.WithConfig(cfg))
	lock.EvictionGuardOf(c).SetPeriod(50 * time.Millisecond)
	h, err := mustMutex(t, c, lockName(t)).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory", "100mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Context().Done():
	case <-time.After(10 * time.Second): // the renew deadline is 15s
		t.Fatal("the hold did not end within 10s of the policy change")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, leader.ErrEvictionPolicy) {
		t.Fatalf("hold ended with %v, want ErrEvictionPolicy", cause)
	}
	_ = h.Unlock(ctx)
}
