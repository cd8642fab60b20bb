package leader

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/solo-run/solo/internal/liveness"
)

// term is the state of one leadership.
type term struct {
	c      *campaign
	lease  Lease
	log    *zap.Logger
	cancel context.CancelCauseFunc

	// live renews the lease and keeps its deadline: its timer ends the
	// term (deadlinePassed) at the last successful send + RenewDeadline.
	live   liveness.Renewal
	passed chan struct{} // size one: deadlinePassed tells the loop

	renewing  bool             // one renew in flight at most
	renewCh   chan renewResult // size one: the renew goroutine never blocks
	renewStop context.CancelFunc

	fnDone    chan error    // size one: the leader function's error
	returned  chan struct{} // closed when the leader function has returned
	fnErr     error
	ctxDone   <-chan struct{} // Run's ctx, until its end began a shutdown
	budget    *time.Timer     // the stop budget, from the term's end
	budgetC   <-chan time.Time
	shutdown  *time.Timer // ShutdownTimeout, from Run's ctx's end
	shutdownC <-chan time.Time

	cause   error // why the term ends; nil while leading
	lost    bool  // the lease is presumed gone: stop renewing, never release
	waiters []*resignRequest
}

// lead runs one term: start fn, renew, and end the term by the rules in
// docs/design.md. It returns only after fn returned (or, on shutdown, after
// ShutdownTimeout) and the lease was released or given up.
func (c *campaign) lead(ctx context.Context, lease Lease, sent time.Time, how Outcome) termEnd {
	// The term's context carries the values of ctx but not its
	// cancellation: shutdown is a graceful step-down, decided here.
	termCtx, cancel := context.WithCancelCause(withTerm(context.WithoutCancel(ctx), lease.Term))
	defer cancel(nil)
	t := c.newTerm(ctx, lease, sent, cancel)
	defer t.stopTimers()
	t.startFn(termCtx, how)
	for {
		x := t.next()
		if x.got == gotFn {
			break
		}
		if end, stop := t.handle(ctx, x); stop {
			return end
		}
	}
	return t.conclude(ctx)
}

// newTerm begins the term of lease, acquired by an attempt sent at sent:
// the Elector leads, and the renewals and the deadline are armed.
func (c *campaign) newTerm(ctx context.Context, lease Lease, sent time.Time, cancel context.CancelCauseFunc) *term {
	e := c.e
	t := &term{
		c:        c,
		lease:    lease,
		log:      e.log.With(zap.Uint64("term", lease.Term)),
		cancel:   cancel,
		renewCh:  make(chan renewResult, 1),
		passed:   make(chan struct{}, 1),
		fnDone:   make(chan error, 1),
		returned: make(chan struct{}),
		ctxDone:  ctx.Done(),
	}
	// The renew deadline cancels the term's context from a timer goroutine
	// of its own, not from the term's loop: a loop held up by anything (a
	// log write to a blocked stderr, a metric, a slow path) cannot delay
	// it. The loop learns of it through passed and reports it afterwards.
	// The term is open before its timer is armed: a deadline already
	// past fires at once, and must find its term open to end it.
	e.beginTerm(lease, sent)
	t.live.Start(sent, &liveness.Policy{
		Timing: liveness.Timing{Interval: e.cfg.RenewInterval, Deadline: e.cfg.RenewDeadline},
		Classes: liveness.Classes{
			Lost:    func(err error) bool { return errors.Is(err, ErrLeaseLost) },
			Refused: func(err error) bool { return errors.Is(err, ErrRedisConfig) },
		},
	}, liveness.ExpireFunc(t.deadlinePassed))
	// Metrics must not block; the deadline is checked after them anyway,
	// so a slow one can delay the start but never past the deadline.
	e.metrics.Transition(TransitionElected, lease.Term)
	return t
}

// stopTimers stops the term's timers as lead returns.
func (t *term) stopTimers() {
	t.live.Stop()
	if t.budget != nil {
		t.budget.Stop()
	}
	if t.shutdown != nil {
		t.shutdown.Stop()
	}
}

// startFn starts the leader function under termCtx, unless the deadline
// already passed: then it never starts, and the loop reports the loss.
func (t *term) startFn(termCtx context.Context, how Outcome) {
	fnDone, returned := t.fnDone, t.returned
	if termCtx.Err() != nil {
		fnDone <- nil
		close(returned)
		return
	}
	go func() {
		defer close(returned)
		fnDone <- callLeader(termCtx, t.c.fn)
	}()
	// Logged after the start: a blocked log sink cannot delay it.
	t.log.Info("elected", zap.String("how", how.String()), zap.Duration("ttl", t.c.e.cfg.TTL))
}

// The events of a term's loop.
const (
	gotFn = iota + 1
	gotPassed
	gotRenew
	gotRenewAt
	gotCtx
	gotResign
	gotWatch
	gotEvent
	gotBudget
	gotShutdown
)

// termEvent is one event of a term's loop: got names it; the other fields
// hold what came with it.
type termEvent struct {
	got  int
	res  renewResult
	req  *resignRequest
	w    Watch
	ev   Event
	evOK bool
}

// next waits for the term's next event. It settles first (the simulator's
// hook, a no-op in production), takes what is ready in one fixed order
// (the deadline, a renewal's answer, the function's return, a Resign, Run's
// end, the renewal timer, the stop budget, the shutdown timeout, a notice,
// the watch: last, so what peers publish cannot starve a timer), and only
// when nothing is, blocks for whatever comes first. One path, in
// production and under the simulator.
func (t *term) next() termEvent {
	c, e := t.c, t.c.e
	var renewAtC <-chan time.Time
	if !t.lost {
		renewAtC = t.live.Due()
	}
	var x termEvent
	if e.hooks.Settle != nil { // the key is built only for the simulator
		e.hooks.Settle("elector " + e.cfg.Name)
	}
	// The fixed order, without allocating: each case is tried in turn.
	switch {
	case recvNow(t.passed):
		x.got = gotPassed
	case recvValNow(t.renewCh, &x.res):
		x.got = gotRenew
	case recvValNow(t.fnDone, &t.fnErr):
		x.got = gotFn
	case recvValNow(e.resignCh, &x.req):
		x.got = gotResign
	case recvNow(t.ctxDone):
		x.got = gotCtx
	case recvNow(renewAtC):
		x.got = gotRenewAt
	case recvNow(t.budgetC):
		x.got = gotBudget
	case recvNow(t.shutdownC):
		x.got = gotShutdown
	case recvVal2Now(c.events, &x.ev, &x.evOK):
		x.got = gotEvent
	case recvValNow(c.watchReady, &x.w):
		x.got = gotWatch
	}
	if x.got != 0 {
		return x
	}
	select {
	case t.fnErr = <-t.fnDone:
		x.got = gotFn
	case <-t.passed:
		x.got = gotPassed
	case x.res = <-t.renewCh:
		x.got = gotRenew
	case <-renewAtC:
		x.got = gotRenewAt
	case <-t.ctxDone:
		x.got = gotCtx
	case x.req = <-e.resignCh:
		x.got = gotResign
	case x.w = <-c.watchReady:
		x.got = gotWatch
	case x.ev, x.evOK = <-c.events:
		x.got = gotEvent
	case <-t.budgetC:
		x.got = gotBudget
	case <-t.shutdownC:
		x.got = gotShutdown
	}
	return x
}

// handle acts on one event of the term's loop other than the function's
// return; stop is set when the term ends without it (a shutdown that gave
// up on the function), with what Run does next.
func (t *term) handle(ctx context.Context, x termEvent) (end termEnd, stop bool) {
	switch x.got {
	case gotPassed:
		// The deadline timer has already cancelled the context; a local
		// timer, not the renew call's timeout, so a hung call cannot
		// delay it. Nothing is released after it.
		t.c.e.expiryHandled()
		t.end(ErrRenewDeadline, true)
		t.startBudget()
	case gotRenew:
		t.renewed(x.res)
		if t.lost {
			t.startBudget()
		}
	case gotRenewAt:
		t.startRenew(ctx)
	case gotCtx:
		t.ctxDone = nil
		t.end(ErrShutdown, false)
		t.startBudget()
		t.shutdown = time.NewTimer(t.c.e.cfg.ShutdownTimeout)
		t.shutdownC = t.shutdown.C
	case gotResign:
		t.waiters = append(t.waiters, x.req)
		t.end(ErrResigned, false)
		t.startBudget()
	case gotWatch:
		t.c.useWatch(x.w)
	case gotEvent:
		t.notice(x.ev, x.evOK)
	case gotBudget:
		t.overrun()
	case gotShutdown:
		return t.giveUp(), true
	}
	return termEnd{}, false
}

// startBudget starts the stop budget (TTL − RenewDeadline) as the term
// ends, once.
func (t *term) startBudget() {
	if t.budget == nil {
		t.budget = time.NewTimer(t.c.e.cfg.TTL - t.c.e.cfg.RenewDeadline)
		t.budgetC = t.budget.C
	}
}

// notice acts on one of the election's notices: a resign request for this
// term (or any) ends it as Resign does. A closed channel stops notices.
func (t *term) notice(ev Event, ok bool) {
	if !ok {
		t.c.events = nil
		return
	}
	if ev.Kind == EventResign && (ev.Lease.Term == 0 || ev.Lease.Term == t.lease.Term) {
		t.log.Info("resign requested")
		t.end(ErrResigned, false)
		t.startBudget()
	}
}

// overrun reports a function still running past its stop budget.
func (t *term) overrun() {
	cfg := t.c.e.cfg
	t.budgetC = nil
	t.log.Error("leader function still running past its stop budget",
		zap.NamedError("cause", t.cause), zap.Bool("lease_kept", !t.lost),
		zap.Duration("stop_budget", cfg.TTL-cfg.RenewDeadline))
	t.c.e.metrics.Overrun(t.lease.Term)
}

// giveUp ends a term whose function ignored cancellation for
// ShutdownTimeout after Run's ctx ended: renewing stops and the lease is
// left to expire, as releasing it now could start a second leader while
// this function still runs. The next Run waits for the function.
func (t *term) giveUp() termEnd {
	e := t.c.e
	t.lost = true
	t.stopRenew()
	e.straggler = t.returned // the next Run waits for it
	e.endTerm(t.waiters)
	t.log.Error("leader function did not stop within shutdown_timeout; lease left to expire",
		zap.Duration("shutdown_timeout", e.cfg.ShutdownTimeout))
	e.metrics.Transition(TransitionStepDown, t.lease.Term)
	return termEnd{stop: true, err: ErrStopTimeout}
}

// conclude ends the term after fn returned (no work of this term runs any
// more): it names the cause, releases the lease unless it is presumed
// gone, and says what Run does next.
func (t *term) conclude(ctx context.Context) termEnd {
	e, cfg, fnErr := t.c.e, t.c.e.cfg, t.fnErr
	if t.cause == nil && errors.Is(fnErr, ErrResigned) {
		t.end(fnErr, false)
	}
	if t.cause == nil {
		cause := fmt.Errorf("leader function returned: %w", fnErr)
		if fnErr == nil {
			cause = errors.New("leader function returned")
		}
		t.end(cause, false)
	}
	t.finish(ctx)
	e.endTerm(t.waiters)

	switch {
	case ctx.Err() != nil:
		return termEnd{stop: true}
	case errors.Is(t.cause, ErrResigned):
		// Resign, a resign request, or fn returning an error that wraps
		// ErrResigned (a worker that drained its jobs and gives up the term).
		return termEnd{pause: cfg.ResignCooldown}
	case fnErr != nil:
		t.log.Error("leader function failed", zap.Error(fnErr))
	}
	return termEnd{pause: t.c.jitter(cfg.RetryInterval), wake: true}
}

// deadlinePassed runs on the deadline timer's own goroutine when no
// renewal succeeded within RenewDeadline (the engine has marked the lease
// expired): it cancels the term's context first, then marks the elector
// not leading and tells the loop. It neither logs nor waits on anything
// the loop holds, so nothing can delay it.
func (t *term) deadlinePassed() {
	t.cancel(ErrRenewDeadline)
	t.c.e.endLeadingExpired(t.lease.Term)
	select {
	case t.passed <- struct{}{}:
	default:
	}
}

// end ends the term with cause: the function's context is cancelled at once
// and IsLeader turns false. lost marks the lease as presumed gone.
func (t *term) end(cause error, lost bool) {
	e := t.c.e
	if t.cause == nil {
		if t.live.Expired() {
			cause, lost = ErrRenewDeadline, true // what the context already says
		}
		t.cause = cause
		t.cancel(cause)
		e.endLeading()
		if !lost {
			t.log.Info("stepping down", zap.String("cause", cause.Error()))
		}
	}
	if lost && !t.lost {
		t.lost = true
		t.live.Stop()
		t.log.Error("leadership lost", zap.NamedError("cause", cause),
			zap.Time("last_renew_sent", t.live.LastOK()), zap.Duration("renew_deadline", e.cfg.RenewDeadline))
		e.metrics.Transition(TransitionExpired, t.lease.Term)
	}
}

// finish runs after fn returned: release the lease unless it is presumed
// gone, then stop any renew still in flight.
func (t *term) finish(ctx context.Context) {
	e := t.c.e
	left := t.live.Left(time.Now())
	if !t.lost && (left <= 0 || t.live.Expired()) {
		// The deadline passed as the function returned, before the loop
		// heard of it: the lease is presumed gone, so it is not released.
		t.end(ErrRenewDeadline, true)
	}
	if t.lost {
		t.stopRenew()
		return
	}
	// Released concurrently with a renew still in flight is safe: both
	// compare the exact value, so a late renew finds the key gone.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left)
	err := t.c.releaseWithin(rctx, t.lease)
	cancel()
	t.stopRenew()
	switch {
	case err == nil:
		t.log.Info("released")
		e.metrics.Transition(TransitionReleased, t.lease.Term)
	case errors.Is(err, ErrLeaseLost):
		t.log.Warn("lease was already gone at release", zap.Error(err))
		e.metrics.Transition(TransitionExpired, t.lease.Term)
	default:
		t.log.Warn("release failed; the lease will expire", zap.Error(err))
		e.metrics.Transition(TransitionStepDown, t.lease.Term)
	}
}

// callLeader runs fn, turning a panic into an error.
func callLeader(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("leader function panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(ctx)
}

// recvNow receives from ch if a value (or its close) is there; a nil ch
// never is.
func recvNow[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// recvValNow is recvNow keeping the value in *v.
func recvValNow[T any](ch <-chan T, v *T) bool {
	select {
	case x := <-ch:
		*v = x
		return true
	default:
		return false
	}
}

// recvVal2Now is recvValNow keeping whether ch is still open in *ok.
func recvVal2Now[T any](ch <-chan T, v *T, ok *bool) bool {
	select {
	case x, open := <-ch:
		*v, *ok = x, open
		return true
	default:
		return false
	}
}
