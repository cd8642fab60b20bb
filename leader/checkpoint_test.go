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
	lock, err := leader.NewRedisStore(c, cfg)
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

// TestRedis_CheckpointLargeValues: checkpoint.lua compares int64 values
// exactly, far above 2^53 where Lua's doubles are not exact. The worker's
// failed-terms count is term×1000 + n with terms of server microseconds
// (about 1.8e15), so about 1.8e18.
//
// Mutation: with the old tonumber comparison this fails with
// "term×1000+1 after term×1000: checkpoint … to 1764000000000000001: leader:
// checkpoint not advanced" (both round to the same double).
func TestRedis_CheckpointLargeValues(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	lock, err := leader.NewRedisStore(c, redisConfig(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, rec, err := lock.Acquire(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const term = 1_764_000_000_000_000 // server µs in late 2025
	steps := []struct {
		name    string
		n       int64
		advance bool
	}{
		{"term×1000", term * 1000, true},
		{"term×1000+1 after term×1000", term*1000 + 1, true},
		{"term×1000+2", term*1000 + 2, true},
		{"term×1000+1 again", term*1000 + 1, false},
		{"the same", term*1000 + 2, false},
		{"a much lower value", 5, false},
		{"a negative value", -term * 1000, false},
		{"the next term's reset", (term + 7) * 1000, true},
		{"max int64", 1<<63 - 1, true},
		{"max int64 - 1", 1<<63 - 2, false},
	}
	for _, s := range steps {
		err := lock.Checkpoint(ctx, rec.Lease, "failed-terms", s.n)
		if s.advance && err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !s.advance && !errors.Is(err, leader.ErrCheckpointNotAdvanced) {
			t.Fatalf("%s: %v, want ErrCheckpointNotAdvanced", s.name, err)
		}
	}
	if n, ok, err := lock.LoadCheckpoint(ctx, "failed-terms"); err != nil || !ok || n != 1<<63-1 {
		t.Fatalf("LoadCheckpoint() = %d %v %v", n, ok, err)
	}

	// Negative values order as integers too (-2^53-1 < -2^53, -10 < -9).
	neg := []struct {
		n       int64
		advance bool
	}{{-(1 << 53) - 1, true}, {-(1 << 53), true}, {-(1 << 53) - 1, false}, {-10, true}, {-9, true}, {-10, false}, {0, true}, {-1, false}, {1, true}}
	for _, s := range neg {
		err := lock.Checkpoint(ctx, rec.Lease, "neg", s.n)
		if s.advance != (err == nil) {
			t.Fatalf("checkpoint %d: %v, want advance %v", s.n, err, s.advance)
		}
	}
}
