package worker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/leadertest"
	"github.com/solo-run/solo/worker"
)

// Cron schedules are in UTC by default, not in the host's zone: hosts set to different zones fire the same instant.
// Mutation: with time.Local as New's default this fails with "ticks []
// (UTC), want [2000-01-01 02:00:00 +0000 UTC]" (the host here is UTC+9).
func TestWorker_CronDefaultsToUTC(t *testing.T) {
	saved := time.Local
	time.Local = time.FixedZone("UTC+9", 9*3600)
	defer func() { time.Local = saved }()
	synctest.Test(t, func(t *testing.T) {
		e, err := leader.NewWithStore(leadertest.New(), cfg("a"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(e, worker.WithLogger(zap.NewNop()))
		if err != nil {
			t.Fatal(err)
		}
		ticks := make(chan time.Time, 10)
		if err := w.Cron("report", "0 2 * * *", func(ctx context.Context) error {
			tick, _ := worker.TickFrom(ctx)
			ticks <- tick
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		time.Sleep(3 * time.Hour) // the bubble starts at 2000-01-01T00:00:00Z
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		close(ticks)
		var got []time.Time
		for tick := range ticks {
			got = append(got, tick.UTC())
		}
		want := time.Date(2000, 1, 1, 2, 0, 0, 0, time.UTC)
		if len(got) != 1 || !got[0].Equal(want) {
			t.Fatalf("ticks %v (UTC), want [%v]", got, want)
		}
	})
}
