package worker

import "github.com/solo-run/solo/leader"

// Metrics receives what a Worker and a Spread measure (WithMetrics).
// worker/workerprom exports them to Prometheus. An implementation embeds
// NopMetrics, so that a method added later is a no-op for it. Its
// methods are called from several goroutines at once.
type Metrics interface {
	// Elector returns the leader.Metrics of one election (a Spread
	// passes it to each job's elector), or nil for none.
	Elector(election string) leader.Metrics
	// WorkerCreated: a Worker of election was built (New).
	WorkerCreated(election string)
	// WorkerMode: the Worker of election was built in mode (WithMode).
	WorkerMode(election string, mode Mode)
	// SpreadCreated: a Spread of group was built (NewSpread).
	SpreadCreated(group string)
	// JobAdded: job was registered on the Worker of election.
	JobAdded(election, job string)
	// JobRunning: a run of job started (delta 1) or ended (delta −1).
	JobRunning(election, job string, delta int)
	// JobRan: a run of job (a pull job's return, a cron tick) ended with
	// err (nil: success).
	JobRan(election, job string, err error)
	// JobRestarted: a pull job was restarted within its term.
	JobRestarted(election, job string)
	// JobOverran: job still ran past the stop budget after cancellation.
	JobOverran(election, job string)
	// TicksSkipped: n ticks of a cron job were not run.
	TicksSkipped(election, job string, n int)
	// FenceClaimFailed: a claim of a new term in the fence failed.
	FenceClaimFailed(election string)
	// FailedTerms: the election's failed terms in a row, as last read or
	// written by this instance.
	FailedTerms(election string, n int64)
	// GaveUp: this instance stopped campaigning (ErrGaveUp).
	GaveUp(election string)
	// HeartbeatConfigError: Redis refused a heartbeat of group as a
	// configuration error (leader.ErrRedisConfig).
	HeartbeatConfigError(group string)
}

// NopMetrics records nothing; embed it in a Metrics implementation.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

func (NopMetrics) Elector(string) leader.Metrics    { return nil }
func (NopMetrics) WorkerCreated(string)             {}
func (NopMetrics) WorkerMode(string, Mode)          {}
func (NopMetrics) SpreadCreated(string)             {}
func (NopMetrics) JobAdded(string, string)          {}
func (NopMetrics) JobRunning(string, string, int)   {}
func (NopMetrics) JobRan(string, string, error)     {}
func (NopMetrics) JobRestarted(string, string)      {}
func (NopMetrics) JobOverran(string, string)        {}
func (NopMetrics) TicksSkipped(string, string, int) {}
func (NopMetrics) FenceClaimFailed(string)          {}
func (NopMetrics) FailedTerms(string, int64)        {}
func (NopMetrics) GaveUp(string)                    {}
func (NopMetrics) HeartbeatConfigError(string)      {}
