package liveness

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

var (
	errLost    = errors.New("lost")
	errRefused = errors.New("refused")
)

var classes = Classes{
	Lost:    func(err error) bool { return errors.Is(err, errLost) },
	Refused: func(err error) bool { return errors.Is(err, errRefused) },
}

// policy is the Policy of timing tm with classes.
func policy(tm Timing) *Policy { return &Policy{Timing: tm, Classes: classes} }

// TestRenewal_Timing: renewals fall due Interval after the last successful
// send, a failure retries after a quarter of it, and the deadline fires at
// the last successful send + Deadline, whatever was sent since.
func TestRenewal_Timing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := Timing{Interval: 3 * time.Second, Deadline: 6 * time.Second}
		start := time.Now()
		expired := make(chan time.Time, 1)
		var r Renewal
		r.Start(start, policy(tm), ExpireFunc(func() { expired <- time.Now() }))
		defer r.Stop()

		at := <-r.Due()
		if d := at.Sub(start); d != 3*time.Second {
			t.Fatalf("first renewal due after %s, want 3s", d)
		}
		sent := time.Now()
		if r.Classify(nil) != Renewed {
			t.Fatal("a nil answer is not Renewed")
		}
		r.Renewed(sent)
		<-r.Due()
		if d := time.Since(sent); d != 3*time.Second {
			t.Fatalf("renewal due %s after the last success, want 3s", d)
		}
		failed := time.Now()
		if a := r.Classify(errors.New("timeout")); a != Failed {
			t.Fatalf("a timeout is %v, want Failed", a)
		}
		if !r.Failing() || r.Failing() {
			t.Fatal("Failing: want true for an episode's first failure only")
		}
		r.Retry()
		<-r.Due()
		if d := time.Since(failed); d != tm.Retry() {
			t.Fatalf("retry after %s, want %s", d, tm.Retry())
		}
		got := <-expired
		if d := got.Sub(sent); d != 6*time.Second || !r.Expired() {
			t.Fatalf("expired %s after the last success (Expired %v), want 6s", d, r.Expired())
		}
		if a := r.Classify(nil); a != Late {
			t.Fatalf("a success after the deadline is %v, want Late", a)
		}
		if !r.Recovered() || r.Recovered() {
			t.Fatal("Recovered: want true once, ending the episode")
		}
	})
}

// TestRenewal_Classify: the Classes tell Lost and Refused.
func TestRenewal_Classify(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r Renewal
		r.Start(time.Now(), policy(Timing{Interval: time.Second, Deadline: 2 * time.Second}), ExpireFunc(func() {}))
		defer r.Stop()
		for err, want := range map[error]Answer{nil: Renewed, errLost: Lost, errRefused: Refused, errors.New("x"): Failed} {
			if got := r.Classify(err); got != want {
				t.Errorf("Classify(%v) = %v, want %v", err, got, want)
			}
		}
	})
}

// renewer is a Renewer that counts its OnDue calls and tells its OnExpire.
type renewer struct {
	r       Renewal
	due     chan time.Time
	expired chan time.Time
}

func (x *renewer) OnDue()    { x.due <- time.Now() }
func (x *renewer) OnExpire() { x.expired <- time.Now() }

// TestRenewal_Renewer: a Renewer's renewals run on the timer (OnDue, no
// Due channel), and its deadline timer is armed by the first Begin: a
// lease stopped before its first renewal never arms it, and one whose
// first renewal begins late still ends at the acquire's send time +
// Deadline.
func TestRenewal_Renewer(t *testing.T) {
	tm := Timing{Interval: 3 * time.Second, Deadline: 6 * time.Second}
	synctest.Test(t, func(t *testing.T) {
		x := &renewer{due: make(chan time.Time, 1), expired: make(chan time.Time, 1)}
		start := time.Now()
		x.r.Start(start, policy(tm), x)
		if x.r.Due() != nil {
			t.Fatal("a Renewer's Due is not nil")
		}
		if x.r.deadline != nil {
			t.Fatal("deadline armed before the first renewal")
		}
		at := <-x.due
		if d := at.Sub(start); d != 3*time.Second {
			t.Fatalf("OnDue after %s, want 3s", d)
		}
		if left := x.r.Begin(time.Now()); left != 3*time.Second || x.r.deadline == nil {
			t.Fatalf("Begin: left %s (armed %v), want 3s and armed", left, x.r.deadline != nil)
		}
		sent := time.Now()
		x.r.Renewed(sent)
		<-x.due
		if d := time.Since(sent); d != 3*time.Second {
			t.Fatalf("OnDue %s after the last success, want 3s", d)
		}
		x.r.Begin(time.Now())
		x.r.Retry()
		<-x.due
		got := <-x.expired
		if d := got.Sub(sent); d != 6*time.Second || !x.r.Expired() {
			t.Fatalf("expired %s after the last success (Expired %v), want 6s", d, x.r.Expired())
		}
		x.r.Stop()
	})
	synctest.Test(t, func(t *testing.T) {
		x := &renewer{due: make(chan time.Time, 1), expired: make(chan time.Time, 1)}
		x.r.Start(time.Now(), policy(tm), x)
		time.Sleep(time.Second)
		x.r.Stop()
		if x.r.Begin(time.Now()); x.r.deadline != nil || !x.r.Stopped() {
			t.Fatal("Begin after Stop armed the deadline")
		}
		time.Sleep(10 * time.Second)
		if len(x.due)+len(x.expired) != 0 {
			t.Fatal("a timer fired after Stop")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		x := &renewer{due: make(chan time.Time, 1), expired: make(chan time.Time, 1)}
		start := time.Now()
		x.r.Start(start, policy(tm), x)
		<-x.due
		time.Sleep(4 * time.Second) // the renewal's goroutine was held up
		if left := x.r.Begin(time.Now()); left != -time.Second {
			t.Fatalf("late Begin: left %s, want -1s", left)
		}
		if got := <-x.expired; got.Sub(start) != 7*time.Second || !x.r.Expired() {
			t.Fatalf("expired %s after the acquire, want at once when armed late", got.Sub(start))
		}
	})
}

// TestRenewal_Fixed: a fixed lease (Interval 0) is never renewed, and its
// deadline is armed at Start, for a Renewer too.
func TestRenewal_Fixed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := &renewer{due: make(chan time.Time, 1), expired: make(chan time.Time, 1)}
		start := time.Now()
		x.r.Start(start, policy(Timing{Deadline: 5 * time.Second}), x)
		if x.r.Due() != nil {
			t.Fatal("a fixed lease has a Due channel")
		}
		got := <-x.expired
		if d := got.Sub(start); d != 5*time.Second || len(x.due) != 0 {
			t.Fatalf("expired after %s (renewals %d), want 5s and none", d, len(x.due))
		}
		x.r.Stop()
	})
}
