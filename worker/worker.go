package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/leader"
)

// ErrRunning is returned when jobs are registered or Run is called while
// the worker runs.
var ErrRunning = errors.New("worker: already running")

// ErrGaveUp is returned by Run (wrapped, with the count) when the election
// had Policy.MaxFailedTerms failed terms in a row: this instance stopped
// campaigning. GaveUp reports it too, and /readyz fails.
var ErrGaveUp = errors.New("worker: gave up")

// errTermFailed marks a term the worker resigned because a job, or the
// fence claim, failed MaxFailures times in a row: a failed term.
var errTermFailed = errors.New("failed term")

// Worker runs registered jobs during every term its elector wins: pull jobs
// are started when the term starts and restarted with capped exponential
// back-off while it lasts; cron jobs fire on the leader only. When the term
// ends every job's context is cancelled and the worker waits for them
// before the elector may release the lease.
type Worker struct {
	hooks    hooks.Hooks // WithHooks
	elector  *leader.Elector
	log      *zap.Logger
	logSet   bool // WithLogger was given
	metrics  Metrics
	policy   Policy
	mode     Mode
	loc      *time.Location
	fence    Fence
	onChange func(leader.Change)
	// waitRedis: /readyz waits for Redis's first answer (ready.go).
	waitRedis bool

	mu      sync.Mutex
	jobs    []*job
	running bool
	// gaveUp is set once the worker stopped campaigning (ErrGaveUp).
	gaveUp atomic.Pointer[error]
	// ownFailed counts this process's own failed terms (see electTerm).
	ownFailed int
}

// job is a registered job.
type job struct {
	name     string
	run      func(context.Context) error
	spec     string
	schedule cron.Schedule // nil for a pull job
	misfire  Misfire
	restart  Restart
	delivery Delivery
}

// Fence is the SQL guard that refuses the writes of stale terms, as the
// worker needs it: leader/fence's *fence.Guard satisfies it. (An
// interface, so that a test or another store can stand in.)
type Fence interface {
	// Claim records term, held by holder, as the election's current term,
	// refusing a lower term than the stored one and a second holder of
	// the stored term.
	Claim(ctx context.Context, election string, term uint64, holder string) error
}

// New returns a Worker whose jobs run under e's leadership.
func New(e *leader.Elector, opts ...Option) (*Worker, error) {
	if e == nil {
		return nil, errors.New("worker: nil elector")
	}
	w := &Worker{
		elector: e,
		log:     zap.NewNop(),
		metrics: NopMetrics{},
		policy:  DefaultPolicy(),
		mode:    ModeElect,
		loc:     time.UTC,
	}
	for _, o := range opts {
		o.apply(w)
	}
	switch w.mode {
	case ModeElect, ModeStandby, ModeAlways:
	default:
		return nil, fmt.Errorf("worker: invalid mode %q: want elect, standby or always", w.mode)
	}
	if w.policy.RestartBackoff > w.policy.RestartBackoffMax {
		return nil, fmt.Errorf("worker: restart_backoff %s above restart_backoff_max %s", w.policy.RestartBackoff, w.policy.RestartBackoffMax)
	}
	if w.logSet {
		e.UseLogger(w.log) // no-op when the elector has a logger already
	}
	cfg := e.Config()
	w.metrics.WorkerCreated(cfg.Name)
	w.log = w.log.Named("worker").With(zap.String("election", cfg.Name), zap.String("id", cfg.ID))
	return w, nil
}

// Elector returns the worker's elector.
func (w *Worker) Elector() *leader.Elector { return w.elector }

// Mode returns the worker's mode.
func (w *Worker) Mode() Mode { return w.mode }

// Pull registers a pull job: fn runs while this instance leads and is
// restarted (see WithRestart, Policy) when it returns. Names are unique.
func (w *Worker) Pull(name string, fn func(ctx context.Context) error, opts ...JobOption) error {
	return w.Add(PullJob(name, fn, opts...))
}

// Cron registers a cron job firing fn on spec, only on the leader. The spec
// is validated now; the error names the job and the spec.
func (w *Worker) Cron(name, spec string, fn func(ctx context.Context) error, opts ...JobOption) error {
	return w.Add(CronJob(name, spec, fn, opts...))
}

// Add registers j: a cron job if it implements Scheduled, else a pull job.
func (w *Worker) Add(j Job) error {
	if j == nil {
		return errors.New("worker: nil job")
	}
	name := j.Name()
	if name == "" {
		return errors.New("worker: job name must not be empty")
	}
	r := &job{name: name, run: j.Run, misfire: MisfireSkip, restart: RestartAlways, delivery: AtMostOnce}
	if c, ok := j.(Configured); ok {
		for _, o := range c.JobOptions() {
			o.apply(r)
		}
	}
	if s, ok := j.(Scheduled); ok {
		r.spec = s.Schedule()
		sched, err := parseSchedule(r.spec)
		if errors.Is(err, ErrNeverFires) {
			return fmt.Errorf("worker: job %q: schedule %q never fires: %s", name, r.spec, strings.TrimPrefix(err.Error(), "worker: "))
		}
		if err != nil {
			return fmt.Errorf("worker: job %q: invalid schedule %q: %w", name, r.spec, err)
		}
		r.schedule = sched
	}
	switch r.misfire {
	case MisfireSkip, MisfireRunOnce:
	default:
		return fmt.Errorf("worker: job %q: invalid misfire %q: want skip or run-once", name, r.misfire)
	}
	if r.delivery == "" {
		r.delivery = AtMostOnce
	}
	switch {
	case r.delivery == AtMostOnce:
	case r.delivery != AtLeastOnce:
		return fmt.Errorf("worker: job %q: invalid delivery %q: want at-most-once or at-least-once", name, r.delivery)
	case r.schedule == nil:
		return fmt.Errorf("worker: job %q: delivery %q is for cron jobs only", name, r.delivery)
	}
	switch r.restart {
	case RestartAlways, RestartOnFailure, RestartNever:
	default:
		return fmt.Errorf("worker: job %q: invalid restart %q: want always, on-failure or never", name, r.restart)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return ErrRunning
	}
	if slices.ContainsFunc(w.jobs, func(o *job) bool { return o.name == name }) {
		return fmt.Errorf("worker: job %q registered twice", name)
	}
	w.jobs = append(w.jobs, r)
	w.metrics.JobAdded(w.elector.Config().Name, name)
	return nil
}

// Run blocks until ctx is done, running the jobs during every term the
// elector wins (ModeElect), never (ModeStandby), or all along (ModeAlways).
// It returns nil once ctx is done and every job returned, or what the
// elector's Run returns (leader.ErrStopTimeout when a job ignored
// cancellation past the shutdown timeout).
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return ErrRunning
	}
	w.running = true
	jobs := slices.Clone(w.jobs)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].name < jobs[j].name })

	if w.onChange != nil {
		// The observer's lifetime is Run's: stopped and awaited on return.
		octx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := w.elector.Observe(octx, w.onChange); err != nil {
				w.log.Error("leader change hook stopped", zap.Error(err))
			}
		})
		defer wg.Wait()
		defer stop()
	}

	switch w.mode {
	case ModeStandby:
		return w.standby(ctx)
	case ModeAlways:
		if w.fence != nil {
			w.log.Warn("mode always: no term, so nothing is claimed in the fence")
		}
		w.log.Error("mode always: running jobs WITHOUT an election; every instance in this mode runs them at once, and writes carry no fencing term (unsafe, for migrating off fetch=true only)")
		err := w.term(ctx, jobs, nil, nil)
		if errors.Is(err, leader.ErrResigned) {
			w.log.Error("jobs gave up in mode always; nothing runs until restart", zap.Error(err))
		}
		return nil
	default:
		if w.policy.MaxFailedTerms <= 0 {
			return w.elector.Run(ctx, func(ctx context.Context) error {
				return w.term(ctx, jobs, w.elector.Checkpoint, nil)
			})
		}
		// Giving up cancels rctx: the elector releases the lease and Run
		// returns, campaigning no more.
		rctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		err := w.elector.Run(rctx, func(tctx context.Context) error {
			return w.electTerm(tctx, jobs, stop)
		})
		if gave := w.gaveUp.Load(); gave != nil && ctx.Err() == nil {
			return errors.Join(*gave, err)
		}
		return err
	}
}

// GaveUp returns nil, or the error wrapping ErrGaveUp once the worker
// stopped campaigning after Policy.MaxFailedTerms failed terms in a row.
func (w *Worker) GaveUp() error {
	if e := w.gaveUp.Load(); e != nil {
		return *e
	}
	return nil
}

// standby observes the election without taking part.
func (w *Worker) standby(ctx context.Context) error {
	w.log.Info("mode standby: this instance never leads")
	cfg := w.elector.Config()
	t := time.NewTimer(0)
	defer t.Stop()
	var last leader.Holder
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		h, err := w.elector.Leader(ctx)
		switch {
		case err == nil && (h.ID != last.ID || h.Term != last.Term):
			w.log.Info("leader observed", zap.String("leader", h.ID), zap.Uint64("term", h.Term))
			last = h
		case errors.Is(err, leader.ErrNoLeader) && last.Term != 0:
			w.log.Info("no leader")
			last = leader.Holder{}
		case err != nil && !errors.Is(err, leader.ErrNoLeader):
			w.log.Debug("observe", zap.Error(err))
		}
		t.Reset(cfg.RenewInterval)
	}
}
