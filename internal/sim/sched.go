package sim

import (
	"container/heap"
	"time"
)

// The network and the server run on one goroutine per schedule: every
// request's execution and every reply's delivery is an action at a fake
// time, run in (time, sequence) order under w.mu. One goroutine instead of
// one per request keeps schedules cheap and orders simultaneous actions
// by when they were scheduled rather than by the Go scheduler.

type action struct {
	at  time.Time
	seq uint64
	fn  func(now time.Time) // runs under w.mu
}

type actions []action

func (a actions) Len() int { return len(a) }
func (a actions) Less(i, j int) bool {
	if !a[i].at.Equal(a[j].at) {
		return a[i].at.Before(a[j].at)
	}
	return a[i].seq < a[j].seq
}
func (a actions) Swap(i, j int) { a[i], a[j] = a[j], a[i] }
func (a *actions) Push(x any)   { *a = append(*a, x.(action)) }
func (a *actions) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}

// at schedules fn at fake time t; the caller holds w.mu.
func (w *world) at(t time.Time, fn func(now time.Time)) {
	w.seq++
	heap.Push(&w.queue, action{at: t, seq: w.seq, fn: fn})
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// loop runs the actions until teardown; it is the world's own goroutine.
func (w *world) loop() {
	defer close(w.loopDone)
	for {
		w.mu.Lock()
		now := time.Now()
		for len(w.queue) > 0 && !w.queue[0].at.After(now) {
			a := heap.Pop(&w.queue).(action)
			a.fn(now)
		}
		var tc <-chan time.Time
		var t *time.Timer
		if len(w.queue) > 0 {
			t = time.NewTimer(w.queue[0].at.Sub(now))
			tc = t.C
		}
		w.mu.Unlock()
		select {
		case <-tc:
		case <-w.kick:
		case <-w.stop:
			if t != nil {
				t.Stop()
			}
			return
		}
		if t != nil {
			t.Stop()
		}
	}
}
