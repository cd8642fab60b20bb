package main

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

// ConsumeOrders is a pull job: a loop that runs for as long as this instance
// leads, and is restarted (with back-off) if it returns. Here it only polls;
// see examples/stream-to-sqlite for a consumer that takes over exactly where
// the previous leader stopped.
type ConsumeOrders struct {
	log *zap.Logger
}

// NewConsumeOrders is a plain constructor: fx calls it with the logger the
// application provides.
func NewConsumeOrders(log *zap.Logger) *ConsumeOrders {
	return &ConsumeOrders{log: log.Named("consume-orders")}
}

// Name implements worker.Job.
func (j *ConsumeOrders) Name() string { return "consume-orders" }

// Run implements worker.Job. Its context carries the term and is cancelled
// when the term ends; Run must then return promptly.
func (j *ConsumeOrders) Run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	log := j.log.With(zap.Uint64("term", term))
	log.Info("consuming orders")
	for ctxSleep(ctx, time.Second) {
		log.Info("polled orders", zap.Int("new", 0))
	}
	log.Info("stopped consuming orders", zap.NamedError("cause", context.Cause(ctx)))
	return nil
}

// NightlyReport is a cron job: it fires on the leader only, and a tick that
// falls into a failover gap is run once, late, by the next leader.
type NightlyReport struct {
	log  *zap.Logger
	spec string
}

// NewNightlyReport builds the report job on the -report-schedule spec.
func NewNightlyReport(log *zap.Logger, f Flags) *NightlyReport {
	return &NightlyReport{log: log.Named("nightly-report"), spec: f.ReportSchedule}
}

// Name implements worker.Job.
func (j *NightlyReport) Name() string { return "nightly-report" }

// Schedule implements worker.Scheduled.
func (j *NightlyReport) Schedule() string { return j.spec }

// JobOptions implements worker.Configured.
func (j *NightlyReport) JobOptions() []worker.JobOption {
	return []worker.JobOption{worker.WithMisfire(worker.MisfireRunOnce)}
}

// Run implements worker.Job.
func (j *NightlyReport) Run(ctx context.Context) error {
	term, _ := leader.TermFrom(ctx)
	j.log.Info("report generated", zap.Uint64("term", term))
	return nil
}

// ctxSleep waits for d or until ctx ends; it reports whether d passed.
func ctxSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
