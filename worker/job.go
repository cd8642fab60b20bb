package worker

import (
	"context"
	"time"
)

// Job is a unit of work that runs only on the leader. Its Run receives a
// context that carries the fencing term (leader.TermFrom) and token
// (fence.TokenFrom, for fence.Guard.Do) and is cancelled when the term
// ends; Run must return soon after.
//
// A Job that also implements Scheduled is a cron job; otherwise it is a
// pull job: a long-running loop, restarted while this instance leads.
type Job interface {
	Name() string
	Run(ctx context.Context) error
}

// Scheduled is implemented by cron jobs: Schedule returns a robfig/cron v3
// spec (5 fields, an optional leading seconds field, or a descriptor such
// as "@every 10s").
type Scheduled interface {
	Schedule() string
}

// Configured is implemented by jobs that carry their own policies; its
// options are applied when the job is added.
type Configured interface {
	JobOptions() []JobOption
}

// JobOption configures one job.
type JobOption interface {
	apply(*job)
}

type jobOptionFunc func(*job)

func (f jobOptionFunc) apply(j *job) { f(j) }

// WithMisfire sets a cron job's policy for ticks that fell into a failover
// gap: MisfireSkip (default) or MisfireRunOnce.
func WithMisfire(m Misfire) JobOption {
	return jobOptionFunc(func(j *job) { j.misfire = m })
}

// Delivery is what a cron job's ticks promise across failures and
// failovers.
type Delivery string

// Delivery guarantees of cron jobs.
const (
	// AtMostOnce (default) records each tick (fenced, beside the lease)
	// before it runs, and runs it only if that succeeded: no tick ever runs
	// twice, on any instance. A run that fails, or is cut off (a crash, a
	// lost lease), or whose writes the fence refuses, loses its tick: it is
	// not run again, and misfire run-once does not catch it up (it catches
	// up only ticks that were never recorded).
	AtMostOnce Delivery = "at-most-once"
	// AtLeastOnce records, fenced, each tick whose run succeeded, and runs a
	// tick until that record exists: a failed run is run again within the term
	// with the pull jobs' back-off, and a run cut off by the end of the term is
	// run again by the next leader. A recorded tick never runs again, but a
	// tick may run more than once: the job must be idempotent for its tick
	// (TickFrom).
	AtLeastOnce Delivery = "at-least-once"
)

// WithDelivery sets a cron job's delivery guarantee: AtMostOnce (default)
// or AtLeastOnce. Pull jobs refuse it.
func WithDelivery(d Delivery) JobOption {
	return jobOptionFunc(func(j *job) { j.delivery = d })
}

// WithRestart sets when a pull job that returned is started again during
// the same term: RestartAlways (default), RestartOnFailure or RestartNever.
func WithRestart(r Restart) JobOption {
	return jobOptionFunc(func(j *job) { j.restart = r })
}

// PullJob returns a Job running fn as a pull job.
func PullJob(name string, fn func(ctx context.Context) error, opts ...JobOption) Job {
	return &funcJob{name: name, fn: fn, opts: opts}
}

// CronJob returns a Job running fn on the cron schedule spec.
func CronJob(name, spec string, fn func(ctx context.Context) error, opts ...JobOption) Job {
	return cronFuncJob{&funcJob{name: name, spec: spec, fn: fn, opts: opts}}
}

type funcJob struct {
	name string
	spec string
	fn   func(context.Context) error
	opts []JobOption
}

func (f *funcJob) Name() string                  { return f.name }
func (f *funcJob) Run(ctx context.Context) error { return f.fn(ctx) }
func (f *funcJob) JobOptions() []JobOption       { return f.opts }

// cronFuncJob is a funcJob that is Scheduled.
type cronFuncJob struct{ *funcJob }

func (c cronFuncJob) Schedule() string { return c.spec }

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
