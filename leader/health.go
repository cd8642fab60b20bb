package leader

import (
	"fmt"
	"time"
)

// Healthy is a liveness check of this elector's own renewal loop: it
// returns an error wrapping ErrRenewStuck while the loop is wedged (while
// leading, no renewal attempted within RenewInterval + tolerance, or one in
// flight past RenewDeadline + tolerance; or a term the renew deadline ended
// not handled within RenewInterval + tolerance), else nil: a Redis outage
// does not fail it. A negative tolerance counts as zero.
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
