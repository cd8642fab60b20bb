// Package liveness is the renew/deadline engine of a lease kept on a
// server: renew every interval from the send time of the last renewal
// that succeeded, end the lease from a local timer at that send time plus
// the renew deadline (never from a call's timeout), classify each
// renewal's answer, and tell once per episode that renewals fail. The
// holder sends the renewals and acts on the answers; the engine owns the
// timing. An Elector's term (leader) and a lock's hold (leader/lock) run
// on it. docs/design.md, "Timing", gives the rules.
package liveness

import (
	"sync/atomic"
	"time"
)

// Timing is when a lease renews and when it ends without a renewal.
type Timing struct {
	// Interval is the time from a successful renewal's send time (or the
	// acquire's) to the next renewal; 0 for a fixed lease, never renewed.
	Interval time.Duration
	// Deadline is the time from a successful renewal's send time (or the
	// acquire's) after which the lease is presumed gone.
	Deadline time.Duration
}

// Retry is the wait before the next renewal after one failed: a quarter
// of Interval, at least a millisecond.
func (t Timing) Retry() time.Duration { return max(t.Interval/4, time.Millisecond) }

// Answer classifies a renewal's answer.
type Answer int

// The answers a renewal can get.
const (
	// Renewed: the server renewed the lease; it lasts from this send time.
	Renewed Answer = iota
	// Late: renewed, but after the deadline ended the lease; it does not
	// count.
	Late
	// Lost: the server says the lease is gone.
	Lost
	// Refused: the server refused the call as a configuration error;
	// retrying will not cure it.
	Refused
	// Failed: no answer, or another error; retry until the deadline.
	Failed
)

// Classes tell the errors of a Lost and a Refused answer; nil means none.
type Classes struct {
	Lost    func(error) bool
	Refused func(error) bool
}

// Policy is how the leases of one kind (an Elector's terms, a Mutex's
// holds) renew and classify answers. Their Renewals share it: it must not
// change while one runs.
type Policy struct {
	Timing
	Classes
}

// Holder is told by its lease's Renewal that the deadline passed.
type Holder interface {
	// OnExpire runs once, on the deadline timer's own goroutine (so
	// nothing the holder does can delay it), after Expired turned true.
	// It must not block or wait on the holder.
	OnExpire()
}

// Renewer is a Holder that renews on the renewal timer's goroutine: its
// OnDue runs there each time a renewal falls due, and Due delivers
// nothing. Its deadline timer is armed by the first Begin, so a lease
// that ends before its first renewal costs one timer.
type Renewer interface {
	Holder
	OnDue()
}

// ExpireFunc is a Holder whose OnExpire calls the function.
type ExpireFunc func()

// OnExpire calls f.
func (f ExpireFunc) OnExpire() { f() }

// Renewal is the engine of one lease, from Start until Stop; its zero
// value is ready for Start (a holder may keep it by value, costing no
// allocation of its own). Its methods are for one goroutine at a time
// (the holder's, or calls under the holder's lock), except Expired,
// which any goroutine may call.
type Renewal struct {
	p        *Policy
	h        Holder
	lastOK   time.Time
	due      *time.Timer // nil for a fixed lease
	deadline *time.Timer // nil until armed
	expired  atomic.Bool
	failing  bool
	stopped  bool
}

// Start arms the engine of a lease whose acquire was sent at sent, under
// p: the first renewal is due at sent + Interval (never, for a fixed
// lease), and at sent + Deadline the deadline timer marks the lease
// expired and calls h.OnExpire. The deadline timer is armed now, unless h
// is a Renewer with renewals to send (then its first Begin arms it).
func (r *Renewal) Start(sent time.Time, p *Policy, h Holder) {
	r.p, r.h, r.lastOK = p, h, sent
	if p.Interval <= 0 {
		r.arm()
		return
	}
	d := time.Until(sent.Add(p.Interval))
	if _, ok := h.(Renewer); ok {
		r.due = time.AfterFunc(d, r.onDue)
		return
	}
	r.due = time.NewTimer(d)
	r.arm()
}

// arm starts the deadline timer at lastOK + Deadline.
func (r *Renewal) arm() {
	r.deadline = time.AfterFunc(time.Until(r.DeadlineAt()), r.expire)
}

// onDue runs on a Renewer's renewal timer goroutine. (A method value of
// r, not of the Renewer: the smaller closure.)
func (r *Renewal) onDue() { r.h.(Renewer).OnDue() }

// expire runs on the deadline timer's goroutine: the lease is over.
func (r *Renewal) expire() {
	r.expired.Store(true)
	r.h.OnExpire()
}

// Due delivers when the next renewal is due; nil for a Renewer or a
// fixed lease.
func (r *Renewal) Due() <-chan time.Time {
	if r.due == nil {
		return nil
	}
	return r.due.C
}

// Begin starts a renewal sent at now: it arms the deadline timer if
// nothing has yet (a Renewer's first renewal; before the request, so the
// deadline never waits on it), and returns the time left to the deadline,
// the bound of the renewal. Left ≤ 0: the deadline timer is ending the
// lease; send nothing.
func (r *Renewal) Begin(now time.Time) (left time.Duration) {
	if r.deadline == nil && !r.stopped {
		r.arm()
	}
	return r.Left(now)
}

// LastOK is the send time of the last successful renewal, or the acquire's.
func (r *Renewal) LastOK() time.Time { return r.lastOK }

// DeadlineAt is when the lease ends without another successful renewal.
func (r *Renewal) DeadlineAt() time.Time { return r.lastOK.Add(r.p.Deadline) }

// Left is the time from now to DeadlineAt: the bound of a renewal sent now.
func (r *Renewal) Left(now time.Time) time.Duration { return r.DeadlineAt().Sub(now) }

// Expired reports whether the deadline timer has ended the lease.
func (r *Renewal) Expired() bool { return r.expired.Load() }

// Stopped reports whether Stop was called.
func (r *Renewal) Stopped() bool { return r.stopped }

// Classify classifies a renewal's answer err: nil is Renewed, or Late once
// the deadline timer has fired; then Lost, Refused by its Classes; any
// other error Failed.
func (r *Renewal) Classify(err error) Answer {
	switch {
	case err == nil && r.expired.Load():
		return Late
	case err == nil:
		return Renewed
	case r.p.Lost != nil && r.p.Lost(err):
		return Lost
	case r.p.Refused != nil && r.p.Refused(err):
		return Refused
	}
	return Failed
}

// Renewed counts a successful renewal sent at sent: the deadline moves to
// sent + Deadline and the next renewal is due at sent + Interval.
func (r *Renewal) Renewed(sent time.Time) {
	r.lastOK = sent
	now := time.Now()
	r.deadline.Reset(sent.Add(r.p.Deadline).Sub(now))
	r.due.Reset(sent.Add(r.p.Interval).Sub(now))
}

// Retry makes the next renewal due after Timing.Retry, for an answer that
// did not renew; the deadline stays where it is.
func (r *Renewal) Retry() { r.due.Reset(r.p.Retry()) }

// Failing notes a renewal that failed and reports whether it is the first
// of its episode: the one to log at warning level.
func (r *Renewal) Failing() (first bool) {
	first = !r.failing
	r.failing = true
	return first
}

// Recovered notes a successful renewal and reports whether it ends an
// episode of failures: the one to log that renewals succeed again.
func (r *Renewal) Recovered() bool {
	was := r.failing
	r.failing = false
	return was
}

// Stop stops both timers: the lease is over or presumed gone, and Begin
// arms nothing from now on. OnExpire does not run after Stop returns
// unless it had already started; nor does OnDue, but one already
// started may still call the Renewal (Stopped tells it so).
func (r *Renewal) Stop() {
	r.stopped = true
	if r.deadline != nil {
		r.deadline.Stop()
	}
	if r.due != nil {
		r.due.Stop()
	}
}
