// Command workerquickstart is docs/library.md's worker snippet, complete: one zap
// logger for the worker and its elector, a pull job and a cron job.
package main

import (
	"cmp"
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

func main() {
	log, _ := zap.NewProduction() // the worker gives it to its elector too
	defer func() { _ = log.Sync() }()
	if err := run(log); err != nil {
		log.Fatal("stopped", zap.Error(err))
	}
}

func run(log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	client, err := redisurl.NewClient(cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"))
	if err != nil {
		return err
	}
	defer client.Close()
	elector, err := leader.New(client, leader.Config{Name: "orders-sync"})
	if err != nil {
		return err
	}
	w, err := worker.New(elector, worker.WithLogger(log))
	if err != nil {
		return err
	}
	// Long-running, restarted with back-off while this instance leads.
	if err := w.Pull("consume-orders", func(ctx context.Context) error {
		term, _ := leader.TermFrom(ctx) // ctx also carries the fencing token: guard.Do(ctx, fn)
		log.Info("consuming", zap.Uint64("term", term))
		<-ctx.Done()
		return nil
	}); err != nil {
		return err
	}
	// Fires on the leader only, at 02:00 UTC (worker.WithLocation to change).
	if err := w.Cron("nightly-report", "0 2 * * *", func(ctx context.Context) error {
		tick, _ := worker.TickFrom(ctx)
		log.Info("report", zap.Time("for", tick), zap.Duration("late", time.Since(tick)))
		return nil
	}); err != nil {
		return err
	}
	return w.Run(ctx) // blocks until ctx ends; jobs run only during terms won
}
