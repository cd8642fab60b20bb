package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/liveness"
	"github.com/solo-run/solo/leader"
)

// lease is one term's holding of a lock, shared by the term's holds (the
// first and its re-entries). Its renewals and deadline run on a
// liveness.Renewal in its Renewer mode: every RenewInterval from the last
// successful renewal's send time a renewal runs on the renewal timer's
// goroutine (awaited by stopWatchdog), and at that send time +
// RenewDeadline the deadline timer ends the lease. Neither holds a
// goroutine between firings, so an uncontended hold costs no goroutine
// start and no join; the deadline timer is armed by the first renewal (a
// fixed lease arms it at once), so a hold shorter than RenewInterval
// costs one timer. The watchdog stops when the last hold is unlocked,
// when the lease is lost, or when the Client closes.
type lease struct {
	m     *Mutex
	term  uint64
	field string // "TERM OWNER": the hash field in Redis
	// strays are owners of the call that took this lease whose requests
	// may still land once the term ended (lockCall.strays): abandoned
	// then (abandonStrays).
	strays []string
	ctx    context.Context
	// cancel ends ctx, which bounds a renewal in flight: every
	// stopWatchdog comes after it. end calls it, then ends every hold.
	cancel context.CancelCauseFunc
	first  Hold // the first hold of the term, allocated with the lease

	wmu      sync.Mutex       // guards live (but Expired)
	live     liveness.Renewal // the renewals and the deadline; OnDue and OnExpire are its callbacks
	inflight sync.WaitGroup   // the renewal running on the renewal timer's goroutine

	mu        sync.Mutex         // guards the fields below
	ended     bool               // end was called: holds made from now on start ended
	firstMade bool               // first is a hold (its cancel is set)
	more      map[*Hold]struct{} // the re-entries' holds not unlocked (made on the first)
	refs      int                // holds not unlocked, plus re-entries in flight
	released  bool               // the last Unlock deleted the lock
	lostCause error              // non-nil once the lease is lost
}

func newLease(m *Mutex, term uint64, field string) *lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &lease{m: m, term: term, field: field, ctx: ctx, cancel: cancel}
}

// livePolicy is the liveness.Policy of a Mutex's leases under cfg: renew
// every RenewInterval (never, for a fixed lease), end at RenewDeadline; a
// renewal that found the field gone is ErrLockLost, a configuration error
// is refused.
func livePolicy(cfg Config, fixed bool) liveness.Policy {
	p := liveness.Policy{
		Timing:  liveness.Timing{Interval: cfg.RenewInterval, Deadline: cfg.RenewDeadline},
		Classes: liveness.Classes{Lost: isLockLost, Refused: isRedisConfig},
	}
	if fixed {
		p.Interval = 0
	}
	return p
}

func isLockLost(err error) bool    { return errors.Is(err, ErrLockLost) }
func isRedisConfig(err error) bool { return errors.Is(err, leader.ErrRedisConfig) }

// start arms the renewals of a lease acquired by an attempt sent at sent,
// or the deadline of a fixed lease.
func (l *lease) start(sent time.Time) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.live.Start(sent, &l.m.live, l)
}

// OnExpire runs on the deadline timer's goroutine: the lease is over.
func (l *lease) OnExpire() {
	cause := ErrRenewDeadline
	if l.m.fixed {
		cause = ErrLeaseExpired
	}
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
	l.live.Stop()
	l.wmu.Unlock()
	l.inflight.Wait()
}

// OnDue runs on the renewal timer's goroutine: one renewal, bounded by
// the time left to the deadline; its answer, classified by the engine,
// arms the next one (after RenewInterval from this send time on success,
// a quarter of it after a failure, until the deadline timer ends the
// lease) or ends the lease at once (the lock gone, or a configuration
// error that every renewal until the deadline would meet too).
func (l *lease) OnDue() {
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
	if l.live.Stopped() || l.ctx.Err() != nil {
		l.wmu.Unlock()
		return
	}
	l.inflight.Add(1) // under wmu, before Stopped is read as false: Wait sees it
	now := time.Now()
	left := l.live.Begin(now)
	l.wmu.Unlock()
	defer l.inflight.Done()
	defer l.refreshEviction() // after the renewal was handled: never delays one

	if left <= 0 {
		return // the deadline timer is ending the lease
	}
	ok, err := call(l.ctx, left, l.m.hooks.Settle, func(ctx context.Context) (bool, error) { return l.m.st.Renew(ctx, l.field) })
	if err == nil && !ok {
		err = ErrLockLost
	}
	err = leader.RedisConfig(err)

	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.live.Stopped() || l.ctx.Err() != nil {
		return // stopped, or answered after the deadline ended the lease
	}
	logf = l.renewed(now, err)
}

// renewed acts on the answer err of a renewal sent at sent, under wmu,
// and returns what to log once wmu is released (nil for nothing).
func (l *lease) renewed(sent time.Time, err error) (logf func()) {
	switch l.live.Classify(err) {
	case liveness.Late:
		// Answered after the deadline timer fired: its cancel is on its
		// way, however fresh this renewal is.
	case liveness.Renewed:
		l.live.Renewed(sent)
		if l.live.Recovered() {
			return func() { l.m.log.Info("renew succeeded again", zap.Uint64("term", l.term)) }
		}
	case liveness.Lost:
		l.expire(err)
		return l.logLoss
	case liveness.Refused:
		// Refused, and every renewal until the deadline would be too: end
		// the hold now (its key expires on the server; the holds' contexts
		// are cancelled with the error as the cause).
		l.expire(err)
		return func() {
			l.m.log.Error("renew refused by redis: a configuration error, retrying will not cure it; the hold ends now", zap.Uint64("term", l.term), zap.Error(err))
		}
	default:
		l.live.Retry()
		if l.live.Failing() {
			return func() {
				l.m.log.Warn("renew failed; retrying until the renew deadline", zap.Uint64("term", l.term), zap.Error(err))
			}
		}
	}
	return nil
}

func (l *lease) logLoss() {
	cause := context.Cause(l.ctx)
	if errors.Is(cause, ErrUnlocked) || errors.Is(cause, ErrClosed) || errors.Is(cause, ErrLeaseExpired) {
		return
	}
	l.m.log.Error("lock lost", zap.Uint64("term", l.term), zap.NamedError("cause", cause))
}

// abandonStrays abandons the lease's strays, once, after the term ended:
// a request of theirs landing later is refused (a tombstone), and one
// that landed since the release (it took the lock, or queued the finished
// call, which a release may then have granted the lock) is undone. The
// abandon runs on a goroutine of the Client, or at once, best effort,
// when the Client is closed.
func (l *lease) abandonStrays() {
	l.mu.Lock()
	owners := l.strays
	l.strays = nil
	l.mu.Unlock()
	if len(owners) == 0 {
		return
	}
	m, ctx, call := l.m, context.Background(), callOf(owners[0])
	if !m.c.spawn(func() { m.abandon(ctx, call, owners) }) {
		m.abandon(ctx, call, owners)
	}
}
