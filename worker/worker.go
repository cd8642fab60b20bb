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
	"github.com/solo-run/solo/leader/fence"
)

// ErrRunning is returned when jobs are registered or Run is called while
// the worker runs.
var ErrRunning = errors.New("worker: already running")

// ErrGaveUp is returned by Run (wrapped, with the count) when the election
// had Policy.MaxFailedTerms failed terms in a row: this instance stopped
// campaigning. GaveUp reports it too, and /readyz fails. In ModeAlways
// GaveUp reports it (and /readyz fails) once the jobs stopped for good: a
// pull job failed Policy.MaxFailures times in a row, or wrote through the
// fence, which that mode cannot do.
var ErrGaveUp = errors.New("worker: gave up")

// ErrNoJobs is returned (wrapped, with the fix) by Run and CheckJobs when
// WithJobsRequired was given and no job is registered.
var ErrNoJobs = errors.New("worker: no job registered")

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
	// jobsRequired is WithJobsRequired.
	jobsRequired bool
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
	if w.mode == ModeAlways && w.fence != nil {
		return nil, errAlwaysFenced("WithFence")
	}
	if w.policy.RestartBackoff > w.policy.RestartBackoffMax {
		return nil, fmt.Errorf("worker: restart_backoff %s above restart_backoff_max %s", w.policy.RestartBackoff, w.policy.RestartBackoffMax)
	}
	if w.logSet {
		e.UseLogger(w.log) // no-op when the elector has a logger already
	}
	cfg := e.Config()
	w.metrics.WorkerCreated(cfg.Name)
	w.metrics.WorkerMode(cfg.Name, w.mode)
	w.log = w.log.Named("worker").With(zap.String("election", cfg.Name), zap.String("id", cfg.ID))
	return w, nil
}

// Elector returns the worker's elector.
func (w *Worker) Elector() *leader.Elector { return w.elector }

// Mode returns the worker's mode.
func (w *Worker) Mode() Mode { return w.mode }

// Jobs returns the names of the registered jobs, in name order.
func (w *Worker) Jobs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make([]string, len(w.jobs))
	for i, j := range w.jobs {
		names[i] = j.name
	}
	sort.Strings(names)
	return names
}

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
	if len(jobs) == 0 && w.mode != ModeStandby {
		if err := w.CheckJobs(); err != nil {
			return err
		}
		w.log.Warn(noJobsWarning)
	}

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
		return w.always(ctx, jobs)
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

// registerJobs says how to register jobs.
const registerJobs = "register them with Pull, Cron or Add (with workerfx: " +
	"fx.Provide(workerfx.AsJob(NewJob)), or workerfx.AsJobOf(NAME, NewJob) for a Named module)"

// noJobsWarning is what Run logs when no job is registered.
const noJobsWarning = "no job registered: this instance runs nothing when it leads; " + registerJobs +
	" (worker.WithJobsRequired makes this an error)"

// CheckJobs returns an error wrapping ErrNoJobs, naming the election and
// how to register jobs, when WithJobsRequired was given and no job is
// registered; else nil.
func (w *Worker) CheckJobs() error {
	w.mu.Lock()
	n := len(w.jobs)
	w.mu.Unlock()
	if n > 0 || !w.jobsRequired {
		return nil
	}
	return fmt.Errorf("%w for election %q, and WithJobsRequired says jobs are required: %s",
		ErrNoJobs, w.elector.Config().Name, registerJobs)
}

// GaveUp returns nil, or the error wrapping ErrGaveUp once the worker
// stopped campaigning after Policy.MaxFailedTerms failed terms in a row,
// or, in ModeAlways, once its jobs stopped for good.
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

// alwaysRemedy is how to move off fetch=true with a fence: mode always
// has no term, so it cannot fence.
const alwaysRemedy = "move off fetch=true with the fence instead: run the old fetch=true instance in mode elect " +
	"and every other instance in mode standby, then switch those to elect (docs/library.md, \"Moving off fetch=true\")"

// errAlwaysFenced is New's refusal of ModeAlways with a fence (by is how
// the fence was given).
func errAlwaysFenced(by string) error {
	return fmt.Errorf("worker: mode %q with a fence (%s; solo run: fence.dsn): mode always runs without an election, so it has no term "+
		"to claim and gives its jobs no fencing token, and every fenced write would fail (fence.ErrNoToken); %s",
		ModeAlways, by, alwaysRemedy)
}

// always runs the jobs without an election (ModeAlways) until ctx ends
// or they gave up; then, until ctx ends, GaveUp reports it and /readyz
// fails.
func (w *Worker) always(ctx context.Context, jobs []*job) error {
	w.log.Error("mode always: running jobs WITHOUT an election; every instance in this mode runs them at once, and writes carry no fencing term (unsafe, for migrating off fetch=true only)")
	wrapped := make([]*job, len(jobs))
	for i, j := range jobs {
		c := *j
		c.run = w.unfenced(j.name, j.run)
		wrapped[i] = &c
	}
	err := w.term(ctx, wrapped, nil, nil)
	if !errors.Is(err, leader.ErrResigned) {
		return nil
	}
	gave := fmt.Errorf("%w: mode always: the jobs stopped: %w; nothing runs until restart", ErrGaveUp, err)
	if w.gaveUp.CompareAndSwap(nil, &gave) {
		w.log.Error("jobs gave up in mode always; nothing runs until restart", zap.Error(err))
		w.metrics.GaveUp(w.elector.Config().Name)
	}
	return nil
}

// unfenced wraps run, the job name's, for ModeAlways, where a fenced
// write can never succeed (no term, no token): the first fence.ErrNoToken
// is logged at error with the remedy, and the run's error then asks to
// stop the jobs (leader.ErrResigned) rather than fail for ever.
func (w *Worker) unfenced(name string, run func(context.Context) error) func(context.Context) error {
	var once sync.Once
	return func(ctx context.Context) error {
		err := run(ctx)
		if !errors.Is(err, fence.ErrNoToken) {
			return err
		}
		once.Do(func() {
			w.log.Error("job writes through the fence, which mode always cannot: no term, no token; "+alwaysRemedy,
				zap.String("job", name), zap.Error(err))
		})
		return fmt.Errorf("%w: %w", err, leader.ErrResigned)
	}
}
