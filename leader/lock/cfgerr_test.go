package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/lock"
)

// A configuration error (NOPERM) for locks. Old code: Lock retried a NOPERM until its
// context ended (one warn), and a refused renewal was retried until the
// renew deadline. Now Lock returns the configuration error at once, and a
// refused renewal ends the hold at once, with the error as the cause.
func TestLock_RedisConfigError(t *testing.T) {
	t.Run("Lock", func(t *testing.T) {
		srv := redistest.Start(t)
		c := newLockClient(t, srv.ACLClient(t, "~*", "&*", "+@all", "-evalsha"))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := mustMutex(t, c, lockName(t)).Lock(ctx)
		if !errors.Is(err, leader.ErrRedisConfig) || ctx.Err() != nil || !strings.Contains(err.Error(), "the ACL user lacks +evalsha") {
			t.Fatalf("Lock = %v (ctx %v), want a configuration error naming +evalsha, before the context ended", err, ctx.Err())
		}
	})
	t.Run("Redlock Lock", func(t *testing.T) {
		var masters []redis.UniversalClient
		for range 3 {
			masters = append(masters, redistest.Start(t).ACLClient(t, "~*", "&*", "+@all", "-hset"))
		}
		c, err := lock.NewRedlockClient(masters)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = mustMutex(t, c, lockName(t)).Lock(ctx)
		if !errors.Is(err, leader.ErrRedisConfig) || ctx.Err() != nil || !strings.Contains(err.Error(), "the ACL user lacks a command run by the lock acquire script (it runs ") {
			t.Fatalf("Lock = %v (ctx %v), want a configuration error naming the lock acquire script, before the context ended", err, ctx.Err())
		}
	})
	t.Run("renewal", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := srv.ACLClient(t, "~*", "&*", "+@all")
		core, logs := observer.New(zapcore.InfoLevel)
		cfg := lock.Config{TTL: 20 * time.Second, RenewInterval: 100 * time.Millisecond, RenewDeadline: 15 * time.Second}
		c := newLockClient(t, rdb, lock.WithConfig(cfg), lock.WithLogger(zap.New(core)))
		h, err := mustMutex(t, c, lockName(t)).Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Client(t).Do(context.Background(), "ACL", "SETUSER", "solo", "-evalsha", "-eval").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Context().Done():
		case <-time.After(10 * time.Second): // the renew deadline is 15s
			t.Fatal("the hold did not end within 10s of the ACL change")
		}
		if cause := context.Cause(h.Context()); !errors.Is(cause, leader.ErrRedisConfig) || !strings.Contains(cause.Error(), "+evalsha") {
			t.Fatalf("hold ended with %v, want the renewal's configuration error", cause)
		}
		// Logged just after the hold ends, on the renewal's goroutine.
		for end := time.Now().Add(5 * time.Second); logs.FilterMessageSnippet("renew refused").Len() == 0 && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := logs.FilterMessageSnippet("renew refused by redis: a configuration error").Len(); n != 1 {
			t.Fatalf("%d refused renewals logged, want one", n)
		}
		_ = h.Unlock(context.Background())
	})
}
