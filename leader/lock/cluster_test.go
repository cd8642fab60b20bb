package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader/lock"
)

// TestCluster_ManyLocks: on a 3-master Cluster, locks of many names (their
// slots spread over every master) are taken, re-entered, handed over to a
// waiter of another Client by the release notice (one pub/sub connection
// per Client, whichever node it is on: the cluster bus relays PUBLISH), and
// released. Mutation check: a term key without the hash tag (lock and term
// key in different slots) fails with "acct-0: context deadline exceeded
// acquire solo:{acct-0}:lock: CROSSSLOT Keys in request don't hash to the
// same slot" (Lock retries Redis errors until its ctx ends).
func TestCluster_ManyLocks(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	opt := func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true }
	a := newLockClient(t, cl.Client(t, opt), lock.WithConfig(lock.Config{TTL: 5 * time.Second}))
	b := newLockClient(t, cl.Client(t, opt), lock.WithConfig(lock.Config{TTL: 5 * time.Second}))
	cc := cl.Client(t, opt)
	const names = 48
	slots := map[string]bool{}
	var wg sync.WaitGroup
	for i := range names {
		name := fmt.Sprintf("acct-%d", i)
		node, err := cc.MasterForKey(t.Context(), "solo:{"+name+"}:lock")
		if err != nil {
			t.Fatal(err)
		}
		slots[node.Options().Addr] = true
		ma, mb := mustMutex(t, a, name), mustMutex(t, b, name)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			h, err := ma.Lock(ctx)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			inner, err := ma.Lock(h.Context())
			if err != nil {
				t.Errorf("%s: re-enter: %v", name, err)
				return
			}
			got := make(chan *lock.Hold, 1)
			go func() {
				hb, err := mb.LockTimeout(ctx, 4*time.Second) // < TTL: only a notice wakes it in time
				if err != nil {
					t.Errorf("%s: waiter: %v", name, err)
				}
				got <- hb
			}()
			time.Sleep(100 * time.Millisecond)
			if _, err := mb.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("%s: TryLock while held: %v", name, err)
			}
			_ = inner.Unlock(ctx)
			if err := h.Unlock(ctx); err != nil {
				t.Errorf("%s: Unlock: %v", name, err)
			}
			hb := <-got
			if hb == nil {
				return
			}
			if hb.Term() <= h.Term() {
				t.Errorf("%s: term %d after %d", name, hb.Term(), h.Term())
			}
			_ = hb.Unlock(context.Background())
		})
	}
	wg.Wait()
	if len(slots) != 3 {
		t.Fatalf("lock names on %d masters, want 3", len(slots))
	}
}
