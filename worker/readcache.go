package worker

import (
	"context"
	"sync"
	"time"

	"github.com/solo-run/solo/leader"
)

// leaderMaxAge is the oldest read of Redis /leader serves; leaderReadTimeout
// bounds one read.
const (
	leaderMaxAge      = time.Second
	leaderReadTimeout = 2 * time.Second
)

// readCache shares the reads of Redis behind /leader among its requests:
// get returns the last read while it is younger than maxAge and was made
// under the same key (what the elector itself knows: a new term, a new
// holder seen, reads again), and concurrent callers wait for the one read
// in flight. However many requests come, the reads are at most one per
// maxAge and per change of key. A read runs in the goroutine of the
// request that starts it, to its end (bounded by leaderReadTimeout) even
// if that request goes away.
type readCache[K comparable, V any] struct {
	read   func(context.Context) V
	maxAge time.Duration

	mu     sync.Mutex
	val    V
	key    K
	at     time.Time     // when val was read; zero before the first read
	flight chan struct{} // closed when the read in flight ends; nil when none
}

func newReadCache[K comparable, V any](read func(context.Context) V) *readCache[K, V] {
	return &readCache[K, V]{read: read, maxAge: leaderMaxAge}
}

// get returns a read made under key and its age, or ctx's error if ctx
// ends while another caller's read is in flight.
func (c *readCache[K, V]) get(ctx context.Context, key K) (V, time.Duration, error) {
	for {
		c.mu.Lock()
		if !c.at.IsZero() && c.key == key {
			if age := time.Since(c.at); age < c.maxAge {
				v := c.val
				c.mu.Unlock()
				return v, age, nil
			}
		}
		if f := c.flight; f != nil {
			c.mu.Unlock()
			select {
			case <-f:
				continue
			case <-ctx.Done():
				var zero V
				return zero, 0, ctx.Err()
			}
		}
		f := make(chan struct{})
		c.flight = f
		c.mu.Unlock()

		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaderReadTimeout)
		v := c.read(rctx)
		cancel()
		c.mu.Lock()
		c.val, c.key, c.at, c.flight = v, key, time.Now(), nil
		c.mu.Unlock()
		close(f)
		return v, 0, nil
	}
}

// aged returns a copy of h as it stands age after it was read: its time
// left shortened by age (not below zero). nil for nil.
func aged(h *leader.Holder, age time.Duration) *leader.Holder {
	if h == nil {
		return nil
	}
	c := *h
	c.TTLLeft = max(c.TTLLeft-age, 0)
	return &c
}
