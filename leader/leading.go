package leader

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// renewResult is the outcome of one renew round trip.
type renewResult struct {
	sent time.Time
	took time.Duration
	err  error
}

// term is the state of one leadership.
type term struct {
	c      *campaign
	lease  Lease
	log    *zap.Logger
	cancel context.CancelCauseFunc

	lastOK   time.Time   // send time of the last successful renewal or the acquire
	deadline *time.Timer // AfterFunc at lastOK + RenewDeadline: deadlinePassed
	renewAt  *time.Timer // next renew attempt
	// expired is set by deadlinePassed, before it cancels the context; a
	// renewal answered after it is too late to count.
	expired atomic.Bool
	passed  chan struct{} // size one: deadlinePassed tells the loop

	renewing     bool             // one renew in flight at most
	renewCh      chan renewResult // size one: the renew goroutine never blocks
	renewStop    context.CancelFunc
	renewFailing bool

	cause   error // why the term ends; nil while leading
	lost    bool  // the lease is presumed gone: stop renewing, never release
	waiters []*resignRequest
}

// lead runs one term: start fn, renew, and end the term by the rules in
// docs/design.md. It returns only after fn returned (or, on shutdown, after
// ShutdownTimeout) and the lease was released or given up.
func (c *campaign) lead(ctx context.Context, lease Lease, sent time.Time, how Outcome) termEnd {
	e := c.e
	cfg := e.cfg
	// The term's context carries the values of ctx but not its
	// cancellation: shutdown is a graceful step-down, decided here.
	termCtx, cancel := context.WithCancelCause(withTerm(context.WithoutCancel(ctx), lease.Term))
	defer cancel(nil)
	t := &term{
		c:       c,
		lease:   lease,
		log:     e.log.With(zap.Uint64("term", lease.Term)),
		cancel:  cancel,
		lastOK:  sent,
		renewAt: time.NewTimer(time.Until(sent.Add(cfg.RenewInterval))),
		renewCh: make(chan renewResult, 1),
		passed:  make(chan struct{}, 1),
	}
	// The renew deadline cancels the term's context from a timer goroutine
	// of its own, not from the loop below: a loop held up by anything (a
	// log write to a blocked stderr, a metric, a slow path) cannot delay
	// it. The loop learns of it through passed and reports it afterwards.
	// The term is open before its timer is armed: a deadline already
	// past fires at once, and must find its term open to end it.
	e.beginTerm(lease, sent)
	t.deadline = time.AfterFunc(time.Until(sent.Add(cfg.RenewDeadline)), t.deadlinePassed)
	defer t.deadline.Stop()
	defer t.renewAt.Stop()
	// Metrics must not block; the deadline is checked after them anyway,
	// so a slow one can delay the start but never past the deadline.
	e.metrics.Transition(TransitionElected, lease.Term)

	fnDone := make(chan error, 1)
	returned := make(chan struct{})
	if termCtx.Err() != nil {
		// The deadline passed between the caller's check and now: never
		// start on it. The loop reports the loss.
		fnDone <- nil
		close(returned)
	} else {
		go func() {
			defer close(returned)
			fnDone <- callLeader(termCtx, c.fn)
		}()
		// Logged after the start: a blocked log sink cannot delay it.
		t.log.Info("elected", zap.String("how", how.String()), zap.Duration("ttl", cfg.TTL))
	}

	var (
		fnErr     error
		ctxDone   = ctx.Done()
		budget    *time.Timer
		budgetC   <-chan time.Time
		shutdownC <-chan time.Time
	)
	defer func() {
		if budget != nil {
			budget.Stop()
		}
	}()
	startBudget := func() {
		if budget == nil {
			budget = time.NewTimer(cfg.TTL - cfg.RenewDeadline)
			budgetC = budget.C
		}
	}
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
wait:
	for {
		var renewAtC <-chan time.Time
		if !t.lost {
			renewAtC = t.renewAt.C
		}
		var (
			got  int
			res  renewResult
			req  *resignRequest
			w    Watch
			ev   Event
			evOK bool
		)
		e.hooks.SettleAt("elector " + cfg.Name)
		got = pollTerm([]termPoll{
			{gotPassed, func() bool { return recvNow(t.passed) }},
			{gotRenew, func() bool { return recvValNow(t.renewCh, &res) }},
			{gotFn, func() bool { return recvValNow(fnDone, &fnErr) }},
			{gotResign, func() bool { return recvValNow(e.resignCh, &req) }},
			{gotCtx, func() bool { return recvNow(ctxDone) }},
			{gotEvent, func() bool { return recvVal2Now(c.events, &ev, &evOK) }},
			{gotWatch, func() bool { return recvValNow(c.watchReady, &w) }},
			{gotRenewAt, func() bool { return recvNow(renewAtC) }},
			{gotBudget, func() bool { return recvNow(budgetC) }},
			{gotShutdown, func() bool { return recvNow(shutdownC) }},
		})
		if got == 0 {
			select {
			case fnErr = <-fnDone:
				got = gotFn
			case <-t.passed:
				got = gotPassed
			case res = <-t.renewCh:
				got = gotRenew
			case <-renewAtC:
				got = gotRenewAt
			case <-ctxDone:
				got = gotCtx
			case req = <-e.resignCh:
				got = gotResign
			case w = <-c.watchReady:
				got = gotWatch
			case ev, evOK = <-c.events:
				got = gotEvent
			case <-budgetC:
				got = gotBudget
			case <-shutdownC:
				got = gotShutdown
			}
		}
		switch got {
		case gotFn:
			break wait
		case gotPassed:
			// The deadline timer has already cancelled the context; a local
			// timer, not the renew call's timeout, so a hung call cannot
			// delay it. Nothing is released after it.
			e.expiryHandled()
			t.end(ErrRenewDeadline, true)
			startBudget()
		case gotRenew:
			t.renewed(res)
			if t.lost {
				startBudget()
			}
		case gotRenewAt:
			t.startRenew(ctx)
		case gotCtx:
			ctxDone = nil
			t.end(ErrShutdown, false)
			startBudget()
			st := time.NewTimer(cfg.ShutdownTimeout)
			defer st.Stop()
			shutdownC = st.C
		case gotResign:
			t.waiters = append(t.waiters, req)
			t.end(ErrResigned, false)
			startBudget()
		case gotWatch:
			c.useWatch(w)
		case gotEvent:
			if !evOK {
				c.events = nil
				continue
			}
			if ev.Kind == EventResign && (ev.Lease.Term == 0 || ev.Lease.Term == lease.Term) {
				t.log.Info("resign requested")
				t.end(ErrResigned, false)
				startBudget()
			}
		case gotBudget:
			budgetC = nil
			t.log.Error("leader function still running past its stop budget",
				zap.NamedError("cause", t.cause), zap.Bool("lease_kept", !t.lost),
				zap.Duration("stop_budget", cfg.TTL-cfg.RenewDeadline))
			e.metrics.Overrun(lease.Term)
		case gotShutdown:
			// The function ignores cancellation. Stop renewing and let the
			// lease expire; releasing it now could start a second leader
			// while this function still runs.
			t.lost = true
			t.stopRenew()
			e.straggler = returned // the next Run waits for it
			e.endTerm(t.waiters)
			t.log.Error("leader function did not stop within shutdown_timeout; lease left to expire",
				zap.Duration("shutdown_timeout", cfg.ShutdownTimeout))
			e.metrics.Transition(TransitionStepDown, lease.Term)
			return termEnd{stop: true, err: ErrStopTimeout}
		}
	}

	// fn has returned: no work of this term runs any more.
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
	return termEnd{pause: c.jitter(cfg.RetryInterval), wake: true}
}

// deadlinePassed runs on the deadline timer's own goroutine when no
// renewal succeeded within RenewDeadline: it cancels the term's context
// first, then marks the elector not leading and tells the loop. It neither
// logs nor waits on anything the loop holds, so nothing can delay it.
func (t *term) deadlinePassed() {
	t.expired.Store(true)
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
		if t.expired.Load() {
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
		t.deadline.Stop()
		t.renewAt.Stop()
		t.log.Error("leadership lost", zap.NamedError("cause", cause),
			zap.Time("last_renew_sent", t.lastOK), zap.Duration("renew_deadline", e.cfg.RenewDeadline))
		e.metrics.Transition(TransitionLost, t.lease.Term)
	}
}

// startRenew sends one renew in its own goroutine, bounded by the time left
// until the deadline (go-redis honours it with ContextTimeoutEnabled; the
// deadline timer does not depend on it either way). The goroutine reports
// into renewCh, which has room for its one answer, so it never blocks and
// ends when the client call returns, even after the term ended.
func (t *term) startRenew(ctx context.Context) {
	if t.renewing || t.lost {
		return
	}
	e := t.c.e
	now := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.lastOK.Add(e.cfg.RenewDeadline).Sub(now))
	t.renewing, t.renewStop = true, cancel
	e.beat(now, true)
	ch := t.renewCh
	go func() {
		err := RedisConfig(e.lock.Renew(rctx, t.lease, e.cfg.TTL))
		took := time.Since(now)
		e.metrics.Renew(took, err)
		ch <- renewResult{sent: now, took: took, err: err}
		refreshEviction(ctx, e.lock, e.cfg.RenewDeadline) // after the answer: never delays a renewal
	}()
}

// renewed handles a renew result.
func (t *term) renewed(res renewResult) {
	e := t.c.e
	cfg := e.cfg
	t.renewing = false
	t.renewStop()
	e.beat(time.Now(), false)
	if res.err == nil || errors.Is(res.err, ErrLeaseLost) {
		e.redisAnswered(nil)
	} else {
		e.redisAnswered(res.err)
	}
	if t.lost {
		return
	}
	switch {
	case res.err == nil && t.expired.Load():
		// Answered after the deadline cancelled the term: the term is over
		// (t.passed reports it), however fresh this renewal is.
	case res.err == nil:
		t.c.configFailing = false
		if t.renewFailing {
			t.renewFailing = false
			t.log.Info("renew succeeded again")
		}
		t.c.checkWatch()
		t.log.Debug("renewed", zap.Duration("took", res.took))
		t.lastOK = res.sent
		e.renewed(res.sent)
		now := time.Now()
		t.deadline.Reset(res.sent.Add(cfg.RenewDeadline).Sub(now))
		t.renewAt.Reset(res.sent.Add(cfg.RenewInterval).Sub(now))
	case errors.Is(res.err, ErrLeaseLost):
		t.end(res.err, true)
	case errors.Is(res.err, ErrRedisConfig):
		// Refused, and every renewal until the deadline would be too:
		// step down now rather than at the deadline. The lease stays ours
		// until it expires; the loop keeps renewing while the function
		// drains (in case the configuration is fixed meanwhile), and the
		// deadline timer still ends the term at lastOK + RenewDeadline.
		t.renewFailing = true
		t.c.configRefused("renew", res.err)
		t.end(res.err, false)
		t.renewAt.Reset(max(cfg.RenewInterval/4, time.Millisecond))
	default:
		if !t.renewFailing {
			t.renewFailing = true
			t.log.Warn("renew failed; retrying until the renew deadline", zap.Error(res.err),
				zap.Time("deadline", t.lastOK.Add(cfg.RenewDeadline)))
		} else {
			t.log.Debug("renew failed", zap.Error(res.err))
		}
		t.renewAt.Reset(max(cfg.RenewInterval/4, time.Millisecond))
	}
}

// stopRenew cancels an in-flight renew without waiting for it: a client
// that ignores cancellation must not hold up a step-down or shutdown. The
// renew's answer, when it comes, goes unread; a late renew is harmless, as
// it only extends a lease that is still exactly ours.
func (t *term) stopRenew() {
	if t.renewing {
		t.renewStop()
		t.renewing = false
	}
}

// finish runs after fn returned: release the lease unless it is presumed
// gone, then stop any renew still in flight.
func (t *term) finish(ctx context.Context) {
	e := t.c.e
	left := time.Until(t.lastOK.Add(e.cfg.RenewDeadline))
	if !t.lost && (left <= 0 || t.expired.Load()) {
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
		e.metrics.Transition(TransitionLost, t.lease.Term)
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

// termPoll is one of the term loop's receives under the simulator's
// settle: try receives without blocking; got names the case.
type termPoll struct {
	got int
	try func() bool
}

// pollTerm tries each receive in order, without blocking, and returns the
// got of the first that succeeded, or 0. (The term loop's fixed order
// under the simulator's settle.)
func pollTerm(polls []termPoll) int {
	for _, p := range polls {
		if p.try() {
			return p.got
		}
	}
	return 0
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
