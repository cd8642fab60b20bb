// Package liveness is the renew/deadline engine of a lease kept on a
// server: renew every interval from the send time of the last renewal
// that succeeded, end the lease from a local timer at that send time plus
// the renew deadline (never from a call's timeout), classify each
// renewal's answer, and tell once per episode that renewals fail. The
// holder sends the renewals and acts on the answers; the engine owns the
// timing. docs/design.md, "Timing", gives the rules.
package liveness

import (
	"sync/atomic"
	"time"
)

// Timing is when a lease renews and when it ends without a renewal.
type Timing struct {
	// Interval is the time from a successful renewal's send time (or the
	// acquire's) to the next renewal.
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

// Renewal is the engine of one lease, from its acquire until Stop. Its
// methods are for one goroutine (the holder's, or calls under the
// holder's lock), except Expired, which any goroutine may call.
type Renewal struct {
	timing   Timing
	classes  Classes
	lastOK   time.Time
	due      *time.Timer
	deadline *time.Timer
	expired  atomic.Bool
	failing  bool
}

// Start arms the engine of a lease whose acquire was sent at sent: the
// first renewal is due at sent + Interval, and at sent + Deadline the
// deadline timer marks the lease expired, then calls onExpire on its own
// goroutine (so nothing the holder does can delay it). onExpire must not
// block or wait on the holder.
func Start(sent time.Time, t Timing, c Classes, onExpire func()) *Renewal {
	r := &Renewal{timing: t, classes: c, lastOK: sent}
	r.due = time.NewTimer(time.Until(sent.Add(t.Interval)))
	r.deadline = time.AfterFunc(time.Until(sent.Add(t.Deadline)), func() {
		r.expired.Store(true)
		onExpire()
	})
	return r
}

// Due delivers when the next renewal is due.
func (r *Renewal) Due() <-chan time.Time { return r.due.C }

// LastOK is the send time of the last successful renewal, or the acquire's.
func (r *Renewal) LastOK() time.Time { return r.lastOK }

// DeadlineAt is when the lease ends without another successful renewal.
func (r *Renewal) DeadlineAt() time.Time { return r.lastOK.Add(r.timing.Deadline) }

// Left is the time from now to DeadlineAt: the bound of a renewal sent now.
func (r *Renewal) Left(now time.Time) time.Duration { return r.DeadlineAt().Sub(now) }

// Expired reports whether the deadline timer has ended the lease.
func (r *Renewal) Expired() bool { return r.expired.Load() }

// Classify classifies a renewal's answer err: nil is Renewed, or Late once
// the deadline timer has fired; then Lost, Refused by its Classes; any
// other error Failed.
func (r *Renewal) Classify(err error) Answer {
	switch {
	case err == nil && r.expired.Load():
		return Late
	case err == nil:
		return Renewed
	case r.classes.Lost != nil && r.classes.Lost(err):
		return Lost
	case r.classes.Refused != nil && r.classes.Refused(err):
		return Refused
	}
	return Failed
}

// Renewed counts a successful renewal sent at sent: the deadline moves to
// sent + Deadline and the next renewal is due at sent + Interval.
func (r *Renewal) Renewed(sent time.Time) {
	r.lastOK = sent
	now := time.Now()
	r.deadline.Reset(sent.Add(r.timing.Deadline).Sub(now))
	r.due.Reset(sent.Add(r.timing.Interval).Sub(now))
}

// Retry makes the next renewal due after Timing.Retry, for an answer that
// did not renew; the deadline stays where it is.
func (r *Renewal) Retry() { r.due.Reset(r.timing.Retry()) }

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

// Stop stops both timers: the lease is over or presumed gone. The
// deadline's onExpire does not run after Stop returns unless it had
// already started.
func (r *Renewal) Stop() {
	r.deadline.Stop()
	r.due.Stop()
}
