package config

import (
	"fmt"
	"math"
	"time"

	"github.com/solo-run/solo/leader"
	"github.com/solo-run/solo/leader/redisurl"
	"github.com/solo-run/solo/worker"
)

// What solo run does after SIGTERM besides the drain and the Redis round
// trips is bounded by these; ExitBound adds them up.
const (
	// HTTPShutdownTimeout bounds the HTTP server's graceful shutdown.
	HTTPShutdownTimeout = 2 * time.Second
	// LogSyncTimeout bounds the flush of the log buffer at exit
	// (logSink.Sync).
	LogSyncTimeout = time.Second
)

// ExitBound is the longest solo run takes to exit after SIGTERM (or INT,
// HUP, QUIT) with a Redis that answers, and the sum it is, for messages.
// This is the one place the formula is written; docs/cli.md ("Exit bound
// and the grace period") and the manifests in deploy/kubernetes
// quote it. c is a configuration Validate accepted up to the election.
//
//	exit bound = election.shutdown_timeout   the drain: the keeper SIGKILLs
//	                                         the tree ¾ margin after its
//	                                         SIGTERM, which stopTiming keeps
//	                                         under shutdown_timeout; past it
//	                                         the lease is left to expire
//	           + n × round trip              n = 1, the release (a leader's
//	                                         only Redis call after its term;
//	                                         a follower's withdraw is
//	                                         shorter than a drain); spread:
//	                                         3, leaving the group, the
//	                                         releases (in parallel), and
//	                                         removing its entry
//	           + HTTPShutdownTimeout         with http.addr
//	           + LogSyncTimeout
//
// A round trip is the client's read timeout (redis.url's read_timeout,
// default 1s), at most renew_deadline, which bounds every such call
// whatever the client does. A Redis that does not answer can hold a call
// up to renew_deadline: a SIGKILL then cuts a release that was failing,
// and the lease expires after the TTL as it would have. A tree with a
// process that even SIGKILL cannot end (uninterruptible sleep) holds solo
// past any bound: solo never exits while a program tree lives.
func (c Config) ExitBound() (time.Duration, string) {
	lc := c.LeaderConfig()
	if lc.TTL == 0 {
		lc.TTL = leader.DefaultTTL
	}
	drain := lc.ShutdownTimeout
	if drain == 0 {
		drain = lc.TTL // leader.Config's default
	}
	roundTrip := redisurl.DefaultTimeout
	if opts, err := redisurl.Parse(c.Redis.URL); err == nil && opts.ReadTimeout > 0 {
		roundTrip = opts.ReadTimeout
	}
	roundTrip = min(roundTrip, lc.TTL-lc.StopBudget()) // renew_deadline, defaults applied
	var sum string
	n, calls := 1, "1 Redis round trip of %s (the release)"
	if c.Election.Mode == worker.ModeSpread {
		n, calls = 3, "3 Redis round trips of %s (leave, releases, entry removal)"
	}
	tail := time.Duration(n)*roundTrip + LogSyncTimeout
	sum = fmt.Sprintf("election.shutdown_timeout %s + "+calls, drain, roundTrip)
	if c.HTTP.Addr != "" {
		tail += HTTPShutdownTimeout
		sum += fmt.Sprintf(" + %s http shutdown", HTTPShutdownTimeout)
	}
	sum += fmt.Sprintf(" + %s log flush", LogSyncTimeout)
	// A shutdown_timeout near the largest Duration (292 years) must not
	// wrap the sum around to a negative bound that any grace period passes.
	return drain + min(tail, math.MaxInt64-drain), sum
}
