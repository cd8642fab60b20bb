package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// runLog records cron runs as "tick@instance", the tick in seconds after
// base: started and completed ones.
type runLog struct {
	mu                 sync.Mutex
	base               time.Time
	started, completed []string
}

func (l *runLog) entry(ctx context.Context, id string) string {
	tick, ok := worker.TickFrom(ctx)
	if !ok {
		panic("no tick in a cron run's context")
	}
	return fmt.Sprintf("%d@%s", int(tick.Sub(l.base).Seconds()), id)
}

func (l *runLog) start(ctx context.Context, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = append(l.started, l.entry(ctx, id))
}

func (l *runLog) done(ctx context.Context, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completed = append(l.completed, l.entry(ctx, id))
}

func (l *runLog) lists() (started, completed string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.started), fmt.Sprint(l.completed)
}

// TestCron_AtLeastOnce_LeaderDiesMidRun: the leader is cut off from Redis
// while its run for tick 30 goes; the run ends with the term (it fails).
// At least once, the next leader runs tick 30 again: the last tick fired
// but never completed. At most once (the default, and the only delivery
// before), tick 30 is lost:
//
//	completed [10@a 20@a 40@b 50@b]: tick 30, cut off mid-run on a, never
//	completed
func TestCron_AtLeastOnce_LeaderDiesMidRun(t *testing.T) {
	for _, tt := range []struct {
		delivery worker.Delivery
		want     string
	}{
		{worker.AtMostOnce, "[10@a 20@a 40@b 50@b]"},
		{worker.AtLeastOnce, "[10@a 20@a 30@b 40@b 50@b]"},
	} {
		t.Run(string(tt.delivery), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				l := &runLog{base: time.Now().UTC()}
				stall, release := make(chan struct{}), make(chan struct{})
				a := newInstance(t, &stallable{Store: lock, stall: stall, release: release}, "a")
				b := newInstance(t, lock, "b")
				for _, in := range []*instance{a, b} {
					id := configuredID(in.e.ID())
					if err := in.w.Cron("report", "*/10 * * * * *", func(ctx context.Context) error {
						l.start(ctx, id)
						if tick, _ := worker.TickFrom(ctx); id == "a" && tick.Sub(l.base) == 30*time.Second {
							<-ctx.Done() // cut off mid-run: the term ends first
							return ctx.Err()
						}
						l.done(ctx, id)
						return nil
					}, worker.WithDelivery(tt.delivery)); err != nil {
						t.Fatal(err)
					}
				}
				a.start()
				synctest.Wait()
				b.start()
				defer func() {
					close(release)
					_ = a.stop()
					_ = b.stop()
				}()
				// a renews every second; cut off at 30.5, its deadline
				// passes at 32, its lease expires at 33 and b takes over.
				time.Sleep(30500 * time.Millisecond)
				close(stall)
				time.Sleep(25 * time.Second) // 55.5
				started, completed := l.lists()
				if completed != tt.want {
					t.Fatalf("completed %s, want %s (started %s)", completed, tt.want, started)
				}
				if !b.e.IsLeader() {
					t.Fatal("b does not lead")
				}
			})
		})
	}
}

// TestCron_AtLeastOnce_FailedRunRunsAgain: a run that fails is run again
// for the same tick, with back-off (1s), until it succeeds; its completion
// is recorded. At most once, the failed tick is not run again:
//
//	completed [20 30]: tick 10 failed and was never run again
func TestCron_AtLeastOnce_FailedRunRunsAgain(t *testing.T) {
	for _, tt := range []struct {
		delivery         worker.Delivery
		started, want    string
		failures, doneAt int
	}{
		{worker.AtMostOnce, "[10@a 20@a 30@a]", "[20@a 30@a]", 1, 0},
		{worker.AtLeastOnce, "[10@a 10@a 20@a 30@a]", "[10@a 20@a 30@a]", 1, 30},
	} {
		t.Run(string(tt.delivery), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lock := leadertest.New()
				l := &runLog{base: time.Now().UTC()}
				in := newInstance(t, lock, "a")
				failed := false
				if err := in.w.Cron("report", "*/10 * * * * *", func(ctx context.Context) error {
					l.start(ctx, "a")
					if !failed {
						failed = true
						return fmt.Errorf("upstream unavailable")
					}
					l.done(ctx, "a")
					return nil
				}, worker.WithDelivery(tt.delivery)); err != nil {
					t.Fatal(err)
				}
				in.start()
				time.Sleep(35 * time.Second)
				_ = in.stop()
				started, completed := l.lists()
				if started != tt.started || completed != tt.want {
					t.Fatalf("started %s, completed %s; want %s and %s", started, completed, tt.started, tt.want)
				}
				if got := counter(t, in, "solo_job_failures_total", "report"); got != float64(tt.failures) {
					t.Errorf("failures %v, want %d", got, tt.failures)
				}
				done, ok, _ := lock.LoadCheckpoint(context.Background(), "cron-done:report")
				if tt.doneAt == 0 && ok {
					t.Errorf("at most once recorded a completion %v", done)
				}
				if tt.doneAt != 0 && (!ok || done != l.base.Add(time.Duration(tt.doneAt)*time.Second).UnixMilli()) {
					t.Errorf("completed tick recorded %v (%v), want tick %d", done, ok, tt.doneAt)
				}
			})
		})
	}
}

// TestCron_AtLeastOnce_NeverRunsACompletedTick: a tick whose completion is
// recorded is not run again — not tick 10, which another term (whose clock
// ran ahead) completed before this term began (the cadence resumes after
// it), not at a new term's catch-up, and not on a retry after a failed run
// once its completion was recorded meanwhile (the completion is read before
// every run).
func TestCron_AtLeastOnce_NeverRunsACompletedTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		base := time.Now().UTC()
		ctx := context.Background()
		_, rec, _ := lock.Acquire(ctx, "ahead", time.Second)
		for _, key := range []string{"cron:report", "cron-done:report"} {
			if err := lock.Checkpoint(ctx, rec.Lease, key, base.Add(10*time.Second).UnixMilli()); err != nil {
				t.Fatal(err)
			}
		}
		_ = lock.Release(ctx, rec.Lease)
		l := &runLog{base: base}
		in := newInstance(t, lock, "a")
		if err := in.w.Cron("report", "*/10 * * * * *", func(ctx context.Context) error {
			l.start(ctx, "a")
			if tick, _ := worker.TickFrom(ctx); tick.Sub(base) == 20*time.Second {
				// Its completion is recorded (as by another run), then the
				// run fails: the retry must not run it again.
				if err := in.e.Checkpoint(ctx, "cron-done:report", tick.UnixMilli()); err != nil {
					return err
				}
				return fmt.Errorf("failed after the completion was recorded")
			}
			l.done(ctx, "a")
			return nil
		}, worker.WithDelivery(worker.AtLeastOnce)); err != nil {
			t.Fatal(err)
		}
		in.start()
		time.Sleep(35 * time.Second)
		_ = in.stop()
		// A new term: tick 30 completed, nothing is owed.
		in2 := newInstance(t, lock, "b")
		if err := in2.w.Cron("report", "*/10 * * * * *", func(ctx context.Context) error {
			l.start(ctx, "b")
			return nil
		}, worker.WithDelivery(worker.AtLeastOnce)); err != nil {
			t.Fatal(err)
		}
		in2.start()
		time.Sleep(4 * time.Second) // 39
		_ = in2.stop()
		if started, _ := l.lists(); started != "[20@a 30@a]" {
			t.Fatalf("started %s, want [20@a 30@a]: tick 10 was completed by another term, tick 20 once", started)
		}
		if n := len(in.logs.FilterMessage("tick already completed; not run again").All()); n != 1 {
			t.Errorf("logged %d completed ticks not run again, want 1 (20's retry)", n)
		}
	})
}

// TestCron_DeliveryRegistration: the option is validated, and refused on
// pull jobs.
func TestCron_DeliveryRegistration(t *testing.T) {
	in := newInstance(t, leadertest.New(), "a")
	nop := func(context.Context) error { return nil }
	if err := in.w.Cron("ok", "@hourly", nop, worker.WithDelivery(worker.AtLeastOnce)); err != nil {
		t.Fatal(err)
	}
	if err := in.w.Cron("bad", "@hourly", nop, worker.WithDelivery("twice")); err == nil {
		t.Fatal("invalid delivery accepted")
	}
	if err := in.w.Pull("pull", nop, worker.WithDelivery(worker.AtLeastOnce)); err == nil {
		t.Fatal("delivery accepted on a pull job")
	}
}

// TestCron_AtLeastOnce_FirstTickCutOffRunsAgain: found by the simulator. A
// new at-least-once job (or one whose records Redis lost) had no
// completion record, and the next leader took a fired tick without one as
// completed, so a first tick cut off mid-run was never run again. Before
// the fix: "completed [20@b 30@b], want [10@b 20@b 30@b]".
func TestCron_AtLeastOnce_FirstTickCutOffRunsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lock := leadertest.New()
		l := &runLog{base: time.Now().UTC()}
		stall, release := make(chan struct{}), make(chan struct{})
		a := newInstance(t, &stallable{Store: lock, stall: stall, release: release}, "a")
		b := newInstance(t, lock, "b")
		for _, in := range []*instance{a, b} {
			id := configuredID(in.e.ID())
			if err := in.w.Cron("report", "*/10 * * * * *", func(ctx context.Context) error {
				l.start(ctx, id)
				if id == "a" {
					<-ctx.Done() // a's first and only tick is cut off mid-run
					return ctx.Err()
				}
				l.done(ctx, id)
				return nil
			}, worker.WithDelivery(worker.AtLeastOnce)); err != nil {
				t.Fatal(err)
			}
		}
		a.start()
		synctest.Wait()
		b.start()
		defer func() {
			close(release)
			_ = a.stop()
			_ = b.stop()
		}()
		time.Sleep(10500 * time.Millisecond)
		close(stall)                 // a's deadline passes at 12, its lease expires at 13
		time.Sleep(25 * time.Second) // 35.5
		started, completed := l.lists()
		if want := "[10@b 20@b 30@b]"; completed != want {
			t.Fatalf("completed %s, want %s (started %s)", completed, want, started)
		}
	})
}
