package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/leader/lock"
)

// rerun runs f while the proxy drops every reply; once ran reports that
// the server executed f's request, it resets the connections, so
// go-redis (its default MaxRetries) sends the request again on a new
// one, whose reply comes back. It returns f's error.
func rerun(t *testing.T, p *faultproxy.Proxy, ran func() bool, f func() error) error {
	t.Helper()
	p.BlackholeReplies(true)
	done := make(chan error, 1)
	go func() { done <- f() }()
	waitFor(t, ran)
	p.BlackholeReplies(false)
	p.ResetAll()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after the reset")
		return nil
	}
}

// TestRetry_ScriptsRunTwice: go-redis re-sends a script that already ran
// when the connection resets before its reply (real redis-server, the
// fault proxy resets the link after the server executed it). Every
// script answers the second run as the first: TryLock holds what its
// first run took (not "held by" itself), a fair Lock on a free lock holds
// at once (not queued behind its own hold for a TTL), and the last
// Unlock returns nil (not ErrLockLost); plain, fair and Redlock.
func TestRetry_ScriptsRunTwice(t *testing.T) {
	for _, kind := range []string{"plain", "fair", "redlock"} {
		t.Run(kind, func(t *testing.T) {
			srv, rdb := startRedis(t)
			p, err := faultproxy.New(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			prdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true,
				ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}) // go-redis's default MaxRetries (3)
			t.Cleanup(func() { _ = prdb.Close() })
			cfg := lock.WithConfig(lock.Config{TTL: 3 * time.Second})
			var c *lock.Client
			opts := []lock.Option{cfg}
			switch kind {
			case "redlock":
				if c, err = lock.NewRedlockClient([]redis.UniversalClient{prdb}, cfg); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
			case "fair":
				opts = append(opts, lock.WithFair())
				fallthrough
			default:
				c = newLockClient(t, prdb, cfg)
			}
			name := lockName(t)
			key := "solo:{" + name + "}:lock"
			m := mustMutex(t, c, name, opts...)
			held := func() bool { return rdb.Exists(t.Context(), key).Val() == 1 }
			gone := func() bool { return rdb.Exists(t.Context(), key).Val() == 0 }

			// Load the scripts first: a request answered NOSCRIPT ran
			// nothing.
			h, err := m.TryLock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			err = rerun(t, p, held, func() (err error) { h, err = m.TryLock(t.Context()); return err })
			if err != nil {
				t.Fatalf("TryLock whose script ran twice: %v (the lock is %v)", err, rdb.HKeys(t.Context(), key).Val())
			}
			if err := rerun(t, p, gone, func() error { return h.Unlock(t.Context()) }); err != nil {
				t.Fatalf("Unlock whose last release ran twice: %v", err)
			}
			if kind != "fair" {
				return
			}
			start := time.Now()
			err = rerun(t, p, held, func() (err error) { h, err = m.Lock(t.Context()); return err })
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("fair Lock on a free lock whose script ran twice held after %s (TTL 3s)", d.Round(10*time.Millisecond))
			}
			if q := rdb.LRange(t.Context(), key+".queue", 0, -1).Val(); len(q) != 0 {
				t.Errorf("queue after the hold: %q, want empty", q)
			}
			_ = h.Unlock(context.Background())
		})
	}
}
