package leader

import (
	"errors"

	"github.com/solo-run/solo/internal/rediserr"
)

var (
	// ErrLeaseLost reports that the lease is not (or no longer) held with
	// the caller's exact value: it expired, was taken by another candidate,
	// was deleted, or Redis lost it in a restart or failover.
	ErrLeaseLost = errors.New("leader: lease lost")

	// ErrNoLeader reports that no candidate holds the lease.
	ErrNoLeader = errors.New("leader: no leader")

	// ErrNotLeader is returned by Resign when this elector does not lead.
	ErrNotLeader = errors.New("leader: not leader")

	// ErrNotReplicated reports a write that fewer than MinReplicas
	// replicas acknowledged: an acquire (the elector never leads on it and
	// releases it) or a checkpoint (counted as not recorded).
	ErrNotReplicated = errors.New("leader: write not acknowledged by enough replicas")

	// ErrRenewDeadline is the cause of a term's context cancellation when
	// no renewal succeeded within RenewDeadline.
	ErrRenewDeadline = errors.New("leader: renew deadline passed")

	// ErrResigned is the cause of a term's context cancellation by Resign.
	ErrResigned = errors.New("leader: resigned")

	// ErrShutdown is the cause of a term's context cancellation when Run's
	// context ends.
	ErrShutdown = errors.New("leader: shutting down")

	// ErrSpreadGroupLive is returned by an acquire (RedisStore.Acquire)
	// refused because a spread group of the same name (worker.Spread,
	// election.mode spread) has a live member: the two modes of one name
	// exclude each other. The Elector logs it once, at error level, and
	// keeps trying: it campaigns once the group is gone.
	ErrSpreadGroupLive = errors.New("leader: a spread group of this name is live (election.mode spread)")

	// ErrAlreadyRunning is returned by Run when the elector already runs.
	ErrAlreadyRunning = errors.New("leader: elector already running")

	// ErrStopTimeout is returned by Run when the leader function did not
	// return within ShutdownTimeout after Run's context ended; the lease
	// was left to expire, not released.
	ErrStopTimeout = errors.New("leader: leader function did not stop in time")
)

// ErrRenewStuck is returned by Elector.Healthy while this elector leads but
// its renewal loop is wedged: it has not attempted a renewal in time.
var ErrRenewStuck = errors.New("leader: leading, but the renewal loop is wedged")

// ErrRedisConfig reports a call Redis refused for a reason retrying cannot
// cure: the ACL user lacks a command, key or channel (NOPERM), the password
// is wrong or missing (WRONGPASS, NOAUTH), or the server does not know a
// command (renamed or disabled). Errors wrapping it are *RedisConfigError,
// whose Fix says what to change (docs/operations.md, ACL).
var ErrRedisConfig = errors.New("leader: redis configuration error")

// RedisConfigError is a call Redis refused as a configuration error: it
// wraps ErrRedisConfig and the call's error, which holds Redis's reply.
type RedisConfigError struct {
	Err error  // the call's error
	Fix string // what to change, naming the rule where Redis names it
}

func (e *RedisConfigError) Error() string { return e.Err.Error() + ": " + e.Fix }

// Unwrap returns the call's error and ErrRedisConfig.
func (e *RedisConfigError) Unwrap() []error { return []error{e.Err, ErrRedisConfig} }

// RedisConfig returns err as a *RedisConfigError when Redis refused the
// call as a configuration error, else err unchanged (nil for nil).
func RedisConfig(err error) error {
	if err == nil || errors.Is(err, ErrRedisConfig) {
		return err
	}
	if fix := rediserr.Fix(err); fix != "" {
		return &RedisConfigError{Err: err, Fix: fix}
	}
	return err
}
