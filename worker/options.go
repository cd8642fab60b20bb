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
