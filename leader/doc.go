// Package leader elects one holder per election through a renewable Redis
// lease and runs a function only while this process holds it.
//
// # Model
//
// Every process is a candidate (Elector) in an election (Config.Name). The
// winner holds the lease PREFIX:{NAME}:lease, whose value "TERM ID" names
// the holder and its fencing term. Acquire, renew and release are one Lua
// script each, one round trip: acquire takes only a missing key (followers
// never steal), renew extends and release deletes only a value that is
// exactly ours, so neither ever touches or re-creates someone else's lease.
// Beside the lease, acquire writes the hash PREFIX:{NAME}:info (the
// holder's TTL, renew interval, proclaimed Config.Value and acquire time,
// expiring with the lease; renew refreshes it, release deletes it) and
// lists a candidate that found the lease held in the sorted set
// PREFIX:{NAME}:candidates: readers (Lookup, LookupView, Observe) learn the
// holder's own timings and the waiting candidates without an extra round
// trip on any path of the election.
// A release publishes a notice on PREFIX:{NAME}:events; waiting candidates
// take over one round trip later. After a crash they take over when the
// lease expires: a follower sleeps the holder's remaining TTL (plus a few
// milliseconds of jitter), so it costs Redis about one command per TTL.
//
// # Protocol and versions
//
// Protocol is the version of this layout in Redis, MinPeerProtocol the
// oldest a build shares an election with. Acquire records the holder's
// protocol in the info hash and, in the same script, refuses a caller
// that does not share an election with the holder (ErrProtocolSkew, a
// *ProtocolError): the Elector then does not campaign, logs it once at
// error level, shows it in Status.ProtocolErr and ProtocolMetrics, and
// campaigns once that holder is gone. The lease key and its "TERM ID"
// value are the same in every protocol, so even builds that check
// nothing never lead at once. docs/design.md, "Protocol and versions",
// has the skew policy.
//
// # Timing: why two leaders never run at once
//
// All times are this process's monotonic clock, taken when a request is
// sent; Redis sets the expiry when it receives the request, later still.
//
//	RenewInterval < RenewDeadline < TTL × (1 − Drift)
//
// The leader renews every RenewInterval. If no renewal succeeded within
// RenewDeadline of the send time of the last successful one, a local
// timer — not the timeout of the renew call, which a stalled Redis or a
// go-redis client without ContextTimeoutEnabled could hold far longer —
// cancels the leader function's context from a goroutine of its own, so
// nothing else (a log write to a blocked stderr, a metric) can delay it, and the elector steps down
// without releasing (the lease is presumed gone). The lease outlives that
// moment on the server by at least the stop budget, TTL − RenewDeadline
// (less the drift margin): the time the function has to stop before
// another candidate can acquire. A function still running past it is
// reported (log and Metrics.Overrun).
//
// Drift covers clock rate differences between this host and the Redis
// server: the deadline holds as long as the two clocks' rates differ by
// less than Drift (default 1%). Clock offsets do not matter: no absolute
// time is compared across machines.
//
// A voluntary step-down (Resign, Run's context done, or the function
// returning) cancels the function, keeps renewing while it drains, and
// releases only after it returned. On shutdown the drain is bounded by
// ShutdownTimeout, after which renewing stops and the lease is left to
// expire (Run returns ErrStopTimeout); it is never released under a running
// function.
//
// # What the lease does not promise, and how the term closes the gap
//
// A process paused longer than the stop budget (a GC pause, SIGSTOP, a
// frozen VM) wakes up still running a function whose lease another
// candidate may hold by now; Redis's asynchronous replication can lose a
// fresh lease on a Sentinel failover. No lease prevents either. Every term
// is therefore a fencing token: TermFrom(ctx) gives it to the function, and
// a store that records the highest term it has seen and refuses lower ones
// (package fence does this for SQL databases) turns a stale leader's write
// into a refused write.
//
// Terms only grow. A new term is max(stored + 1, the Redis server's clock
// in microseconds), so even when Redis loses the term key (a restart
// without persistence, a failover to a lagging replica) the next term is
// above every term handed out before — under the assumption that the Redis
// server's clock never steps back by more than the time such a loss takes.
// A term is therefore also a timestamp (Holder.Since).
//
// # Late and lost replies
//
// Every store call is bounded by the elector's own timers, whatever the
// Redis client's timeouts: an acquire is abandoned at RenewDeadline after
// its send time, a release at the deadline left, and a step-down or
// shutdown never waits for a call the client does not end. A function
// starts only while this host's clock is still before the confirming
// attempt's send time + RenewDeadline: a reply that comes later (a client
// without ContextTimeoutEnabled, a stalled server) is released, never led
// on.
//
// An acquire whose reply is lost has an unknown outcome: the candidate
// never starts its function on it. Its retry finds its own ID holding the
// lease and adopts it: the adopting script refreshes the TTL after the
// retry's send time, and the lease was this candidate's all along, so the
// term's deadline runs from the retry's send time. Adoption by ID is sound
// because every Elector appends a random part of its own to Config.ID:
// two processes sharing a configuration are still two candidates, and an
// ID only ever appears on a lease that one of this Elector's own attempts
// took. (A lease held under the same configured ID by another run is
// logged as a configuration error.) When Run returns with an acquire of
// unknown outcome outstanding, it looks for such a lease and releases it.
//
// A call Redis refuses as a configuration error — NOPERM (an ACL without a
// command, key or channel the scripts need), WRONGPASS, NOAUTH, an unknown
// command — is not an outage: it wraps ErrRedisConfig (*RedisConfigError,
// whose Fix names the rule to add), is logged once at error level and
// reported in Status.ConfigErr, and a renewal refused so ends the term at
// once. The elector keeps trying every RetryInterval, so an ACL fixed live
// needs no restart. docs/operations.md, ACL, gives the minimal ACL user.
//
// A Redis that may evict the lease (maxmemory set, maxmemory-policy not
// noeviction) voids the lease's guarantee: RedisLock checks it with INFO
// memory (EvictionGuard) and refuses such a server as a configuration
// error wrapping ErrEvictionPolicy; a leader steps down at its next
// renewal once the policy, re-read after a renewal once a minute passed,
// turns unsafe.
//
// With Config.MinReplicas, acquire, renew and checkpoints are followed by
// WAIT on the same connection: an acquire that too few replicas
// acknowledged is refused and released (ErrNotReplicated), a renew counts
// as failed, a checkpoint as not recorded.
//
// # Deployments
//
// The client is any redis.UniversalClient: a single node, a Sentinel
// failover client or a Cluster client. The election's keys share the hash
// tag {NAME}, so each election lives in one Cluster slot and elections
// spread over the cluster. Safety does not depend on the client's
// timeouts, but keep its read and write timeouts well under RenewDeadline
// and set ContextTimeoutEnabled, so a hung call fails in time to be
// retried; New logs a warning otherwise.
//
// # Many elections in one process
//
// By default each running Elector holds a pub/sub connection of its own for
// the notices and renews in round trips of its own: right for one or a few
// elections per process. A process that runs hundreds or thousands of
// elections on one client builds them all with one Hub (NewHub, WithHub,
// Hub.NewRedisLock): their notices share one pub/sub connection (one
// reference-counted SUBSCRIBE per election, one health PING for all) and
// renewals that fall due together are sent in one pipeline. Results and
// timing rules are unchanged. Close the Hub after its electors stopped.
package leader
