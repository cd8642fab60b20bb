package sim

import (
	"fmt"
	"time"
)

// Out of the model is bounded: a data loss or failover excuses a leader
// function or a lock hold that is no longer the server's, but only until
// its own deadline. A holder that learns nothing stops by its last true
// renewal + RenewDeadline (the elector and the lock's watchdog cancel
// then); a renewal is true when the server held the holder's own value
// as it ran (the scripts' owner checks decide what the holder hears, so a
// broken check shows here). Execution times stand in for send times,
// which makes the bound looser, never tighter.

// deadlineSlop absorbs a cancellation due at the very instant of a check.
const deadlineSlop = time.Millisecond

// renewedTrue records that the server held value (a lease "TERM ID" or a
// lock field "TERM OWNER") as a script renewed or took it at now.
func (w *world) renewedTrue(value string, now time.Time) {
	if w.trueAt == nil {
		w.trueAt = map[string]time.Time{}
	}
	w.trueAt[value] = now
}

// pastOwnDeadline says how long value's holder has outlived its own
// deadline (rd after its last true renewal), or 0.
func (w *world) pastOwnDeadline(value string, rd time.Duration, now time.Time) time.Duration {
	t, ok := w.trueAt[value]
	if !ok {
		return 0
	}
	if late := now.Sub(t.Add(rd + deadlineSlop)); late > 0 {
		return late
	}
	return 0
}

// checkOwnDeadline is invariant 1's bound for an excused function k. A
// cancellation excuses the function from when it came, not before: one
// that came past the deadline (judged by the renewals true by then: one
// in flight that ran true later does not undo it) leaves the function
// running uncancelled until then.
func (w *world) checkOwnDeadline(k fnKey, f *fnState, where string, now time.Time) {
	var late time.Duration
	if f.cancelled.IsZero() {
		late = w.pastOwnDeadline(fmt.Sprintf("%d %s", k.term, w.cands[k.cand].id), w.p.Cfg.RenewDeadline, now)
	} else {
		late = f.lateAtCancel
	}
	switch {
	case late <= 0:
	case f.cancelled.IsZero():
		w.violate(InvLease, fmt.Sprintf("c%d's leader function of term %d runs (%s) %s past its last true renewal + RenewDeadline, not cancelled (excused only until then: %s)",
			k.cand, k.term, where, late, f.affected), f.tags...)
	default:
		w.violate(InvLease, fmt.Sprintf("c%d's leader function of term %d ran (seen %s) uncancelled until %s past its last true renewal + RenewDeadline (excused only until then: %s)",
			k.cand, k.term, where, late, f.affected), f.tags...)
	}
}

// checkLockDeadline is L3's bound for a live hold r, whatever excuses it.
func (lw *lockWorld) checkLockDeadline(c int, r *leaseRec, where string) {
	if r.ctx.Err() != nil {
		return
	}
	if late := lw.w.pastOwnDeadline(r.field, lw.cfg.RenewDeadline, time.Now()); late > 0 {
		lw.w.violate(InvLockDeadline, fmt.Sprintf("c%d's hold of term %d is live (%s) %s past its last true renewal + RenewDeadline", c, r.term, where, late))
	}
}
