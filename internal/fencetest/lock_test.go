package fencetest_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader/fence"
	"github.com/solo-run/solo/leader/lock"
)

// TestLockFence: the fence guard takes a lock's term and owner as it takes
// an election's. A hold whose lock passed to another owner (its key was
// lost, as after a pause past the stop budget) has its write refused once
// the new holder claimed its higher term; the new holder's write goes
// through. Runs on SQLite and PostgreSQL.
func TestLockFence(t *testing.T) {
	srv := redistest.Start(t)
	forEachBackend(t, func(t *testing.T, newEnv func(t *testing.T) *env) {
		e := newEnv(t)
		ctx := ctxT(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		defer rdb.Close()
		name := "acct-" + t.Name()[len("TestLockFence/"):]
		newMutex := func() (*lock.Mutex, *lock.Client) {
			c, err := lock.NewClient(rdb, lock.WithConfig(lock.Config{TTL: 30 * time.Second}))
			if err != nil {
				t.Fatal(err)
			}
			m, err := c.Mutex(name)
			if err != nil {
				t.Fatal(err)
			}
			return m, c
		}
		m1, c1 := newMutex()
		defer c1.Close()
		m2, c2 := newMutex()
		defer c2.Close()

		old, err := m1.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		write := func(h *lock.Hold, who string) error {
			return e.g.DoTerm(ctx, h.Name(), h.Term(), h.Holder(), func(tx *sql.Tx) error { return e.insert(ctx, tx, who, h.Term()) })
		}
		if err := e.g.Claim(ctx, old.Name(), old.Term(), old.Holder()); err != nil {
			t.Fatalf("claim of a lock's term: %v", err)
		}
		if err := write(old, "old"); err != nil {
			t.Fatalf("write of the holder: %v", err)
		}
		// The old holder is frozen; its key goes (expiry after a pause,
		// a failover that lost it) and another owner takes the lock.
		if err := rdb.Del(ctx, "solo:{"+name+"}:lock").Err(); err != nil {
			t.Fatal(err)
		}
		cur, err := m2.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cur.Term() <= old.Term() {
			t.Fatalf("new term %d not above %d", cur.Term(), old.Term())
		}
		if err := e.g.Claim(ctx, cur.Name(), cur.Term(), cur.Holder()); err != nil {
			t.Fatalf("claim of the new term: %v", err)
		}
		// The old holder wakes up and writes with its term: refused.
		if err := write(old, "old"); !errors.Is(err, fence.ErrStaleTerm) {
			t.Fatalf("stale hold's write: %v, want ErrStaleTerm", err)
		}
		if err := write(cur, "cur"); err != nil {
			t.Fatalf("write of the current holder: %v", err)
		}
		// A claim of the old term again is refused too.
		if err := e.g.Claim(ctx, old.Name(), old.Term(), old.Holder()); !errors.Is(err, fence.ErrStaleTerm) {
			t.Fatalf("re-claim of the old term: %v, want ErrStaleTerm", err)
		}
		if n := e.count(t, "old"); n != 1 {
			t.Fatalf("old holder has %d rows, want 1 (the write before the handover)", n)
		}
		_ = cur.Unlock(context.Background())
		_ = old.Unlock(context.Background())
	})
}
