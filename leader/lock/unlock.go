package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// releaseLast deletes the lock for the term's last hold and stops the
// watchdog. The release is sent even when ctx is cancelled or its
// deadline has passed (go-redis writes no request on a done context):
// when ctx's deadline is less than RenewDeadline away, the release runs on
// a goroutine of the Client bounded by RenewDeadline, and releaseLast
// returns by ctx's deadline (context.DeadlineExceeded when the release
// has not answered by then).
func (l *lease) releaseLast(ctx context.Context) (int64, error) {
	l.end(ErrUnlocked) // every hold of the term ends before the lock can pass on
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) >= l.m.cfg.RenewDeadline {
		ctx, cancel := uncancelled(ctx)
		defer cancel()
		n, err := l.m.release(ctx, l.field, true)
		l.finish(n, err)
		return n, err
	}
	type result struct {
		n   int64
		err error
	}
	ch := make(chan result, 1)
	ctx = context.WithoutCancel(ctx)
	send := func() (int64, error) {
		// Bounded by RenewDeadline in every mode (as an abandon is), also
		// with a client that ignores deadlines: Close waits for it.
		n, err := call(ctx, l.m.cfg.RenewDeadline, l.m.hooks.Settle, func(ctx context.Context) (int64, error) {
			return l.m.st.Release(ctx, l.field, true)
		})
		l.finish(n, err)
		return n, err
	}
	if !l.m.c.spawn(func() {
		n, err := send()
		ch <- result{n, err}
	}) {
		return send() // closed: at once, best effort
	}
	t := time.NewTimer(time.Until(dl))
	defer t.Stop()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-t.C:
		return 0, context.DeadlineExceeded
	}
}

// uncancelled returns ctx without its cancellation but with its deadline
// and values: a release is sent even when ctx was cancelled (Unlock with
// the hold's own context), and ctx's deadline still bounds it. cancel is
// never nil.
func uncancelled(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	u := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(u, dl)
	}
	return u, func() {}
}

// unref drops one reference without a release of its own (a re-entry that
// did not happen). If it was the last, the lease is released as by Unlock.
func (l *lease) unref(ctx context.Context) {
	l.mu.Lock()
	l.refs--
	last := l.refs == 0 && !l.released && l.lostCause == nil
	l.mu.Unlock()
	if last {
		_, _ = l.releaseLast(ctx)
	}
}

// finish records a release's answer: the term is over once its last hold
// went (whatever Redis said: an unconfirmed release leaves the key to
// expire) or Redis deleted the lock.
func (l *lease) finish(n int64, err error) {
	if err == nil && n < 0 {
		l.expire(ErrLockLost)
	}
	l.mu.Lock()
	end := l.refs == 0 || (err == nil && n <= 0)
	if end && l.lostCause == nil {
		l.released = true
	}
	l.mu.Unlock()
	if end {
		l.end(ErrUnlocked)
		l.stopWatchdog()
		l.m.c.untrack(l)
		l.abandonStrays()
		if err == nil && n == 0 {
			if ce := l.m.log.Check(zap.DebugLevel, "released"); ce != nil {
				ce.Write(zap.Uint64("term", l.term))
			}
		}
	}
}

// Unlock gives up this hold. The lock is released (deleted, and waiters
// notified) when it was its term's last hold; before that only the count
// in Redis goes down. It returns ErrNotHeld when the hold was already
// unlocked, and an error wrapping ErrLockLost (and the cause, such as
// ErrRenewDeadline) when the hold was lost: nothing is then released, as
// another owner may hold the lock already. ctx bounds the call (as does
// RenewDeadline); the hold counts as unlocked either way, and a lock whose
// release did not go through expires after its TTL. The last release is
// sent even when ctx is done: when ctx's deadline is less than
// RenewDeadline away (or past), it goes on a goroutine of the Client,
// bounded by RenewDeadline, and Unlock returns by ctx's deadline, with
// its error if no answer came by then.
func (h *Hold) Unlock(ctx context.Context) error {
	if !h.unlocked.CompareAndSwap(false, true) {
		return ErrNotHeld
	}
	// The hold ends before any release is sent: a release may let another
	// owner in before its reply comes back — the last one, and also one
	// that is not the last when a re-entry is in flight (counted here, not
	// yet in Redis), which brings Redis's count to zero.
	h.cancel(ErrUnlocked)
	if errors.Is(context.Cause(ctx), ErrUnlocked) {
		ctx = context.WithoutCancel(ctx) // Unlock(h.Context()) still sends its release
	}
	l := h.l
	l.mu.Lock()
	delete(l.more, h) // an unlocked re-entry is not kept until the term ends
	l.refs--
	last := l.refs == 0
	cause := l.lostCause
	l.mu.Unlock()
	if cause != nil {
		if last {
			l.finish(-2, nil)
		}
		return lostError(l.m.name, cause)
	}
	var (
		n   int64
		err error
	)
	if last {
		n, err = l.releaseLast(ctx)
	} else {
		n, err = l.m.release(ctx, l.field, false)
		l.finish(n, err)
	}
	switch {
	case err != nil:
		return leader.RedisConfig(fmt.Errorf("unlock %s: %w", l.m.name, err))
	case n < 0:
		return lostError(l.m.name, ErrLockLost)
	}
	return nil
}

// heldLostError is Lock's error for a carried hold that was lost: it
// wraps ErrLockLost and the cause (such as ErrRenewDeadline).
func heldLostError(name string, cause error) error {
	if errors.Is(cause, ErrLockLost) {
		return fmt.Errorf("lock %s: hold in context: %w", name, cause)
	}
	return fmt.Errorf("lock %s: hold in context: %w (%w)", name, ErrLockLost, cause)
}

func lostError(name string, cause error) error {
	if errors.Is(cause, ErrLockLost) {
		return fmt.Errorf("unlock %s: %w", name, cause)
	}
	return fmt.Errorf("unlock %s: %w (%w)", name, ErrLockLost, cause)
}
