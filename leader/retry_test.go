package leader_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/faultproxy"
	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
)

// retried is a RedisStore whose client (go-redis's default MaxRetries)
// goes through a fault proxy, and a client straight to the server.
type retried struct {
	p      *faultproxy.Proxy
	lock   *leader.RedisStore
	direct *redis.Client
	cfg    leader.Config
}

func newRetried(t *testing.T) retried {
	t.Helper()
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	cfg := redisConfig(t, "a")
	lock, err := leader.NewRedisStore(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return retried{p: p, lock: lock, direct: newClient(t, srv.Addr()), cfg: cfg}
}

// twice runs f while the proxy drops every reply; once ran reports that
// the server executed f's request, it resets the connections, so go-redis
// sends the request again on a new one. It returns f's error.
func (r retried) twice(t *testing.T, ran func() bool, f func() error) error {
	t.Helper()
	r.p.BlackholeReplies(true)
	done := make(chan error, 1)
	go func() { done <- f() }()
	waitFor(t, 10*time.Second, "the script ran", ran)
	r.p.BlackholeReplies(false)
	r.p.ResetAll()
	return <-done
}

// TestRedis_CheckpointRunTwice: go-redis re-sends a checkpoint whose
// connection reset after the server ran it (real redis-server; the fault
// proxy drops the reply and resets the link). The second run answers as
// the first did: recorded, not ErrCheckpointNotAdvanced (cron in
// at-most-once mode would skip the tick it just fired). Another request
// with the same value, of this lease or the next, still gets
// ErrCheckpointNotAdvanced.
func TestRedis_CheckpointRunTwice(t *testing.T) {
	r := newRetried(t)
	ctx := context.Background()
	_, rec, err := r.lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.lock.Checkpoint(ctx, rec.Lease, "cron:x", 1); err != nil { // loads the script
		t.Fatal(err)
	}
	ran := func() bool { return r.direct.Get(ctx, r.cfg.Key("cp:cron:x")).Val() == "2" }
	if err := r.twice(t, ran, func() error { return r.lock.Checkpoint(ctx, rec.Lease, "cron:x", 2) }); err != nil {
		t.Fatalf("Checkpoint whose script ran twice: %v", err)
	}
	if err := r.lock.Checkpoint(ctx, rec.Lease, "cron:x", 2); !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
		t.Fatalf("another request with the same value = %v, want ErrCheckpointNotAdvanced", err)
	}
	if err := r.lock.Release(ctx, rec.Lease); err != nil {
		t.Fatal(err)
	}
	_, rec2, err := r.lock.Acquire(ctx, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.lock.Checkpoint(ctx, rec2.Lease, "cron:x", 2); !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
		t.Fatalf("the next lease with the same value = %v, want ErrCheckpointNotAdvanced", err)
	}
}

// leased takes the lease as "a" after one acquire and release, which
// load the scripts (a request answered NOSCRIPT ran nothing).
func (r retried) leased(t *testing.T) leader.Record {
	t.Helper()
	ctx := context.Background()
	_, rec, err := r.lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.lock.Release(ctx, rec.Lease); err != nil {
		t.Fatal(err)
	}
	if _, rec, err = r.lock.Acquire(ctx, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestRedis_ReleaseRunTwice: go-redis re-sends a release whose
// connection reset after the server ran it; the second run answers
// "released", not ErrLeaseLost, and the next lease is taken as usual.
func TestRedis_ReleaseRunTwice(t *testing.T) {
	r := newRetried(t)
	ctx := context.Background()
	rec := r.leased(t)
	ran := func() bool { return r.direct.Exists(ctx, r.cfg.LeaseKey()).Val() == 0 }
	if err := r.twice(t, ran, func() error { return r.lock.Release(ctx, rec.Lease) }); err != nil {
		t.Fatalf("Release whose script ran twice: %v", err)
	}
	_, next, err := r.lock.Acquire(ctx, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.direct.HGet(ctx, r.cfg.InfoKey(), "lease").Val(); got != next.Lease.String() {
		t.Fatalf("info of the next lease: lease %q, want %q", got, next.Lease.String())
	}
	// The same release run again (its re-send landing after a follower
	// took the next lease) answers as the first, and leaves the next
	// lease alone; a release of a lease never released here is refused.
	if err := r.lock.Release(ctx, rec.Lease); err != nil {
		t.Fatalf("the same release run again under the next lease = %v, want nil", err)
	}
	if got := r.direct.Get(ctx, r.cfg.LeaseKey()).Val(); got != next.Lease.String() {
		t.Fatalf("lease after a re-run release: %q, want the next lease %q", got, next.Lease.String())
	}
	stale := rec.Lease
	stale.ID = "c"
	if err := r.lock.Release(ctx, stale); !errors.Is(err, leader.ErrLeaseLost) {
		t.Fatalf("a stale release under the next lease = %v, want ErrLeaseLost", err)
	}
}

// TestRedis_ReleaseRerunAfterFollowerTook: the release runs, its reply is
// lost, a follower takes the lease on the "released" notice (its acquire
// rewrites the info hash), and only then does go-redis's re-send land: it
// still answers "released", not ErrLeaseLost.
func TestRedis_ReleaseRerunAfterFollowerTook(t *testing.T) {
	r := newRetried(t)
	ctx := context.Background()
	follower, err := leader.NewRedisStore(r.direct, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := r.leased(t)
	var next leader.Record
	ran := func() bool {
		if r.direct.Exists(ctx, r.cfg.LeaseKey()).Val() != 0 {
			return false
		}
		_, next, err = follower.Acquire(ctx, "b", time.Minute)
		return err == nil
	}
	if err := r.twice(t, ran, func() error { return r.lock.Release(ctx, rec.Lease) }); err != nil {
		t.Fatalf("Release re-sent after a follower took lease %s: %v", next.Lease, err)
	}
	if got := r.direct.Get(ctx, r.cfg.LeaseKey()).Val(); got != next.Lease.String() {
		t.Fatalf("lease after the re-sent release: %q, want the follower's %q", got, next.Lease.String())
	}
}
