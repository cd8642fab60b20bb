// Package lock is a fenced, reentrant distributed lock on Redis, built on
// the election's lease, term and timing rules (package leader).
//
// A Client owns one pub/sub connection shared by all its locks; a Mutex is
// one lock name; a Hold is one holding of it:
//
//	c, err := lock.NewClient(rdb)            // once per process; Close at exit
//	m, err := c.Mutex("account-42")
//	h, err := m.Lock(ctx)                     // or TryLock, LockTimeout
//	defer h.Unlock(context.Background())
//	work(h.Context(), h.Term())               // cancelled before the lock can pass on
//
// Guarantees:
//
//   - A holder learns it lost the lock before anyone else can take it: the
//     hold's context is cancelled by a local timer at the last successful
//     renewal's send time + RenewDeadline, while the key lasts on the
//     server until at least that send time + TTL × (1 − Drift). Every Redis
//     call is bounded by RenewDeadline, whatever the client's timeouts.
//   - Every hold has a term (Hold.Term) that grows with every new holding
//     and is never reused, even when Redis loses its data. Hold.Context
//     carries it as a fence.Token, so fence.Guard.Do(h.Context(), fn) is a
//     fenced write.
//   - Lock with a context that carries a hold of the same lock (Hold.Context,
//     WithHold) re-enters; the lock is released when the term's last hold
//     is unlocked. Another context waits like another process.
//   - Waiters wake on the release notice or when the holder's lease runs
//     out, one per Client per release; they never poll.
//
// Not guaranteed: a process paused past the stop budget, TTL −
// RenewDeadline, can wake up believing it holds the lock, and a failover
// without Config.MinReplicas can lose a fresh lock: fence the writes with
// the term. Without WithFair, the waiters of different Clients race for a
// release; WithFair grants the lock in arrival order. There is no
// read-write lock.
//
// NewRedlockClient makes the same Mutexes over N independent masters (a
// quorum of N/2+1); it buys little over one master with replicas and
// MinReplicas.
//
// The keys, scripts, timing, fairness and Redlock's terms are in
// docs/design.md, "Locks" and "Redlock".
package lock
