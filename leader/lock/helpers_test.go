package lock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader/lock"
)

func newRedis(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLockClient(t testing.TB, rdb redis.UniversalClient, opts ...lock.Option) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustMutex(t testing.TB, c *lock.Client, name string, opts ...lock.Option) *lock.Mutex {
	t.Helper()
	m, err := c.Mutex(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func lockName(t testing.TB) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

func startRedis(t testing.TB) (*redistest.Server, *redis.Client) {
	srv := redistest.Start(t)
	return srv, newRedis(t, srv.Addr())
}

// counter counts the commands a client sends, by name (EVALSHA/EVAL by
// the script's first key suffix is not needed: tests count EVALSHA+EVAL).
type counter struct {
	mu    sync.Mutex
	cmds  map[string]int
	pipes int
}

func newCounter() *counter { return &counter{cmds: map[string]int{}} }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.cmds[cmd.Name()]++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts the commands of a pipeline (the Client's
// batches) as if sent one by one; pipes counts the pipelines.
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.pipes++
		for _, cmd := range cmds {
			c.cmds[cmd.Name()]++
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (c *counter) get(names ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, name := range names {
		n += c.cmds[name]
	}
	return n
}

// holdCount returns the hold count stored for h, 0 when absent.
func holdCount(t testing.TB, rdb redis.UniversalClient, name string, h *lock.Hold) int64 {
	t.Helper()
	field := lock.Field(h)
	n, err := rdb.HGet(context.Background(), "solo:{"+name+"}:lock", field).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
