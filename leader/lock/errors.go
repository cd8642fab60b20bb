package lock

import (
	"errors"

	"github.com/solo-run/solo/leader"
)

var (
	// ErrNotObtained is returned by TryLock when another owner holds the
	// lock.
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrLockLost reports a hold that is no longer held in Redis: its key
	// expired, was deleted, or Redis lost it in a restart or failover. It
	// is the cause of the hold's context cancellation when a renewal finds
	// the lock gone, and is returned by Unlock of a hold that was lost.
	ErrLockLost = errors.New("lock: lock lost")

	// ErrRenewDeadline is the cause of a hold's context cancellation when
	// no renewal succeeded within RenewDeadline. Unlock then returns an
	// error wrapping both it and ErrLockLost.
	ErrRenewDeadline = errors.New("lock: renew deadline passed")

	// ErrLeaseExpired is the cause of a fixed-lease hold's context
	// cancellation (WithFixedLease) when its lease is about to end.
	ErrLeaseExpired = errors.New("lock: fixed lease expired")

	// ErrUnlocked is the cause of a hold's context cancellation by its own
	// Unlock, or, for every hold of the term, by the Unlock that released
	// the lock.
	ErrUnlocked = errors.New("lock: unlocked")

	// ErrNotHeld is returned by Unlock of a hold that was already unlocked.
	ErrNotHeld = errors.New("lock: hold already unlocked")

	// ErrNotReplicated is returned (wrapped) by an acquire that fewer than
	// Config.MinReplicas replicas acknowledged: the lock it took was handed
	// back. Lock retries; TryLock returns it.
	ErrNotReplicated = leader.ErrNotReplicated

	// ErrClosed is returned by a Mutex whose Client was closed.
	ErrClosed = errors.New("lock: client closed")

	// errCallBound reports a Redis call abandoned at its bound: its
	// outcome is unknown.
	errCallBound = errors.New("lock: no reply within the renew deadline")

	// errLate reports an acquire confirmed after its renew deadline: it is
	// released, never held.
	errLate = errors.New("lock: acquire confirmed after its renew deadline")

	// errRenewNotReplicated marks a renewal that fewer than MinReplicas
	// replicas acknowledged: a failed renewal (retried), not a lost lock.
	errRenewNotReplicated = errors.New("lock: renewal not acknowledged by enough replicas")
)
