// Package lockseam is the seam through which solo's own simulator
// (internal/sim) runs the real leader/lock code over a simulated store: the
// exported mirror of leader/lock's internal store interface. Being
// internal, it cannot be imported outside this module, so it adds nothing
// to leader/lock's public API.
package lockseam

import (
	"context"
	"time"
)

// Outcomes of an acquire, as leader/lock's acquire script returns them.
const (
	CodeGone      = -1 // the hold to re-enter is gone
	CodeHeld      = 0  // another owner holds the lock
	CodeAcquired  = 1  // a new term was minted for owner
	CodeAdopted   = 2  // owner's own earlier attempt holds it
	CodeReentered = 3  // one more hold of the term
)

// AcquireReply is an acquire's answer.
type AcquireReply struct {
	Code   int
	Term   uint64        // acquired, adopted
	Count  int64         // re-entered: holds of the term now
	Holder string        // held: "TERM OWNER" of the holder
	PTTL   time.Duration // held: the holder's time left
}

// Store keeps one lock; every method is one atomic step, with the
// semantics of leader/lock's scripts (acquire.lua, renew.lua, release.lua,
// abandon.lua; release and abandon publish "released FIELD" on
// Lock.Channel when they delete the lock).
type Store interface {
	// Acquire takes the lock for owner, adopts it when owner already holds
	// it, or (reenter non-empty) adds one hold to the term whose field is
	// reenter. wait says the caller will wait (a fair lock queues it).
	Acquire(ctx context.Context, owner, reenter string, wait bool) (AcquireReply, error)
	// Renew extends the lock if field still holds it.
	Renew(ctx context.Context, field string) (bool, error)
	// Release drops one hold (all when last) of field; it returns the
	// holds left, or -1 when field does not hold the lock.
	Release(ctx context.Context, field string, last bool) (int64, error)
	// Abandon deletes the lock if owner holds it.
	Abandon(ctx context.Context, owner string) error
}

// Lock describes the lock a Store is made for.
type Lock struct {
	Name      string
	KeyPrefix string
	Channel   string // the release notices' pub/sub channel
	TTL       time.Duration
	Fair      bool // WithFair: waiters take the lock in FIFO order
}

// WithStore is set by package leader/lock (in its init): it returns a
// lock.Option, typed any here to avoid an import cycle, that makes every
// Mutex of a Client use the Store newStore returns for it. Waiters still
// subscribe through the Client's Redis client.
var WithStore func(newStore func(Lock) Store) any
