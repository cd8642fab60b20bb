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

// Option configures a Worker (New) or the workers of a Spread (NewSpread).
type Option interface {
	apply(*Worker)
}

type optionFunc func(*Worker)

func (f optionFunc) apply(w *Worker) { f(w) }

// WithLogger sets the logger; the worker logs under the name "worker".
// The elector logs through it too (under "leader") unless it was given a
// logger of its own (leader.WithLogger): one logger is enough for both.
// Default: no logging.
func WithLogger(log *zap.Logger) Option {
	return optionFunc(func(w *Worker) {
		if log != nil {
			w.log, w.logSet = log, true
		}
	})
}

// WithMetrics sets the metrics to update (worker/workerprom's for
// Prometheus). Default: none. Pass the elector m.Elector(name) for the
// election's own.
func WithMetrics(m Metrics) Option {
	return optionFunc(func(w *Worker) {
		if m != nil {
			w.metrics = m
		}
	})
}

// WithPolicy sets the failure policy of pull jobs. Zero fields keep their
// defaults (DefaultPolicy()).
func WithPolicy(p Policy) Option {
	return optionFunc(func(w *Worker) {
		if p.MaxFailures > 0 {
			w.policy.MaxFailures = p.MaxFailures
		}
		if p.RestartBackoff > 0 {
			w.policy.RestartBackoff = p.RestartBackoff
		}
		if p.RestartBackoffMax > 0 {
			w.policy.RestartBackoffMax = p.RestartBackoffMax
		}
		if p.MaxFailedTerms > 0 {
			w.policy.MaxFailedTerms = p.MaxFailedTerms
		}
	})
}

// WithMode sets the mode: ModeElect (default) runs jobs only while the
// elector leads; ModeStandby never leads and only observes; ModeAlways
// runs the jobs without any election, as the old fetch=true flag did —
// unsafe when more than one instance runs it, and logged as such.
func WithMode(m Mode) Option {
	return optionFunc(func(w *Worker) {
		if m != "" {
			w.mode = m
		}
	})
}

// WithFence makes the worker claim every term it wins in f, before any job
// of the term runs, with the election's name, the term and the elector's ID
// as the holder: from then on f refuses the writes of every older term, so
// jobs need not claim themselves. A Claim that fails (refused, or the
// database unreachable) is logged and counted in
// solo_fence_claim_failures_total and retried with the pull jobs' back-off
// (Policy.RestartBackoff doubling up to RestartBackoffMax); no job runs
// meanwhile. After Policy.MaxFailures failures in a row the worker resigns
// the term (it sits out one election) so that another instance tries. It
// does not tell a refusal from an outage: a refused Claim (a higher term
// stored) normally means this term is already lost, which ends it anyway.
// ModeAlways has no term and claims nothing. Default: none (a job's first
// fence.Guard.Do of a term claims it, after whatever the job read before;
// claim before any job when jobs read what they then write).
func WithFence(f Fence) Option {
	return optionFunc(func(w *Worker) { w.fence = f })
}

// WithOnLeaderChange calls fn for every change of the election's
// leadership while Run runs — the current leader first, then each
// election, release, resignation and expiry, this instance's own terms
// included (leader.Elector.Observe) — in order, from one goroutine that
// the Worker owns: Run starts it, and stops and awaits it before
// returning. fn must not block for long: changes queue behind it. It runs
// in every mode (in ModeAlways there is no election of this worker's, but
// other instances' may be observed). Default: none.
func WithOnLeaderChange(fn func(leader.Change)) Option {
	return optionFunc(func(w *Worker) { w.onChange = fn })
}

// WithLocation sets the time zone of cron schedules without a CRON_TZ=
// (or TZ=) prefix; a prefix wins. Default: UTC, not the host's zone
// (time.Local): the leader fires the ticks, and leadership moves between
// hosts that may be set to different zones, so "0 2 * * *" would fire at a
// different instant after every failover (and a tick could run twice, or
// not at all, across it). Pass time.Local only when every instance has
// the same zone.
func WithLocation(loc *time.Location) Option {
	return optionFunc(func(w *Worker) {
		if loc != nil {
			w.loc = loc
		}
	})
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

// failedTermsKey is the checkpoint that counts the election's failed
// terms in a row. A checkpoint only grows, so it holds
// base×failedTermsBase + n: n failed terms in a row since the successful
// term base (0 before any). A failed term adds 1; a success writes
// term×failedTermsBase, above every earlier value because terms grow.
const (
	failedTermsKey  = "failed-terms"
	failedTermsBase = 1000
)

// electTerm is term with the group-wide count of failed terms: it gives up
// at the start of a term when the count reached MaxFailedTerms and this
// process had a failed term of its own (a newly started instance gets one
// try: a fix deployed by restarting every instance is not refused), and
// after a failed term that brings the count there.
func (w *Worker) electTerm(ctx context.Context, jobs []*job, stop context.CancelCauseFunc) error {
	term, _ := leader.TermFrom(ctx)
	election := w.elector.Config().Name
	v, _, err := w.elector.LoadCheckpoint(ctx, failedTermsKey)
	if err != nil {
		w.log.Warn("cannot read the count of failed terms; running the term", zap.Error(err), zap.Uint64("term", term))
	}
	n := v % failedTermsBase
	w.metrics.FailedTerms(election, n)
	if int(n) >= w.policy.MaxFailedTerms && w.ownFailed > 0 {
		w.giveUp(n, stop)
		return nil // releases the lease: the next candidate finds the count too
	}
	healthy := make(chan struct{}, 1)
	var wg sync.WaitGroup
	hctx, hstop := context.WithCancel(ctx)
	reset := false // written by the goroutine below before wg.Done
	if n > 0 {
		// Reset the count at the term's first sign of health.
		wg.Go(func() {
			select {
			case <-hctx.Done():
				return
			case <-healthy:
			}
			if err := w.elector.Checkpoint(hctx, failedTermsKey, int64(term)*failedTermsBase); err != nil && hctx.Err() == nil {
				w.log.Warn("cannot reset the count of failed terms", zap.Error(err), zap.Uint64("term", term))
				return
			}
			reset = true
			w.metrics.FailedTerms(election, 0)
		})
	}
	err = w.term(ctx, jobs, w.elector.Checkpoint, healthy)
	hstop()
	wg.Wait()
	if !errors.Is(err, errTermFailed) || ctx.Err() != nil {
		return err
	}
	w.ownFailed++
	next := v + 1
	switch {
	case reset:
		next = int64(term)*failedTermsBase + 1 // healthy first, then failed
	case n >= failedTermsBase-1:
		next = v // saturated: keep counting as the maximum
	}
	// The lease is still held (the term resigns after this): fenced by it.
	if cerr := w.elector.Checkpoint(ctx, failedTermsKey, next); cerr != nil {
		w.log.Warn("cannot record the failed term", zap.Error(cerr), zap.Uint64("term", term))
		return err
	}
	n = next % failedTermsBase
	w.metrics.FailedTerms(election, n)
	if int(n) >= w.policy.MaxFailedTerms {
		w.giveUp(n, stop)
	}
	return err
}

// giveUp stops campaigning for good, logged once.
func (w *Worker) giveUp(n int64, stop context.CancelCauseFunc) {
	err := fmt.Errorf("%w: %d failed terms in a row across the election (worker.max_failed_terms %d); this instance stops campaigning",
		ErrGaveUp, n, w.policy.MaxFailedTerms)
	if w.gaveUp.CompareAndSwap(nil, &err) {
		w.log.Error("giving up: the election's jobs keep failing on every instance", zap.Int64("failed_terms", n),
			zap.Int("max_failed_terms", w.policy.MaxFailedTerms))
		w.metrics.GaveUp(w.elector.Config().Name)
	}
	stop(err)
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
		wg.Go(func() { w.runCron(jctx, log, crons, runs, cp, healthy) })
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
				log.Info("job asks to resign", zap.Error(err))
				select {
				case giveUp <- fmt.Errorf("job %q: %w", j.name, err):
				default:
				}
				return
			}
			if j.restart == RestartNever {
				log.Error("job failed; restart policy never", zap.Error(err))
				return
			}
			if failures >= p.MaxFailures {
				log.Error("job failed repeatedly; resigning so another instance tries",
					zap.Error(err), zap.Int("failures", failures))
				select {
				case giveUp <- fmt.Errorf("job %q failed %d times in a row: %w: %w", j.name, failures, err, errTermFailed):
				default:
				}
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
