package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// "@every 10s" keeps one cadence across terms: a term
// shorter than the interval, a graceful handover and a crash whose lease
// expires do not shift it. Its ticks are the multiples of 10s since the
// epoch, the same on every instance.
//
// Mutation: with robfig/cron's ConstantDelaySchedule (the everySchedule
// wrap removed from parseSchedule) this fails with "ticks at [19s 47s],
// want [10s 20s 40s 50s]": every term restarted the interval.
func TestWorker_CronEveryKeepsCadenceAcrossTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now() // 2000-01-01T00:00:00Z in a bubble: a multiple of 10s
		lock := leadertest.New()
		var mu sync.Mutex
		var ticks []time.Duration
		job := func(ctx context.Context) error {
			tick, _ := worker.TickFrom(ctx)
			mu.Lock()
			ticks = append(ticks, tick.Sub(t0))
			mu.Unlock()
			return nil
		}
		a, b := newInstance(t, lock, "a"), newInstance(t, lock, "b")
		for _, in := range []*instance{a, b} {
			if err := in.w.Cron("every", "@every 10s", job); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(3 * time.Second)
		a.start()
		synctest.Wait()
		b.start()
		time.Sleep(6 * time.Second) // a leads 3s–9s: no tick in its term
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(16 * time.Second) // b leads from 9s: ticks at 10s, 20s
		lock.Steal("x", 12*time.Second)
		time.Sleep(30 * time.Second) // b loses the lease at 25s, wins again after 37s
		_ = b.stop()
		mu.Lock()
		defer mu.Unlock()
		want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 50 * time.Second}
		if !slices.Equal(ticks, want) {
			t.Fatalf("ticks at %v, want %v", ticks, want)
		}
	})
}
