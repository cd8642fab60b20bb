package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/leader/lock"
)

func Example() {
	// miniredis stands in for Redis here so that the example runs anywhere;
	// the tests run against a real redis-server.
	mr, err := miniredis.Run()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c, err := lock.NewClient(rdb, lock.WithConfig(lock.Config{TTL: 5 * time.Second}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	m, err := c.Mutex("account-42")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The work runs under h.Context(): it is cancelled before the lock can
	// pass to another owner. h.Term() fences its writes.
	fmt.Println("held, fenced with a term:", h.Term() > 0)

	// Re-entry: a context carrying the hold locks again at once.
	inner, err := m.Lock(h.Context())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("re-entered, same term:", inner.Term() == h.Term())

	// Another context does not re-enter: it would wait.
	_, err = m.TryLock(ctx)
	fmt.Println("another context:", errors.Is(err, lock.ErrNotObtained))

	_ = inner.Unlock(ctx)
	_ = h.Unlock(ctx)
	fmt.Println("unlocked:", context.Cause(h.Context()))
	// Output:
	// held, fenced with a term: true
	// re-entered, same term: true
	// another context: true
	// unlocked: lock: unlocked
}
