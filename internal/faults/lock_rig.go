//go:build linux

package faults

// Holder waits until exactly one candidate holds the lock (LOCK mode) and
// has had a write of its hold's term accepted (so its claim is done), and
// returns it. Holds are short: the caller checks Leading before a fault
// and HeldAt after it to know whether the fault landed on the hold.
func (r *Rig) Holder() Leading {
	r.T.Helper()
	return r.soleLeaderWith(KindWrite, ResultAccepted, "no single holder with an accepted write", "holding")
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
