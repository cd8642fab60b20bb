package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// maxCatchUp bounds the count of missed ticks examined after a gap.
const maxCatchUp = 100_000

// testHookRunStart, when set (by tests only, before Run), is called first
// thing in every cron run's goroutine: it stands for a goroutine that the
// Go scheduler starts late (CPU starvation, a GC pause).
var testHookRunStart func(job string)

// cronEntry is one cron job during one term.
type cronEntry struct {
	job     *job
	next    time.Time
	due     atomic.Int64 // unix ms of the tick the next run is for
	wrapped cron.Job     // cron.Recover + cron.SkipIfStillRunning around fire
}

// runCron schedules the term's cron jobs until ctx ends, then waits for
// their runs. A fresh scheduler per term keeps no state between terms; the
// last fired tick of each job lives in Redis (leader.Elector.Checkpoint),
// so the next leader neither repeats a tick nor loses the ones that fell
// into the failover gap silently.
func (w *Worker) runCron(ctx context.Context, log *zap.Logger, jobs []*job, runs *runningSet, cp checkpointFunc) {
	var wg sync.WaitGroup
	defer wg.Wait()
	logger := cronLogger{log: log}
	// Installed explicitly: robfig/cron recovers nothing by default.
	chain := cron.NewChain(cron.Recover(logger), cron.SkipIfStillRunning(logger))
	fire := func(e *cronEntry, tick time.Time) {
		e.due.Store(tick.UnixMilli())
		wg.Go(func() {
			if h := testHookRunStart; h != nil {
				h(e.job.name)
			}
			e.wrapped.Run()
		})
	}
	now := time.Now().In(w.loc)
	entries := make([]*cronEntry, 0, len(jobs))
	for _, j := range jobs {
		e := &cronEntry{job: j}
		e.wrapped = chain.Then(cron.FuncJob(func() { w.fireCron(ctx, log, e, runs, cp) }))
		e.next = w.catchUp(ctx, log, e, now, cp != nil, fire)
		entries = append(entries, e)
	}
	for {
		earliest := entries[0].next
		for _, e := range entries[1:] {
			if e.next.Before(earliest) {
				earliest = e.next
			}
		}
		t := time.NewTimer(time.Until(earliest))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now := time.Now().In(w.loc)
		for _, e := range entries {
			if !e.next.After(now) {
				fire(e, e.next)
				e.next = e.job.schedule.Next(now)
			}
		}
	}
}

// catchUp decides a job's first tick in a new term from the last tick
// recorded by any term. Ticks missed in between follow the job's misfire
// policy: skip them, or run once, late, for the latest one.
func (w *Worker) catchUp(ctx context.Context, log *zap.Logger, e *cronEntry, now time.Time, fenced bool, fire func(*cronEntry, time.Time)) time.Time {
	j := e.job
	log = log.With(zap.String("job", j.name))
	if !fenced {
		return j.schedule.Next(now)
	}
	last, ok, err := w.elector.LoadCheckpoint(ctx, cronKey(j.name))
	if err != nil {
		log.Warn("cannot read the last fired tick; missed ticks are not caught up", zap.Error(err))
		return j.schedule.Next(now)
	}
	if !ok {
		return j.schedule.Next(now)
	}
	first := j.schedule.Next(time.UnixMilli(last).In(w.loc))
	if first.After(now) {
		// No gap; continue the cadence from the last tick (matters for
		// @every schedules, which are relative).
		return first
	}
	latest, missed := first, 1
	for n := j.schedule.Next(latest); !n.After(now) && missed < maxCatchUp; n = j.schedule.Next(n) {
		latest, missed = n, missed+1
	}
	switch j.misfire {
	case MisfireRunOnce:
		log.Info("running a missed tick once, late", zap.Int("missed", missed), zap.Time("tick", latest))
		fire(e, latest)
	default:
		log.Info("skipping ticks missed during the failover", zap.Int("missed", missed),
			zap.Time("first", first), zap.Time("last", latest))
		w.metrics.ticksSkipped(w.elector.Config().Name, j.name, missed)
	}
	return j.schedule.Next(now)
}

// fireCron runs one tick: record it first (fenced, monotonic), run it only
// if that succeeded, so no tick ever runs twice across terms.
func (w *Worker) fireCron(ctx context.Context, log *zap.Logger, e *cronEntry, runs *runningSet, cp checkpointFunc) {
	if ctx.Err() != nil {
		return
	}
	j := e.job
	tick := time.UnixMilli(e.due.Load())
	log = log.With(zap.String("job", j.name), zap.Time("tick", tick))
	election := w.elector.Config().Name
	if cp != nil {
		err := cp(ctx, cronKey(j.name), tick.UnixMilli())
		switch {
		case errors.Is(err, leader.ErrCheckpointNotAdvanced):
			log.Info("tick already ran on another term; skipped")
			return
		case err != nil:
			log.Warn("cannot record the tick; skipped", zap.Error(err))
			w.metrics.jobRun(election, j.name, fmt.Errorf("record tick: %w", err))
			return
		}
	}
	runs.add(j.name)
	defer runs.remove(j.name)
	defer func() {
		if r := recover(); r != nil {
			w.metrics.jobRun(election, j.name, fmt.Errorf("panic: %v", r))
			panic(r) // cron.Recover logs it with the stack
		}
	}()
	err := j.run(withTick(ctx, tick))
	w.metrics.jobRun(election, j.name, err)
	if err != nil {
		log.Warn("cron job failed", zap.Error(err))
		return
	}
	log.Debug("cron job done")
}

func cronKey(job string) string { return "cron:" + job }

type tickKey struct{}

// TickFrom returns the scheduled time a cron job's run is for: the tick it
// was recorded under. A late run (misfire run-once) gets the missed tick,
// not the time it runs at, so a job that keys its work by the tick stores
// the late run under the tick it stands for. ok is false outside a cron run.
func TickFrom(ctx context.Context) (tick time.Time, ok bool) {
	tick, ok = ctx.Value(tickKey{}).(time.Time)
	return tick, ok
}

func withTick(ctx context.Context, tick time.Time) context.Context {
	return context.WithValue(ctx, tickKey{}, tick)
}

// cronLogger adapts zap to cron.Logger; cron's chatty Info goes to Debug.
type cronLogger struct{ log *zap.Logger }

func (c cronLogger) Info(msg string, keysAndValues ...any) {
	if msg == "skip" { // SkipIfStillRunning dropped a tick: worth seeing
		c.log.Info("tick skipped: the previous run is still going")
		return
	}
	c.log.Sugar().Debugw(msg, keysAndValues...)
}

func (c cronLogger) Error(err error, msg string, keysAndValues ...any) {
	c.log.Sugar().Errorw(msg, append(keysAndValues, "error", err)...)
}
