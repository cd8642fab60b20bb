package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// rerunHook runs the first script command whose arguments end with
// field, "1" (a last release of field), twice: its first reply is lost,
// and the second run (go-redis's retry) lands delay later.
type rerunHook struct {
	delay time.Duration

	mu    sync.Mutex
	field string
	runs  []any // the two runs' replies
}

func (h *rerunHook) arm(field string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.field = field
}

func (h *rerunHook) take(cmd redis.Cmder) bool {
	a := cmd.Args()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.field == "" || !isScript(cmd) || len(a) < 4 || fmt.Sprint(a[len(a)-4]) != h.field || fmt.Sprint(a[len(a)-3]) != "1" {
		return false
	}
	h.field = ""
	return true
}

func (h *rerunHook) record(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append(h.runs, cmd.(*redis.Cmd).Val())
}

func (h *rerunHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *rerunHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.take(cmd) {
			return next(ctx, cmd)
		}
		_ = next(ctx, cmd)
		h.record(cmd)
		time.Sleep(h.delay)
		err := next(ctx, cmd)
		h.record(cmd)
		return err
	}
}

func (h *rerunHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.take(cmd) {
				_ = next(ctx, cmds)
				h.record(cmd)
				time.Sleep(h.delay)
				err := next(ctx, cmds)
				h.record(cmd)
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// TestRetry_LateRerunOfLastRelease: inline calls over a client that
// ignores deadlines (its calls return when the client does). The last
// release runs, its reply is lost, and the client's retry lands after
// the first run's mark lapsed (it lives a TTL): the second run answers
// "not held". Unlock must not report ErrLockLost for a lock its release
// deleted: the late answer is no proof, as it would be no answer at all
// on a goroutine bounded by RenewDeadline.
func TestRetry_LateRerunOfLastRelease(t *testing.T) {
	srv, check := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // no ContextTimeoutEnabled
	t.Cleanup(func() { _ = rdb.Close() })
	cfg := lock.Config{TTL: 300 * time.Millisecond}
	hook := &rerunHook{delay: 2 * cfg.TTL}
	rdb.AddHook(hook)
	name := lockName(t)
	m := mustMutex(t, newLockClient(t, rdb), name, lock.WithConfig(cfg), lock.WithInlineCalls())
	// Load the scripts first: a request answered NOSCRIPT ran nothing.
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h, err = m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	hook.arm(lock.Field(h))
	err = h.Unlock(t.Context())
	hook.mu.Lock()
	runs := hook.runs
	hook.mu.Unlock()
	if len(runs) != 2 || runs[0] != int64(0) {
		t.Fatalf("setup: the release's runs answered %v, want 0 then -1", runs)
	}
	if errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Unlock whose release ran (%v) and ran again %s later (%v): %v; want no ErrLockLost",
			runs[0], hook.delay, runs[1], err)
	}
	if n := check.Exists(t.Context(), "solo:{"+name+"}:lock").Val(); n != 0 {
		t.Fatalf("the lock is still there after Unlock")
	}
}
