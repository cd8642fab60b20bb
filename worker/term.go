package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/fence"
)

// checkpointFunc records a cron tick fenced by the term in ctx; nil in
// ModeAlways, where there is no term.
type checkpointFunc func(ctx context.Context, key string, n int64) error

// term runs the jobs for one term (or, in ModeAlways, for the whole run).
// It returns when ctx ends, after every job returned; or, when a pull job
// failed MaxFailures times in a row, after cancelling and draining every
// job, with an error wrapping leader.ErrResigned so the elector releases
// the lease and sits out one election.
//
// healthy, when not nil, gets a value (never blocking) at each sign that
// the jobs work: a pull job that returned nil or ran for
// RestartBackoffMax, a cron run without error.
func (w *Worker) term(ctx context.Context, jobs []*job, cp checkpointFunc, healthy chan<- struct{}) error {
	term, ok := leader.TermFrom(ctx)
	log := w.log.With(zap.Uint64("term", term))
	ctx = w.jobContext(ctx, term, ok)
	if w.fence != nil && cp != nil {
		election, holder := w.elector.Config().Name, w.elector.ID()
		claim := func(ctx context.Context) error { return w.fence.Claim(ctx, election, term, holder) }
		if err := w.claimFence(ctx, log, election, claim); err != nil || ctx.Err() != nil {
			return err
		}
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	runs := &runningSet{names: map[string]int{}, running: func(name string, delta int) {
		w.metrics.JobRunning(w.elector.Config().Name, name, delta)
	}}
	giveUp := make(chan error, 1)
	var wg sync.WaitGroup
	var crons []*job
	for _, j := range jobs {
		if j.schedule != nil {
			crons = append(crons, j)
			continue
		}
		wg.Go(func() { w.supervise(jctx, log, j, runs, giveUp, healthy) })
	}
	if len(crons) > 0 {
		wg.Go(func() { w.runCron(jctx, log, crons, runs, cp, giveUp, healthy) })
	}
	log.Info("jobs started", zap.Int("pull", len(jobs)-len(crons)), zap.Int("cron", len(crons)))

	var resign error
	select {
	case <-ctx.Done():
	case resign = <-giveUp:
		cancel(resign)
	}
	w.drain(log, &wg, runs)
	if resign != nil {
		if errors.Is(resign, leader.ErrResigned) {
			return resign
		}
		return fmt.Errorf("%w: %w", resign, leader.ErrResigned)
	}
	return nil
}

// jobContext returns ctx carrying what a job reads from it besides the
// term: its elector (ElectorFrom) and, when there is a term (every mode
// but ModeAlways), the fencing token (fence.TokenFrom) that
// fence.Guard.Do writes with: the election's name, the term, the
// elector's ID.
func (w *Worker) jobContext(ctx context.Context, term uint64, hasTerm bool) context.Context {
	ctx = context.WithValue(ctx, electorKey{}, w.elector)
	if !hasTerm || term == 0 {
		return ctx
	}
	return fence.WithToken(ctx, fence.Token{Election: w.elector.Config().Name, Term: term, Holder: w.elector.ID()})
}

// claimFence makes claim (a claim in the worker's fence of the row
// election) before the term's jobs start, retrying with back-off. It
// returns nil once claimed or when ctx ended, and an error wrapping
// leader.ErrResigned after Policy.MaxFailures failures in a row.
func (w *Worker) claimFence(ctx context.Context, log *zap.Logger, election string, claim func(context.Context) error) error {
	p := w.policy
	backoff := p.RestartBackoff
	for failures := 1; ; failures++ {
		err := claim(ctx)
		if err == nil {
			log.Info("term claimed in the fence", zap.String("row", election))
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		w.metrics.FenceClaimFailed(election)
		if failures >= p.MaxFailures {
			log.Error("fence claim failed repeatedly; resigning so another instance tries",
				zap.Error(err), zap.Int("failures", failures))
			return fmt.Errorf("fence claim of %q failed %d times in a row: %w: %w: %w", election, failures, err, errTermFailed, leader.ErrResigned)
		}
		log.Warn("fence claim failed; no job runs until it succeeds", zap.Error(err),
			zap.Int("failures", failures), zap.Duration("backoff", backoff))
		if !sleep(ctx, backoff) {
			return nil
		}
		backoff = min(backoff*2, p.RestartBackoffMax)
	}
}

// drain waits for every job of a term to return, reporting (log and
// metric) the jobs still running past the stop budget: past it, after a
// lost lease, another instance may already lead.
func (w *Worker) drain(log *zap.Logger, wg *sync.WaitGroup, runs *runningSet) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	budget := w.elector.Config().StopBudget()
	t := time.NewTimer(budget)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	for _, name := range runs.list() {
		log.Error("job ignores cancellation: still running past the stop budget",
			zap.String("job", name), zap.Duration("stop_budget", budget))
		w.metrics.JobOverran(w.elector.Config().Name, name)
	}
	<-done
	log.Info("overrunning jobs returned")
}

// supervise runs a pull job until ctx ends, restarting it by its policy.
func (w *Worker) supervise(ctx context.Context, log *zap.Logger, j *job, runs *runningSet, giveUp chan<- error, healthy chan<- struct{}) {
	log = log.With(zap.String("job", j.name))
	election := w.elector.Config().Name
	p := w.policy
	backoff := p.RestartBackoff
	failures := 0
	for {
		started := time.Now()
		runs.add(j.name)
		var longRun *time.Timer
		if healthy != nil {
			longRun = time.AfterFunc(p.RestartBackoffMax, func() { signal(healthy) })
		}
		err := callJob(ctx, j.run)
		if longRun != nil {
			longRun.Stop()
		}
		runs.remove(j.name)
		if ctx.Err() != nil {
			return
		}
		w.metrics.JobRan(election, j.name, err)
		if time.Since(started) >= p.RestartBackoffMax {
			// It ran healthily for a while: this failure starts a new streak.
			failures, backoff = 0, p.RestartBackoff
		}
		delay := p.RestartBackoff
		if err == nil {
			signal(healthy)
			failures, backoff = 0, p.RestartBackoff
			if j.restart != RestartAlways {
				log.Info("job finished")
				return
			}
		} else {
			failures++
			if errors.Is(err, leader.ErrResigned) {
				// The job itself asks to give up the term (it saw a stale
				// term, say): drain the others and resign at once.
				jobAsksToResign(log, giveUp, j, err)
				return
			}
			if j.restart == RestartNever {
				log.Error("job failed; restart policy never", zap.Error(err))
				return
			}
			if failures >= p.MaxFailures {
				log.Error("job failed repeatedly; resigning so another instance tries",
					zap.Error(err), zap.Int("failures", failures))
				askGiveUp(giveUp, fmt.Errorf("job %q failed %d times in a row: %w: %w", j.name, failures, err, errTermFailed))
				return
			}
			delay = backoff
			backoff = min(backoff*2, p.RestartBackoffMax)
			log.Warn("job failed; restarting", zap.Error(err), zap.Int("failures", failures), zap.Duration("backoff", delay))
		}
		if !sleep(ctx, delay) {
			return
		}
		w.metrics.JobRestarted(election, j.name)
	}
}

// jobAsksToResign logs j's request to give up the term (err, from a pull
// or cron run, wraps leader.ErrResigned) and hands it to term (askGiveUp).
func jobAsksToResign(log *zap.Logger, giveUp chan<- error, j *job, err error) {
	log.Info("job asks to resign", zap.Error(err))
	askGiveUp(giveUp, fmt.Errorf("job %q: %w", j.name, err))
}

// askGiveUp hands err, a job's request to give up the term, to term's
// giveUp without blocking: term then cancels and drains every job and
// returns err (wrapped in leader.ErrResigned), so the elector resigns, or
// in ModeAlways the jobs stop (GaveUp). The first request wins; later ones
// are dropped, and a nil giveUp drops every one.
func askGiveUp(giveUp chan<- error, err error) {
	select {
	case giveUp <- err:
	default:
	}
}

// callJob runs fn, turning a panic into an error.
func callJob(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("job panicked: %v", r)
		}
	}()
	return fn(ctx)
}

// signal sends on ch without blocking; a nil ch is ignored.
func signal(ch chan<- struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runningSet tracks which jobs are running, for overrun reports and the
// solo_job_running gauge (running, if set).
type runningSet struct {
	mu      sync.Mutex
	names   map[string]int
	running func(name string, delta int)
}

func (r *runningSet) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[name]++
	if r.running != nil {
		r.running(name, 1)
	}
}

func (r *runningSet) remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running != nil {
		r.running(name, -1)
	}
	if r.names[name]--; r.names[name] <= 0 {
		delete(r.names, name)
	}
}

func (r *runningSet) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.names))
	for n := range r.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
