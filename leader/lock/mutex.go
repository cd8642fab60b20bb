package lock

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/hooks"
	"github.com/solo-run/solo/internal/liveness"
	"github.com/solo-run/solo/leader"
)

// Mutex is one named lock. Make it with Client.Mutex; it is safe for
// concurrent use.
type Mutex struct {
	c     *Client
	name  string
	cfg   Config
	fixed bool
	live  liveness.Policy // its leases', from cfg and fixed
	// inline: Lock, TryLock and Unlock send their calls on the caller's
	// goroutine (WithInlineCalls, or a client that honours deadlines).
	inline bool
	// ctxBound: the client honours context deadlines, so an inline call
	// gets one at RenewDeadline.
	ctxBound bool
	fair     bool // WithFair
	// grants: a fair release may grant the lock to the queue's head
	// (the Redis store, or a hooks store that is a hooks.Granter).
	grants  bool
	key     any // holdKey, boxed once (a context lookup would box it every time)
	channel string
	st      hooks.Store
	log     *zap.Logger
	// hooks are the simulator's (WithHooks), zero in production: its
	// Settle makes a wait that could end in two ways at one instant decide
	// by a fixed order; its Rand gives a call's jitter.
	hooks hooks.Hooks
}

// holdKey is the context key of a hold: one per Client and lock (prefix
// and name), so a context can carry holds of several locks, and a hold is
// re-entered only through the Client that made it (another Client may
// talk to another Redis, where the hold does not exist).
type holdKey struct {
	c    *Client
	lock string
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Config returns the timings in use, defaults applied.
func (m *Mutex) Config() Config { return m.cfg }

// WithHold returns a copy of ctx that carries h, so that Lock and TryLock
// with it re-enter h's lock instead of waiting for it. Hold.Context already
// carries its hold.
func WithHold(ctx context.Context, h *Hold) context.Context {
	return context.WithValue(ctx, h.l.m.key, h)
}

// HoldFrom returns the hold of m's lock carried by ctx, if any.
func (m *Mutex) HoldFrom(ctx context.Context) (*Hold, bool) {
	h, ok := ctx.Value(m.key).(*Hold)
	return h, ok
}

// Lock blocks until it holds the lock or ctx ends, and returns the hold.
// If ctx carries a hold of this lock (Hold.Context, WithHold) that is still
// held, Lock re-enters it: the new Hold shares the term, and the lock is
// released when every hold of the term was unlocked; if that hold was lost,
// Lock returns an error wrapping ErrLockLost. ctx bounds only the wait: the
// hold's context does not inherit its cancellation. Redis errors are
// retried; Lock returns ctx's error (joined with the last Redis error, if
// any) when ctx ends first, and ErrClosed after the Client was closed. How
// it waits and times its calls: docs/design.md, "Locks".
func (m *Mutex) Lock(ctx context.Context) (*Hold, error) { return m.lock(ctx, true) }

// TryLock makes one attempt: it returns the hold, or ErrNotObtained when
// another owner holds the lock, or another error (Redis, ctx) with nothing
// held. With a context carrying a hold of this lock it re-enters, as Lock.
func (m *Mutex) TryLock(ctx context.Context) (*Hold, error) { return m.lock(ctx, false) }

// LockTimeout is Lock that gives up after d (or when ctx ends).
func (m *Mutex) LockTimeout(ctx context.Context, d time.Duration) (*Hold, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return m.lock(ctx, true)
}

// reenter adds one hold to the term of h. It returns (nil, nil) when that
// term was released: the caller takes the lock anew.
func (m *Mutex) reenter(ctx context.Context, h *Hold) (*Hold, error) {
	l := h.l
	l.mu.Lock()
	switch {
	case l.lostCause != nil:
		cause := l.lostCause
		l.mu.Unlock()
		return nil, heldLostError(m.name, cause)
	case l.released || l.ended || l.refs == 0:
		// The term is over, or its last Unlock is under way (it counted
		// the last hold out, and its release deletes whatever the count):
		// a re-entry now would be deleted with it.
		l.mu.Unlock()
		return nil, nil
	}
	l.refs++ // counted before the request, so no Unlock thinks it is the last
	l.mu.Unlock()
	rep, err := m.reacquire(ctx, l.field)
	if err == nil && rep.Code == hooks.CodeReentered {
		l.mu.Lock()
		cause, ended := l.lostCause, l.ended
		l.mu.Unlock()
		switch {
		case cause != nil:
			// Answered after the hold was lost: the term is over.
			l.unref(ctx)
			return nil, heldLostError(m.name, cause)
		case ended:
			// Never a dead hold with a nil error: the term ended while
			// the re-entry was on its way.
			l.unref(ctx)
			return nil, fmt.Errorf("lock %s: hold in context: %w", m.name, ErrLockLost)
		}
		return l.newHold(ctx, new(Hold)), nil
	}
	// Not re-entered (or unknown: a count Redis may have added is dropped
	// by the last Unlock, which deletes whatever the count).
	l.unref(ctx)
	if err != nil {
		return nil, leader.RedisConfig(fmt.Errorf("lock %s: re-enter: %w", m.name, err))
	}
	if rep.Code == hooks.CodeGone {
		l.expire(ErrLockLost)
		return nil, fmt.Errorf("lock %s: hold in context: %w", m.name, ErrLockLost)
	}
	return nil, fmt.Errorf("lock %s: unexpected re-enter outcome %d", m.name, rep.Code)
}
