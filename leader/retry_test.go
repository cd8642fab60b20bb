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

// TestRedis_CheckpointRunTwice: go-redis re-sends a checkpoint whose
// connection reset after the server ran it (real redis-server; the fault
// proxy drops the reply and resets the link). The second run answers as
// the first did: recorded, not ErrCheckpointNotAdvanced (cron in
// at-most-once mode would skip the tick it just fired). Another request
// with the same value, of this lease or the next, still gets
// ErrCheckpointNotAdvanced.
func TestRedis_CheckpointRunTwice(t *testing.T) {
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 5 * time.Second}) // default MaxRetries (3)
	t.Cleanup(func() { _ = c.Close() })
	direct := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	lock, err := leader.NewRedisLock(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, rec, err := lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Checkpoint(ctx, rec.Lease, "cron:x", 1); err != nil { // loads the script
		t.Fatal(err)
	}
	p.BlackholeReplies(true)
	done := make(chan error, 1)
	go func() { done <- lock.Checkpoint(ctx, rec.Lease, "cron:x", 2) }()
	waitFor(t, 10*time.Second, "the checkpoint ran", func() bool { return direct.Get(ctx, cfg.Key("cp:cron:x")).Val() == "2" })
	p.BlackholeReplies(false)
	p.ResetAll()
	if err := <-done; err != nil {
		t.Fatalf("Checkpoint whose script ran twice: %v", err)
	}
	if err := lock.Checkpoint(ctx, rec.Lease, "cron:x", 2); !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
		t.Fatalf("another request with the same value = %v, want ErrCheckpointNotAdvanced", err)
	}
	if err := lock.Release(ctx, rec.Lease); err != nil {
		t.Fatal(err)
	}
	_, rec2, err := lock.Acquire(ctx, "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Checkpoint(ctx, rec2.Lease, "cron:x", 2); !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
		t.Fatalf("the next lease with the same value = %v, want ErrCheckpointNotAdvanced", err)
	}
}
