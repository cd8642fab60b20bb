package workerprom

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/worker"
)

var _ worker.Metrics = (*Metrics)(nil)

// Metrics are solo's Prometheus metrics, registered on the Registerer the
// user passes (never the global one by default): a worker.Metrics (for
// worker.WithMetrics) whose Elector gives the leader.Metrics of an
// election (for leader.WithMetrics). A nil *Metrics records nothing.
//
//	solo_build_info{version,protocol,goversion}           1: the solo version, protocol and Go release of this process
//	solo_election_leader{election}                        1 while this instance leads
//	solo_election_term{election}                          the current (or last) term
//	solo_election_transitions_total{election,transition}  elected, released, lost, stepdown
//	solo_election_renew_duration_seconds{election,result} renew round trips (ok, lost, error)
//	solo_election_overruns_total{election}                leader functions past the stop budget
//	solo_job_runs_total{election,job}           job runs (cron ticks, pull job returns)
//	solo_job_failures_total{election,job}       runs that returned an error or panicked
//	solo_job_restarts_total{election,job}       pull job restarts
//	solo_job_last_success_timestamp_seconds{election,job}
//	solo_job_overruns_total{election,job}       jobs still running past the stop budget
//	solo_job_skipped_ticks_total{election,job}  cron ticks not run: missed in a failover gap or a late scheduler (misfire skip), or the previous run still going
//	solo_fence_claim_failures_total{election}   failed claims of a new term in the fence (WithFence)
//	solo_worker_failed_terms{election}          the election's failed terms in a row, as last read or written here (Policy.MaxFailedTerms)
//	solo_worker_gave_up{election}               1 once this instance stopped campaigning after MaxFailedTerms failed terms (mode always: once its jobs stopped for good)
//	solo_election_redis_up{election}            1 while Redis answers this elector's calls, 0 before the first answer and while it does not
//	solo_job_running{election,job}              runs of the job in progress on this instance (0 or 1)
//	solo_election_protocol_refused{election}    1 while this instance does not campaign: the holder speaks a protocol this build does not share an election with (leader.ErrProtocolSkew)
//	solo_election_redis_config_errors_total{election} calls Redis refused as a configuration error (NOPERM, WRONGPASS, NOAUTH, unknown command, an eviction policy)
//	solo_worker_mode{election,mode}             1 for the mode of this instance's worker (elect, standby, always; mode.go)
//	solo_election_redis_evicting{election}      1 while Redis may evict solo's keys (maxmemory with a policy other than noeviction: the instance does not campaign), -1 while INFO cannot tell (an ACL without +info), else 0
//
// Every series but solo_job_last_success_timestamp_seconds exists from
// the start with its zero value: the election's series once its elector
// is built (Metrics.Elector), a job's once it is added to a Worker. A
// follower exports solo_election_leader 0, and a counter that never
// counted exports 0, so rates and alerts need no absent() or
// last_over_time. The last-success timestamp appears at the first success
// (a 0 would read as "last success in 1970").
type Metrics struct {
	leading        *prometheus.GaugeVec
	term           *prometheus.GaugeVec
	transitions    *prometheus.CounterVec
	renew          *prometheus.HistogramVec
	overruns       *prometheus.CounterVec
	jobRuns        *prometheus.CounterVec
	jobFailures    *prometheus.CounterVec
	jobRestarts    *prometheus.CounterVec
	jobLastSuccess *prometheus.GaugeVec
	jobOverruns    *prometheus.CounterVec
	jobSkipped     *prometheus.CounterVec
	fenceClaims    *prometheus.CounterVec
	failedTermsN   *prometheus.GaugeVec
	gaveUp         *prometheus.GaugeVec
	redisUp        *prometheus.GaugeVec
	jobRunning     *prometheus.GaugeVec
	protoRefused   *prometheus.GaugeVec
	redisConfig    *prometheus.CounterVec
	evicting       *prometheus.GaugeVec
	workerMode     *prometheus.GaugeVec
}

// New creates the metrics and registers them on reg. Called again
// with the same reg (two elections in one process, each with its own
// Worker) it returns Metrics that share the collectors already registered:
// the election label keeps them apart.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("workerprom: nil prometheus registerer")
	}
	el, job := []string{"election"}, []string{"election", "job"}
	m := &Metrics{
		leading:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_election_leader", Help: "1 while this instance leads the election."}, el),
		term:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_election_term", Help: "Fencing term of this instance's current or last leadership."}, el),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_election_transitions_total", Help: "Leadership transitions by kind."}, []string{"election", "transition"}),
		renew: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "solo_election_renew_duration_seconds", Help: "Lease renewal round trips.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"election", "result"}),
		overruns:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_election_overruns_total", Help: "Leader functions still running past the stop budget."}, el),
		jobRuns:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_job_runs_total", Help: "Job runs that ended (cron ticks and pull job returns)."}, job),
		jobFailures:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_job_failures_total", Help: "Job runs that returned an error or panicked."}, job),
		jobRestarts:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_job_restarts_total", Help: "Pull job restarts within a term."}, job),
		jobLastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_job_last_success_timestamp_seconds", Help: "Unix time of the job's last successful run."}, job),
		jobOverruns:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_job_overruns_total", Help: "Jobs still running past the stop budget after cancellation."}, job),
		fenceClaims:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_fence_claim_failures_total", Help: "Claims of a new term in the fence (worker.WithFence) that failed or were refused; no job runs until one succeeds."}, el),
		failedTermsN:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_worker_failed_terms", Help: "The election's failed terms in a row (resigned after worker.max_failures job failures), as last read or written by this instance."}, el),
		gaveUp:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_worker_gave_up", Help: "1 once this instance stopped campaigning after worker.max_failed_terms failed terms in a row (in mode always: once its jobs stopped for good)."}, el),
		redisUp:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_election_redis_up", Help: "1 while Redis answers this instance's acquire and renew calls of the election, else 0 (also before the first answer)."}, el),
		protoRefused:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_election_protocol_refused", Help: "1 while this instance does not campaign because the holder speaks a protocol this build does not share an election with (version skew)."}, el),
		jobRunning:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_job_running", Help: "Runs of the job in progress on this instance."}, job),
		redisConfig: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_election_redis_config_errors_total",
			Help: "Calls of this instance (acquire, renew; a spread group's heartbeat) that Redis refused as a configuration error: NOPERM (ACL), WRONGPASS, NOAUTH, unknown command. Retrying does not cure them: fix the configuration (docs/operations.md#acl)."}, el),
		evicting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "solo_election_redis_evicting",
			Help: "1 while Redis may evict this election's keys (maxmemory set, maxmemory-policy not noeviction): the instance does not campaign, a leader steps down; -1 while INFO memory is refused (the ACL user lacks +info) so the policy cannot be verified; else 0 (docs/operations.md#memory)."}, el),
		workerMode: newWorkerMode(),
		jobSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "solo_job_skipped_ticks_total", Help: "Cron ticks not run: missed in a failover gap or by a late scheduler (misfire policy skip), or skipped because the previous run was still going."}, job),
	}
	if err := registerBuildInfo(reg); err != nil {
		return nil, err
	}
	err := errors.Join(
		register(reg, &m.leading), register(reg, &m.term), register(reg, &m.transitions),
		register(reg, &m.renew), register(reg, &m.overruns), register(reg, &m.jobRuns),
		register(reg, &m.jobFailures), register(reg, &m.jobRestarts), register(reg, &m.jobLastSuccess),
		register(reg, &m.jobOverruns), register(reg, &m.jobSkipped), register(reg, &m.fenceClaims),
		register(reg, &m.failedTermsN), register(reg, &m.gaveUp), register(reg, &m.redisUp),
		register(reg, &m.jobRunning), register(reg, &m.protoRefused), register(reg, &m.redisConfig),
		register(reg, &m.evicting), register(reg, &m.workerMode),
	)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers *c on reg, or replaces *c by the identical collector
// registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
	if !ok {
		return err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return err
	}
	*c = existing
	return nil
}

// Elector returns the leader.Metrics of one election, for leader.WithMetrics,
// and creates the election's series with their zero values.
func (m *Metrics) Elector(election string) leader.Metrics {
	if m == nil {
		return nil
	}
	m.leading.WithLabelValues(election)
	m.term.WithLabelValues(election)
	for _, t := range []leader.Transition{leader.TransitionElected, leader.TransitionReleased, leader.TransitionExpired, leader.TransitionStepDown} {
		m.transitions.WithLabelValues(election, t.Label())
	}
	for _, r := range []string{"ok", "lost", "error"} {
		m.renew.WithLabelValues(election, r)
	}
	m.overruns.WithLabelValues(election)
	m.redisUp.WithLabelValues(election)
	m.protoRefused.WithLabelValues(election)
	m.redisConfig.WithLabelValues(election)
	m.evicting.WithLabelValues(election)
	return electorMetrics{m: m, election: election}
}

// WorkerCreated creates a Worker's own series of election with their
// zero values (not resetting any already there).
func (m *Metrics) WorkerCreated(election string) {
	if m == nil {
		return
	}
	m.fenceClaims.WithLabelValues(election)
	m.failedTermsN.WithLabelValues(election)
	m.gaveUp.WithLabelValues(election)
}

// JobAdded creates a job's series with their zero values, but for the
// last-success timestamp.
func (m *Metrics) JobAdded(election, job string) {
	if m == nil {
		return
	}
	for _, c := range []*prometheus.CounterVec{m.jobRuns, m.jobFailures, m.jobRestarts, m.jobOverruns, m.jobSkipped} {
		c.WithLabelValues(election, job)
	}
	m.jobRunning.WithLabelValues(election, job)
}

// JobRunning adds delta to solo_job_running.
func (m *Metrics) JobRunning(election, job string, delta int) {
	if m != nil {
		m.jobRunning.WithLabelValues(election, job).Add(float64(delta))
	}
}

type electorMetrics struct {
	leader.NopMetrics
	m        *Metrics
	election string
}

func (e electorMetrics) Transition(t leader.Transition, term uint64) {
	e.m.transitions.WithLabelValues(e.election, t.Label()).Inc()
	if t == leader.TransitionElected {
		e.m.leading.WithLabelValues(e.election).Set(1)
		e.m.term.WithLabelValues(e.election).Set(float64(term))
		return
	}
	e.m.leading.WithLabelValues(e.election).Set(0)
}

func (e electorMetrics) Renew(took time.Duration, err error) {
	result := "ok"
	switch {
	case errors.Is(err, leader.ErrLeaseLost):
		result = "lost"
	case err != nil:
		result = "error"
	}
	e.m.renew.WithLabelValues(e.election, result).Observe(took.Seconds())
}

// Redis implements leader.Metrics.
func (e electorMetrics) Redis(err error) {
	v := 1.0
	if err != nil {
		v = 0
	}
	e.m.redisUp.WithLabelValues(e.election).Set(v)
}

// ProtocolRefused implements leader.Metrics.
func (e electorMetrics) ProtocolRefused(refused bool) {
	v := 0.0
	if refused {
		v = 1
	}
	e.m.protoRefused.WithLabelValues(e.election).Set(v)
}

// RedisConfigError implements leader.Metrics.
func (e electorMetrics) RedisConfigError(error) { e.m.HeartbeatConfigError(e.election) }

// RedisEviction implements leader.Metrics.
func (e electorMetrics) RedisEviction(s leader.EvictionState) {
	v := 0.0
	switch s {
	case leader.EvictionUnsafe:
		v = 1
	case leader.EvictionUnverified:
		v = -1
	}
	e.m.evicting.WithLabelValues(e.election).Set(v)
}

// SpreadCreated creates a spread group's own series (its heartbeat's)
// with their zero values.
func (m *Metrics) SpreadCreated(group string) {
	if m != nil {
		m.redisConfig.WithLabelValues(group)
	}
}

// HeartbeatConfigError counts a spread group's heartbeat that Redis
// refused as a configuration error.
func (m *Metrics) HeartbeatConfigError(election string) {
	if m != nil {
		m.redisConfig.WithLabelValues(election).Inc()
	}
}

func (e electorMetrics) Overrun(uint64) { e.m.overruns.WithLabelValues(e.election).Inc() }

// JobRan counts a run of job that ended with err.
func (m *Metrics) JobRan(election, job string, err error) {
	if m == nil {
		return
	}
	m.jobRuns.WithLabelValues(election, job).Inc()
	if err != nil {
		m.jobFailures.WithLabelValues(election, job).Inc()
		return
	}
	m.jobLastSuccess.WithLabelValues(election, job).SetToCurrentTime()
}

// JobRestarted counts a pull job's restart.
func (m *Metrics) JobRestarted(election, job string) {
	if m != nil {
		m.jobRestarts.WithLabelValues(election, job).Inc()
	}
}

// JobOverran counts a job still running past the stop budget.
func (m *Metrics) JobOverran(election, job string) {
	if m != nil {
		m.jobOverruns.WithLabelValues(election, job).Inc()
	}
}

// TicksSkipped counts n cron ticks not run.
func (m *Metrics) TicksSkipped(election, job string, n int) {
	if m != nil {
		m.jobSkipped.WithLabelValues(election, job).Add(float64(n))
	}
}

// FenceClaimFailed counts a failed claim of a term in the fence.
func (m *Metrics) FenceClaimFailed(election string) {
	if m != nil {
		m.fenceClaims.WithLabelValues(election).Inc()
	}
}

// FailedTerms sets the election's failed terms in a row.
func (m *Metrics) FailedTerms(election string, n int64) {
	if m != nil {
		m.failedTermsN.WithLabelValues(election).Set(float64(n))
	}
}

// GaveUp marks the election as given up by this instance.
func (m *Metrics) GaveUp(election string) {
	if m != nil {
		m.gaveUp.WithLabelValues(election).Set(1)
	}
}
