package leader_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
)

func TestRedis_CheckpointIsFencedAndMonotonic(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	cfg := redisConfig(t, "a")
	lock, err := leader.NewRedisLock(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok, err := lock.LoadCheckpoint(ctx, "cron:x"); err != nil || ok {
		t.Fatalf("LoadCheckpoint() on nothing = %v %v", ok, err)
	}
	_, rec, err := lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Checkpoint(ctx, rec.Lease, "cron:x", 100); err != nil {
		t.Fatal(err)
	}
	if err := lock.Checkpoint(ctx, rec.Lease, "cron:x", 100); !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
		t.Fatalf("same value = %v, want ErrCheckpointNotAdvanced", err)
	}
	if err := lock.Checkpoint(ctx, rec.Lease, "cron:x", 99); !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
		t.Fatalf("lower value = %v, want ErrCheckpointNotAdvanced", err)
	}
	// The key shares the lease's slot and prefix.
	if v, _ := c.Get(ctx, cfg.Key("cp:cron:x")).Result(); v != "100" {
		t.Fatalf("stored %q", v)
	}
	// A stale lease cannot write.
	if err := lock.Release(ctx, rec.Lease); err != nil {
		t.Fatal(err)
	}
	_, rec2, _ := lock.Acquire(ctx, "b", time.Minute)
	if err := lock.Checkpoint(ctx, rec.Lease, "cron:x", 200); !errors.Is(err, leader.ErrLeaseLost) {
		t.Fatalf("stale lease = %v, want ErrLeaseLost", err)
	}
	if err := lock.Checkpoint(ctx, rec2.Lease, "cron:x", 200); err != nil {
		t.Fatal(err)
	}
	if n, ok, err := lock.LoadCheckpoint(ctx, "cron:x"); err != nil || !ok || n != 200 {
		t.Fatalf("LoadCheckpoint() = %d %v %v", n, ok, err)
	}
}

func TestElector_FunctionReturningErrResignedResigns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		a := newElector(t, lock, fastConfig("a"))
		b := newElector(t, lock, fastConfig("b"))
		started := make(chan string, 10)
		drained := false
		stopA := run(t, a, func(ctx context.Context) error {
			started <- "a"
			// Drain own work for longer than the stop budget: the lease must
			// stay renewed meanwhile, since the function has not returned.
			time.Sleep(5 * time.Second)
			if h, _, ok := lock.Holder(); !ok || h.ID != a.ID() {
				t.Errorf("lease lost while draining: %v %v", h, ok)
			}
			drained = true
			return errors.Join(errors.New("job failed 5 times"), leader.ErrResigned)
		})
		if <-started != "a" {
			t.Fatal("a did not lead")
		}
		stopB := run(t, b, func(ctx context.Context) error { started <- "b"; <-ctx.Done(); return nil })
		if got := <-started; got != "b" || !drained {
			t.Fatalf("next leader %q (drained %v), want b after a drained", got, drained)
		}
		// Checkpoints are fenced by the term in the context.
		ctx := leader.WithTerm(context.Background(), b.Term())
		if err := b.Checkpoint(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		if err := a.Checkpoint(leader.WithTerm(context.Background(), 1), "k", 2); !errors.Is(err, leader.ErrLeaseLost) {
			t.Fatalf("stale Checkpoint() = %v", err)
		}
		if n, ok, _ := a.LoadCheckpoint(context.Background(), "k"); !ok || n != 1 {
			t.Fatalf("LoadCheckpoint() = %d %v", n, ok)
		}
		if h, err := a.Leader(context.Background()); err != nil || h.ID != b.ID() {
			t.Fatalf("Leader() = %+v %v", h, err)
		}
		_ = stopA()
		_ = stopB()
	})
}
