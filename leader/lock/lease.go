package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/leader"
)

// lease is one term's holding of a lock, shared by the term's holds (the
// first and its re-entries). It owns its watchdog: two timers, one that
// renews every RenewInterval from the last successful renewal's send time
// and one that ends the lease at that send time + RenewDeadline. Neither
// holds a goroutine between firings, so an uncontended hold costs no
// goroutine start and no join; a renewal runs on its timer's goroutine
// and is awaited by stopWatchdog. The deadline timer is armed by the
// first renewal, before its request is sent (a fixed lease arms it at
// once): until then the renewal timer, due earlier, is the only one, so a
// hold shorter than RenewInterval costs one timer. The watchdog stops
// when the last hold is unlocked, when the lease is lost, or when the
// Client closes.
type lease struct {
	m     *Mutex
	term  uint64
	field string // "TERM OWNER": the hash field in Redis
	ctx   context.Context
	// cancel ends ctx, which bounds a renewal in flight: every
	// stopWatchdog comes after it. end calls it, then ends every hold.
	cancel context.CancelCauseFunc
	first  Hold // the first hold of the term, allocated with the lease

	deadline *time.Timer // at last successful renewal's send time + RenewDeadline; nil until armed
	expired  atomic.Bool // set by the deadline timer before it cancels

	wmu      sync.Mutex // guards the watchdog fields below
	stopped  bool
	renewAt  *time.Timer // nil for a fixed lease
	lastOK   time.Time   // send time of the last successful renewal (or the acquire)
	failing  bool
	inflight sync.WaitGroup

	mu        sync.Mutex         // guards the fields below
	ended     bool               // end was called: holds made from now on start ended
	firstMade bool               // first is a hold (its cancel is set)
	more      map[*Hold]struct{} // the re-entries' holds not unlocked (made on the first)
	refs      int                // holds not unlocked, plus re-entries in flight
	released  bool               // the last Unlock deleted the lock
	lostCause error              // non-nil once the lease is lost
}

func newLease(m *Mutex, term uint64, field string, sent time.Time) *lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &lease{m: m, term: term, field: field, ctx: ctx, cancel: cancel, lastOK: sent}
}

// start arms the renewals, or the deadline of a fixed lease.
func (l *lease) start(sent time.Time) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.m.fixed {
		l.deadline = time.AfterFunc(time.Until(sent.Add(l.m.cfg.RenewDeadline)), l.onDeadline)
		return
	}
	l.renewAt = time.AfterFunc(time.Until(sent.Add(l.m.cfg.RenewInterval)), l.renew)
}

// onDeadline runs on the deadline timer's goroutine: the lease is over.
func (l *lease) onDeadline() {
	cause := ErrRenewDeadline
	if l.m.fixed {
		cause = ErrLeaseExpired
	}
	l.expired.Store(true)
	l.expire(cause)
	l.logLoss() // after the cancel: a slow log sink cannot delay it
}

// expire marks the lease lost with cause and cancels every hold's context.
func (l *lease) expire(cause error) {
	l.mu.Lock()
	if l.lostCause == nil && !l.released {
		l.lostCause = cause
	}
	l.mu.Unlock()
	l.end(cause)
}

// end cancels the lease's context and every hold's, synchronously (the
// holds' contexts are not children of the lease's: a child would cost
// the lease a Done channel and a children map per hold). A hold made
// after end starts cancelled (newHold).
func (l *lease) end(cause error) {
	l.cancel(cause)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	// Under mu, so no hold is missed or made meanwhile. A cancel only
	// cancels the context's children and starts its AfterFuncs: it never
	// calls back into the lease. The re-entries go first: whoever sees
	// the first hold end (a caller waiting on its Done) finds every hold
	// of the term ended already.
	for h := range l.more {
		h.cancel(cause)
	}
	if l.firstMade {
		l.first.cancel(cause)
	}
}

// stopWatchdog stops the timers and waits for a renewal in flight, which
// the lease's cancel (always before stopWatchdog) has cancelled.
func (l *lease) stopWatchdog() {
	l.wmu.Lock()
	l.stopped = true
	if l.deadline != nil {
		l.deadline.Stop()
	}
	if l.renewAt != nil {
		l.renewAt.Stop()
	}
	l.wmu.Unlock()
	l.inflight.Wait()
}

// renew runs on the renewal timer's goroutine: one renewal, bounded by
// the time left to the deadline; then it arms the next one (after
// RenewInterval from this send time on success, a quarter of it after a
// failure, until the deadline timer ends the lease).
func (l *lease) renew() {
	cfg := l.m.cfg
	// Logged last, after wmu is released and inflight is done (defers run
	// in reverse): Unlock and Close stop the watchdog under wmu and wait
	// for inflight, and a blocked log sink (a full stderr pipe) must not
	// delay them.
	var logf func()
	defer func() {
		if logf != nil {
			logf()
		}
	}()
	l.wmu.Lock()
	if l.stopped || l.ctx.Err() != nil {
		l.wmu.Unlock()
		return
	}
	l.inflight.Add(1) // under wmu, before stopped is read as false: Wait sees it
	lastOK := l.lastOK
	if l.deadline == nil {
		// Armed before the request: the deadline never waits on it.
		l.deadline = time.AfterFunc(time.Until(lastOK.Add(cfg.RenewDeadline)), l.onDeadline)
	}
	l.wmu.Unlock()
	defer l.inflight.Done()
	defer l.refreshEviction() // after the renewal was handled: never delays one

	now := time.Now()
	left := lastOK.Add(cfg.RenewDeadline).Sub(now)
	if left <= 0 {
		return // the deadline timer is ending the lease
	}
	ok, err := call(l.ctx, left, l.m.hooks.Settle, func(ctx context.Context) (bool, error) { return l.m.st.Renew(ctx, l.field) })

	l.wmu.Lock()
	if l.stopped || l.ctx.Err() != nil {
		l.wmu.Unlock()
		return // stopped, or answered after the deadline ended the lease
	}
	switch {
	case err == nil && ok && !l.expired.Load():
		if l.failing {
			l.failing = false
			logf = func() { l.m.log.Info("renew succeeded again", zap.Uint64("term", l.term)) }
		}
		l.lastOK = now
		l.deadline.Reset(time.Until(now.Add(cfg.RenewDeadline)))
		l.renewAt.Reset(time.Until(now.Add(cfg.RenewInterval)))
	case err == nil && !ok:
		l.expire(ErrLockLost)
		logf = l.logLoss
	case errors.Is(leader.RedisConfig(err), leader.ErrRedisConfig):
		// Refused, and every renewal until the deadline would be too: end
		// the hold now (its key expires on the server; the holds' contexts
		// are cancelled with the error as the cause).
		cerr := leader.RedisConfig(err)
		l.expire(cerr)
		logf = func() {
			l.m.log.Error("renew refused by redis: a configuration error, retrying will not cure it; the hold ends now", zap.Uint64("term", l.term), zap.Error(cerr))
		}
	case err != nil:
		if !l.failing {
			l.failing = true
			logf = func() {
				l.m.log.Warn("renew failed; retrying until the renew deadline", zap.Uint64("term", l.term), zap.Error(err))
			}
		}
		l.renewAt.Reset(max(cfg.RenewInterval/4, time.Millisecond))
	}
	l.wmu.Unlock()
}

func (l *lease) logLoss() {
	cause := context.Cause(l.ctx)
	if errors.Is(cause, ErrUnlocked) || errors.Is(cause, ErrClosed) || errors.Is(cause, ErrLeaseExpired) {
		return
	}
	l.m.log.Error("lock lost", zap.Uint64("term", l.term), zap.NamedError("cause", cause))
}
