package lock_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/lock"
)

// TestMinReplicas_Sentinel: the lock
// honours MinReplicas as an election does, on a real Sentinel group (a
// primary, a replica, three sentinels). With the replica frozen, a fresh
// acquire is handed back and reported (ErrNotReplicated) instead of held
// on a write a failover could lose, and a hold's renewals count as failed
// until the renew deadline ends it; with the replica back, locks are
// taken again, and a hold taken with the replica's acknowledgement
// survives a planned failover (nobody else gets the lock). Before the
// lock had MinReplicas, the frozen-replica acquire was held: a failover
// to that replica would hand the lock to a second owner.
func TestMinReplicas_Sentinel(t *testing.T) {
	s := redistest.StartSentinel(t, "solo-lock-"+strconv.Itoa(os.Getpid()))
	rdb := s.FailoverClient(t, func(o *redis.FailoverOptions) { o.ContextTimeoutEnabled = true })
	name := lockName(t)
	cfg := lock.Config{TTL: 3 * time.Second, RenewInterval: 500 * time.Millisecond, RenewDeadline: 2 * time.Second,
		MinReplicas: 1, ReplicaTimeout: 100 * time.Millisecond}
	c := newLockClient(t, rdb, lock.WithConfig(cfg))
	a := mustMutex(t, c, name)
	b := mustMutex(t, c, name+"-b")
	ctx := t.Context()

	ha, err := a.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with the replica up: %v", err)
	}
	// The acquire reached the replica before TryLock returned.
	rc := newRedis(t, s.Replica().Addr())
	if n, err := rc.HExists(ctx, "solo:{"+name+"}:lock", lock.Field(ha)).Result(); err != nil || !n {
		t.Fatalf("the replica lacks the hold: %v %v", n, err)
	}

	s.Replica().Stop(t)
	frozen := time.Now()
	hb, err := b.TryLock(ctx)
	if err == nil {
		s.Replica().Cont(t)
		t.Fatalf("TryLock with a frozen replica: got term %d, want ErrNotReplicated", hb.Term())
	}
	if !errors.Is(err, lock.ErrNotReplicated) {
		s.Replica().Cont(t)
		t.Fatalf("TryLock with a frozen replica: %v, want ErrNotReplicated", err)
	}
	// Handed back: nothing of b is left on the primary.
	pc := newRedis(t, s.Primary().Addr())
	waitFor(t, func() bool { return pc.Exists(ctx, "solo:{"+name+"-b}:lock").Val() == 0 })
	// a's renewals are not acknowledged: the hold ends at its renew
	// deadline, not later, and not as lost.
	select {
	case <-ha.Context().Done():
	case <-time.After(cfg.RenewDeadline + time.Second):
		s.Replica().Cont(t)
		t.Fatal("a's hold outlived its renew deadline with no renewal acknowledged")
	}
	if cause := context.Cause(ha.Context()); !errors.Is(cause, lock.ErrRenewDeadline) {
		t.Errorf("a's cause = %v, want ErrRenewDeadline", cause)
	}
	if d := time.Since(frozen); d < cfg.RenewDeadline-cfg.RenewInterval {
		t.Errorf("a's hold ended %s after the freeze, before a renewal could have failed", d)
	}
	_ = ha.Unlock(ctx)
	s.Replica().Cont(t)

	// With the replica back, a hold is taken and outlives a planned
	// failover: the promoted replica has it, so nobody else gets it.
	hb, err = b.LockTimeout(ctx, 10*time.Second)
	if err != nil {
		t.Fatalf("Lock with the replica back: %v", err)
	}
	s.Failover(t)
	other := mustMutex(t, newLockClient(t, s.FailoverClient(t, func(o *redis.FailoverOptions) { o.ContextTimeoutEnabled = true }),
		lock.WithConfig(cfg)), name+"-b")
	if h, err := other.TryLock(ctx); err == nil {
		if hb.Context().Err() == nil {
			t.Fatalf("after the failover another owner took term %d while term %d is live", h.Term(), hb.Term())
		}
		_ = h.Unlock(ctx)
	}
	_ = hb.Unlock(ctx)
}

// TestMinReplicas_RefusedWithRedlock: Redlock's masters are independent
// primaries, so MinReplicas is refused with an error naming the field.
func TestMinReplicas_RefusedWithRedlock(t *testing.T) {
	srvs := startMasters(t, 1)
	cfg := lock.WithConfig(lock.Config{MinReplicas: 1})
	_, err := lock.NewRedlockClient([]redis.UniversalClient{newRedis(t, srvs[0].Addr())}, cfg)
	var ce *leader.ConfigError
	if !errors.As(err, &ce) || ce.Field != "min_replicas" {
		t.Fatalf("NewRedlockClient with MinReplicas: %v, want a ConfigError naming min_replicas", err)
	}
	c := newRedlock(t, srvs)
	if _, err := c.Mutex("x", cfg); !errors.As(err, &ce) || ce.Field != "min_replicas" {
		t.Fatalf("Redlock Mutex with MinReplicas: %v, want a ConfigError naming min_replicas", err)
	}
}

// startReplicated starts a primary and one replica of it, in sync.
func startReplicated(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t)
	replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	rc := newRedis(t, replica.Addr())
	waitFor(t, func() bool {
		info, _ := rc.Info(t.Context(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	return primary, replica
}

// TestMinReplicas_FairGrant: a grant becomes a hold only through an
// acquire's WAIT. The grantee's Mutex has MinReplicas 1; its replica is
// frozen when the holder releases, and the release grants the lock to
// the grantee's call. The grantee must not hold a lock no replica
// acknowledged (a failover would hand it to another owner): its Lock
// waits until the replica is back, then holds.
func TestMinReplicas_FairGrant(t *testing.T) {
	primary, replica := startReplicated(t)
	rdb := newRedis(t, primary.Addr())
	name := lockName(t)
	holder := mustMutex(t, newLockClient(t, rdb), name, lock.WithFair())
	h, err := holder.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg := lock.Config{TTL: 3 * time.Second, MinReplicas: 1, ReplicaTimeout: 50 * time.Millisecond}
	got, _ := waitGranted(t, primary.Addr(), name, cfg)
	replica.Stop(t)
	frozen := true
	defer func() {
		if frozen {
			replica.Cont(t)
		}
	}()
	if err := h.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatalf("the grantee holds term %d with its replica frozen (MinReplicas 1): no replica has it", r.h.Term())
		}
		t.Fatalf("Lock: %v", r.err)
	case <-time.After(time.Second):
	}
	replica.Cont(t)
	frozen = false
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.h.Unlock(t.Context())
	case <-time.After(10 * time.Second):
		t.Fatal("the grantee is still waiting 10s after its replica came back")
	}
}
