//go:build linux

package faults

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/solo-run/solo/leader/lock"
)

// LockMode makes a candidate a user of package leader/lock instead of an
// elector: it loops Lock, a fenced hold of random length, Unlock, a short
// gap, for as long as it runs. The lock's name is the rig's Election, which
// is also the fence's election name; the fence's holder is Hold.Holder.
//
// The hold's events take the places of the leader function's: KindAcquire
// when Lock returns (Mono is when it was called, Dur how long it took,
// waiting included), KindStart once it holds (Dur: the hold's planned
// length, so that a test knows whether a fault came before its end),
// KindClaim and KindWrite under
// the hold's term, KindStop before Unlock (Detail: the cause when the hold's
// context ended first), KindRelease for the Unlock. Level 1 is then "no two
// holds at once", level 2 the same store check as the elections'.
type LockMode struct {
	// HoldMin and HoldMax bound a hold's length; holds longer than the TTL
	// live on the watchdog's renewals.
	HoldMin time.Duration `json:"hold_min"`
	HoldMax time.Duration `json:"hold_max"`
	// GapMax bounds the pause after an Unlock before the next Lock, so
	// that other candidates' waiters get their turn.
	GapMax time.Duration `json:"gap_max"`
}

// DefaultLockMode returns the lock rows' holds: 400ms–1.5s (up to 1.5 TTL
// of LockTiming, so renewals matter), a gap of up to 100ms.
func DefaultLockMode() *LockMode {
	return &LockMode{HoldMin: 400 * time.Millisecond, HoldMax: 1500 * time.Millisecond, GapMax: 100 * time.Millisecond}
}

// LockTiming returns the lock rows' timing, shorter than the elections' to
// keep the rows quick: TTL 1s, renew every 300ms, deadline 700ms (stop
// budget 300ms), retry 200ms, client timeouts 250ms (below the stop
// budget, as the elections' 500ms are below theirs), a write every
// 20–50ms.
func LockTiming() Timing {
	return Timing{
		TTL:           time.Second,
		RenewInterval: 300 * time.Millisecond,
		RenewDeadline: 700 * time.Millisecond,
		RetryInterval: 200 * time.Millisecond,
		RedisTimeout:  250 * time.Millisecond,
		WriteMin:      20 * time.Millisecond,
		WriteMax:      50 * time.Millisecond,
	}
}

// newLockMode makes the candidate's lock client and mutex.
func (c *candidate) newLockMode() error {
	if err := c.cfg.Lock.check(); err != nil {
		return err
	}
	t := c.cfg.Timing
	cl, err := lock.NewClient(c.client, lock.WithID(c.cfg.ID), lock.WithLogger(c.log), lock.WithConfig(lock.Config{
		TTL: t.TTL, RenewInterval: t.RenewInterval, RenewDeadline: t.RenewDeadline, RetryInterval: t.RetryInterval,
	}))
	if err != nil {
		return err
	}
	c.locks = cl
	c.mu, err = cl.Mutex(c.cfg.Election)
	return err
}

// runLock runs the LOCK mode until SIGTERM.
func (c *candidate) runLock() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	c.out.emit(Event{Kind: KindReady})
	for ctx.Err() == nil {
		c.holdOnce(ctx)
		gap := time.Duration(c.rnd.Int64N(int64(c.cfg.Lock.GapMax) + 1))
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
	}
	c.out.emit(Event{Kind: KindExit})
	return 0
}

// holdOnce takes the lock, holds it and unlocks it.
func (c *candidate) holdOnce(ctx context.Context) {
	t0 := Mono()
	h, err := c.mu.Lock(ctx)
	ev := Event{Mono: t0, Dur: Mono() - t0, Kind: KindAcquire}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		ev.Result, ev.Detail = ResultError, err.Error()
		c.out.emit(ev)
		select {
		case <-ctx.Done():
		case <-time.After(c.cfg.Timing.RetryInterval):
		}
		return
	}
	ev.Result, ev.Term, ev.Detail = "acquired", h.Term(), h.Holder()
	c.out.emit(ev)

	c.hold(ctx, h)

	// Unlock on a fresh, bounded context: ctx may have ended (SIGTERM).
	uctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timing.TTL)
	defer cancel()
	t1 := Mono()
	err = h.Unlock(uctx)
	rev := Event{Mono: t1, Dur: Mono() - t1, Kind: KindRelease, Term: h.Term(), Result: ResultOK}
	switch {
	case errors.Is(err, lock.ErrLockLost):
		rev.Result, rev.Detail = ResultLost, err.Error()
	case err != nil:
		rev.Result, rev.Detail = ResultError, err.Error()
	}
	c.out.emit(rev)
}

// hold is the work under one hold: claim its term for its owner, then
// write every WriteMin–WriteMax while the hold's context lives, until the
// hold's random length is over. Its start and stop bound the interval in
// which it may write, as a leader function's do.
func (c *candidate) hold(ctx context.Context, h *lock.Hold) {
	hctx := h.Context()
	term, owner := h.Term(), h.Holder()
	start := Mono()
	mode := c.cfg.Lock
	end := start + int64(mode.HoldMin) + c.rnd.Int64N(int64(mode.HoldMax-mode.HoldMin)+1)
	c.out.emit(Event{Mono: start, Kind: KindStart, Term: term, Detail: owner, Dur: end - start})
	defer func() {
		ev := Event{Kind: KindStop, Term: term}
		if cause := context.Cause(hctx); cause != nil {
			ev.Detail = cause.Error()
		}
		ev.Mono = Mono()
		c.out.emit(ev)
	}()

	// As the election's job: a write that has begun is finished; the
	// fence, not the cancellation, stops a stale one.
	wctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(hctx), 2*c.cfg.Timing.TTL)
	}
	claim := claimPending
	for hctx.Err() == nil && ctx.Err() == nil && Mono() < end {
		if claim == claimPending {
			claim = c.claim(wctx, term, owner)
		}
		if claim == claimStale {
			// A higher term was claimed: this hold can never write. Keep
			// it idle until it ends.
			left := time.Duration(end - Mono())
			select {
			case <-hctx.Done():
			case <-ctx.Done():
			case <-time.After(left):
			}
			return
		}
		d := c.cfg.Timing.WriteMin + time.Duration(c.rnd.Int64N(int64(c.cfg.Timing.WriteMax-c.cfg.Timing.WriteMin)+1))
		if !c.pause(hctx, d) {
			return
		}
		if claim == claimOK {
			c.write(wctx, term, owner)
		}
	}
}

// check reports a LockMode that cannot run.
func (m *LockMode) check() error {
	if m.HoldMin <= 0 || m.HoldMax < m.HoldMin || m.GapMax < 0 {
		return fmt.Errorf("lock mode: bad holds %s–%s, gap %s", m.HoldMin, m.HoldMax, m.GapMax)
	}
	return nil
}
