package worker

import "time"

// Mode says whether an instance takes part in the election.
type Mode string

// Modes, to move off a hand-picked "fetch=true" instance one instance at a
// time.
const (
	// ModeElect competes for the lease and runs the jobs while leading.
	ModeElect Mode = "elect"
	// ModeStandby never leads; it only observes the election.
	ModeStandby Mode = "standby"
	// ModeAlways runs the jobs without an election: the old flag's
	// behaviour, unsafe when two instances have it.
	ModeAlways Mode = "always"
)

// Misfire is what a cron job does about ticks that fell into a failover gap.
type Misfire string

// Misfire policies.
const (
	// MisfireSkip drops missed ticks; the job runs at its next tick.
	MisfireSkip Misfire = "skip"
	// MisfireRunOnce runs the job once, late, for any number of missed ticks.
	MisfireRunOnce Misfire = "run-once"
)

// Restart says when a pull job that returned is started again.
type Restart string

// Restart policies.
const (
	// RestartAlways restarts the job whenever it returns.
	RestartAlways Restart = "always"
	// RestartOnFailure restarts the job only when it failed (an error, a
	// panic, a non-zero exit).
	RestartOnFailure Restart = "on-failure"
	// RestartNever leaves a job that returned stopped until the next term.
	RestartNever Restart = "never"
)

// Defaults of Policy (see DefaultPolicy).
const (
	DefaultMaxFailures       = 5
	DefaultRestartBackoff    = time.Second
	DefaultRestartBackoffMax = 30 * time.Second
)

// Policy is how a worker restarts failing pull jobs (WithPolicy). solo's
// config.yaml sets it in its worker: section (max_failures for
// MaxFailures, and so on).
type Policy struct {
	// MaxFailures is the number of consecutive job failures after which the
	// instance resigns so that another candidate can try. Default 5; at
	// least 1.
	MaxFailures int

	// RestartBackoff is the first restart delay of a failed pull job; it
	// doubles with each further consecutive failure. Default 1s.
	RestartBackoff time.Duration

	// RestartBackoffMax caps the restart delay. Default 30s; not below
	// RestartBackoff.
	RestartBackoffMax time.Duration

	// MaxFailedTerms is the number of failed terms in a row, counted across
	// every instance of the election, after which every instance stops
	// campaigning (ErrGaveUp). A term has failed when the worker resigned it
	// because a pull job or the fence claim failed MaxFailures times in a row;
	// a successful run of a job resets the count. Default 0: never give up.
	// NewSpread refuses it. See docs/design.md, "Jobs under leadership".
	MaxFailedTerms int
}

// DefaultPolicy returns the defaults: 5 failures, back-off from 1s to 30s.
func DefaultPolicy() Policy {
	return Policy{
		MaxFailures:       DefaultMaxFailures,
		RestartBackoff:    DefaultRestartBackoff,
		RestartBackoffMax: DefaultRestartBackoffMax,
	}
}
