//go:build linux

package faults

import (
	"fmt"
	"time"
)

// Holder waits until exactly one candidate holds the lock (LOCK mode) and
// has had a write of its hold's term accepted (so its claim is done), and
// returns it. Holds are short: the caller checks Leading before a fault
// and HeldAt after it to know whether the fault landed on the hold.
func (r *Rig) Holder() Leading {
	r.T.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		seen := r.H.Len()
		if ls := r.Leaders(); len(ls) == 1 {
			l := ls[0]
			id := l.Slot.ID()
			for _, ev := range r.H.Events(l.Index) {
				if ev.Cand == id && ev.Kind == KindWrite && ev.Term == l.Term && ev.Result == ResultAccepted {
					return l
				}
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			var holding []string
			for _, l := range r.Leaders() {
				holding = append(holding, fmt.Sprintf("%s (term %d, for %s)", l.Slot.ID(), l.Term, time.Duration(Mono()-l.Start).Round(time.Millisecond)))
			}
			r.T.Fatalf("no single holder with an accepted write within %s; holding now: %v", waitLimit, holding)
		}
		r.H.Wait(left, seen, func(Event) bool { return true })
	}
}

// HeldAt reports whether cand's hold that started at history index from
// was still open (no stop event) at monotonic time at, by the events so
// far: a candidate reports its stop before it unlocks, and a stop made
// before a SIGKILL or SIGSTOP is in its pipe before the signal lands.
func (r *Rig) HeldAt(from int, cand string, at int64) bool {
	stop, ok := r.Find(from, func(ev Event) bool { return ev.Cand == cand && ev.Kind == KindStop })
	return !ok || stop.Mono >= at
}

// PlannedEnd returns when the hold l would end by itself: a LOCK-mode
// start event carries the hold's planned length.
func (r *Rig) PlannedEnd(l Leading) int64 {
	evs := r.H.Events(l.Index)
	if len(evs) == 0 || evs[0].Kind != KindStart {
		r.T.Fatalf("history index %d is no start event", l.Index)
	}
	return evs[0].Mono + evs[0].Dur
}
