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

// TestRenewal_Timing: renewals fall due Interval after the last successful
// send, a failure retries after a quarter of it, and the deadline fires at
// the last successful send + Deadline, whatever was sent since.
func TestRenewal_Timing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := Timing{Interval: 3 * time.Second, Deadline: 6 * time.Second}
		start := time.Now()
		expired := make(chan time.Time, 1)
		r := Start(start, tm, classes, func() { expired <- time.Now() })
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
		r := Start(time.Now(), Timing{Interval: time.Second, Deadline: 2 * time.Second}, classes, func() {})
		defer r.Stop()
		for err, want := range map[error]Answer{nil: Renewed, errLost: Lost, errRefused: Refused, errors.New("x"): Failed} {
			if got := r.Classify(err); got != want {
				t.Errorf("Classify(%v) = %v, want %v", err, got, want)
			}
		}
	})
}
