package worker

import (
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

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
// unsafe when more than one instance runs it, and logged as such. Having
// no term, ModeAlways cannot fence: New refuses it with WithFence, and a
// job's fenced write (fence.ErrNoToken) is logged at error and stops the
// jobs (GaveUp). To move off fetch=true with a fence, run the old
// fetch=true instance in ModeElect and the others in ModeStandby.
func WithMode(m Mode) Option {
	return optionFunc(func(w *Worker) {
		if m != "" {
			w.mode = m
		}
	})
}

// WithFence makes the worker claim every term it wins in f, with the
// election's name, the term and the elector's ID, before any job of the
// term runs, so jobs need not claim themselves. A failed Claim is logged,
// counted and retried with the pull jobs' back-off, no job running
// meanwhile; after Policy.MaxFailures failures in a row the worker resigns
// the term. New refuses it with ModeAlways, which has no term to claim.
// Default: none (a job's first fence.Guard.Do of a term claims it, after
// whatever the job read before).
func WithFence(f Fence) Option {
	return optionFunc(func(w *Worker) { w.fence = f })
}

// WithOnLeaderChange calls fn for every change of the election's leadership
// while Run runs (leader.Elector.Observe: the current leader first, this
// instance's own terms included), in order and in every mode, from one
// goroutine that Run starts and awaits before returning. fn must not block
// for long: changes queue behind it. Default: none.
func WithOnLeaderChange(fn func(leader.Change)) Option {
	return optionFunc(func(w *Worker) { w.onChange = fn })
}

// WithLocation sets the time zone of cron schedules without a CRON_TZ=
// (or TZ=) prefix; a prefix wins. Default: UTC, not time.Local, because
// leadership moves between hosts that may be set to different zones. Pass
// time.Local only when every instance has the same zone.
func WithLocation(loc *time.Location) Option {
	return optionFunc(func(w *Worker) {
		if loc != nil {
			w.loc = loc
		}
	})
}

// WithJobsRequired says the service has jobs to run: Run (and
// workerfx's start) refuses to start, with an error wrapping ErrNoJobs,
// when none is registered, rather than campaign and, elected, run
// nothing. Without it such a Run logs the fact at warn and runs on.
// Default: not required.
func WithJobsRequired() Option {
	return optionFunc(func(w *Worker) { w.jobsRequired = true })
}
