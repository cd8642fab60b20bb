package main

import (
	"time"

	"github.com/solo-run/solo/cmd/solo/internal/config"
	"github.com/solo-run/solo/leader"
)

// minStopMargin is the least time solo run accepts between the renew
// deadline and TTL × (1 − drift), the earliest the lease can pass: SIGTERM,
// SIGKILL at three quarters of it, and a quarter (≥ 50ms) for the kill to
// land and the tree to be reaped.
const minStopMargin = 200 * time.Millisecond

// stopTiming derives, from the timing rule, when SIGKILL follows SIGTERM,
// and refuses configurations under which solo run cannot stop a program
// tree before the lease can pass. lc has its defaults applied; failover is
// config.FailoverAllowance's share of the margin (0 without Sentinel).
//
// The lease outlives the renew deadline by at least
// margin = TTL × (1 − drift) − renew_deadline − failover on this host's
// clock; SIGKILL comes at 3/4 of it (not of TTL − renew_deadline, which
// ignores drift).
func stopTiming(lc leader.Config, failover time.Duration) (killAfter time.Duration, err error) {
	safe := time.Duration(float64(lc.TTL) * (1 - lc.Drift))
	margin := safe - lc.RenewDeadline - failover
	if margin < minStopMargin && failover > 0 {
		return 0, usageErr("election.renew_interval %s + election.renew_deadline %s: leave %s before the lease can pass in a Sentinel failover (ttl×(1−drift) = %s − renew_deadline − renew_interval − %s for the sentinels to move the replicas; ttl %s, drift %g); solo run needs at least %s to stop the program: lower renew_interval or renew_deadline, or raise ttl",
			lc.RenewInterval, lc.RenewDeadline, margin, safe, config.SentinelReconfiguration, lc.TTL, lc.Drift, minStopMargin)
	}
	if margin < minStopMargin {
		return 0, usageErr("election.renew_deadline %s: leaves %s before the lease can pass (ttl×(1−drift) = %s, ttl %s, drift %g); solo run needs at least %s to stop the program (SIGTERM, then SIGKILL)",
			lc.RenewDeadline, margin, safe, lc.TTL, lc.Drift, minStopMargin)
	}
	killAfter = margin * 3 / 4
	if lc.ShutdownTimeout < margin {
		return 0, usageErr("election.shutdown_timeout %s: must be at least %s for solo run (SIGKILL comes %s after SIGTERM, and must land before solo gives up the drain)",
			lc.ShutdownTimeout, margin, killAfter)
	}
	return killAfter, nil
}
