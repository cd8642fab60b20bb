package hooks

import (
	"context"
	"time"
)

// Outcomes of an acquire, as leader/lock's acquire script returns them.
const (
	CodeAbandoned = -2 // the attempt was abandoned before it landed: nothing done
	CodeGone      = -1 // the hold to re-enter is gone
	CodeHeld      = 0  // another owner holds the lock
	CodeAcquired  = 1  // a new term was minted for owner
	CodeAdopted   = 2  // an earlier attempt of the same call holds it (Field)
	CodeReentered = 3  // one more hold of the term
)

// AcquireReply is an acquire's answer.
type AcquireReply struct {
	Code   int
	Term   uint64        // acquired, adopted
	Count  int64         // re-entered: holds of the term now
	Holder string        // held: "TERM OWNER" of the holder
	PTTL   time.Duration // held: the holder's time left
	// Field names the hold to renew and release by (acquired, adopted)
	// when it is not "TERM OWNER" of the attempt's own owner: an adopted
	// hold's (an earlier attempt's owner), Redlock's (every master's own
	// term).
	Field string
	// Seen is, on a fair lock's "held" answer, the last term minted (0
	// when unknown): a grant with a higher term came after the answer.
	Seen uint64
}

// Store keeps one lock for a Mutex: leader/lock's Redis and Redlock
// stores, or the one Hooks.NewLockStore makes. Every method is one atomic
// step, with the semantics of leader/lock's scripts (acquire.lua,
// renew.lua, release.lua, abandon.lua; release and abandon publish
// "released FIELD" on Lock.Channel when they delete the lock).
type Store interface {
	// Acquire is one attempt of a Lock call: it takes the lock for owner
	// (unique per attempt, "CALL.N"), adopts it when one of adopt (the
	// call's earlier attempts whose outcome is unknown) holds it, or
	// (reenter non-empty) adds one hold to the term whose field is
	// reenter. An owner that was abandoned (a tombstone) gets
	// CodeAbandoned and changes nothing. wait says the caller will wait
	// (a fair lock queues the call: the owner up to its last '.').
	Acquire(ctx context.Context, owner string, adopt []string, reenter string, wait bool) (AcquireReply, error)
	// Renew extends the lock if field still holds it.
	Renew(ctx context.Context, field string) (bool, error)
	// Release drops one hold (all when last) of field; it returns the
	// holds left, or -1 when field does not hold the lock.
	Release(ctx context.Context, field string, last bool) (int64, error)
	// Abandon gives each of owners (attempts of call that may still land)
	// a tombstone, and deletes the lock if one of them holds it; a fair
	// lock's call also leaves the queue.
	Abandon(ctx context.Context, call string, owners []string) error
}

// Granter is a Store whose fair queue marks each waiting call as one that
// takes grants (its entry "CALL!", as leader/lock's Redis store queues
// it): a fair Mutex over it takes a release's grant ("granted TERM
// CALL.0", or the hold "TERM CALL.0" adopted by its next attempt) as it
// does over Redis. A Store that is not a Granter, or answers false, gets
// no grants (its calls queue as "CALL" and are woken by "released").
type Granter interface {
	TakesGrants() bool
}

// Lock describes the lock a Store is made for.
type Lock struct {
	Name      string
	KeyPrefix string
	Channel   string // the release notices' pub/sub channel
	TTL       time.Duration
	Fair      bool // WithFair: waiters take the lock in FIFO order
}
