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
// # Guarantees
//
//   - Every hold has a term (Hold.Term): a fencing token that grows with
//     every new holding of the lock and is never reused, even when Redis
//     loses its data (the term's floor is the Redis server's clock in
//     microseconds). Hold.Context carries it for package leader/fence as
//     the hold's fence.Token (Hold.Token: election lock:NAME, the term,
//     Hold.Holder), so fence.Guard.Do(h.Context(), fn) is a fenced write;
//     or give Term and Holder to any store that refuses lower terms.
//   - A holder learns it lost the lock before anyone else can take it: its
//     hold context is cancelled by a local timer at the last successful
//     renewal's send time + RenewDeadline, while the key lasts on the
//     server until at least that send time + TTL × (1 − Drift). The
//     difference, TTL − RenewDeadline, is the stop budget of the work under
//     the hold. Config is checked for RenewInterval < RenewDeadline <
//     TTL × (1 − Drift).
//   - Every Redis call is bounded by RenewDeadline, not by the client's
//     timeouts: with a client that honours context deadlines
//     (ContextTimeoutEnabled), Lock/TryLock/Unlock send their calls on
//     the caller's goroutine with that deadline; otherwise each call runs
//     on a goroutine of its own bounded by a local timer (WithInlineCalls
//     sends them inline anyway, bounded by the client only). Renewals
//     always have their own bound. An acquire confirmed after its send
//     time + RenewDeadline is released, never held, in every mode.
//   - Waiters wake on the release notice, or when the holder's lease runs
//     out; they never poll at a fixed interval.
//   - Reentrancy: Lock with a context that carries a hold of the same lock
//     (Hold.Context, WithHold) adds one to the hold count in Redis; the
//     lock is released when the term's last hold is unlocked. Another
//     context never re-enters.
//   - A request the Redis client sends twice (go-redis re-sends a script
//     after a connection reset) is answered as its first run: an acquire
//     adopts what it took, a last release reports the lock released.
//   - Unlock keeps ctx's deadline: its release is sent even when ctx was
//     cancelled (Unlock(h.Context())), never past ctx's deadline.
//
// # Non-guarantees
//
//   - A process paused past the stop budget (GC, SIGSTOP, a frozen VM) can
//     wake up believing it holds the lock; no lease prevents that. Fence
//     the writes with the term.
//   - Redis replication is asynchronous: a failover can lose a fresh lock.
//     The term survives (clock floor); the fence refuses the stale holder.
//   - A Redis that may evict keys (maxmemory with a policy other than
//     noeviction) could drop a held lock: the Client refuses one, reading
//     INFO memory (leader.EvictionGuard) before acquires and once a
//     minute during holds; Lock returns a configuration error wrapping
//     leader.ErrEvictionPolicy, and a hold ends at a renewal.
//   - Without WithFair, fairness only within a Client: a release wakes
//     one waiter per Client (the one waiting longest), and a new Lock of
//     a Client whose longest waiter has waited over 1 ms goes behind it
//     (sync.Mutex's hand-off), but the waiters of different Clients race
//     for a release and can pass one another. WithFair grants the lock in
//     the order Lock calls started waiting (a queue in Redis; the release
//     hands the lock to the head, whose Lock returns without another
//     round trip, the key then living for the head's own TTL whatever
//     the releaser's; with MinReplicas the head's next acquire, with its
//     WAIT, takes the grant instead; a dead waiter's slot lapses after
//     2×TTL + RetryInterval), at the cost of longer scripts.
//   - No read-write lock: readers could not be fenced by a term (see
//     docs/design.md, Locks).
//
// # Redlock
//
// NewRedlockClient makes the same Mutexes and Holds over N independent
// masters: a hold needs a quorum of N/2+1, its context ends at the
// acquire's send time + RenewDeadline like any hold, and its term is the
// highest the quorum minted (renewals and releases raise every master's
// term counter to it, so two quorums sharing a master keep terms growing).
// It buys little over one master with replicas and WAIT
// (leader.Config.MinReplicas); docs/design.md, Redlock, says when to use
// which and what its term does and does not guarantee.
package lock
