package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/solo-run/solo/internal/redistest"
	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// TestSpread_RerunWaitsForStraggler: a job ignores cancellation past the
// shutdown timeout, so Run returns ErrStopTimeout with the job still
// running; a second Run of the same Spread does not start a second copy
// of it while the first runs (as a second Run of one Elector waits), ends
// with ErrStopTimeout again if stopped meanwhile, and runs the job once
// the first copy returned.
//
// Mutation: with no wait across Runs (each Run's fresh electors campaign
// at once) this fails with "3 copies of job j running at once".
func TestSpread_RerunWaitsForStraggler(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	cfg := spreadConfig("rerun")
	cfg.ID = "m"
	cfg.ShutdownTimeout = 200 * time.Millisecond
	s, err := worker.NewSpread(client, cfg, worker.SpreadConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var copies, most atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	if err := s.Pull("j", func(ctx context.Context) error {
		n := copies.Add(1)
		defer copies.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- struct{}{}
		<-ctx.Done()
		<-release // ignores cancellation until released
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	run := func() (stop func() error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		return func() error { cancel(); return <-done }
	}
	waitStart := func(what string) {
		t.Helper()
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the job did not start within 10s", what)
		}
	}

	stop := run()
	waitStart("first Run")
	if err := stop(); !errors.Is(err, leader.ErrStopTimeout) {
		t.Fatalf("first Run returned %v, want ErrStopTimeout", err)
	}
	// The lease is left to expire (TTL 1s); a second Run must still not
	// start the job while its first copy runs.
	stop = run()
	time.Sleep(3 * time.Second)
	if err := stop(); !errors.Is(err, leader.ErrStopTimeout) {
		t.Errorf("second Run, stopped while the first copy runs, returned %v, want ErrStopTimeout", err)
	}
	stop = run()
	time.Sleep(2 * time.Second)
	if n := most.Load(); n > 1 {
		close(release)
		stop()
		t.Fatalf("%d copies of job j running at once", n)
	}
	close(release)
	waitStart("after the first copy returned")
	if err := stop(); err != nil {
		t.Errorf("third Run returned %v", err)
	}
	if n := most.Load(); n > 1 {
		t.Fatalf("%d copies of job j running at once", n)
	}
}
