package leader

import (
	"fmt"
	"time"
)

// Healthy is a liveness check in the spirit of client-go's leader-election
// healthz adaptor: it returns an error wrapping ErrRenewStuck while this
// elector leads and its last successful renewal was sent more than
// RenewInterval + tolerance ago (a renewal is overdue: Redis is slow or
// unreachable, or this process is starved), and nil otherwise — also when
// it does not lead, since a follower has nothing to renew. A negative
// tolerance counts as zero. Once the renew deadline passes the elector
// steps down and Healthy is nil again: the check flags the window in
// which leadership is at risk, for a probe or an alert, not a lost term.
func (e *Elector) Healthy(tolerance time.Duration) error {
	st := e.Status()
	if !st.Leading {
		return nil
	}
	limit := e.cfg.RenewInterval + max(tolerance, 0)
	if age := time.Since(st.LastRenew); age > limit {
		return fmt.Errorf("term %d: last successful renewal sent %s ago (renew interval %s, tolerance %s): %w",
			st.Term, age.Round(time.Millisecond), e.cfg.RenewInterval, max(tolerance, 0), ErrRenewStuck)
	}
	return nil
}
