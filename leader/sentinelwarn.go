package leader

import (
	"sync"
	"weak"

	"github.com/redis/go-redis/v9"
)

// SentinelWarning is what New logs at error, once per client, for a
// Sentinel failover client (redis.NewFailoverClient, or redisurl's
// redis+sentinel:// URL) with MinReplicas 0: the failover window, and the
// settings solo run derives for a Sentinel URL (an embedded elector gets
// none of them).
const SentinelWarning = "min_replicas 0 with a Sentinel redis client: renewals are not acknowledged by a replica, " +
	"so during a planned failover (SENTINEL FAILOVER) the leader keeps renewing on the old master while its lease runs out on the new one, " +
	"and two instances can run the program at once; set min_replicas 1, renew_interval ttl/10 and renew_deadline ttl/2 " +
	"(leader.Config MinReplicas, RenewInterval, RenewDeadline; election.min_replicas, renew_interval, renew_deadline in solo run, " +
	"which derives them for a Sentinel URL unless given) (docs/operations.md, \"Redis failed over (Sentinel)\")"

// sentinelWarned holds the failover clients SentinelWarning was logged
// for, weakly: a closed client is not kept alive by it.
var sentinelWarned sync.Map // weak.Pointer[redis.Client] → struct{}

// isFailoverClient reports whether client is a Sentinel failover client:
// go-redis names such a client's address "FailoverClient".
func isFailoverClient(client redis.UniversalClient) (*redis.Client, bool) {
	c, ok := client.(*redis.Client)
	return c, ok && c.Options().Addr == "FailoverClient"
}

// warnSentinel logs SentinelWarning at error when client is a Sentinel
// failover client and e's MinReplicas is 0, once per client (the
// elections of a spread group, or an elector built again, share it). An
// elector without a logger (WithLogger) does not count: a probe built
// without one must not silence the next.
func (e *Elector) warnSentinel(client redis.UniversalClient) {
	c, ok := isFailoverClient(client)
	if !ok || e.cfg.MinReplicas != 0 || !e.logSet {
		return
	}
	if _, seen := sentinelWarned.LoadOrStore(weak.Make(c), struct{}{}); seen {
		return
	}
	e.log.Error("unsafe election settings for Sentinel: " + SentinelWarning)
}
