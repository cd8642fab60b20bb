// Package fence is the SQL guard that refuses writes from a stale leader.
//
// A lease alone cannot stop a leader that was paused (GC, SIGSTOP, a frozen
// VM) past its stop budget from waking up and writing after another instance
// has taken over. Every leadership carries a fencing term that grows with each
// new lease; this package makes a SQL database remember the highest term it
// has seen for each election, and who holds it, and refuse transactions that
// carry a lower term or another holder.
//
// # Protocol
//
//  1. Once, at start-up: [Guard.EnsureTable] creates the fence
//     table (default name solo_fence) if it is missing, and adds the holder
//     column to a table created by an older version.
//  2. At the start of every term: [Guard.Claim] stores the new
//     term for the election with its holder — the elector's ID,
//     leader.Elector.ID() — unless a higher term is stored, in which case it
//     returns [ErrStaleTerm]. Claiming the same term again by the same holder
//     is a no-op; by another holder it returns [ErrHolderMismatch].
//     worker.WithFence does this step for the jobs of a worker.
//  3. For every write: run it in a transaction that begins with
//     [Guard.Check], most simply through [Guard.Do], which takes the term
//     and holder from the context's [Token]; or [Guard.DoTerm] or
//     [Guard.Begin] with the term and holder by hand. The check refuses the
//     transaction with [ErrStaleTerm] when a higher term has been claimed
//     ([ErrHolderMismatch], [ErrNotClaimed] in the cases they name), and
//     holds until commit.
//
// # The fencing token
//
// A [Token] is the election, the term and the holder of one leadership.
// The worker puts it in every job's context (worker.Worker, worker.Spread:
// the job's election, the term, the elector's ID), and a lock's
// lock.Hold.Context carries its hold's (election lock:NAME, the hold's
// term and holder); [WithToken] puts one in any context. The typical fenced
// write is then one call that passes no IDs or terms:
//
//	err := guard.Do(ctx, func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO orders …")
//		return err
//	}) // fence.ErrStaleTerm once a newer leader has claimed
//
// Do claims the token's term at its first write when the fence has not
// seen it yet (a lock's new hold; a worker without WithFence), so step 2
// needs no code. A worker given the guard (worker.WithFence, or a
// *fence.Guard in worker.Module's fx graph) claims before any job runs,
// which a job that reads state before its first write (a stream
// position) relies on: once the claim returned, no older term's
// transaction can still commit what the job is about to read. A worker in
// mode always has no term and gives no token: Do refuses with
// [ErrNoToken].
//
// # Guarantees
//
// For one election, in one database, among transactions that go through the
// guard:
//   - The stored term never decreases, and a Claim of a term lower than one
//     already committed is refused with ErrStaleTerm, even when several
//     claimers race, including on a row that does not exist yet.
//   - One term has one holder: the first Claim of a term records it; a Claim
//     or Check of that term by another holder is refused with
//     ErrHolderMismatch. (Two holders of one term mean the election handed
//     it out twice, or a term was copied or made up.)
//   - A transaction whose Check passed either commits before any Claim of a
//     higher term commits, or does not commit at all. So once a new
//     leader's Claim has returned, no transaction of an older term can
//     commit, however long its leader was paused.
//   - A Claim waits only for the transactions that had passed Check when it
//     came. On PostgreSQL, Check and Claim take a transaction-level advisory
//     lock of the election (shared and exclusive), and PostgreSQL grants
//     such locks in arrival order: a Check that comes while a Claim waits
//     queues behind it, and is refused once the Claim committed. An old
//     leader that keeps overlapping its transactions cannot hold the new
//     leader off. (SQLite has one writer at a time: a Claim waits for the
//     open checked transaction, if any, then competes for the write lock.)
//   - On PostgreSQL, transactions of the same term do not wait for one
//     another: shared locks do not conflict.
//   - The server's default isolation level does not matter. Claim runs in a
//     transaction of its own at READ COMMITTED. Check works in a transaction
//     at any level: at REPEATABLE READ or SERIALIZABLE, a transaction whose
//     snapshot predates a Claim of a higher term is refused with
//     ErrStaleTerm (wrapping the server's serialization failure).
//
// # Non-guarantees
//
//   - Writes that do not go through the guard (autocommit statements, other
//     programs, transactions that skip Check) are not fenced.
//   - Only this database is fenced. Side effects outside it (e-mails, calls to
//     other services, other databases) are not, unless they carry the term
//     and check it themselves.
//   - SQLite's fence holds only among processes on one host. The guard
//     relies on SQLite's file locks; WAL mode needs shared memory, which
//     processes on different hosts do not share, and network filesystems
//     (NFS, SMB, most FUSE mounts) implement the locks poorly or not at
//     all. Leaders on several hosts need a database server (PostgreSQL).
//   - Check must be the first statement of its transaction. On SQLite a
//     transaction that read before the check may fail with SQLITE_BUSY when
//     the check upgrades it to a writer. Either way a stale write is
//     refused.
//   - If Commit returns an error because the connection broke, the outcome
//     is unknown, as with any database transaction.
//   - Each election name has its own row, and terms of different names
//     are not compared. worker's two modes of one name use different
//     rows (NAME in mode elect, NAME.JOB per job in mode spread): a
//     switch elect → spread is fenced (each spread member claims the row
//     NAME with a term it reserved from that election before its first
//     job), a switch spread → elect is not (docs/operations.md, "Changing
//     TTLs or modes on a live election").
//   - The guard is only as good as its terms and holders: they must come
//     from the election (leader.TermFrom(ctx) or SOLO_TERM, and
//     leader.Elector.ID() or SOLO_ID), never be made up.
//   - While a transaction holds its check, a Claim of a higher term waits
//     for it. Keep fenced transactions short. On PostgreSQL the wait is
//     bounded by the Guard's lock timeout ([WithLockTimeout], default
//     [DefaultLockTimeout], set for Claim's and Check's own statements):
//     past it Claim returns an error wrapping [ErrClaimTimeout], stores
//     nothing, and may be retried; Check likewise when it waited for a
//     Claim. On SQLite the driver's busy timeout (busy_timeout pragma)
//     bounds the wait, and Claim fails with SQLITE_BUSY ("database is
//     locked") past it.
//   - A leader paused (SIGSTOP, a frozen VM, a GC pause) inside a checked
//     transaction blocks failover to the database until that transaction
//     ends: no higher term can be claimed, so the next leader's Claim waits
//     and it cannot write. See "Failover with the fence" below.
//
// # Failover with the fence
//
// The lease fails over from a crashed or frozen leader within its TTL
// (10s by default; at least TTL − renew interval, 6.7s, after the freeze).
// The fence adds to that only when the old leader froze inside a checked
// transaction:
//
//   - PostgreSQL: the guard sets idle_in_transaction_session_timeout for
//     the transactions it checks ([WithIdleTimeout], default
//     [DefaultIdleTimeout], 4s): the server ends a transaction left idle
//     that long, and the next leader's Claim, which waits for it at most
//     the lock timeout ([WithLockTimeout], default [DefaultLockTimeout],
//     5s, above the idle timeout so one Claim outlasts it), goes through.
//     Failover with the fence is max(the lease's, 4s after the freeze):
//     with the default TTL, the lease's. Measured (internal/fencetest,
//     SOLO_FENCE_BOUND=1): a Claim made at once returned 4.0s after the
//     freeze, in one attempt; with the old defaults (30s, 5s) it took
//     30s and 6 attempts. The price of the short timeout: a fenced
//     transaction left idle 4s between two statements (a slow call to
//     another service inside it) is ended by the server and fails; raise
//     WithIdleTimeout for such jobs, and the bound with it. A leader
//     frozen in the middle of a statement that the server is still
//     running is not covered (set statement_timeout), nor is a Claim of
//     a guard whose idle timeout is zero (the server's setting, off by
//     default).
//   - SQLite: nothing bounds it. The paused process holds the database
//     write lock — for every writer — until it resumes (its transaction
//     then ends: its context was cancelled with its term) or dies (the
//     lock goes with the process); the next leader's Claim fails with
//     SQLITE_BUSY past the busy timeout and is retried. Measured: a
//     leader frozen 8s held the Claim off 8.1s. Keep SQLite for one host
//     and accept that bound, or use PostgreSQL.
//
// # Dialects
//
// SQLite (modernc.org/sqlite, mattn/go-sqlite3) and PostgreSQL (pgx stdlib,
// lib/pq) are supported; the dialect is detected from db.Driver() or given
// with [WithDialect]. The package imports database/sql only; the program
// imports the driver. SQLite needs version 3.24 or later (upsert),
// PostgreSQL 9.6 or later. The table and statements of each dialect, for
// programs in other languages that claim and check by hand, are in the
// fence section of docs/design.md.
package fence
