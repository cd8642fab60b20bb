package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// failLeaveOnce is a go-redis hook that fails the first heartbeat call
// that leaves the members (member TTL 0) of the group whose members key is
// key, once armed; every other call goes through.
type failLeaveOnce struct {
	key    string
	armed  atomic.Bool
	failed atomic.Int32
}

func (f *failLeaveOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *failLeaveOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// EVALSHA sha 6 KEYS[1..6] member ttl ...: KEYS[1] at 3, ttl at 10.
		a := cmd.Args()
		if len(a) > 10 && a[3] == f.key && a[10] == int64(0) && f.armed.CompareAndSwap(true, false) {
			f.failed.Add(1)
			err := errors.New("injected: leave lost")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (f *failLeaveOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSpread_FailedLeaveKeepsExclusionWhileDraining: the one call that
// extends a leaving member's exclusion entry over its drain fails; a job
// that drains for longer than the entry the last heartbeat wrote
// (member_ttl + TTL = 2s) still never runs beside the elect-mode instance
// waiting for the name: the leave is sent again while jobs drain.
//
// Mutation: with the leave sent once (the old Run) this fails with "job
// job00 runs on a and e at once" (the tracker's witness).
func TestSpread_FailedLeaveKeepsExclusionWhileDraining(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	hook := &failLeaveOnce{key: leader.Config{Name: "leave1"}.Key("members")}
	hooked := srv.Client(t)
	hooked.AddHook(hook)
	k := newTracker(t)
	var slow atomic.Bool
	slow.Store(true)
	drained := make(chan string, 1)
	cfg := leader.Config{Name: "leave1", ID: "a", TTL: time.Second, ShutdownTimeout: 5 * time.Second}
	s, err := worker.NewSpread(hooked, cfg, worker.SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pull("job00", k.slowJob("a", "job00", &slow, 3500*time.Millisecond, drained)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &spreadInst{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- s.Run(ctx) }()
	t.Cleanup(a.stop)
	k.waitLoads(t, 10*time.Second, []int{1}, "a")
	e := startElect(t, client, k, "leave1", "e", "job00")
	deadline := time.Now().Add(10 * time.Second)
	for e.logs.FilterMessageSnippet("a spread group of the same name runs its jobs").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the elect-mode instance never said why it does not campaign")
		}
		time.Sleep(20 * time.Millisecond)
	}
	hook.armed.Store(true)
	a.stop() // job00 drains for 3.5s, ignoring cancellation
	<-drained
	if hook.failed.Load() != 1 {
		t.Fatalf("the leave call failed %d times, want once", hook.failed.Load())
	}
	k.waitLoads(t, 10*time.Second, []int{1}, "e")
}
