// Package leader elects one holder per election through a renewable Redis
// lease and runs a function only while this process holds it.
//
// Every process is a candidate (Elector) in an election (Config.Name). The
// winner holds the lease PREFIX:{NAME}:lease, whose value "TERM ID" names
// the holder and its fencing term; Run calls the function for every term
// won, with a context that carries the term (TermFrom) and is cancelled
// when the term ends.
//
// Guarantees, with the timing rule
//
//	RenewInterval < RenewDeadline < TTL × (1 − Drift)
//
// times on this host's monotonic clock, from a request's send time:
//
//   - No two candidates run the function at the same instant, for every
//     fault the lease covers (crash, partition, slow or stalled Redis, lost
//     replies, any client timeouts): if no renewal succeeded within
//     RenewDeadline of the last successful one's send time, a local timer
//     cancels the function's context, and the lease outlives that moment
//     on the server by the stop budget, TTL − RenewDeadline.
//   - Followers never steal: they acquire only a missing lease. Renew and
//     release touch only a lease whose value is exactly theirs.
//   - Terms only grow and are never reused, even when Redis loses its data
//     (a term is max(stored + 1, the server's clock in µs)). A store that
//     refuses lower terms (package fence) turns the write of a leader
//     paused past its stop budget into a refused write.
//   - A voluntary step-down (Resign, Run's context done) cancels the
//     function, keeps renewing while it drains, and releases only after it
//     returned: another candidate takes over one round trip later. After a
//     crash a follower takes over when the lease expires.
//
// What the lease cannot promise: a process paused longer than the stop
// budget wakes up still running; a Sentinel failover without
// Config.MinReplicas can lose a fresh lease. Fence the writes with the term.
//
// The client is any redis.UniversalClient (single node, Sentinel,
// Cluster); safety does not depend on its timeouts. Many elections in one process share one pub/sub connection
// and pipelined renewals through a Hub. A call Redis refuses as a
// configuration error (ACL, password, an evicting maxmemory-policy, a peer
// of another protocol) wraps ErrRedisConfig or ErrProtocolSkew and is
// logged once; the elector keeps trying.
//
// Keys, scripts, the timing rules and the protocol: docs/design.md.
package leader
