package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// slowJob is tracker.job for a job that, while slow is set, keeps running
// for drain after its context is cancelled (it ignores cancellation that
// long); the witness stays exact: the job counts as running until it
// returns.
func (k *tracker) slowJob(inst, name string, slow *atomic.Bool, drain time.Duration, drained chan<- string) func(context.Context) error {
	fast := k.job(inst, name)
	return func(ctx context.Context) error {
		if !slow.Load() {
			return fast(ctx)
		}
		k.mu.Lock()
		if other, ok := k.running[name]; ok {
			k.t.Errorf("job %s runs on %s and %s at once", name, other, inst)
		}
		k.running[name] = inst
		k.starts[name]++
		k.mu.Unlock()
		<-ctx.Done()
		if slow.Load() {
			time.Sleep(drain) // ignores cancellation this long
		}
		k.mu.Lock()
		delete(k.running, name)
		k.mu.Unlock()
		select {
		case drained <- inst + ":" + name:
		default:
		}
		return nil
	}
}

// TestSpread_ShedRenewsWhileDraining: a job shed to rebalance is resigned
// in every respect: its lease is renewed while it drains, however long
// past TTL and shutdown_timeout that takes, and no other member starts it
// before it returned (issue 22, finding 11).
//
// Mutation: with the old shed (Resign bounded by ShutdownTimeout + TTL,
// then the campaign cancelled, i.e. a shutdown: renewing stops at
// shutdown_timeout and the lease expires under the draining job) this
// fails with "job jobNN runs on a and b at once".
func TestSpread_ShedRenewsWhileDraining(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	k := newTracker(t)
	var slow atomic.Bool
	slow.Store(true)
	drained := make(chan string, 4)
	const drain = 4 * time.Second // TTL 1s, shutdown_timeout 200ms
	start := func(name string) *spreadInst {
		cfg := leader.Config{Name: "shed", ID: name, TTL: time.Second, ShutdownTimeout: 200 * time.Millisecond}
		s, err := worker.NewSpread(client, cfg, worker.SpreadConfig{MinHold: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range []string{"job00", "job01"} {
			if err := s.Pull(j, k.slowJob(name, j, &slow, drain, drained)); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		in := &spreadInst{s: s, cancel: cancel, done: make(chan error, 1)}
		go func() { in.done <- s.Run(ctx) }()
		t.Cleanup(in.stop)
		return in
	}
	start("a")
	k.waitLoads(t, 10*time.Second, []int{2, 0}, "a", "b")
	start("b")
	select {
	case who := <-drained: // the shed job returned, drain later
		if who[:2] != "a:" {
			t.Fatalf("%s drained; want a job of a (shed)", who)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a never shed a job")
	}
	// The shed job moves to b once it returned, not before.
	k.waitLoads(t, 10*time.Second, []int{1, 1}, "a", "b")
	slow.Store(false)
}
