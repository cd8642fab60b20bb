package leader

import "time"

// Clock is the elector's source of time. All timing rules use it: send
// times, the renew deadline, intervals and back-offs. The default is the
// system's monotonic clock; tests inject their own (or run in a
// testing/synctest bubble).
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the elector uses. Stop and Reset follow
// time.Timer's Go 1.23 semantics: no stale value is received after either.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
