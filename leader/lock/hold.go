package lock

import (
	"context"
	"sync/atomic"

	"github.com/solo-run/solo/leader/fence"
)

// newHold makes h (zero; &l.first for the first) a hold of the lease;
// parent gives its context's values.
func (l *lease) newHold(parent context.Context, h *Hold) *Hold {
	h.l = l
	// The hold's context takes its values from parent (and itself), never
	// its cancellation; the lease ends it through end, synchronously, with
	// no goroutine in between: registered under mu, or born ended.
	h.vals = holdValues{Context: context.Background(), parent: fence.WithToken(parent, h.Token()), h: h}
	h.ctx, h.cancel = context.WithCancelCause(&h.vals)
	l.mu.Lock()
	if l.refs == 0 {
		l.refs = 1 // the first hold; a re-entry counted itself before its request
	}
	if h == &l.first {
		l.firstMade = true
	} else {
		if l.more == nil {
			l.more = map[*Hold]struct{}{}
		}
		l.more[h] = struct{}{}
	}
	ended := l.ended
	l.mu.Unlock()
	if ended {
		h.cancel(context.Cause(l.ctx))
	}
	return h
}

// Hold is one holding of a lock: the first Lock of a term or a re-entry.
// Its methods are safe for concurrent use.
type Hold struct {
	l        *lease
	ctx      context.Context
	cancel   context.CancelCauseFunc
	unlocked atomic.Bool
	vals     holdValues // the parent of ctx
}

// holdValues is the parent of a hold's context: never done (Done, Err
// and Deadline of Background, so the context package links it to no
// parent), with the hold itself under its lock's key and the values of
// the context Lock was given.
type holdValues struct {
	context.Context // Background
	parent          context.Context
	h               *Hold
}

func (c *holdValues) Value(key any) any {
	if key == c.h.l.m.key {
		return c.h
	}
	return c.parent.Value(key)
}

// Term returns the fencing token: it grows with every new holding of the
// lock (re-entries share their term) and is never reused, even when Redis
// lost its data (the term's floor is the Redis server's clock).
func (h *Hold) Term() uint64 { return h.l.term }

// Holder returns the term's holder ID: unique per acquire attempt (an
// adopted hold keeps the holder ID of the attempt that took it), the holder
// a fence guard checks beside the term (fence.Token.Holder).
func (h *Hold) Holder() string { return ownerOf(h.l.field) }

// Name returns the lock's name.
func (h *Hold) Name() string { return h.l.m.name }

// FenceElection returns the name under which a lock's terms are claimed
// and checked in a fence (leader/fence): "lock:" + the lock's name, apart
// from the election of the same name, whose terms are counted apart.
func FenceElection(lock string) string { return "lock:" + lock }

// Token returns the hold's fencing token: the fence election
// FenceElection(name), the term and the owner. Context carries it, so that
// fence.Guard.Do(h.Context(), fn) writes fenced by this hold (claiming the
// term at its first write).
func (h *Hold) Token() fence.Token {
	return fence.Token{Election: FenceElection(h.l.m.name), Term: h.l.term, Holder: h.Holder()}
}

// Context returns a context that carries the hold (so that Lock with it
// re-enters), its fencing token (Token, for fence.Guard.Do) and the
// values of the context Lock was given, and that is
// cancelled when the hold ends: with ErrUnlocked by Unlock, with
// ErrRenewDeadline when no renewal succeeded within RenewDeadline of the
// last one's send time, with ErrLockLost when a renewal found the lock
// gone, with ErrLeaseExpired at the end of a fixed lease, with ErrClosed
// by Client.Close. context.Cause tells which. It is cancelled before the
// lock can pass to another owner, at least TTL − RenewDeadline (the stop
// budget) before.
func (h *Hold) Context() context.Context { return h.ctx }
