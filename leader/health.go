package leader

import (
	"fmt"
	"time"
)

// Healthy is a liveness check of this process's own renewal loop: it
// returns an error wrapping ErrRenewStuck while this elector leads and its
// term loop is wedged, and nil otherwise — also when it does not lead, and
// whatever Redis does.
//
// The loop is wedged when it has not attempted a renewal in time: no
// renewal started within RenewInterval + tolerance of its last one's
// answer (or of the term's start), or a renewal in flight for longer than
// RenewDeadline + tolerance, which its own timeout and the deadline timer
// never allow; or the renew deadline ended the term (the job is stopped
// by then) and the loop has not handled that within RenewInterval +
// tolerance. A renewal that fails or hangs because Redis is down, frozen
// or slow is not a wedge: the loop keeps trying and steps down at the
// renew deadline, and restarting the process would not bring Redis back.
// A negative tolerance counts as zero.
//
// This differs from client-go's leader-election healthz adaptor, which
// fails while a renewal is overdue, that is while the lock's store is
// unreachable: a liveness probe on it restarts every leader in a Redis
// outage.
func (e *Elector) Healthy(tolerance time.Duration) error {
	e.mu.Lock()
	st, beat, busy, expired := e.status, e.loopBeat, e.renewBusy, e.expiredAt
	e.mu.Unlock()
	tolerance = max(tolerance, 0)
	if !expired.IsZero() {
		limit := e.cfg.RenewInterval + tolerance
		if age := time.Since(expired); age > limit {
			return fmt.Errorf("renewal loop wedged: the renew deadline ended the term %s ago and the loop has not handled it (limit %s): %w",
				age.Round(time.Millisecond), limit, ErrRenewStuck)
		}
		return nil
	}
	if !st.Leading {
		return nil
	}
	limit, what := e.cfg.RenewInterval+tolerance, "no renewal attempted for"
	if busy {
		limit, what = e.cfg.RenewDeadline+tolerance, "renewal in flight for"
	}
	if age := time.Since(beat); age > limit {
		return fmt.Errorf("term %d: renewal loop wedged: %s %s (limit %s; last successful renewal sent %s ago): %w",
			st.Term, what, age.Round(time.Millisecond), limit, time.Since(st.LastRenew).Round(time.Millisecond), ErrRenewStuck)
	}
	return nil
}
